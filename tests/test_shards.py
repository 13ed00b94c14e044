"""Every stage that fans out gives the same numbers in shards, side by side, as in one piece (issue 17).

Real corpus (the 2012 convention sentences), real models (MiniLM, spaCy, TextBlob, VADER), real Dask
LocalClusters: one of threads in this process (the local default, where shards share every loaded
resource) and one of worker processes (as on a real cluster; slow: each worker imports and loads anew).
Each comparison runs at least three shards at once against one single-shard run, each on its own
embedding cache, so neither side reads what the other computed. Re-identification shards on threads and
on worker processes are compared with one process in tests/test_reidentify.py.
"""

from __future__ import annotations

import gc
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tasks.corpus.datasets import fetch_dataset
from tasks.generate.base import build_strategy, generate_synthetic
from tasks.metrics.suite import MetricOptions, score_strategy
from tasks.parallel import dask_client, map_shards, prepare_workers, resource_lock

N_DOCS = 120
SHARD = 40  # three sample shards
#: The cheapest metrics that still reach every shared resource: TextBlob (sti), the spaCy tagger (pos_*),
#: the MiniLM tokenizer and encoder (bertscore, cps, fcsd), sacrebleu (bleu_divergence), the SQLite cache.
METRICS = ["sti", "sti_pct", "pos_jaccard", "bleu_divergence", "cps", "bertscore_f1", "pos_jsd", "fcsd"]
#: On worker processes: the same lexicon, tagger and cache paths without the encoders (each worker process
#: would load MiniLM anew, which takes minutes on a busy 2-core machine).
PROCESS_METRICS = ["sti", "sti_pct", "pos_jaccard", "bleu_divergence", "pos_jsd"]


@pytest.fixture(scope="module")
def corpus() -> pd.DataFrame:
    data_dir = Path(__file__).resolve().parents[1] / "data"
    frame = pd.read_parquet(fetch_dataset("conventions", data_dir))
    return frame.head(N_DOCS).reset_index(drop=True)


@pytest.fixture(scope="module")
def stymasked(corpus: pd.DataFrame) -> pd.DataFrame:
    out = generate_synthetic(build_strategy("stymask", {}).fit(corpus), corpus, seed=0)
    out["strategy"] = "stymask"
    return out


@pytest.fixture(scope="module")
def threads():
    with dask_client(threads_per_worker=3) as client:
        yield client


@pytest.fixture(scope="module")
def processes():
    with dask_client(n_workers=2, threads_per_worker=2, processes=True) as client:
        yield client


def _single_shard(corpus, synthetic, names, tmp_path, **options):
    return score_strategy(corpus, synthetic, names, MetricOptions(shard_size=10**6, **options),
                          tmp_path / "single.sqlite")


def _assert_same_scores(sharded, single):
    assert (sharded.sample_scores["doc_id"] == single.sample_scores["doc_id"]).all()
    # Batches of different shards pad differently, so encoder outputs may differ in the last float bits.
    pd.testing.assert_frame_equal(sharded.sample_scores, single.sample_scores, check_exact=False, rtol=1e-5)
    pd.testing.assert_frame_equal(sharded.distribution_scores, single.distribution_scores, check_exact=False,
                                  rtol=1e-5)


def test_metric_suite_in_three_shards_on_threads_equals_one_shard(corpus, stymasked, threads, tmp_path):
    sharded = score_strategy(corpus, stymasked, METRICS, MetricOptions(shard_size=SHARD),
                             tmp_path / "threads.sqlite", client=threads)
    single = _single_shard(corpus, stymasked, METRICS, tmp_path)
    assert sharded.sample_scores["sti"].notna().sum() > N_DOCS // 2
    assert (sharded.sample_scores["sti"] != 0).any()  # the lexicon was read, not left empty
    _assert_same_scores(sharded, single)


def test_vader_sti_in_shards_on_threads_equals_one_shard(corpus, stymasked, threads, tmp_path):
    sharded = score_strategy(corpus, stymasked, ["sti"], MetricOptions(shard_size=SHARD // 2,
                                                                       transfer_classifier="vader"),
                             tmp_path / "threads.sqlite", client=threads)
    single = _single_shard(corpus, stymasked, ["sti"], tmp_path, transfer_classifier="vader")
    assert "vader" in sharded.signatures["sti"]
    _assert_same_scores(sharded, single)


@pytest.mark.slow
def test_metric_suite_in_shards_on_worker_processes_equals_one_shard(corpus, stymasked, processes, tmp_path):
    sharded = score_strategy(corpus, stymasked, PROCESS_METRICS, MetricOptions(shard_size=SHARD),
                             tmp_path / "processes.sqlite", client=processes)
    single = _single_shard(corpus, stymasked, PROCESS_METRICS, tmp_path)
    _assert_same_scores(sharded, single)


def _generate_shard(bounds: tuple[int, int], *, corpus: pd.DataFrame, strategy: str, seed: int) -> pd.DataFrame:
    """What the flow's generate stage does for one shard: build and fit on the whole corpus, rewrite a slice."""
    rewriter = build_strategy(strategy, {}).fit(corpus)
    return generate_synthetic(rewriter, corpus.iloc[bounds[0]:bounds[1]], seed=seed)


@pytest.mark.parametrize("strategy", ["stymask", "syntr"])
def test_generation_shards_side_by_side_concatenate_to_one_shard(corpus, threads, strategy):
    bounds = [(i, min(i + SHARD, N_DOCS)) for i in range(0, N_DOCS, SHARD)]
    parts = map_shards(threads, _generate_shard, bounds, corpus=corpus, strategy=strategy, seed=5)
    whole = _generate_shard((0, N_DOCS), corpus=corpus, strategy=strategy, seed=5)
    assert len(parts) == 3
    together = pd.concat(parts, ignore_index=True)
    assert (together["status"] == "ok").mean() > 0.9
    assert (together["text"] != corpus["text"]).any()
    pd.testing.assert_frame_equal(together, whole)


def test_utility_runs_side_by_side_equal_one_at_a_time(corpus, stymasked):
    from tasks.corpus.splits import assign_splits
    from tasks.training.utility import run_one

    data = assign_splits(corpus.assign(label=corpus["attr_party"]), seed=3)
    runs = [("original", "baseline", 1.0), ("stymask", "substitution", 1.0), ("stymask", "augmentation", 0.5)]

    def one(run):
        strategy, setting, fraction = run
        return run_one(data, stymasked, strategy, setting, fraction, seed=0, label_col="label")

    alone = [one(r) for r in runs]
    with ThreadPoolExecutor(max_workers=3) as pool:
        together = list(pool.map(one, runs))
    for a, b in zip(alone, together, strict=True):
        assert np.isfinite(a.filter(like="f1").to_numpy(dtype=float)).all()
        pd.testing.assert_frame_equal(a.drop(columns=["seconds"], errors="ignore"),
                                      b.drop(columns=["seconds"], errors="ignore"))


def test_prepare_workers_runs_once_for_workers_in_this_process():
    calls = []
    with dask_client(n_workers=2, threads_per_worker=1) as local:
        assert len(local.scheduler_info()["workers"]) == 2
        prepare_workers(local, lambda: calls.append(1))
    assert calls == [1]


@pytest.mark.slow
def test_prepare_workers_runs_in_each_worker_process(processes, tmp_path):
    import os

    pids = processes.run(os.getpid)
    folder = str(tmp_path)
    prepare_workers(processes, lambda: Path(folder, str(os.getpid())).touch())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(str(pid) for pid in set(pids.values()))
    assert str(os.getpid()) not in {p.name for p in tmp_path.iterdir()} and len(set(pids.values())) == 2


class Shared:
    """A stand-in for a shared, non-thread-safe object (a spaCy pipeline, a tokenizer)."""


def test_resource_lock_is_one_lock_per_object():
    a, b = Shared(), Shared()
    seen = []
    barrier = threading.Barrier(4)

    def grab(obj):
        barrier.wait()
        seen.append(resource_lock(obj))

    workers = [threading.Thread(target=grab, args=(obj,)) for obj in (a, a, b, b)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len({id(lock) for lock in seen}) == 2
    assert resource_lock(a) is resource_lock(a) and resource_lock(a) is not resource_lock(b)
    assert pickle.loads(pickle.dumps(a)).__dict__ == {}  # the lock is kept beside the object, not on it
    from tasks import parallel

    before = len(parallel._RESOURCE_LOCKS)
    del a
    gc.collect()
    assert len(parallel._RESOURCE_LOCKS) == before - 1  # dropped with its object


def test_seeded_torch_training_side_by_side_equals_one_at_a_time(corpus):
    """Trainers seed torch's process-wide RNG: three fits on threads must draw as three fits in a row."""
    from tasks.training.dialogue import DialogueActTagger, hashing_embedder

    acts = ["qy", "sd", "b"]
    turns = corpus.head(60).reset_index(drop=True)
    data = turns.assign(group_id=[f"g{i // 6}" for i in range(len(turns))], position=[i % 6 for i in range(len(turns))],
                        author_id=[f"{i // 6}:{'AB'[i % 2]}" for i in range(len(turns))],
                        label=[acts[len(t.split()) % 3] for t in turns["text"]], split="train")

    def fit(seed):
        tagger = DialogueActTagger(embed=hashing_embedder(16), word_dim=8, sent_dim=8, hidden=8, epochs=3,
                                   batch_size=4, seed=seed, num_threads=1).fit(data)
        return tagger.history_

    alone = [fit(s) for s in (0, 1, 2)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        together = list(pool.map(fit, (0, 1, 2)))
    assert alone[0] != alone[1]  # the seed matters, so a mixed-up generator would show
    assert together == alone
