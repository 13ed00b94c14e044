"""The whole flow at real size, the way a user runs it (issue 17): deployments/configs/conventions.yaml on
all 8,862 convention sentences, two strategies (stymask, syntr), the default metrics in five sample shards
per strategy on the local Dask cluster, privacy and utility (one seed). Checks that every stage completes
and that every document is accounted for at each step (outputs + recorded failures = inputs).

Slow: about as long as ``benchmarks/flow.py --sizes 8862`` (its figures: ``flow`` in docs/performance.md)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from flows.experiment import experiment_from_mapping
from tasks.corpus.datasets import fetch_dataset

pytestmark = [pytest.mark.slow, pytest.mark.scale, pytest.mark.timeout(2400)]  # the whole flow at 8,862 sentences
REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "deployments" / "configs" / "conventions.yaml"
STRATEGIES = ("stymask", "syntr")


def test_conventions_whole_flow_accounts_for_every_document(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SYNTHUGC_DATA_DIR", str(REPO / "data"))
    source = pd.read_parquet(fetch_dataset("conventions", REPO / "data"))
    config = yaml.safe_load(CONFIG.read_text())
    config["storage_root"] = str(tmp_path / "runs")
    assert [s["name"] for s in config["generate"]["strategies"]] == list(STRATEGIES)

    summary = experiment_from_mapping(config)

    assert summary.failed == {}
    assert set(summary.stages.values()) == {"Completed"}
    kinds = {name.split("[", 1)[0] for name in summary.stages}
    assert {"ingest", "split", "generate", "metrics", "privacy", "reidentify", "utility", "report"} <= kinds
    run = tmp_path / "runs" / config["experiment"]

    # ingest: every row of the dataset is in the corpus or in the recorded failures
    corpus = pd.read_parquet(run / "split" / "corpus.parquet")
    failures_path = run / "ingest" / "failures.parquet"
    ingest_failures = pd.read_parquet(failures_path) if failures_path.exists() else pd.DataFrame()
    assert len(source) == 8862
    assert len(corpus) + len(ingest_failures) == len(source)
    assert set(corpus["doc_id"]) | set(ingest_failures.get("doc_id", [])) == set(source["doc_id"])
    shard_size = config["metrics"]["shard_size"]
    assert len(corpus) > 2 * shard_size  # at least three sample shards per strategy

    for label in STRATEGIES:
        generated = pd.concat([pd.read_parquet(p) for p in sorted((run / "generate" / label).glob("shard-*.parquet"))],
                              ignore_index=True)
        assert sorted(generated["doc_id"]) == sorted(corpus["doc_id"])  # one output row per input row
        failed = generated[generated["status"] != "ok"]
        assert failed["reason"].notna().all()
        assert (generated["status"] == "ok").mean() > 0.9

        samples = pd.read_parquet(run / "metrics" / label / "sample_scores.parquet")
        assert sorted(samples["doc_id"]) == sorted(corpus["doc_id"])
        for metric in ("bertscore_f1", "sti", "pos_jaccard", "cps"):
            scored = samples.loc[samples["status"] == "ok", metric]
            reasons = samples.loc[samples["status"] == "ok", f"{metric}_reason"]
            assert (scored.notna() | reasons.notna()).all()  # a score or the reason there is none
            assert scored.notna().mean() > 0.9
        dist = pd.read_parquet(run / "metrics" / label / "distribution_scores.parquet")
        means = dist[dist["level"] == "sample-mean"]
        assert ((means["n"] + means["n_failed"]) <= len(corpus)).all()
        assert ((means["n"] > 0) | means["reason"].notna()).all()  # e.g. self-BLEU needs several variants
        assert (means.set_index("metric").loc[["bertscore_f1", "sti", "pos_jaccard", "cps"], "n"] > 0).all()
        assert {"fbd", "fcsd", "pos_jsd", "char_jsd"} <= set(dist["metric"])

        privacy = run / "privacy" / label
        assert len(pd.read_parquet(privacy / "privacy_scores.parquet"))
        assert len(pd.read_parquet(privacy / "reid_scores.parquet"))
        utility = sorted((run / "utility" / label).glob("*.parquet"))
        assert len(utility) == 2  # substitution and augmentation at 100%, seed 0
    assert (run / "report.html").stat().st_size > 0
