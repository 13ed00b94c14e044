"""Pseudonymisation in a run: a cached stage before generation whose mapping stays private; stymask alone
copies the direct identifiers, pseudonymize + stymask does not (pii_leakage against the original texts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from prefect import flow

from flows.config import parse_config
from flows.experiment import run_experiment
from flows.plan import plan_prepare
from tasks.layout import stage_kind
from tasks.report.build import PSEUDONYMISED_SOURCE

CLI = Path(sys.executable).parent / "synthugc"

pytestmark = pytest.mark.slow

TEXTS = [
    "Write to maria.lopez@gmail.com if John Carter is late again, honestly.",
    "@jcarter99 said the bus was late, call 415-555-0132 if you see it.",
    "I told John Carter that the meeting moved; Maria Lopez agreed with me.",
    "Seriously, email maria.lopez@gmail.com before Friday or we lose the room.",
    "The report from John Carter is great, but @jcarter99 never answers me.",
    "Maria Lopez and I walked to the park after lunch, it was sunny.",
]


@flow(name="pii-flow-test")
def _run(config: dict):
    return run_experiment(parse_config(config), families=("metrics", "report"))


def test_pseudonymised_strategy_leaks_nothing_and_the_mapping_stays_private(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.parquet"
    pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(TEXTS))], "text": TEXTS,
                  "author_id": ["a", "b", "a", "b", "a", "b"], "group_id": ["a", "b", "a", "b", "a", "b"]}
                 ).to_parquet(corpus)
    config = {"experiment": "pii", "seed": 5, "storage_root": str(tmp_path / "runs"), "data": {"path": str(corpus)},
              "generate": {"pseudonymize": {"scope": "author"}, "strategies": [
                  {"name": "stymask", "label": "stymask-raw", "pseudonymize": False},
                  {"name": "stymask", "label": "stymask-pseudo"}]},
              "metrics": {"names": ["pii_leakage", "pii_invented"]},
              "privacy": {"enabled": False}, "utility": {"enabled": False}, "report": {"goals": ["share-data"]}}
    summary = _run(config)
    assert summary.stages["pseudonymize"] == "Completed"
    run = tmp_path / "runs" / "pii"
    leak = {}
    for label in ("stymask-raw", "stymask-pseudo"):
        dist = pd.read_parquet(run / "metrics" / label / "distribution_scores.parquet")
        overall = dist[(dist["metric"] == "pii_leakage") & (dist["entity"] == "all")]
        leak[label] = float(overall["value"].iloc[0])
    assert leak["stymask-raw"] > 0.5 and leak["stymask-pseudo"] == 0.0
    mapping = pd.read_parquet(run / "private" / "pseudonymize" / "mapping.parquet")
    assert "maria.lopez@gmail.com" in set(mapping.astype(str).to_numpy().ravel())
    pseudo = pd.concat(pd.read_parquet(p) for p in (run / "generate" / "stymask-pseudo").glob("*.parquet"))
    assert not pseudo["text"].str.contains("maria.lopez@gmail.com", case=False).any()
    report = (run / "report.md").read_text() + (run / "report.html").read_text()
    assert "maria.lopez@gmail.com" not in report and "mapping" not in report  # never in the report
    assert "copies 100%" in report or "verbatim" in report  # stymask-raw is excluded from share-data
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stages"]["pseudonymize"]["result"]["outputs"]["mapping"]["path"].endswith(
        "private/pseudonymize/mapping.parquet")


EMAILS = ("maria.lopez@gmail.com", "j.carter@work-mail.org")
PHONES = ("415-555-0132", "(212) 555-0187")
RAW_PII = EMAILS + PHONES
PII_TEXTS = [
    "Write to maria.lopez@gmail.com if the bus is late again, honestly.",
    "The bus was late, call 415-555-0132 if you see it coming.",
    "Seriously, email j.carter@work-mail.org before Friday or we lose the room.",
    "My number is (212) 555-0187, text me when the meeting starts.",
    "I told maria.lopez@gmail.com that the meeting moved to Monday.",
    "We walked to the park after lunch, it was sunny and warm.",
]


def _texts_outside_private(run: Path) -> dict[str, str]:
    """Every file of the run outside private/ as text: parquet files as their string cells, the rest as read."""
    found = {}
    for path in sorted(p for p in run.rglob("*") if p.is_file() and "private" not in p.relative_to(run).parts):
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
            found[str(path)] = " ".join(str(v) for c in frame.columns for v in frame[c].tolist() if isinstance(v, str))
        else:
            found[str(path)] = path.read_text(encoding="utf-8", errors="replace")
    return found


def test_no_raw_identifier_leaves_private_when_pseudonymising(tmp_path):
    """A run with pseudonymisation on and example outputs, then `synthugc report --examples` and `synthugc
    annotate export`: no e-mail address or phone number of the input is in any file outside private/ (parquet
    cells, report, manifest, rating sheet; the privacy stages included) or in the local cache or in what the CLI
    printed; the raw copies (ingest, split, the strategy that rewrote the originals) are under private/,
    and the examples show the pseudonymised source."""
    corpus = tmp_path / "corpus.parquet"
    texts = PII_TEXTS * 3  # enough for the privacy stages (profiling, membership, re-identification)
    pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts,
                  "author_id": [f"a{i % 3}" for i in range(len(texts))],
                  "group_id": [f"g{i % 4}" for i in range(len(texts))],
                  "attr_party": ["x" if i % 2 else "y" for i in range(len(texts))]}).to_parquet(corpus)
    config = tmp_path / "pii.yaml"
    config.write_text(yaml.safe_dump({
        "experiment": "pii", "seed": 5, "storage_root": str(tmp_path / "runs"), "data": {"path": str(corpus)},
        "generate": {"pseudonymize": {"entities": ["EMAIL_ADDRESS", "PHONE_NUMBER"], "scope": "author"},
                     "strategies": [{"name": "stymask", "label": "stymask-raw", "pseudonymize": False},
                                    {"name": "stymask", "label": "stymask-pseudo"}]},
        "metrics": {"names": ["pii_leakage", "bleu_divergence"]},
        "utility": {"enabled": False}, "report": {"goals": ["share-data"], "examples": 6}}))
    env = {**os.environ, "SYNTHUGC_CACHE_DIR": str(tmp_path / "cache")}
    run_proc = subprocess.run([str(CLI), "run", str(config), "--verbose"], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=900)
    assert run_proc.returncode == 0, run_proc.stderr[-3000:]
    run = tmp_path / "runs" / "pii"
    report_proc = subprocess.run([str(CLI), "report", str(run), "--examples", "6"], capture_output=True, text=True,
                                 env=env, cwd=tmp_path, timeout=600)
    assert report_proc.returncode == 0, report_proc.stderr[-3000:]
    export_proc = subprocess.run([str(CLI), "annotate", "export", str(run), "--per-strategy", "3"],
                                 capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert export_proc.returncode == 0, export_proc.stderr[-3000:]

    private = run / "private"
    for folder in ("ingest", "split", "pseudonymize", "generate/stymask-raw"):
        assert list((private / folder).glob("*.parquet")), folder
    assert not (run / "ingest").exists() and not (run / "split").exists()
    assert not (run / "generate" / "stymask-raw").exists() and list((run / "generate" / "stymask-pseudo").glob("*"))
    raw_copy = pd.read_parquet(private / "ingest" / "corpus.parquet")
    assert set(EMAILS) <= {e for t in raw_copy["text"] for e in EMAILS if e in t}  # the check below can fail

    outside = _texts_outside_private(run)
    outside["cli output"] = "".join(p.stdout + p.stderr for p in (run_proc, report_proc, export_proc))
    assert {str(run / "report.html"), str(run / "report.md"), str(run / "manifest.json")} <= set(outside)
    assert any("human_eval" in where for where in outside)  # the rating sheet is checked too
    assert str(run / "privacy" / "stymask-pseudo" / "top_words.parquet") in outside  # the privacy stages ran
    leaks = {(where, value) for where, text in outside.items() for value in RAW_PII if value in text}
    assert not leaks, sorted(leaks)
    cached = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # the local cache (indexes, results)
    assert cached and not [p for p in cached for v in RAW_PII if v.encode() in p.read_bytes()]

    md = (run / "report.md").read_text()
    assert PSEUDONYMISED_SOURCE in md and "@example.com" in md  # the examples show the pseudonymised source
    assert "stymask-pseudo" in md.split("Example outputs")[1]
    assert "stymask-raw" not in md.split("Example outputs")[1].split("\n\n## ")[0].split("\n")[2]  # no column


def test_only_a_pseudonymising_run_moves_ingest_and_split_under_private(tmp_path):
    """The plan puts ingest and split (and a strategy that rewrites the originals) under private/ only when
    generate.pseudonymize is set; a run without it keeps today's layout."""
    corpus = tmp_path / "c.parquet"
    pd.DataFrame({"doc_id": ["d0"], "text": ["hello"]}).to_parquet(corpus)
    raw = {"experiment": "x", "data": {"path": str(corpus)}, "generate": {"strategies": [{"name": "stymask"}]}}
    plain = {c.kind: c.params["options"].private for c in plan_prepare(parse_config(raw)).calls}
    pseudo = {c.kind: c.params["options"].private
              for c in plan_prepare(parse_config(raw, overrides=["generate.pseudonymize={}"])).calls}
    assert plain == {"ingest": False, "split": False} and pseudo == {"ingest": True, "split": True}
    kind = stage_kind("split")
    assert kind.relative_path("corpus", {}) == "split/corpus.parquet"
    assert kind.relative_path("corpus", {}, private=True) == "private/split/corpus.parquet"
    assert stage_kind("pseudonymize").relative_path("corpus", {}, private=True) == "private/pseudonymize/corpus.parquet"
