"""Executor benchmark: 3 LLM-bound strategies x 4 generation shards against a local OpenAI-compatible server
that answers every request after a fixed delay, run with the sequential executor (one stage at a time) and
with the concurrent one (up to 4 LLM-bound stages at once), same machine, same run; then the same plan again
with every stage cached, for the executor's overhead per stage.

    .venv/bin/python benchmarks/executor.py [--docs-per-shard 24] [--delay 0.25]

Prints the speedup (reference: the sequential executor measured in the same run) and ends with a RESULT line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tasks.models.simulated_server import fixed_delay_server
from tasks.settings import apply_environment_defaults

apply_environment_defaults()


def _corpus(path: Path, n_docs: int) -> None:
    texts = [f"Speaker {i % 7} said we must rebuild road number {i} before the winter comes." for i in range(n_docs)]
    pd.DataFrame({"doc_id": [f"d{i:04d}" for i in range(n_docs)], "text": texts,
                  "author_id": [f"a{i % 7}" for i in range(n_docs)]}).to_parquet(path)


def _config(corpus: Path, root: Path, experiment: str, shard_size: int) -> dict:
    llm_settings = {"concurrency": 8, "max_retries": 1}
    return {"experiment": experiment, "seed": 1, "storage_root": str(root), "data": {"path": str(corpus)},
            "generate": {"shard_size": shard_size, "strategies": [
                {"name": "llm", "params": {"backend": llm_settings}},
                {"name": "paraphrase", "params": {"backend": llm_settings}},
                {"name": "synsim", "params": {"generator": "llm", "k": 2, "llm": llm_settings}}]},
            "privacy": {"enabled": False}, "utility": {"enabled": False}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs-per-shard", type=int, default=24)
    parser.add_argument("--delay", type=float, default=0.25, help="seconds the server takes per request")
    parser.add_argument("--parallel", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="synthugc-executor-bench-"))
    os.environ["SYNTHUGC_CACHE_DIR"] = str(tmp / "cache")
    os.environ.setdefault("PREFECT_HOME", str(tmp / "prefect"))
    os.environ["SYNTHUGC_STAGE_LIMITS"] = f"cpu=2,llm={args.parallel},gpu=1"
    from prefect import flow

    from flows.config import parse_config
    from flows.experiment import run_experiment

    corpus = tmp / "corpus.parquet"
    _corpus(corpus, 4 * args.docs_per_shard)

    @flow(name="executor-benchmark")
    def bench(experiment: str, parallel: int):
        cfg = parse_config(_config(corpus, tmp / "runs", experiment, args.docs_per_shard))
        started = time.perf_counter()
        summary = run_experiment(cfg, families=(), max_parallel=parallel)
        return time.perf_counter() - started, summary

    load = os.getloadavg()[0]
    with fixed_delay_server(args.delay) as endpoint:
        os.environ["SYNTHUGC_LLM_ENDPOINT_LLM"] = endpoint
        print(f"executor benchmark ({os.cpu_count()} cpus, load {load:.2f}): 3 LLM strategies x 4 shards of "
              f"{args.docs_per_shard} docs, server delay {args.delay} s per request")
        sequential, seq_summary = bench("sequential", 1)
        concurrent, con_summary = bench("concurrent", args.parallel)
        cached, cached_summary = bench("concurrent", args.parallel)
    same = all((tmp / "runs" / "sequential" / "generate" / label / f"shard-{i:05d}.parquet").read_bytes()
               == (tmp / "runs" / "concurrent" / "generate" / label / f"shard-{i:05d}.parquet").read_bytes()
               for label in ("llm", "paraphrase", "synsim") for i in range(4))
    n_stages = len(cached_summary.stages)
    assert set(cached_summary.stages.values()) == {"Cached"}, cached_summary.stages
    print(f"{'executor':<34} {'seconds':>8} {'stages':>7} {'peak parallel':>14}")
    print(f"{'sequential (reference)':<34} {sequential:>8.2f} {len(seq_summary.stages):>7} {seq_summary.peak_parallel:>14}")
    print(f"{'concurrent':<34} {concurrent:>8.2f} {len(con_summary.stages):>7} {con_summary.peak_parallel:>14}")
    print(f"{'concurrent, every stage cached':<34} {cached:>8.2f} {n_stages:>7} {cached_summary.peak_parallel:>14}")
    print(f"speedup {sequential / concurrent:.2f}x; cached overhead {1000 * cached / n_stages:.0f} ms per stage; "
          f"artifacts byte-identical: {same}; load now {os.getloadavg()[0]:.2f}")
    print(f"RESULT speedup={sequential / concurrent:.2f} sequential_s={sequential:.2f} concurrent_s={concurrent:.2f} "
          f"cached_ms_per_stage={1000 * cached / n_stages:.0f} identical={same} load={load:.2f}")


if __name__ == "__main__":
    main()
