"""`synthugc release`: a folder to hand out, from a protect output and from a run. It holds no source text, no
pseudonym mapping, no id in clear; its checksums verify; it loads with datasets and pandas; its card is Hugging
Face's format and states a missed budget released with --ignore-budget; bad input and budget strings exit 2."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tasks.corpus.datasets import fetch_dataset
from tasks.errors import InputError
from tasks.layout import PROTECT_LABEL
from tasks.metrics.verbatim import verbatim_flags
from tasks.protect.files import (
    MOVE_COLUMN,
    ROUND_COLUMN,
    ROUNDS_COLUMNS,
    VERBATIM_COLUMN,
    protect_paths,
)
from tasks.protect.release import CARD_FILE, CHECKSUMS_FILE, DATA_FILE, release_table, size_category
from tasks.report.render import with_interval

REPO = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "synthugc"
#: A source text this long or longer must never be a value of the release (shorter ones may recur by chance).
SOURCE_CHARS = 20


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=dict(os.environ), timeout=600,
                          cwd=cwd)


def _release(source: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return _run("release", str(source), "--out", str(out), *args)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("synthugc: error: "), proc.stderr[-2000:]
    return lines[0]


def _strings(frame: pd.DataFrame) -> set[str]:
    return {v for c in frame.columns for v in frame[c].tolist() if isinstance(v, str)}


FIGURES = {  # the judge's worst case, as the protect summary states it
    "reidentification": {"value": 0.02, "ci_low": 0.0, "ci_high": 0.08, "n": 60, "attack": "minhash",
                         "adversary": "full"},
    "pii_leakage": {"value": 0.3, "ci_low": 0.2, "ci_high": 0.4, "n": 80, "attack": None, "adversary": None},
    "profiling": {"value": 0.55, "ci_low": 0.4, "ci_high": 0.7, "n": 40, "attack": None, "adversary": None},
}


CERTIFICATE = [  # every attack on the full histories, as the protect summary lists them
    {"attack": "minhash", "adversary": "full", "accuracy_at_1": 0.02, "accuracy_at_1_ci_low": 0.0,
     "accuracy_at_1_ci_high": 0.08, "residual_risk": 0.0, "residual_risk_ci_low": 0.0, "residual_risk_ci_high": 0.07,
     "n_timelines": 60, "chance": 0.01},
    {"attack": "stylometric", "adversary": "full", "accuracy_at_1": 0.0, "accuracy_at_1_ci_low": 0.0,
     "accuracy_at_1_ci_high": 0.06, "residual_risk": 0.0, "residual_risk_ci_low": 0.0, "residual_risk_ci_high": 0.05,
     "n_timelines": 60, "chance": 0.01}]


def _protect(base: Path, corpus: pd.DataFrame, *generate: str, meta: dict | None = None) -> Path:
    """A protect output built from real files in the protect format (P.parquet: `synthugc generate`'s schema
    plus round and move, strategy 'protect'; P.rounds.parquet, P.failures.parquet, P.protect.json and the
    private mapping beside it): ``corpus`` rewritten by ``generate``'s strategy, one rewritten row failed;
    ``meta``: further columns of every row (a strategy's meta columns)."""
    corpus.to_parquet(base / "corpus.parquet")
    out = base / "out" / "P.parquet"
    proc = _run("generate", "--corpus", str(base / "corpus.parquet"), *generate, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pd.read_parquet(out)
    table["strategy"], table["variant"] = PROTECT_LABEL, "first"
    table[ROUND_COLUMN] = pd.array([0] * len(table), dtype="Int64")
    table[MOVE_COLUMN] = pd.array([f"strategy:{generate[1]}"] * len(table), dtype="string")
    sources = corpus.set_index("doc_id").loc[table["doc_id"], "text"].astype(str).tolist()
    table[VERBATIM_COLUMN] = pd.array(verbatim_flags(sources, table["text"].astype(str).tolist()), dtype="boolean")
    for column, value in (meta or {}).items():
        table[column] = value
    failed = table.index[~table["unchanged"].astype(bool)][0]  # a rewritten document that missed the floor
    table.loc[failed, ["status", "reason"]] = ["failed", "budget and meaning floor not both met"]
    table.to_parquet(out)
    paths = protect_paths(out)
    pd.DataFrame([{"round": 0, "attack": "minhash", "adversary": "full", "role": "judge", "accuracy_at_1": 0.02,
                   "accuracy_at_1_ci_low": 0.0, "accuracy_at_1_ci_high": 0.08, "accuracy_at_10": 0.1,
                   "n_timelines": 60, "meaning": 0.93, "documents_rewritten": 40, "seconds": 1.5}],
                 columns=ROUNDS_COLUMNS).to_parquet(paths.rounds)
    pd.DataFrame({"doc_id": [table.loc[failed, "doc_id"]], "reason": ["budget and meaning floor not both met"]}
                 ).to_parquet(paths.failures)
    paths.private.mkdir()
    pd.DataFrame({"author_id": corpus["author_id"], "pseudonym": [f"P{i}" for i in range(len(corpus))],
                  "text": corpus["text"]}).to_parquet(paths.private / "P.mapping.parquet")
    ok = table[table["status"] == "ok"]
    paths.summary.write_text(json.dumps({
        "tool_version": "0.1.0", "signature": f"protect start={generate[1]} ladder=pseudonymize,mask-evidence seed=0",
        "budget": "reidentification<=0.10", "decide_on": "bound", "met": True, "rounds": 1, "start": generate[1],
        "ladder": ["pseudonymize", "mask-evidence"], "meaning_metric": "bertscore_f1", "meaning_floor": 0.85,
        "on_fail": "drop", "figures": FIGURES, "certificate": CERTIFICATE, "verbatim_chars": 30,
        "meaning": {"value": 0.93, "ci_low": 0.91, "ci_high": 0.95, "n": len(ok)},
        "documents": {"input": len(table), "kept": len(ok), "rewritten": int((~ok["unchanged"]).sum()), "failed": 1},
        "verdict": "protect: budget met"}))
    return out


@pytest.fixture(scope="module")
def protect_output(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """A protect output of 48 debate turns back-translated through a far pivot (apertium, Serbo-Croatian): a
    quarter of them hold no run of 30 characters of their source; returns P and the source corpus."""
    debates = pd.read_parquet(fetch_dataset("debates", REPO / "data"))
    corpus = debates.sort_values(["group_id", "position"]).groupby("group_id").head(12).reset_index(drop=True)
    return _protect(tmp_path_factory.mktemp("protect"), corpus, "--strategy", "backtranslate", "--set",
                    "backend=apertium", "--set", "pivots=[hbs]"), corpus


def _card_header(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_protect_release_hands_out_only_synthetic_texts_and_pseudonyms(protect_output, tmp_path):
    p, corpus = protect_output
    out = tmp_path / "release"
    proc = _release(p, out, "--keep", "label,author_id,group_id", "--license", "cc-by-4.0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pd.read_parquet(p)
    ok = table[table["status"] == "ok"]
    copied = ok["verbatim"].astype(bool) | ok["unchanged"].astype(bool)
    kept = ok[~copied]
    reid = FIGURES["reidentification"]
    assert proc.stdout.strip() == (
        f"release: {len(kept)} documents -> {out} (budget met: reidentification "
        f"{with_interval(reid['value'], reid['ci_low'], reid['ci_high'])} <= 0.1 (decided on the 95% interval's "
        "upper bound; minhash, full))")
    files = sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file())
    assert files == sorted([DATA_FILE, CARD_FILE, CHECKSUMS_FILE])  # no mapping, failures, rounds or histories
    check = subprocess.run(["sha256sum", "-c", CHECKSUMS_FILE], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == 2, check.stdout + check.stderr

    released = pd.read_parquet(out / "data")
    assert list(released.columns) == ["doc_id", "text", "label", "author_id", "group_id"]
    assert sorted(released["text"]) == sorted(kept["text"])  # the failed and the verbatim rows are left out
    card = (out / CARD_FILE).read_text()
    assert "](http" not in card  # the card links to no page (this project has no package index page)
    values = _strings(released) | {card}
    long_sources = [t for t in corpus["text"] if len(t) >= SOURCE_CHARS]
    assert len(long_sources) > 40 and not [t for t in long_sources if t in values or t in card]
    identifiers = {*corpus["doc_id"], *corpus["author_id"].dropna(), *corpus["group_id"].dropna()}
    assert not identifiers & _strings(released)
    assert not [i for i in identifiers if f"`{i}`" in card or f" {i} " in card]
    # one pseudonym per author, the same on every row of that author
    author_of = dict(zip(kept["text"], kept["author_id"], strict=True))
    pairs = {(author_of[t], a) for t, a in zip(released["text"], released["author_id"], strict=True)}
    assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs}) > 1
    assert released["doc_id"].is_unique and released["doc_id"].str.fullmatch(r"doc-[0-9a-f]{20}").all()

    header = _card_header(card)
    assert header == {"pretty_name": "protect: synthetic user-generated text", "language": ["en"],
                      "license": "cc-by-4.0", "size_categories": ["n<1K"], "task_categories": ["text-classification"]}
    assert 0 < len(kept) < copied.sum()
    assert (f"{int(copied.sum())} hold a run of 30 or more characters of their source text\n  "
            f"({int(ok['unchanged'].astype(bool).sum())} of them unchanged) and are left out") in card
    # the certificate, attack by attack, with its intervals
    assert "| minhash | full | 0.020 [0.000, 0.080] | 0.000 [0.000, 0.070] | 60 |" in card
    assert "| stylometric | full | 0.000 [0.000, 0.060] | 0.000 [0.000, 0.050] | 60 |" in card
    assert "protect start=backtranslate ladder=pseudonymize,mask-evidence seed=0" in card and "synthugc 0.1.0" in card
    assert "| reidentification: share of users re-identified | attack minhash, adversary full | 0.020 [0.000, 0.080] | 60 |" in card
    assert "0.930 [0.910, 0.950]" in card  # the meaning kept, with its interval
    assert "`reidentification<=0.10` is **met**" in card and "--ignore-budget" not in card


def test_release_loads_with_datasets(protect_output, tmp_path):
    datasets = pytest.importorskip("datasets")
    p, _ = protect_output
    out = tmp_path / "release"
    assert _release(p, out, "--keep", "label").returncode == 0
    by_pandas = pd.read_parquet(out / DATA_FILE)
    loaded = datasets.load_dataset("parquet", data_dir=str(out), cache_dir=str(tmp_path / "hf-cache"))
    assert list(loaded) == ["train"] and loaded["train"].column_names == ["doc_id", "text", "label"]
    assert loaded["train"]["doc_id"] == by_pandas["doc_id"].tolist()
    assert loaded["train"]["text"] == by_pandas["text"].tolist()
    by_card = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))  # reads the card's header
    assert by_card["train"].num_rows == len(by_pandas)


#: The Hugging Face dataset card's sections, in the card's order (### under the ## before it).
CARD_SECTIONS = ["## Dataset Description", "### Dataset Summary", "### Languages", "## Uses", "### Direct Use",
                 "### Out-of-Scope Use", "## Dataset Structure", "### Data Fields", "### Example rows",
                 "## Dataset Creation", "### Curation Rationale", "### Source Data", "### How the texts were made",
                 "### Documents held back", "### What the texts keep (quality)", "## Personal and Sensitive Information",
                 "### What the texts leak", "### Privacy budget", "## Bias, Risks, and Limitations", "## Citation"]


def _section(card: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading."""
    return re.split(r"\n#{2,3} ", card.split(f"\n{heading}\n", 1)[1], maxsplit=1)[0]


def _held_back(card: str) -> dict[str, int]:
    """The card's documents table: label -> count (``held back: <reason>`` for each reason)."""
    rows = re.findall(r"^\| (in the input|released|held back: [^|]+) \| ([\d,]+) \|$", _section(card, "### Documents held back"),
                      flags=re.M)
    return {label: int(n.replace(",", "")) for label, n in rows}


def test_card_follows_the_hugging_face_template(protect_output, tmp_path):
    """The card's sections are Hugging Face's, in order; every released field is described with its type; three
    released rows that hold no run of their source are shown; the documents held back are counted by reason and add
    up; the adversaries are said in words; no raw counter, boolean or repeated tool name."""
    p, _ = protect_output
    out = tmp_path / "release"
    assert _release(p, out, "--keep", "label,author_id,group_id").returncode == 0
    card = (out / CARD_FILE).read_text()
    places = [card.find(f"\n{heading}\n") for heading in CARD_SECTIONS]
    assert -1 not in places and places == sorted(places), dict(zip(CARD_SECTIONS, places, strict=True))

    released = pd.read_parquet(out / DATA_FILE)
    fields = _section(card, "### Data Fields")
    for column in released.columns:
        kind = "string" if pd.api.types.is_string_dtype(released[column].dtype) else "?"  # every column here
        assert re.search(rf"^- `{column}` \({kind}\): \S", fields, flags=re.M), (column, fields)
    examples = re.findall(r"^\| (doc-[0-9a-f]{20}) \| (.+?) \| ", _section(card, "### Example rows"), flags=re.M)
    assert len(examples) == 3
    table = pd.read_parquet(p)
    ok = table[table["status"] == "ok"]
    copied = ok["verbatim"].astype(bool) | ok["unchanged"].astype(bool)
    by_id = dict(zip(released["doc_id"], released["text"], strict=True))
    for doc_id, text in examples:
        assert text.replace("\\", "") in {by_id[doc_id], by_id[doc_id][:299] + "…"}  # the released text (cut)
        assert by_id[doc_id] in set(ok.loc[~copied, "text"])  # a rewrite, not a verbatim row

    held = _held_back(card)
    assert held["in the input"] == len(table) and held["released"] == len(released) == int((~copied).sum())
    assert held["held back: holds a run of 30 or more characters of its source text (the user's own words)"] == \
        int(copied.sum())
    assert held["held back: no rewrite met both the privacy budget and the meaning floor"] == 1  # the failed row
    assert sum(n for label, n in held.items() if label.startswith("held back")) == len(table) - len(released)
    assert "**not a random sample** of the input" in card and "missing more often" in card

    assert ("- **full** adversary (measured here): holds the users' other posts and the source texts of the released "
            "rows (the strongest case: it has the originals).") in card
    assert ("- **disjoint** adversary (not measured for this release): holds only the users' other posts, not the "
            "source texts.") in card
    assert "synthugc synthugc" not in card and card.count("synthugc 0.1.0") == 2  # summary and creation, once each
    assert not re.search(r"\b[a-z_]+ \d+, [a-z_]+ \d+, [a-z_]+ \d+", card)  # no "failed 1, input 48, kept 47"
    assert not re.search(r"\b(True|False|nan)\b", card)
    assert "| fluency |" not in card  # the summary states none
    assert "| meaning | bertscore_f1 | 0.930 [0.910, 0.950] | 0.85 | 47 |" in card


def test_card_states_the_summarys_withheld_documents_and_fluency(protect_output, tmp_path):
    """A protect summary with ``withheld`` (held back outside P.parquet, by reason) and ``fluency``: the card counts
    those documents by reason in plain words and in the input, and shows the fluency figure beside meaning."""
    p, _ = protect_output
    copy = tmp_path / "P.parquet"
    shutil.copy(p, copy)
    summary = json.loads(protect_paths(p).summary.read_text())
    withheld = [{"reason": "floor: every move left meaning below 0.85", "count": 1200},
                {"reason": "still leaks PII after 2 round(s): the ladder is exhausted", "count": 7},
                {"reason": "input row 4, field text: empty", "count": 3}]
    fluency = {"value": 0.81, "ci_low": 0.79, "ci_high": 0.83, "floor": 0.7}
    protect_paths(copy).summary.write_text(json.dumps({**summary, "withheld": withheld, "fluency": fluency,
                                                       "tool_version": "synthugc 0.1.0 (source 0123abcd)"}))
    out = tmp_path / "release"
    assert _release(copy, out).returncode == 0
    card = (out / CARD_FILE).read_text()
    table = pd.read_parquet(copy)
    held = _held_back(card)
    assert held["in the input"] == len(table) + 1210
    assert held["held back: every rewrite fell below the meaning floor"] == 1200
    assert held["held back: still leaks personal information (PII) after every rewrite"] == 7
    assert held["held back: failed input validation"] == 3
    assert "| in the input | 1,258 |" in card and "| held back: every rewrite fell below the meaning floor | 1,200 |" in card
    assert ("| fluency | fluency against the source: SLOR difference in nats per word (0: as fluent as the source, below "
            "0: less) | 0.810 [0.790, 0.830] | 0.7 | – |") in card
    assert "synthugc 0.1.0 (source 0123abcd)" in card and "synthugc synthugc" not in card


def test_keep_verbatim_releases_the_users_own_words_and_says_so(protect_output, tmp_path):
    p, _ = protect_output
    out = tmp_path / "release"
    proc = _release(p, out, "--keep-verbatim", "--task-category", "text-generation")
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pd.read_parquet(p)
    ok = table[table["status"] == "ok"]
    released = pd.read_parquet(out / DATA_FILE)
    assert sorted(released["text"]) == sorted(ok["text"]) and list(released.columns) == ["doc_id", "text"]
    card = (out / CARD_FILE).read_text()
    assert "are released (`--keep-verbatim`): those rows are the users' own" in card
    assert _card_header(card)["task_categories"] == ["text-generation"]


def test_a_release_of_nothing_but_source_texts_is_refused(protect_output):
    table = pd.read_parquet(protect_output[0]).assign(unchanged=True)
    with pytest.raises(InputError, match=r"nothing to release: of 48 rows, 1 failed and 47 are verbatim"):
        release_table(table, ["label"])
    assert len(release_table(table, ["label"], keep_verbatim=True).table) == 47


def test_a_pseudonymised_copy_is_verbatim_and_is_not_released_as_rewritten(tmp_path):
    """A name swapped, every other word the user's: the copy holds a run of its source, so the release leaves it
    out like an unchanged row (and --keep-verbatim keeps it)."""
    from tasks.generate.pseudonymize import pseudonymize_corpus

    texts = ["Maria Lopez told me the bus was late again and I walked the whole way to the office in the rain.",
             "Call John Carter before Friday, the meeting room is booked for the whole afternoon on Monday."]
    corpus = pd.DataFrame({"doc_id": ["a", "b"], "text": texts, "author_id": ["u1", "u2"]})
    copies, _ = pseudonymize_corpus(corpus, scope="author", seed=0)
    assert all(c != t for c, t in zip(copies["text"], texts, strict=True))  # the names were swapped
    table = corpus.assign(text=copies["text"], status="ok", unchanged=False)
    flags = pd.Series(verbatim_flags(texts, copies["text"].tolist()))
    assert flags.all()
    with pytest.raises(InputError, match=r"nothing to release: of 2 rows, 0 failed and 2 are verbatim"):
        release_table(table, [], verbatim=flags)
    assert len(release_table(table, [], verbatim=flags, keep_verbatim=True).table) == 2


def test_size_categories_are_hugging_faces_buckets():
    assert [size_category(n) for n in (0, 999, 1000, 9999, 10_000, 2_500_000)] == [
        "n<1K", "n<1K", "1K<n<10K", "1K<n<10K", "10K<n<100K", "1M<n<10M"]


def test_a_missed_budget_exits_2_naming_the_figure_unless_forced(protect_output, tmp_path):
    p, _ = protect_output
    out = tmp_path / "release"
    line = _one_error_line(_release(p, out, "--budget", "pii_leakage<=0.05"))
    assert line == ("synthugc: error: strategy 'protect' misses --budget: pii_leakage 0.300 [0.200, 0.400] > 0.05 "
                    "(decided on the 95% interval's upper bound); --ignore-budget releases it anyway and the card "
                    "says so")
    named = _one_error_line(_release(p, out, "--budget", "reidentification<=0.01"))
    assert ("reidentification 0.020 [0.000, 0.080] is undecided for reidentification<=0.01 (decided on the 95% "
            "interval's upper bound; minhash, full: the interval straddles it)") in named  # the attack, its value
    assert not out.exists()
    undecided = _one_error_line(_release(p, out, "--budget", "reidentification<=0.05"))
    assert "reidentification 0.020 [0.000, 0.080] is undecided for reidentification<=0.05" in undecided
    assert _release(p, out, "--budget", "reidentification<=0.05", "--decide-on", "point").returncode == 0

    forced = _release(p, tmp_path / "forced", "--budget", "pii_leakage<=0.05", "--ignore-budget")
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert "budget missed: pii_leakage 0.300 [0.200, 0.400] > 0.05" in forced.stdout
    assert "released with --ignore-budget" in forced.stdout
    card = (tmp_path / "forced" / CARD_FILE).read_text()
    body = card.split("---\n", 2)[2]
    assert body.lstrip().split("\n\n")[1].startswith("> **Released with `--ignore-budget` although the strategy misses its "
                                                     "budget** (`pii_leakage<=0.05`)")
    assert "`pii_leakage<=0.05` is **missed** (released anyway with `--ignore-budget`)" in card


@pytest.mark.parametrize(("budget", "expected"), [
    ("reid<=0.1", "--budget: unknown budget figure 'reid'; known: reidentification, reidentification_risk, pii_leakage"),
    ("reidentification=0.1", "--budget: unknown operator '=' in 'reidentification=0.1'; known: <=, >="),
    ("reidentification<=1e999", "the limit must be a finite number"),
    (",", "--budget: no bound given"),
])
def test_budget_string_errors_exit_2(protect_output, tmp_path, budget, expected):
    p, _ = protect_output
    line = _one_error_line(_release(p, tmp_path / "release", "--budget", budget))
    assert expected in line and not (tmp_path / "release").exists()


def test_a_bad_budget_in_the_protect_summary_exits_2(protect_output, tmp_path):
    p, _ = protect_output
    copy = tmp_path / "P.parquet"
    shutil.copy(p, copy)
    summary = json.loads(protect_paths(p).summary.read_text())
    protect_paths(copy).summary.write_text(json.dumps({**summary, "budget": "reidentification<0.1"}))
    line = _one_error_line(_release(copy, tmp_path / "release"))
    assert f"the protect output's budget ({copy}): unknown operator '<' in 'reidentification<0.1'; known: <=, >=" in line


@pytest.mark.parametrize(("args", "expected"), [
    (["--keep", "nope"], "--keep 'nope': no such column; available: strategy, variant, author_id, group_id, position, split, "
                         "label, attr_party, round, move"),
    (["--keep", "unchanged"], "--keep 'unchanged': never released"),
    (["--keep", "verbatim"], "--keep 'verbatim': never released"),
    (["--strategy", "stymask"], "--strategy 'stymask': a protect output holds one strategy, 'protect'"),
    (["--variant", "first"], "--variant: a protect output holds one strategy, 'protect', of one variant"),
    (["--license", "CC BY"], "--license 'CC BY': expected a Hugging Face id such as cc-by-4.0"),
    (["--language", "english!"], "--language 'english!': expected a Hugging Face id"),
    (["--decide-on", "upper"], "--decide-on 'upper': must be one of bound, point"),
    (["--unit", "cluster"], "--unit 'cluster': must be one of timeline, post"),
    (["--force"], "--force is now --ignore-budget"),
    (["--require", "reidentification<=0.10"], "--require is now --budget"),
])
def test_bad_arguments_exit_2_with_one_line(protect_output, tmp_path, args, expected):
    p, _ = protect_output
    line = _one_error_line(_release(p, tmp_path / "release", *args))
    assert expected in line and not (tmp_path / "release").exists()


def test_missing_summary_and_busy_folders_exit_2(protect_output, tmp_path):
    p, _ = protect_output
    lone = tmp_path / "lone" / "P.parquet"
    lone.parent.mkdir()
    shutil.copy(p, lone)
    assert "the protect summary P.protect.json is missing beside it" in _one_error_line(
        _release(lone, tmp_path / "release"))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert "is not empty; give a new folder, or --overwrite" in _one_error_line(_release(p, busy))
    assert "holds no earlier release" in _one_error_line(_release(p, busy, "--overwrite"))
    assert (busy / "notes.txt").read_text() == "mine"
    out = tmp_path / "release"
    assert _release(p, out, "--keep", "label").returncode == 0
    assert _release(p, out, "--overwrite").returncode == 0  # an earlier release is replaced whole
    assert list(pd.read_parquet(out / DATA_FILE).columns) == ["doc_id", "text"]
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".tmp-")]


def test_a_dp_release_states_the_nominal_and_the_audited_epsilon(protect_output, tmp_path):
    """dp-bart's paraphraser is not in the offline model cache, so the protected rows are stymask's with the
    epsilon columns the dp strategy writes (tasks/generate/dp.py); the audit is `synthugc audit-dp`'s own."""
    texts = ["The new bus line finally opened and it is FAST!!!", "Our team lost the match AGAIN this weekend!!!",
             "The library will close early on public holidays!!!", "I cooked a HUGE pot of soup for the week!!!",
             "Traffic on the bridge was terrible this morning!!!"]
    corpus = pd.DataFrame({"doc_id": [f"d{i}" for i in range(5)], "text": texts,
                           "author_id": [f"user{i % 2}" for i in range(5)]})
    dp = ["--set", "method=dp-bart", "--set", "epsilon=1", "--set", "max_input_tokens=16"]
    p = _protect(tmp_path, corpus, "--strategy", "stymask", meta={"epsilon_doc": 1.0, "epsilon_doc_bound": 1.0})
    audit = tmp_path / "audit.parquet"
    proc = _run("audit-dp", "--corpus", str(tmp_path / "corpus.parquet"), "--strategy", "dp", *dp, "--trials", "100",
                "--neighbours", "2", "--out", str(audit))
    assert proc.returncode == 0, proc.stderr[-2000:]
    audited = proc.stdout.split(" -> ")[0].removeprefix("dp: ")
    assert audited.startswith("dp-bart: nominal epsilon 1 per document, audited (largest epsilon lower bound)")
    out = tmp_path / "release"
    proc = _release(p, out, "--dp-audit", str(audit), "--keep-verbatim")  # stymask keeps most of each sentence
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = (out / CARD_FILE).read_text()
    assert f"nominal epsilon 1\n  per document; audited with `synthugc audit-dp`: {audited}." in card
    line = _one_error_line(_release(protect_output[0], tmp_path / "backtranslate", "--dp-audit", str(audit)))
    assert "--dp-audit: strategy 'protect' has no DP epsilon to audit" in line
    assert "not an audit written by `synthugc audit-dp`" in _one_error_line(
        _release(p, tmp_path / "bad", "--dp-audit", str(p), "--keep-verbatim"))


# ------------------------------------------------------------------------------------------------ a run
EMAILS = ("maria.lopez@gmail.com", "j.carter@work-mail.org")
PII_TEXTS = [  # each with shouting or repeated punctuation, which stymask rewrites
    "Write to maria.lopez@gmail.com if the bus is LATE again!!! Honestly.",
    "The bus was late, so I walked the WHOLE way to the office in the rain!!!",
    "Seriously, email j.carter@work-mail.org before Friday or we LOSE the room!!!",
    "I CAN'T believe the meeting moved AGAIN!!! Who decides these things???",
    "I told maria.lopez@gmail.com that the meeting moved to Monday morning!!!",
    "We walked to the park after lunch, it was SO sunny and warm and quiet!!!",
]


@pytest.mark.slow
def test_run_release_takes_the_public_strategy_and_its_worst_case(tmp_path):
    """A pseudonymising run: only the strategy that rewrote the pseudonymised corpus can be released, its card
    names the re-identification attack and setting whose interval reaches highest, and nothing of private/
    (raw texts, the mapping) or any raw id is in the release."""
    corpus = tmp_path / "corpus.parquet"
    texts = PII_TEXTS * 3
    pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts,
                  "author_id": [f"user{i % 3}" for i in range(len(texts))],
                  "group_id": [f"thread{i % 4}" for i in range(len(texts))],
                  "label": ["calm" if i % 2 else "angry" for i in range(len(texts))],
                  "attr_party": ["x" if i % 2 else "y" for i in range(len(texts))]}).to_parquet(corpus)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "experiment": "rel", "seed": 5, "storage_root": str(tmp_path / "runs"), "data": {"path": str(corpus)},
        "generate": {"pseudonymize": {"entities": ["EMAIL_ADDRESS"], "scope": "author"},
                     "strategies": [{"name": "stymask", "label": "stymask-raw", "pseudonymize": False},
                                    {"name": "stymask", "label": "stymask-pseudo"}]},
        "metrics": {"names": ["pii_leakage", "bleu_divergence"]},
        "utility": {"enabled": False}, "report": {"budget": "reidentification<=0.10"}}))
    env = {**os.environ, "SYNTHUGC_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([str(CLI), "run", str(config)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "runs" / "rel"
    assert (run / "private" / "pseudonymize" / "mapping.parquet").is_file()

    raw = _one_error_line(_release(run, tmp_path / "raw", "--strategy", "stymask-raw"))
    assert "--strategy 'stymask-raw': not a strategy of this run (its strategies: stymask-pseudo)" in raw
    out = tmp_path / "release"
    proc = _release(run, out, "--strategy", "stymask-pseudo", "--keep", "author_id,label", "--ignore-budget",
                    "--keep-verbatim")  # stymask keeps most of each sentence: verbatim, left out otherwise
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = (out / CARD_FILE).read_text()
    released = pd.read_parquet(out / DATA_FILE)
    assert sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file()) == sorted(
        [DATA_FILE, CARD_FILE, CHECKSUMS_FILE])
    assert subprocess.run(["sha256sum", "-c", CHECKSUMS_FILE], cwd=out, capture_output=True).returncode == 0
    values = " ".join(_strings(released)) + card
    assert not [e for e in EMAILS if e in values]
    assert not [t for t in texts if t in _strings(released) or t in card]
    assert not {f"user{i}" for i in range(3)} & _strings(released)
    assert released["author_id"].str.fullmatch(r"author-[0-9a-f]{20}").all() and released["author_id"].nunique() == 3

    reid = pd.read_parquet(run / "privacy" / "stymask-pseudo" / "reid_scores.parquet")
    reid = reid[(reid["metric"] == "reid_accuracy") & reid["value"].notna()]
    worst = reid.loc[reid["ci_high"].fillna(reid["value"]).idxmax()]  # reference: the highest upper bound
    assert (f"| reidentification: share of users re-identified | attack {worst['attack']}, adversary "
            f"{worst['adversary']} | {with_interval(worst['value'], worst['ci_low'], worst['ci_high'])} |") in card
    manifest = json.loads((run / "manifest.json").read_text())
    assert f"synthugc {manifest['versions']['synthugc']}" in card and "stymask params={} seed=5" in card
    assert "- **Source**: a local corpus file (corpus.parquet)." in card  # its name, not its folder
    held = _held_back(card)
    assert held["released"] == len(released) and held["in the input"] == len(texts)
    assert sum(n for label, n in held.items() if label.startswith("held back")) == len(texts) - len(released)


def test_run_leaks_are_stated_under_the_budget_threat_model():
    """report.adversaries narrows the worst case to the settings the budget is stated against; a residual
    risk not above its control is stated as 0 with its interval."""
    from tasks.protect.release import _run_leaks

    def row(metric: str, value: float, high: float, adversary: str) -> dict:
        return {"strategy": "protect", "level": "privacy", "metric": metric, "value": value, "ci_low": 0.0,
                "ci_high": high, "n": 50, "attack": "delta", "adversary": adversary, "entity": None}

    privacy = pd.DataFrame([row("reid_accuracy", 0.9, 0.95, "full"), row("reid_accuracy", 0.2, 0.3, "disjoint"),
                            row("reid_residual_risk", 0.88, 0.9, "full"),
                            row("reid_residual_risk", math.nan, 0.05, "disjoint")])
    every = _run_leaks(privacy)
    assert every["reidentification"]["adversary"] == "full" and every["reidentification_risk"]["value"] == 0.88
    disjoint = _run_leaks(privacy, ["disjoint"])
    assert disjoint["reidentification"]["value"] == 0.2 and disjoint["reidentification"]["adversary"] == "disjoint"
    assert disjoint["reidentification_risk"]["value"] == 0.0 and disjoint["reidentification_risk"]["ci_high"] == 0.05


# ------------------------------------------------------------------------------------------- post unit
def _chance_monotonic(values: list) -> float:
    """The probability that a uniformly random order of ``values`` is sorted either way (ties in any order)."""
    counts = pd.Series(values, dtype=object).value_counts()
    if len(counts) <= 1:
        return 1.0
    ways = math.factorial(len(values))
    for n in counts:
        ways //= math.factorial(int(n))
    return 2 / ways


def _beyond_chance(values: list, rng_seed: int = 0, n: int = 20_000) -> tuple[int, float]:
    """Adjacent equal values in ``values``, and the share of ``n`` random orders of them with at least as many (the
    exact permutation tail: the count is skewed, so a normal bound on it fails far more often than it says)."""
    import numpy as np

    rng = np.random.default_rng(rng_seed)
    codes = pd.factorize(pd.Series(values))[0]
    draws = np.array([np.sum(p[1:] == p[:-1]) for p in (rng.permutation(codes) for _ in range(n))])
    observed = int(np.sum(codes[1:] == codes[:-1]))
    return observed, float(np.mean(draws >= observed))


def test_post_release_unlinks_the_rows_and_states_style_linkability(protect_output, tmp_path):
    """--unit post: no author, group or position column, rows in an order that follows neither the input nor an
    author, group, position or released column; the card states the unit, that the timeline certificate is
    conservative, and the same-author pair AUC measured on the released rows."""
    p, _ = protect_output
    out = tmp_path / "release"
    proc = _release(p, out, "--unit", "post", "--keep", "label")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "; unit post: rows unlinked, same-author pair AUC " in proc.stdout
    released = pd.read_parquet(out / DATA_FILE)
    assert list(released.columns) == ["doc_id", "text", "label"]
    table = pd.read_parquet(p)
    kept = table[(table["status"] == "ok") & ~table["verbatim"].astype(bool) & ~table["unchanged"].astype(bool)]
    kept = kept.reset_index(drop=True).assign(order=lambda f: range(len(f)))
    assert kept["text"].is_unique and sorted(released["text"]) == sorted(kept["text"])
    joined = released.merge(kept[["text", "author_id", "group_id", "position", "order"]], on="text", how="left")  # test only
    assert joined["order"].tolist() != sorted(joined["order"])  # not the input's order
    for column in ["doc_id", "text", "label", "author_id", "group_id", "position", "order"]:
        if _chance_monotonic(joined[column].tolist()) > 1e-6:
            continue  # few values (a label): a random order is sorted too often for this check to mean anything
        assert not joined[column].is_monotonic_increasing and not joined[column].is_monotonic_decreasing, column
    assert _chance_monotonic(joined["order"].tolist()) < 1e-6  # the check ran for the rows' own order
    for column in ["author_id", "group_id"]:  # an author's (a debate's) rows no more adjacent than by chance
        observed, tail = _beyond_chance(joined[column].tolist())
        assert tail > 0, (column, observed)  # beyond every one of 20,000 random orders: a 1-in-20,000 false alarm
    again = tmp_path / "again"
    assert _release(p, again, "--unit", "post", "--keep", "label").returncode == 0
    assert pd.read_parquet(again / DATA_FILE)["text"].tolist() != released["text"].tolist()  # a fresh order

    card = (out / CARD_FILE).read_text()
    assert "## Unit: each post alone" in card and "no author, group or position column" in card
    assert "measured on timelines, so for single posts they are conservative" in card
    assert "can be re-linked by their style" in card and "**AUC " in card
    assert "the released rows, at release time" in card and "released posts themselves (no histories given)" in card
    n_authors = kept["author_id"].nunique()
    assert f"posts of {n_authors} authors" in card
    assert "rows of one author or conversation stay linked" not in card


def test_timeline_release_says_its_unit(protect_output, tmp_path):
    p, _ = protect_output
    out = tmp_path / "release"
    assert _release(p, out, "--keep", "author_id").returncode == 0
    card = (out / CARD_FILE).read_text()
    assert "## Unit: an author's posts together" in card and "an attacker sees an author's posts together" in card
    assert "AUC" not in card


@pytest.mark.parametrize("column", ["author_id", "group_id", "position"])
def test_post_release_keeping_a_linking_column_exits_2(protect_output, tmp_path, column):
    p, _ = protect_output
    line = _one_error_line(_release(p, tmp_path / "release", "--unit", "post", "--keep", f"label,{column}"))
    assert f"--keep {column}: a release at --unit post drops author_id, group_id, position" in line
    assert not (tmp_path / "release").exists()


def test_post_certified_output_is_released_at_post_unit_only(protect_output, tmp_path):
    """A summary certified at post unit: the default unit is post and the card states its certificate's AUC; a
    timeline release is refused (a post certificate says nothing of timelines); so is an unknown unit."""
    p, _ = protect_output
    copy = tmp_path / "P.parquet"
    shutil.copy(p, copy)
    summary = json.loads(protect_paths(p).summary.read_text())
    link = {"value": 0.61, "ci_low": 0.55, "ci_high": 0.67, "n_same": 120, "n_other": 120, "n_authors": 9,
            "n_posts": 40, "model": "centred cosine (test)", "interval": "cluster bootstrap (test)"}
    protect_paths(copy).summary.write_text(json.dumps({**summary, "unit": "post", "linkability": link}))
    line = _one_error_line(_release(copy, tmp_path / "timeline", "--unit", "timeline"))
    assert "--unit timeline: the protect output was certified at post unit" in line
    assert "--unit 'cluster': must be one of timeline, post" in _one_error_line(
        _release(copy, tmp_path / "bad", "--unit", "cluster"))
    kept = _one_error_line(_release(copy, tmp_path / "kept", "--keep", "author_id"))
    assert "a release at post unit (the unit the protect output was certified at) drops" in kept
    out = tmp_path / "release"
    proc = _release(copy, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "same-author pair AUC 0.610 [0.550, 0.670]" in proc.stdout
    assert list(pd.read_parquet(out / DATA_FILE).columns) == ["doc_id", "text"]
    card = (out / CARD_FILE).read_text()
    assert "measured on single posts, as they are released" in card
    assert "**AUC 0.610 [0.550, 0.670]**" in card and "the protect output's certificate" in card
    assert "Its interval lies above 0.5" in card
