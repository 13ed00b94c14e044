"""The experiment flow end to end on a small real sample (debates turns, apertium, MiniLM, sacrebleu),
and the cache behaviour docs/architecture.md describes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import sacrebleu
from debate_sample import debate_turns

from flows.experiment import StageFailed, experiment_from_mapping
from tasks.layout import RunLayout, stage_kind
from tasks.metrics.suite import ALL_METRICS
from tasks.privacy.attacks import available_attacks
from tasks.scores import TABLES, validate_scores

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "synthugc"


@pytest.fixture(scope="module")
def sample_corpus(tmp_path_factory) -> Path:
    """42 real debate turns from three debates, each cut to its first 40 words, splits left to the flow."""
    sample = debate_turns(3, 14, words=40)
    path = tmp_path_factory.mktemp("corpus") / "sample.parquet"
    sample.to_parquet(path)
    return path


def _config(corpus: Path, root: Path, stymask_params: dict | None = None,
            metrics: list[str] | None = None) -> dict:
    return {
        "experiment": "t",
        "seed": 3,
        "storage_root": str(root),
        "data": {"path": str(corpus)},
        "generate": {"shard_size": 25, "strategies": [
            {"name": "backtranslate", "params": {"backend": "apertium", "pivots": ["spa"]}},
            {"name": "stymask", "params": stymask_params or {}},
        ]},
        "metrics": {"names": metrics or ["bertscore_f1", "bleu_divergence"]},
        "utility": {"seeds": [0, 1], "fractions": [0.5, 1.0]},
    }


@pytest.fixture()
def isolated(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _manifest(root: Path) -> dict:
    return json.loads((root / "t" / "manifest.json").read_text())


def test_end_to_end_then_everything_cached(sample_corpus, isolated):
    root = isolated / "runs"
    first = experiment_from_mapping(_config(sample_corpus, root, metrics=list(ALL_METRICS)))
    expected_stages = {"ingest", "split", "generate[backtranslate][0]", "generate[backtranslate][1]",
                       "generate[stymask][0]", "generate[stymask][1]", "metrics[backtranslate]",
                       "metrics[stymask]", "privacy[backtranslate]", "privacy[stymask]", "index-histories[minhash]",
                       "reidentify[backtranslate]", "reidentify[stymask]", "report",
                       *_utility_stages(["backtranslate", "stymask"])}
    assert set(first.stages) == expected_stages
    assert set(first.stages.values()) == {"Completed"}

    corpus = pd.read_parquet(root / "t" / "split" / "corpus.parquet")
    assert len(corpus) == 42
    for label in ("backtranslate", "stymask"):
        scores = pd.read_parquet(root / "t" / "metrics" / label / "sample_scores.parquet")
        assert sorted(scores["doc_id"]) == sorted(corpus["doc_id"])  # one output per input, none lost
        ok = scores[scores["status"] == "ok"]
        assert len(ok) >= 35
        assert ok["bertscore_f1"].between(0.0, 1.0 + 1e-6).all()
        # bleu_divergence equals sacrebleu on the stored pair
        synthetic = pd.concat(pd.read_parquet(p) for p in sorted((root / "t" / "generate" / label).glob("*.parquet")))
        row = synthetic[synthetic["status"] == "ok"].iloc[0]
        source = corpus.set_index("doc_id").loc[row["doc_id"], "text"]
        expected = 1 - sacrebleu.sentence_bleu(row["text"], [source]).score / 100
        got = scores.set_index("doc_id").loc[row["doc_id"], "bleu_divergence"]
        assert abs(got - expected) < 1e-9
    # back-translation really rewrites: mean divergence clearly above zero
    bt = pd.read_parquet(root / "t" / "metrics" / "backtranslate" / "distribution_scores.parquet")
    assert bt.set_index("metric").loc["bleu_divergence", "value"] > 0.2

    html = Path(first.report_html).read_text()
    assert "<summary>backtranslate (pivot-spa)</summary>" in html and "<summary>stymask</summary>" in html
    assert "http" not in html.split("<body")[1]
    manifest = _manifest(root)
    assert manifest["signatures"]["bertscore_f1"].startswith("metric:bertscore")
    assert {name: stage["state"] for name, stage in manifest["stages"].items()} == first.stages

    published = _artifacts("t-report") + _artifacts("t-scores") + _artifacts("t-table4")
    assert {a.type for a in published} == {"markdown", "table"}
    link = _artifacts("t-report-html")  # Prefect stores a link artifact as markdown: [text](url)
    assert len(link) == 1 and Path(first.report_html).as_uri() in str(link[0].data)
    assert any("bertscore_f1" in str(a.data) for a in published)

    # every intrinsic metric has a value or a reason, at its level, with its signature
    for label in ("backtranslate", "stymask"):
        dist = pd.read_parquet(root / "t" / "metrics" / label / "distribution_scores.parquet")
        assert set(dist["metric"]) == set(ALL_METRICS)
        assert (dist["value"].notna() | dist["reason"].notna()).all()
        assert dist["signature"].str.startswith("metric:").all()
    assert "Bag-level metrics" in html and "distribution level (Table 13)" in html and "Privacy attacks (Table 6)" in html
    privacy = pd.read_parquet(root / "t" / "privacy" / "stymask" / "privacy_scores.parquet")
    profiled = privacy[(privacy["metric"] == "profiling_accuracy") & (privacy["attribute"] == "party")
                       & (privacy["model"] == "linear")]
    original = profiled.loc[profiled["strategy"] == "original", "value"].item()
    privacy = privacy.set_index(["strategy", "metric"])
    assert 0.0 <= original <= 1.0
    assert 0.5 <= privacy.loc[("stymask", "membership_auc"), "value"] <= 1.0  # near-copies of the members
    reid = pd.read_parquet(root / "t" / "privacy" / "stymask" / "reid_scores.parquet").set_index(
        ["strategy", "metric", "attack", "adversary"])
    pairs = {(a, s) for a in available_attacks() for s in ("full", "disjoint")}  # the default: all of them
    assert {k[2:] for k in reid.index if k[:2] == ("stymask", "reid_accuracy")} == pairs  # every attack x adversary
    for attack in ("minhash", "stylometric"):  # the adversary holding the originals beats chance
        assert (reid.loc[("stymask", "reid_accuracy", attack, "full"), "value"]
                > reid.loc[("chance", "reid_accuracy", attack, "full"), "value"] > 0)
        # each dialogue here is a whole document that gets rewritten, so the disjoint adversary holds
        # nothing: no timeline can be attributed, so accuracy and chance are unknown (not 0) and the row says why
        disjoint = reid.loc[[("stymask", "reid_accuracy", attack, "disjoint"), ("chance", "reid_accuracy", attack,
                                                                              "disjoint")]]
        assert disjoint["value"].isna().all()
        assert disjoint["reason"].str.contains("history is empty").all()
    timelines = pd.read_parquet(root / "t" / "privacy" / "stymask" / "reidentification.parquet")
    one = timelines[(timelines["attack"] == "minhash") & (timelines["adversary"] == "full")]
    assert len(one) == reid.loc[("stymask", "reid_accuracy", "minhash", "full"), "n"] > 0
    runs = pd.read_parquet(root / "t" / "report" / "utility_runs.parquet")
    assert set(runs["setting"]) == {"baseline", "substitution", "augmentation"}
    assert len(runs) == len(_utility_stages(["backtranslate", "stymask"]))  # the baseline ran once
    assert set(runs["seed"]) == {0, 1} and runs.loc[runs["status"] == "ok", "macro_f1"].between(0, 1).all()
    assert "Substitution: train on synthetic, test on real (Table 5)" in html and "(Table 7)" in html

    _assert_declared_schemas(root / "t")

    second = experiment_from_mapping(_config(sample_corpus, root, metrics=list(ALL_METRICS)))
    assert set(second.stages.values()) == {"Cached"}, second.stages


def _assert_declared_schemas(run: Path) -> None:
    """Every score table the run wrote has the columns and dtypes tasks/scores.py declares for that output
    in tasks/layout.py."""
    checked = set()
    for result in RunLayout.from_manifest(json.loads((run / "manifest.json").read_text())).results:
        for output, ref in result.outputs.items():
            declared = stage_kind(result.kind).output(output).table
            if declared is not None:
                validate_scores(pd.read_parquet(ref.path), TABLES[declared])
                checked.add(declared)
    assert checked >= {"sample_scores", "scores", "distributions", "utility_runs", "metric_correlations"}


def _utility_stages(strategies: list[str]) -> set[str]:
    """Stage names of the utility runs of the test config (seeds 0, 1; fractions 50%, 100%)."""
    from tasks.training.utility import utility_design

    return {f"utility[{label}][{setting}][{round(100 * f)}%][seed {seed}]"
            for label, setting, f, seed in utility_design(strategies, ["substitution", "augmentation"], [0.5, 1.0], [0, 1])}


def _artifacts(key: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))


def test_changing_one_strategy_recomputes_only_its_branch(sample_corpus, isolated):
    root = isolated / "runs"
    experiment_from_mapping(_config(sample_corpus, root))
    changed = experiment_from_mapping(_config(sample_corpus, root, stymask_params={"intensity": 0.5}))
    recomputed = {k for k, v in changed.stages.items() if v != "Cached"}
    assert recomputed == {"generate[stymask][0]", "generate[stymask][1]", "metrics[stymask]", "privacy[stymask]",
                          "reidentify[stymask]", "report",
                          *(name for name in _utility_stages(["stymask"]) if "[original]" not in name)}


def test_rewritten_input_at_same_path_invalidates_dependents(sample_corpus, isolated):
    root = isolated / "runs"
    corpus = isolated / "mine.parquet"
    shutil.copy(sample_corpus, corpus)
    experiment_from_mapping(_config(corpus, root))
    df = pd.read_parquet(corpus)
    df.loc[df.index[0], "text"] = "An entirely new first turn about taxes and jobs."
    df.to_parquet(corpus)
    rerun = experiment_from_mapping(_config(corpus, root))
    assert rerun.stages["ingest"] == "Completed"
    assert rerun.stages["split"] == "Completed"
    assert rerun.stages["metrics[stymask]"] == "Completed"
    samples = pd.read_parquet(root / "t" / "split" / "corpus.parquet")
    assert "An entirely new first turn about taxes and jobs." in set(samples["text"])


def test_lost_artifact_is_recomputed_not_trusted(sample_corpus, isolated):
    root = isolated / "runs"
    experiment_from_mapping(_config(sample_corpus, root))
    (root / "t" / "metrics" / "stymask" / "sample_scores.parquet").unlink()
    rerun = experiment_from_mapping(_config(sample_corpus, root))
    assert rerun.stages["metrics[stymask]"] == "Completed"
    assert rerun.stages["metrics[backtranslate]"] == "Cached"
    assert (root / "t" / "metrics" / "stymask" / "sample_scores.parquet").exists()

    edited = root / "t" / "metrics" / "backtranslate" / "distribution_scores.parquet"  # truncated on disk
    edited.write_bytes(edited.read_bytes()[:100])
    again = experiment_from_mapping(_config(sample_corpus, root))
    assert again.stages["metrics[backtranslate]"] == "Completed" and again.stages["metrics[stymask]"] == "Cached"
    assert len(pd.read_parquet(edited)) > 0  # the recomputed table, not the truncated bytes


def test_failed_strategy_recorded_others_complete_and_rerun_recomputes_only_it(sample_corpus, isolated, monkeypatch):
    root = isolated / "runs"
    original_path = os.environ["PATH"]
    empty_bin = isolated / "bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))  # apertium is not found: the backtranslate branch fails
    with pytest.raises(StageFailed, match="generate\\[backtranslate\\]"):
        experiment_from_mapping(_config(sample_corpus, root))
    stages = {name: stage["state"] for name, stage in _manifest(root)["stages"].items()}
    assert stages["generate[backtranslate][0]"] == "Failed"
    assert stages["metrics[stymask]"] == "Completed"
    assert stages["metrics[backtranslate]"] == "NotRun"
    assert not (root / "t" / "metrics" / "backtranslate").exists()
    report = (root / "t" / "report.md").read_text()
    assert "Failed stages" in report and "apertium" in report

    monkeypatch.setenv("PATH", original_path)
    rerun = experiment_from_mapping(_config(sample_corpus, root))
    assert rerun.stages["generate[stymask][0]"] == "Cached"
    assert rerun.stages["metrics[stymask]"] == "Cached"
    assert rerun.stages["generate[backtranslate][0]"] == "Completed"
    assert rerun.stages["metrics[backtranslate]"] == "Completed"


def _cli(*args: str, env_extra: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_cli_bad_config_exits_2_with_one_line(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("experiment: x\ndata: {dataset: debates}\ngenerate:\n  strategies:\n    - name: stymask\n"
                      "      params: {no_such_param: 1}\n  shards: 3\n")
    proc = _cli("run", str(config))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "generate" in lines[0] and "Traceback" not in proc.stderr


def test_cli_bad_data_exits_2_naming_file_column_row(sample_corpus, tmp_path):
    df = pd.read_parquet(sample_corpus)
    df.loc[df.index[5], "doc_id"] = df.loc[df.index[2], "doc_id"]
    bad = tmp_path / "dup.parquet"
    df.to_parquet(bad)
    config = tmp_path / "c.yaml"
    config.write_text(f"experiment: bad\nstorage_root: {tmp_path / 'runs'}\ndata: {{path: {bad}}}\n"
                      "generate:\n  strategies:\n    - name: stymask\n")
    proc = _cli("run", str(config), env_extra={"SYNTHUGC_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    error_lines = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert any(str(bad) in line and "doc_id" in line and "row 6" in line for line in error_lines), proc.stderr


def test_llm_profiling_stage_with_the_offline_llm(sample_corpus, isolated):
    """The zero-shot LLM attack as a flow stage, on the in-process SmolLM2 (tiny answers: machinery only)."""
    root = isolated / "runs"
    short = isolated / "short.parquet"  # short turns keep the prompts small for a CPU model
    pd.read_parquet(sample_corpus).assign(text=lambda f: f["text"].str.slice(0, 60)).to_parquet(short)
    config = _config(short, root, metrics=["bleu_divergence"])
    config["generate"]["strategies"] = [{"name": "stymask"}]
    config["privacy"] = {"membership": {"enabled": False}, "reidentify": {"enabled": False},
                         "llm_profiling": {"enabled": True, "max_tokens": 8, "n": 1}}
    config["utility"] = {"enabled": False}  # nothing here reads the utility runs
    summary = experiment_from_mapping(config)
    assert summary.stages["llm-profile[stymask]"] == "Completed"
    scores = pd.read_parquet(root / "t" / "privacy" / "stymask" / "llm_profiling_scores.parquet")
    assert {"original", "stymask", "chance"} <= set(scores["strategy"])
    assert scores.loc[scores["metric"] == "llm_profiling_success", "value"].between(0, 1).all()
    predictions = pd.read_parquet(root / "t" / "privacy" / "stymask" / "llm_profiling_predictions.parquet")
    assert len(predictions) > 0 and predictions["answer"].notna().any()
    accuracy = scores[scores["metric"] == "llm_profiling_accuracy"]
    assert set(accuracy["attribute"]) == {"party"} and accuracy["model"].isna().all()  # the attribute in its column
    assert "LLM profiling party ↓" in (root / "t" / "report.md").read_text()  # Table 6's column for it


def test_dp_audit_stage_feeds_the_reports_dp_table(sample_corpus, isolated):
    """privacy.audit_dp adds audit-dp[<label>] for each strategy with a privacy mechanism (not stymask); its table
    is the audit `synthugc audit-dp` writes, and the report's DP table sets the audited epsilon beside the nominal
    one. With the audit off the table shows the nominal epsilon alone and says how to audit it."""
    from tasks.privacy.dp_audit import DP_PROMPT_COLUMNS, audited_epsilon

    root = isolated / "runs"
    short = isolated / "short.parquet"  # short turns keep the prompts small for the CPU model
    pd.read_parquet(sample_corpus).assign(text=lambda f: f["text"].str.slice(0, 60)).to_parquet(short)
    config = _config(short, root, metrics=["bleu_divergence"])
    config["generate"]["strategies"] = [{"name": "dp", "params": {"epsilon": 4, "max_tokens": 6}}, {"name": "stymask"}]
    config["privacy"] = {"membership": {"enabled": False}, "reidentify": {"enabled": False},
                         "audit_dp": {"enabled": True, "neighbours": 2, "max_docs": 3}}
    config["utility"] = {"enabled": False}
    summary = experiment_from_mapping(config)
    assert summary.stages["audit-dp[dp]"] == "Completed" and "audit-dp[stymask]" not in summary.stages
    audit = pd.read_parquet(root / "t" / "privacy" / "dp" / "dp_audit.parquet")
    assert list(audit.columns) == list(DP_PROMPT_COLUMNS) and len(audit) == 3
    assert list(audit["doc_id"]) == sorted(pd.read_parquet(root / "t" / "split" / "corpus.parquet")["doc_id"])[:3]
    figures = audited_epsilon(audit)
    assert figures["nominal"] == 4 and 0 < figures["audited"] <= 4 and figures["violations"] == 0
    assert f"| dp (dp-prompt-eps4) | 4 | {figures['audited']:.4g} (dp-prompt: largest privacy loss) | 3 | 0 |" in \
        _dp_rows(root)
    assert 'id="dp"' in (root / "t" / "report.html").read_text()

    config["privacy"]["audit_dp"]["enabled"] = False
    again = experiment_from_mapping(config)
    assert "audit-dp[dp]" not in again.stages and again.stages["generate[dp][0]"] == "Cached"
    assert "| dp (dp-prompt-eps4) | 4 | not audited (enable privacy.audit_dp) | – | – |" in _dp_rows(root)


def _dp_rows(root: Path) -> list[str]:
    """The rows of the report's DP table (markdown)."""
    section = (root / "t" / "report.md").read_text().split("## Differential privacy: nominal against audited epsilon")
    assert len(section) == 2, "the report has no DP table"
    return [line for line in section[1].split("\n## ")[0].splitlines() if line.startswith("| dp")]
