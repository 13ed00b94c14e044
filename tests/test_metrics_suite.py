"""The metric suite as the flow and `synthugc score` run it: every metric, Dask and sequential agree,
degenerate input gives NaN with a reason instead of crashing, and the commands write their files."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tasks.layout import read_stage_tables
from tasks.metrics import catalogue
from tasks.metrics.base import reason_column
from tasks.metrics.suite import (
    ALL_METRICS,
    BAG_METRICS,
    DISTRIBUTION_METRICS,
    SAMPLE_METRICS,
    MetricOptions,
    check_metric_names,
    comparison_metrics,
    metric_correlation_matrix,
    prefetch_embeddings,
    score_strategy,
)
from tasks.parallel import dask_client

pytestmark = pytest.mark.slow
CLI = Path(sys.executable).parent / "synthugc"

SOURCES = [
    "We need to bring jobs back to this country, and we will do it quickly.",
    "My plan cuts taxes for the middle class and invests in infrastructure.",
    "I have been fighting for children and families my entire career.",
    "They are taking our jobs, and nobody is doing anything about it!",
    "The economy is stronger when it works for everyone, not just those at the top.",
    "Believe me, we are going to make this country great again.",
    "Well, I think that is not true, and the record shows it.",
    "Thank you.",
]


def _corpus() -> pd.DataFrame:
    return pd.DataFrame({
        "doc_id": [f"d{i}" for i in range(len(SOURCES))],
        "text": SOURCES,
        "group_id": ["g1"] * 4 + ["g2"] * 3 + ["g3"],  # g3: a one-item bag
        "author_id": ["a", "b"] * 4,
    })


def _synthetic(corpus: pd.DataFrame) -> pd.DataFrame:
    texts = [t.replace("jobs", "work").replace("!", ".") for t in corpus["text"]]
    texts[2] = corpus["text"][2]  # an identical copy
    texts[6] = "No."  # one word
    status = ["ok"] * len(texts)
    status[5], texts[5] = "failed", None  # a generation failure stays in the table
    return pd.DataFrame({"doc_id": corpus["doc_id"], "strategy": "toy", "variant": "first", "text": texts,
                         "group_id": corpus["group_id"], "author_id": corpus["author_id"], "status": status,
                         "reason": [None if s == "ok" else "model failed" for s in status]})


@pytest.fixture(scope="module")
def options() -> MetricOptions:
    from tasks.models.registry import resolve_model

    return MetricOptions(token_encoder=resolve_model("token_encoder"),
                         sentence_encoder=resolve_model("sentence_encoder"),
                         pos_tagger=resolve_model("pos_tagger"), shard_size=3)


def test_every_metric_sequential_and_on_dask_agree(tmp_path, options):
    corpus = _corpus()
    synthetic = _synthetic(corpus)
    here = score_strategy(corpus, synthetic, ALL_METRICS, options, tmp_path / "a.sqlite")
    with dask_client(threads_per_worker=2) as client:
        there = score_strategy(corpus, synthetic, ALL_METRICS, options, tmp_path / "b.sqlite", client=client)

    samples = here.sample_scores
    assert len(samples) == len(synthetic) and list(samples["doc_id"]) == list(synthetic["doc_id"])
    for metric in SAMPLE_METRICS:
        assert metric in samples.columns and reason_column(metric) in samples.columns
        np.testing.assert_allclose(samples[metric].to_numpy(float), there.sample_scores[metric].to_numpy(float),
                                   rtol=1e-6, atol=1e-6, equal_nan=True)
    # the failed row is NaN with the generation failure as its reason, never dropped
    failed = samples[samples["doc_id"] == "d5"].iloc[0]
    assert np.isnan(failed["bertscore_f1"]) and "model failed" in failed[reason_column("bertscore_f1")]
    # an identical copy scores as one
    copy = samples[samples["doc_id"] == "d2"].iloc[0]
    assert copy["bertscore_f1"] == pytest.approx(1.0, abs=1e-5)
    assert copy["bleu_divergence"] == pytest.approx(0.0, abs=1e-9)
    assert copy["pos_jaccard"] == pytest.approx(1.0)

    def overall(scores: pd.DataFrame) -> pd.DataFrame:  # one row per metric: PII rows per type left out
        return scores[scores["entity"].fillna("all") == "all"].set_index("metric")

    dist = overall(here.distribution_scores)
    expected = (set(SAMPLE_METRICS) | set(DISTRIBUTION_METRICS) | set(BAG_METRICS) | set(catalogue.names("pair"))
                | {"self_bleu", "self_bleu_diversity"})
    assert set(dist.index) == expected
    other = overall(there.distribution_scores)
    for metric in expected:
        a, b = dist.loc[metric, "value"], other.loc[metric, "value"]
        assert (np.isnan(a) and np.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-6), metric
        signature = dist.loc[metric, "signature"]
        assert signature.startswith("metric:") and "version:" in signature, (metric, signature)
    # one variant only: self-BLEU is undefined and says why
    assert np.isnan(dist.loc["self_bleu", "value"]) and dist.loc["self_bleu", "reason"]
    assert (dist["n_failed"] == 1).all()
    assert set(here.distributions["metric"]) >= {"fcsd"}
    assert {"real", "synthetic"} <= set(here.distributions.loc[here.distributions["metric"] == "fcsd", "series"])


def test_sample_means_carry_the_bootstrap_interval_over_documents(tmp_path, options):
    """A mean meaning (or any sample) score carries its 95% interval: scipy's percentile bootstrap of the mean over
    the scored documents, with the run's seed and the configured resamples; n counts the scored documents."""
    from scipy import stats

    corpus = _corpus()
    synthetic = _synthetic(corpus)
    result = score_strategy(corpus, synthetic, ["bertscore_f1", "bleu_divergence"],
                            replace(options, seed=5, n_bootstrap=400), tmp_path / "ci.sqlite")
    rows = result.distribution_scores.set_index("metric")
    for metric in ("bertscore_f1", "bleu_divergence"):
        values = result.sample_scores[metric].dropna().to_numpy(float)
        ref = stats.bootstrap((values,), np.mean, n_resamples=400, method="percentile", rng=5, vectorized=True)
        row = rows.loc[metric]
        assert row["n"] == len(values) == len(corpus) - 1  # the failed generation is not a document scored
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)
        assert row["ci_low"] < row["value"] < row["ci_high"]
    other = score_strategy(corpus, synthetic, ["bertscore_f1"], replace(options, seed=6, n_bootstrap=400),
                           tmp_path / "ci.sqlite").distribution_scores.set_index("metric")
    assert other.loc["bertscore_f1", "ci_low"] != rows.loc["bertscore_f1", "ci_low"]  # seeded by the run's seed


def test_variants_give_self_bleu_and_degenerate_sets_give_reasons(tmp_path, options):
    corpus = _corpus().iloc[:3]
    first = _synthetic(_corpus()).iloc[:3]
    second = first.assign(variant="second", text=["Jobs must come back here fast.", "Tax cuts for the middle.",
                                                   "Kids and families, always."])
    synthetic = pd.concat([first, second], ignore_index=True)
    result = score_strategy(corpus, synthetic, ["self_bleu", "self_bleu_diversity", "fbd", "pair_sbert"],
                            options, tmp_path / "c.sqlite")
    per_doc = result.sample_scores.drop_duplicates("doc_id").set_index("doc_id")
    assert per_doc["self_bleu"].notna().all()
    assert ((per_doc["self_bleu_diversity"] - (1 - per_doc["self_bleu"] / 100)).abs() < 1e-9).all()
    dist = result.distribution_scores
    assert set(dist["variant"]) == {"first", "second"}
    # FBD on 3 vs 3 texts in 384 dimensions is defined (singular covariances handled)
    assert dist.loc[dist["metric"] == "fbd", "value"].notna().all()

    lonely = score_strategy(corpus.iloc[:1], first.iloc[:1], ["fbd", "pos_jsd", "char_jsd"], options,
                            tmp_path / "d.sqlite")
    rows = lonely.distribution_scores.set_index("metric")
    assert np.isnan(rows.loc["fbd", "value"]) and rows.loc["fbd", "reason"]


def test_strategies_scored_side_by_side_embed_the_real_texts_once(tmp_path, options):
    """Two strategies' prefetches started together on one run's cache: every distinct text goes through the
    encoder once in all (the second waits for the first and embeds only its own outputs)."""
    from concurrent.futures import ThreadPoolExecutor

    real = SOURCES * 3 + [f"{t} Again." for t in SOURCES]  # enough real text that the two overlap
    outputs = [[t.upper() for t in SOURCES], [t.lower() + "!" for t in SOURCES]]
    cache = tmp_path / "cache" / "embeddings.sqlite"
    with ThreadPoolExecutor(2) as pool:
        counts = list(pool.map(lambda out: prefetch_embeddings([*real, *out], ["bertscore_f1", "cps"], options,
                                                               str(cache)), outputs))
    assert sum(counts) == len(set(real) | set(outputs[0]) | set(outputs[1]))
    assert min(counts) == len(SOURCES)  # the later one: its own outputs only


def test_pii_scan_parses_feed_the_pos_metrics_and_change_no_score(tmp_path, options, monkeypatch):
    """The PII scan's spaCy parses give the POS and style metrics their tags (one parse per text); every
    score is what the suite gives when each metric parses for itself."""
    from tasks.metrics import suite

    corpus, synthetic = _corpus(), _synthetic(_corpus())
    names = ["pii_leakage", "pos_jaccard", "style_cosine", "pos_jsd"]
    shared = suite.score_strategy(corpus, synthetic, names, options, tmp_path / "a.sqlite")
    pairs = synthetic.merge(corpus[["doc_id", "text"]].rename(columns={"text": "source"}), on="doc_id")
    ok = pairs[pairs["status"] == "ok"]
    kept = suite.prefetch_parses(pairs, names, options, str(tmp_path / "k.sqlite"))
    assert kept == len(set(ok["source"]) | set(ok["text"]))
    monkeypatch.setattr(suite, "prefetch_parses", lambda *args: 0)
    alone = suite.score_strategy(corpus, synthetic, names, options, tmp_path / "b.sqlite")
    pd.testing.assert_frame_equal(shared.sample_scores, alone.sample_scores)
    pd.testing.assert_frame_equal(shared.distribution_scores, alone.distribution_scores)


MODEL_LIBRARIES = ("torch", "transformers", "sentence_transformers", "spacy")


def test_model_free_metrics_on_dask_import_no_model_library(tmp_path):
    """BLEU divergence and character JSD read no model: scored on a Dask client, in a fresh process, they are
    computed without importing torch, transformers, sentence-transformers or spaCy (seconds a CLI run of
    model-free metrics used to spend before its fan-out); a metric that reads one still imports them first."""
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_metrics_suite import MODEL_LIBRARIES, _corpus, _synthetic
from tasks.metrics.suite import MetricOptions, loads_models, score_strategy
from tasks.parallel import dask_client

corpus = _corpus()
with dask_client(threads_per_worker=2) as client:
    result = score_strategy(corpus, _synthetic(corpus), ["bleu_divergence", "char_jsd"], MetricOptions(),
                            {str(tmp_path / "cache.sqlite")!r}, client=client)
print(sorted(set(result.distribution_scores.dropna(subset=["value"])["metric"])))
print([name for name in MODEL_LIBRARIES if name in sys.modules])
print(loads_models(["pos_jsd"]), loads_models(["bertscore_f1"]), loads_models(["pii_leakage"]))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scored, imported, reads = proc.stdout.splitlines()[-3:]
    assert scored == "['bleu_divergence', 'char_jsd']"
    assert imported == "[]"
    assert reads == "True True True"  # spaCy's tagger, an encoder, the PII scan: imported before the fan-out


def test_unknown_metric_names_are_rejected():
    with pytest.raises(ValueError, match="unknown metric 'bleurt'"):
        check_metric_names(["bertscore_f1", "bleurt"])


def test_correlation_matrix_needs_three_strategies():
    rows = []
    for i, name in enumerate(["a", "b", "c", "d"]):
        rows += [{"strategy": name, "variant": "first", "metric": "m1", "value": float(i)},
                 {"strategy": name, "variant": "first", "metric": "m2", "value": float(10 - i)}]
    matrix = metric_correlation_matrix(pd.DataFrame(rows)).set_index("metric")
    assert matrix.loc["m1", "m2"] == pytest.approx(1.0)  # absolute Spearman of a perfectly inverse pair
    assert np.isnan(metric_correlation_matrix(pd.DataFrame(rows[:4])).set_index("metric").loc["m1", "m2"])


def test_comparison_metrics_rank_a_closer_bag_higher(tmp_path, options):
    functions = comparison_metrics(["fbd_sbert", "cos_tf", "bertscore_f1"], options, tmp_path / "e.sqlite")
    assert set(functions) == {"fbd_sbert", "cos_tf"}  # sample-level metrics need aligned pairs
    reference = SOURCES[:6]
    near = [t.replace("jobs", "work") for t in reference]
    far = ["Completely unrelated words about gardening tools."] * 6
    assert functions["cos_tf"](reference, near) > functions["cos_tf"](reference, far)
    assert functions["fbd_sbert"](reference, near) < functions["fbd_sbert"](reference, far)


def test_comparison_bag_metrics_scored_together_equal_each_alone(tmp_path, options):
    """The meta-evaluation's bag metrics share one scoring call per bag; each value is what scoring that
    metric alone gives."""
    from tasks.metrics.suite import score_bags

    functions = comparison_metrics(BAG_METRICS, options, tmp_path / "f.sqlite")
    reference, generated = SOURCES[:6], [t.replace("jobs", "work").upper() for t in SOURCES[1:7]]
    for metric in BAG_METRICS:
        alone = score_bags(pd.DataFrame({"group_id": "bag", "text": reference}),
                           pd.DataFrame({"group_id": "bag", "text": generated}), [metric],
                           replace(options, bag_group="group_id"), str(tmp_path / "g.sqlite"))
        assert functions[metric](reference, generated) == pytest.approx(float(alone["value"].iloc[0]), abs=1e-6), metric


def test_one_bag_metric_raising_leaves_the_others_scored(tmp_path, options, monkeypatch):
    """Scoring a bag's metrics together must not let one metric's error take the others down: the failing
    one raises its own error (the meta-evaluation records it as that metric's reason), the rest score."""
    from tasks.metrics import bags

    def broken(*args, **kwargs):
        raise RuntimeError("inv_pp broke")

    monkeypatch.setattr(bags, "inv_pp", broken)
    functions = comparison_metrics(["inv_pp", "cos_tf", "pair_bleu3"], options, tmp_path / "h.sqlite")
    reference, generated = SOURCES[:6], [t.replace("jobs", "work") for t in SOURCES[:6]]
    with pytest.raises(RuntimeError, match="inv_pp broke"):
        functions["inv_pp"](reference, generated)
    assert 0 < functions["cos_tf"](reference, generated) <= 1
    assert 0 < functions["pair_bleu3"](reference, generated) <= 1


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SYNTHUGC_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=env, timeout=600)


def test_score_and_metaeval_commands_write_their_files(tmp_path):
    corpus = _corpus()
    corpus.to_parquet(tmp_path / "corpus.parquet")
    _synthetic(corpus).to_parquet(tmp_path / "synthetic.parquet")
    proc = _run("score", "--corpus", str(tmp_path / "corpus.parquet"), "--synthetic", str(tmp_path / "synthetic.parquet"),
                "--out", str(tmp_path / "scores"), "--metrics", "bertscore_f1,bleu_divergence,char_jsd,cos_tf",
                tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    scored = read_stage_tables(tmp_path / "scores", "metrics")  # named as the flow's metrics stage names them
    samples, dist = scored["sample_scores"], scored["distribution_scores"]
    assert len(samples) == 8 and {"bertscore_f1", "bleu_divergence"} <= set(samples.columns)
    assert set(dist["metric"]) == {"bertscore_f1", "bleu_divergence", "char_jsd", "cos_tf"}

    bad = _synthetic(corpus).drop(columns=["status"])
    bad.to_parquet(tmp_path / "bad.parquet")
    proc = _run("score", "--corpus", str(tmp_path / "corpus.parquet"), "--synthetic", str(tmp_path / "bad.parquet"),
                "--out", str(tmp_path / "x"), tmp_path=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "bad.parquet" in proc.stderr and "'status'" in proc.stderr

    proc = _run("metaeval", "--corpus", str(tmp_path / "corpus.parquet"), "--out", str(tmp_path / "meta"),
                "--metrics", "char_jsd,cos_tf", "--bag-size", "6", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    meta = read_stage_tables(tmp_path / "meta", "metaeval")
    assert set(meta) == {"summary", "rows", "metric_pair_correlations"}
    summary = meta["summary"]
    assert set(summary["metric"]) == {"char_jsd", "cos_tf"}
    assert summary.loc[(summary["metric"] == "char_jsd") & (summary["manipulation"] == "nti"), "rho_mean"].iloc[0] > 0.8
