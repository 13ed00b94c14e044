"""Hostile inputs through the CLI (issue 15): every case runs the `synthugc` command the way a user would.

A bad name, file, path or option ends with exit code 2 and one line on stderr naming the problem (no
traceback), before any work and without writing outside the run; input rows are never lost; partial files
left by an interrupted run are removed by the next run, which says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml

CLI = Path(sys.executable).parent / "synthugc"
#: A folder nobody can write in, root included (sysfs refuses new files).
READ_ONLY = Path("/sys/synthugc-hostile")


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=dict(os.environ), cwd=cwd,
                          timeout=600)


def _corpus(tmp: Path, texts: list[str] | None = None) -> Path:
    """A corpus CSV in the schema: 6 short posts by 2 authors (or the given texts)."""
    texts = texts or ["We will win this election.", "I CAN'T believe it!!!", "Taxes are too high.",
                      "Jobs come first.", "Thank you all so much.", "The economy is growing."]
    path = tmp / "corpus.csv"
    pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts,
                  "author_id": [f"u{i % 2}" for i in range(len(texts))]}).to_csv(path, index=False)
    return path


def _config(tmp: Path, **changes) -> Path:
    """A valid tiny experiment config (stymask, one cheap metric, no privacy or utility) with ``changes``."""
    cfg = {"experiment": "x", "storage_root": str(tmp / "deep" / "a" / "b" / "runs"),
           "data": {"path": str(_corpus(tmp))},
           "generate": {"strategies": [{"name": "stymask"}]}, "metrics": {"names": ["bleu_divergence"]},
           "privacy": {"enabled": False}, "utility": {"enabled": False}, **changes}
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _synthetic(tmp: Path, corpus: Path, duplicate: int | None = None) -> Path:
    """A synthetic table (schema) that copies the corpus texts, with row ``duplicate`` written twice."""
    rows = pd.read_csv(corpus).assign(strategy="s", variant="default", status="ok")
    if duplicate is not None:
        rows = pd.concat([rows, rows.iloc[[duplicate]]])
    path = tmp / "synthetic.csv"
    rows.to_csv(path, index=False)
    return path


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


# Each case builds its inputs under tmp and returns (CLI arguments, expected text in the error line, a check
# of what is on disk afterwards or None).
Case = Callable[[Path], tuple[list[str], str, Callable[[], None] | None]]


def _no_escape(tmp: Path) -> Callable[[], None]:
    def check() -> None:
        assert not [p for p in tmp.rglob("*") if "escaped" in p.name]
        assert not (tmp / "deep").exists()  # nothing written under (or beside) the storage root

    return check


def label_traversal_in_config(tmp: Path):
    config = _config(tmp, generate={"strategies": [{"name": "stymask", "label": "../../../../escaped"}]})
    return ["run", str(config)], "generate.strategies.0.label", _no_escape(tmp)


def label_traversal_in_override(tmp: Path):
    return (["run", str(_config(tmp)), "--set", "generate.strategies.0.label=../../../../escaped"],
            "generate.strategies.0.label", _no_escape(tmp))


def experiment_dotdot(tmp: Path):
    return ["run", str(_config(tmp, experiment=".."))], "experiment: '..' cannot name a folder", _no_escape(tmp)


def experiment_dot(tmp: Path):
    return ["run", str(_config(tmp, experiment="."))], "experiment: '.' cannot name a folder", _no_escape(tmp)


def attribute_traversal(tmp: Path):
    config = _config(tmp, privacy={"profiling": {"attributes": ["../escaped"]}})
    return ["run", str(config)], "privacy.profiling.attributes", _no_escape(tmp)


def config_not_utf8(tmp: Path):
    config = tmp / "latin1.yaml"
    config.write_bytes("experiment: caf\u00e9\n".encode("latin-1"))
    return ["run", str(config)], "not valid UTF-8", None


def config_is_a_folder(tmp: Path):
    folder = tmp / "exp.yaml"
    folder.mkdir()
    return ["run", str(folder)], "is a folder, not a file", None


def storage_root_is_a_file(tmp: Path):
    root = tmp / "root-file"
    root.write_text("not a folder")
    return ["run", str(_config(tmp, storage_root=str(root)))], "is a file, not a folder", None


def score_duplicate_synthetic_rows(tmp: Path):
    corpus = _corpus(tmp)
    synthetic = _synthetic(tmp, corpus, duplicate=2)
    return (["score", "--corpus", str(corpus), "--synthetic", str(synthetic), "--out", str(tmp / "scores"),
             "--metrics", "bleu_divergence"], "duplicate synthetic row for doc_id 'd2'", None)


def import_header_only_csv(tmp: Path):
    src = tmp / "empty.csv"
    src.write_text("id,body\n")
    return ["import", str(src), "--text-col", "body", "--out", str(tmp / "c.parquet")], "no rows", None


def import_zero_row_parquet(tmp: Path):
    src = tmp / "empty.parquet"
    pd.DataFrame({"body": pd.Series([], dtype="string")}).to_parquet(src)
    return ["import", str(src), "--text-col", "body", "--out", str(tmp / "c.parquet")], "no rows", None


def import_keeps_no_document(tmp: Path):
    src = tmp / "blank.csv"
    pd.DataFrame({"body": ["", "   ", "\u200b"]}).to_csv(src, index=False)
    out = tmp / "c.parquet"

    def check() -> None:
        assert not out.exists()

    return (["import", str(src), "--text-col", "body", "--out", str(out)],
            "no document passed validation: all 3 row(s) failed", check)


def generate_zero_document_corpus(tmp: Path):
    corpus = tmp / "zero.parquet"
    pd.DataFrame({"doc_id": pd.Series([], dtype="string"), "text": pd.Series([], dtype="string")}).to_parquet(corpus)
    out = tmp / "gen.parquet"

    def check() -> None:
        assert not out.exists()

    return ["generate", "--corpus", str(corpus), "--strategy", "stymask", "--out", str(out)], "no rows", check


def generate_out_is_a_folder(tmp: Path):
    out = tmp / "gen"
    out.mkdir()

    def check() -> None:
        assert _files(out) == []  # nothing hidden inside as .tmp-<uuid>-gen

    return (["generate", "--corpus", str(_corpus(tmp)), "--strategy", "stymask", "--out", str(out)],
            "is a folder", check)


def import_out_is_a_folder(tmp: Path):
    out = tmp / "out"
    out.mkdir()

    def check() -> None:
        assert _files(out) == [] and not (tmp / "out.failures.parquet").exists()

    return ["import", str(_corpus(tmp)), "--text-col", "text", "--out", str(out)], "is a folder", check


def score_out_is_a_file(tmp: Path):
    corpus = _corpus(tmp)
    synthetic = _synthetic(tmp, corpus)
    out = tmp / "scores"
    out.write_text("a file")
    return (["score", "--corpus", str(corpus), "--synthetic", str(synthetic), "--out", str(out)],
            "is a file; give a folder", None)


def import_out_read_only(tmp: Path):
    return (["import", str(_corpus(tmp)), "--text-col", "text", "--out", str(READ_ONLY / "c.parquet")],
            "cannot write the output here", None)


def profile_out_read_only(tmp: Path):
    return (["profile", "--corpus", str(_corpus(tmp)), "--attr", "gender", "--out", str(READ_ONLY / "p")],
            "cannot write the output here", None)


def import_max_chars_zero(tmp: Path):
    return (["import", str(_corpus(tmp)), "--text-col", "text", "--out", str(tmp / "c.parquet"), "--max-chars", "0"],
            "--max-chars 0", None)


def score_metrics_only_commas(tmp: Path):
    corpus = _corpus(tmp)
    return (["score", "--corpus", str(corpus), "--synthetic", str(_synthetic(tmp, corpus)), "--out", str(tmp / "s"),
             "--metrics", ","], "names no metric", None)


def import_folder_as_input(tmp: Path):
    folder = tmp / "input.csv"
    folder.mkdir()
    return ["import", str(folder), "--text-col", "text", "--out", str(tmp / "c.parquet")], "is a folder, not a file", None


def reidentify_histories_is_a_folder(tmp: Path):
    folder = tmp / "histories.parquet"
    folder.mkdir()
    return (["reidentify", "--histories", str(folder), "--synthetic", str(_synthetic(tmp, _corpus(tmp))),
             "--out", str(tmp / "r")], "is a folder, not a file", None)


def reidentify_histories_not_parquet(tmp: Path):
    corpus = _corpus(tmp)
    return (["reidentify", "--histories", str(corpus), "--synthetic", str(_synthetic(tmp, corpus)), "--out",
             str(tmp / "r")], "not a readable parquet file", None)


def import_jsonl_unterminated_string(tmp: Path):
    src = tmp / "posts.jsonl"
    src.write_text('{"text": "fine"}\n{"text": "never closed')  # json says "starting at", the error adds "at"
    return (["import", str(src), "--text-col", "text", "--out", str(tmp / "c.parquet")],
            "line 2 is not valid JSON (Unterminated string starting at character 10)", None)


def _import_refused(tmp: Path, name: str, content: bytes, expected: str, *extra: str):
    """An import of ``content`` that must stop (nothing written) with ``expected`` in its one line."""
    src = tmp / name
    src.write_bytes(content)
    out = tmp / "c.parquet"

    def check() -> None:
        assert not out.exists() and not (tmp / "c.failures.parquet").exists()

    return ["import", str(src), "--text-col", "body", "--id-col", "id", *extra, "--out", str(out)], expected, check


def import_csv_first_row_extra_field(tmp: Path):
    return _import_refused(tmp, "posts.csv", b"id,body\ng1,hello, world\ng2,second\ng3,third\n",
                           "row 1: line 2 has 3 fields but the header has 2 (a ',' in an unquoted value?)")


def import_csv_first_row_unterminated_quote(tmp: Path):
    return _import_refused(tmp, "posts.csv", b'id,body\ng1,"hello\ng2,second\ng3,third\n',
                           "row 1: line 2: a quote opened in this record is never closed (the file ends inside it)")


def import_csv_authors_not_utf8(tmp: Path):
    return _import_refused(tmp, "posts.csv", b"id,body,user\ng1,a,u\xff1\ng2,b,u\xfe1\ng3,c,u2\n",
                           "column 'author_id', row 1: invalid UTF-8 (byte 0xFF at character 1)",
                           "--author-col", "user")


def import_jsonl_int_and_string_id(tmp: Path):
    return _import_refused(tmp, "posts.jsonl", b'{"id": 1, "body": "a"}\n{"id": "1", "body": "b"}\n',
                           "row 2: duplicate doc_id '1': the ids have different types (integer and string)")



def _bomb_config(tmp: Path) -> Path:
    """A config whose stymask intensity is a billion laughs (9^10 'lol's once its aliases are followed)."""
    levels = ['lol0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    config = _config(tmp)
    raw = yaml.safe_load(config.read_text())
    raw["generate"]["strategies"][0]["params"] = {"intensity": "BOMB"}
    config.write_text("\n".join(levels) + "\n" + yaml.safe_dump(raw).replace("BOMB", "*l9"))
    return config


def config_alias_bomb_under_a_strategy_setting(tmp: Path):
    return ["run", str(_bomb_config(tmp))], "its aliases expand it past 2000000 characters", _no_escape(tmp)


def config_over_the_size_limit(tmp: Path):
    config = _config(tmp)
    config.write_text(config.read_text() + "# " + "x" * 1_000_000 + "\n")
    return ["run", str(config)], "larger than 1000000 bytes", _no_escape(tmp)


def config_is_a_list(tmp: Path):
    config = tmp / "list.yaml"
    config.write_text("- experiment: x\n")
    return ["run", str(config)], f"{config}: the top level must be a mapping of settings", None


def config_is_empty(tmp: Path):
    config = tmp / "empty.yaml"
    config.write_text("")
    return ["run", str(config)], f"{config}: the file is empty", None


def dp_epsilon_infinite(tmp: Path):
    config = _config(tmp, generate={"strategies": [{"name": "dp", "params": {"epsilon": float("inf")}}]})
    return (["run", str(config)], "generate.strategies.0.params.dp.epsilon: Input should be a finite number (got inf)",
            _no_escape(tmp))


def dp_epsilon_boolean(tmp: Path):
    config = _config(tmp, generate={"strategies": [{"name": "dp", "params": {"epsilon": True}}]})
    return (["run", str(config)], "generate.strategies.0.params.dp.epsilon: Input should be a valid number (got True)",
            _no_escape(tmp))


def shard_size_past_its_bound(tmp: Path):
    config = _config(tmp, generate={"shard_size": 10**9, "strategies": [{"name": "stymask"}]})
    return ["run", str(config)], "generate.shard_size: Input should be less than or equal to 1000000", _no_escape(tmp)


def report_budget_malformed_in_config(tmp: Path):
    config = _config(tmp, report={"budget": "reidentification<0.1"})
    return ["run", str(config)], f"{config}: report.budget: unknown operator '<' in 'reidentification<0.1'", _no_escape(tmp)


def report_budget_malformed_on_the_command_line(tmp: Path):
    return ["report", str(tmp / "run"), "--budget", "reidentification<0.1"], "--budget: unknown operator '<'", None


def set_alias_bomb(tmp: Path):
    bomb = _bomb_config(tmp).read_text().split("experiment:")[0].replace("\n", ", ").join("{}")
    return (["generate", "--corpus", str(_corpus(tmp)), "--strategy", "stymask", "--out", str(tmp / "g.parquet"),
             "--set", f"intensity={bomb}"], "--set intensity: its aliases expand it past", None)


def override_with_a_long_value(tmp: Path):
    return (["run", str(_config(tmp)), "--set", "generate.strategies.0.label=" + "x" * 100_000],
            "generate.strategies.0.label: 'xxxxxxxx", _no_escape(tmp))

HOSTILE: dict[str, Case] = {case.__name__: case for case in (
    label_traversal_in_config, label_traversal_in_override, experiment_dotdot, experiment_dot, attribute_traversal,
    config_not_utf8, config_is_a_folder, storage_root_is_a_file, score_duplicate_synthetic_rows, import_header_only_csv,
    import_zero_row_parquet, import_keeps_no_document, generate_zero_document_corpus, generate_out_is_a_folder,
    import_out_is_a_folder, score_out_is_a_file, import_out_read_only, profile_out_read_only, import_max_chars_zero,
    score_metrics_only_commas, import_folder_as_input, reidentify_histories_is_a_folder,
    reidentify_histories_not_parquet, import_jsonl_unterminated_string, import_csv_first_row_extra_field,
    import_csv_first_row_unterminated_quote, import_csv_authors_not_utf8, import_jsonl_int_and_string_id,
    config_alias_bomb_under_a_strategy_setting,
    config_over_the_size_limit, config_is_a_list, config_is_empty, dp_epsilon_infinite, dp_epsilon_boolean,
    shard_size_past_its_bound, report_budget_malformed_in_config, report_budget_malformed_on_the_command_line,
    set_alias_bomb, override_with_a_long_value)}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_input_exits_2_with_one_line(name: str, tmp_path: Path) -> None:
    args, expected, check = HOSTILE[name](tmp_path)
    proc = _run(*args, cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith("synthugc: error: ") and expected in lines[0], lines[0][:2000]
    assert len(lines[0]) < 1000, lines[0][:2000]  # values are echoed cut (tasks.errors.shown)
    assert " at at " not in lines[0]
    if check is not None:
        check()


def test_generate_keeps_rows_that_failed_validation_beside_the_output(tmp_path: Path) -> None:
    """12 inputs, 3 of them invalid (empty, a control character, only zero-width characters): 9 outputs and 3
    failure records beside them, as import writes them; nothing lost."""
    texts = [f"Post number {i} about the debate." for i in range(9)] + ["", "bell\x07", "\u200b\u200d\ufeff"]
    out = tmp_path / "gen" / "synthetic.parquet"
    proc = _run("generate", "--corpus", str(_corpus(tmp_path, texts)), "--strategy", "stymask", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    synthetic = pd.read_parquet(out)
    failures = pd.read_parquet(tmp_path / "gen" / "synthetic.failures.parquet")
    assert len(synthetic) + len(failures) == len(texts)
    assert sorted(failures["doc_id"]) == ["d10", "d11", "d9"]
    assert failures.set_index("doc_id").loc["d11", "reason"] == "text is empty (only invisible characters)"
    assert str(tmp_path / "gen" / "synthetic.failures.parquet") in proc.stdout


def test_import_records_zero_width_only_text_as_a_failure(tmp_path: Path) -> None:
    src = tmp_path / "posts.csv"
    pd.DataFrame({"body": ["hello there", "\u200b\u200b", "\u2060 \u200c", "visible\u200b"]}).to_csv(src, index=False)
    out = tmp_path / "c.parquet"
    proc = _run("import", str(src), "--text-col", "body", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    corpus, failures = pd.read_parquet(out), pd.read_parquet(tmp_path / "c.failures.parquet")
    assert corpus["text"].tolist() == ["hello there", "visible\u200b"]
    assert failures["row"].tolist() == [2, 3]
    assert set(failures["reason"]) == {"text is empty (only invisible characters)"}


@pytest.mark.slow
def test_rerun_removes_stale_partials_and_says_so(tmp_path: Path) -> None:
    """Partial files an interrupted run left (a write killed before its rename) are removed by the next run,
    which names how many; the run's own artifacts are whole and no partial remains."""
    config = _config(tmp_path)
    run_dir = Path(yaml.safe_load(config.read_text())["storage_root"]) / "x"
    stale = [run_dir / "generate" / "stymask" / ".tmp-0123abcd-shard-00000.parquet", run_dir / ".tmp-99-manifest.json"]
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1 half a file")
    keep = run_dir / "notes.txt"  # not a partial: left alone
    keep.write_text("mine")
    proc = _run("run", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"removed 2 stale partial file(s) left under {run_dir}" in proc.stderr
    assert not any(p.exists() for p in stale) and keep.read_text() == "mine"
    assert not [p for p in run_dir.rglob(".tmp-*")]
    assert len(pd.read_parquet(run_dir / "generate" / "stymask" / "shard-00000.parquet")) == 6
