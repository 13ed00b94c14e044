"""Pseudonymisation in a run: a cached stage before generation whose mapping stays private; stymask alone
copies the direct identifiers, pseudonymize + stymask does not (pii_leakage against the original texts)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from prefect import flow

from flows.config import parse_config
from flows.experiment import run_experiment

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
