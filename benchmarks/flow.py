"""Benchmark of the whole experiment flow (flows.experiment) on real public text.

Mode ``--sizes N [N ...]`` (scaling): runs ``deployments/configs/conventions.yaml`` (2012 convention
sentences; stymask and syntr; the default metrics in sample shards; privacy; utility with one seed) with
``data.max_docs = N`` for each N, each size in a fresh Python process with a fresh storage root and
embedding cache (nothing is reused between sizes). For every stage kind (``generate``, ``metrics``, ...;
the shards and strategies of a kind added up) it prints the seconds and the peak RSS of the process while
that kind ran, then the growth exponent of each kind's seconds against the corpus size (the slope of a
least-squares line through log seconds vs log N): 1 is linear, above ~1.2 is superlinear. The reference
is the smallest size of the same run: each figure is also printed as a ratio to it.

Peak RSS is sampled every 50 ms in the flow's process (the local Dask cluster is threads in it); stages
may run side by side (the executor), so a peak includes what other stages hold at the time and what
earlier ones left loaded (models stay cached).

Mode ``--executor``: 3 LLM-bound strategies x 4 shards against a local OpenAI-compatible server that
answers after a fixed delay, run with the sequential executor (the reference, one stage at a time) and with
up to ``--parallel`` stages at once in the same run; prints the speedup, whether the artifacts are
byte-identical, and the executor's overhead per stage on the same run with every stage cached.

Run: ``.venv/bin/python benchmarks/flow.py --sizes 500 2000 8862`` or ``benchmarks/flow.py --executor``
(see benchmarks/README.md).

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks.results import record  # noqa: E402

CONFIG = ROOT / "deployments" / "configs" / "conventions.yaml"
PAGE = os.sysconf("SC_PAGE_SIZE")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def busy_cpu_seconds() -> float:
    """CPU-seconds every core of the machine has spent busy since boot, all processes together (Linux /proc/stat:
    user, nice, system, irq, softirq and steal; idle and I/O wait left out). Two readings bracket a run: on a quiet
    machine their difference is what the run used, its children and servers included."""
    with open("/proc/stat") as handle:
        ticks = [int(v) for v in handle.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def rss_bytes() -> int:
    """This process's resident set size now (Linux /proc)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * PAGE


class StageMeter:
    """A flows.progress reporter that times each stage and samples the process's peak RSS while it runs."""

    def __init__(self, interval: float = 0.05) -> None:
        self.stages: dict[str, dict[str, float]] = {}
        self._current: str | None = None
        self._started = 0.0
        self._peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, args=(interval,), daemon=True)
        self._sampler.start()

    def _sample(self, interval: float) -> None:
        while not self._stop.wait(interval):
            with self._lock:
                self._peak = max(self._peak, rss_bytes())

    def planned(self, total: int) -> None:
        pass

    def started(self, name: str) -> None:
        with self._lock:
            self._current, self._started, self._peak = name, time.perf_counter(), rss_bytes()

    def finished(self, name: str, state: str, seconds: float) -> None:  # flows.progress's reporter protocol
        with self._lock:
            seconds = time.perf_counter() - self._started
            peak = max(self._peak, rss_bytes())
        self.stages[name] = {"seconds": seconds, "peak_rss": peak, "state": state}

    def close(self) -> None:
        self._stop.set()


def stage_kind(name: str) -> str:
    """``generate[stymask][0]`` -> ``generate``: shards and strategies of one stage added up."""
    return name.split("[", 1)[0]


def run_one_size(size: int, config_path: Path) -> dict[str, Any]:
    """Run the flow once at ``size`` documents in this process; per-stage seconds and peak RSS."""
    import yaml

    from tasks.settings import apply_environment_defaults

    work = Path(tempfile.mkdtemp(prefix=f"synthugc-flow-{size}-"))
    os.environ["SYNTHUGC_CACHE_DIR"] = str(work / "cache")
    os.environ.setdefault("PREFECT_HOME", str(work / "prefect"))
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # the temporary Prefect server takes minutes to start on a machine loaded well past its cores
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "600")
    os.environ.setdefault("PREFECT_API_REQUEST_TIMEOUT", "600")  # and answers slowly there
    apply_environment_defaults()
    from flows import progress
    from flows.experiment import experiment_from_mapping
    from tasks.corpus.datasets import fetch_dataset

    fetch_dataset("conventions", ROOT / "data")
    config = yaml.safe_load(config_path.read_text())
    config["storage_root"] = str(work / "runs")
    config["data"] = {**config.get("data", {}), "max_docs": size}
    os.chdir(ROOT)  # data.dataset is read from ./data
    meter = StageMeter()
    started = time.perf_counter()
    try:
        with progress.installed(meter):
            summary = experiment_from_mapping(config)
    finally:
        meter.close()
    total = time.perf_counter() - started
    return {"size": size, "total_seconds": total, "stages": meter.stages, "failed": summary.failed,
            "peak_rss": max((s["peak_rss"] for s in meter.stages.values()), default=rss_bytes())}


def by_kind(stages: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    kinds: dict[str, dict[str, float]] = {}
    for name, s in stages.items():
        k = kinds.setdefault(stage_kind(name), {"seconds": 0.0, "peak_rss": 0, "n": 0})
        k["seconds"] += s["seconds"]
        k["peak_rss"] = max(k["peak_rss"], s["peak_rss"])
        k["n"] += 1
    return kinds


def growth_exponent(sizes: Sequence[int], seconds: Sequence[float]) -> float:
    """Least-squares slope of log(seconds) against log(size); NaN with fewer than two usable points."""
    points = [(math.log(n), math.log(t)) for n, t in zip(sizes, seconds, strict=True) if n > 0 and t > 0]
    if len(points) < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")


def scaling(sizes: list[int], config: Path) -> None:
    """The --sizes mode: one child process per size, then the per-stage table and exponents."""
    results = []
    for size in sizes:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
            out = Path(handle.name)
        print(f"size {size}: running (load {load_average()}) ...", flush=True)
        child = subprocess.run([sys.executable, __file__, "--child-size", str(size), "--config", str(config),
                                "--child-out", str(out)], cwd=ROOT)
        if child.returncode != 0:
            print(f"size {size}: the flow process exited with {child.returncode}; stopping", flush=True)
            break
        results.append(json.loads(out.read_text()))
        out.unlink()
        r = results[-1]
        print(f"size {size}: {r['total_seconds']:.1f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB, "
              f"failed stages: {r['failed'] or 'none'} (load {load_average()})", flush=True)
    if not results:
        record("flow", "sizes= error=no-size-completed")
        return
    kinds = [by_kind(r["stages"]) for r in results]
    names = list(dict.fromkeys(k for table in kinds for k in table))
    done = [r["size"] for r in results]
    base = done[0]
    print(f"\nreference: the smallest size of this run ({base} documents); ratio = seconds / seconds at {base} "
          f"(linear growth would be size / {base})")
    header = f"{'stage':<16}" + "".join(f"{f'{n} s':>11}{'MiB':>7}{'ratio':>7}" for n in done) + f"{'exponent':>10}"
    print(header)
    exponents: dict[str, float] = {}
    for name in names:
        secs = [t.get(name, {}).get("seconds", float("nan")) for t in kinds]
        row = f"{name:<16}"
        for table, s in zip(kinds, secs, strict=True):
            mib = table.get(name, {}).get("peak_rss", 0) / 2**20
            ratio = s / secs[0] if secs[0] else float("nan")
            row += f"{s:>11.1f}{mib:>7.0f}{ratio:>7.2f}"
        exponents[name] = growth_exponent(done, secs)
        print(row + f"{exponents[name]:>10.2f}")
    totals = [r["total_seconds"] for r in results]
    exponents["total"] = growth_exponent(done, totals)
    print(f"{'total (wall)':<16}" + "".join(f"{t:>11.1f}{r['peak_rss'] / 2**20:>7.0f}{t / totals[0]:>7.2f}"
                                            for t, r in zip(totals, results, strict=True))
          + f"{exponents['total']:>10.2f}")
    finite = {k: v for k, v in exponents.items() if k != "total" and math.isfinite(v)}
    worst = max(finite, key=finite.get) if finite else "none"
    print(f"\nload average at end: {load_average()} (the machine is shared with other jobs; quote it with "
          f"any figure)")
    record("flow", " ".join([
        f"sizes={','.join(map(str, done))}",
        "total_s=" + ",".join(f"{t:.1f}" for t in totals),
        "peak_rss_mib=" + ",".join(f"{r['peak_rss'] / 2**20:.0f}" for r in results),
        f"exponent_total={exponents['total']:.2f}",
        f"worst_stage={worst}",
        f"exponent_worst={finite.get(worst, float('nan')):.2f}",
        *(f"exponent_{k.replace('-', '_')}={v:.2f}" for k, v in finite.items()),
    ]))


def _executor_corpus(path: Path, n_docs: int) -> None:
    import pandas as pd

    texts = [f"Speaker {i % 7} said we must rebuild road number {i} before the winter comes." for i in range(n_docs)]
    pd.DataFrame({"doc_id": [f"d{i:04d}" for i in range(n_docs)], "text": texts,
                  "author_id": [f"a{i % 7}" for i in range(n_docs)]}).to_parquet(path)


def _executor_config(corpus: Path, root: Path, experiment: str, shard_size: int) -> dict:
    llm_settings = {"concurrency": 8, "max_retries": 1}
    return {"experiment": experiment, "seed": 1, "storage_root": str(root), "data": {"path": str(corpus)},
            "generate": {"shard_size": shard_size, "strategies": [
                {"name": "llm", "params": {"backend": llm_settings}},
                {"name": "paraphrase", "params": {"backend": llm_settings}},
                {"name": "synsim", "params": {"generator": "llm", "k": 2, "llm": llm_settings}}]},
            "privacy": {"enabled": False}, "utility": {"enabled": False}}


def executor_speedup(docs_per_shard: int, delay: float, parallel: int) -> None:
    """Mode ``--executor``: 3 LLM-bound strategies x 4 generation shards against a local OpenAI-compatible
    server answering after a fixed ``delay``, with the sequential executor (the reference) and with up to
    ``parallel`` stages at once, same run; then again with every stage cached (executor overhead per stage)."""
    from tasks.models.simulated_server import fixed_delay_server
    from tasks.settings import apply_environment_defaults

    apply_environment_defaults()
    tmp = Path(tempfile.mkdtemp(prefix="synthugc-executor-bench-"))
    os.environ["SYNTHUGC_CACHE_DIR"] = str(tmp / "cache")
    os.environ.setdefault("PREFECT_HOME", str(tmp / "prefect"))
    os.environ["SYNTHUGC_STAGE_LIMITS"] = f"cpu=2,llm={parallel},gpu=1"
    from prefect import flow

    from flows.config import parse_config
    from flows.experiment import run_experiment

    corpus = tmp / "corpus.parquet"
    _executor_corpus(corpus, 4 * docs_per_shard)

    @flow(name="executor-benchmark")
    def bench(experiment: str, parallel: int):
        cfg = parse_config(_executor_config(corpus, tmp / "runs", experiment, docs_per_shard))
        started = time.perf_counter()
        summary = run_experiment(cfg, families=(), max_parallel=parallel)
        return time.perf_counter() - started, summary

    load = os.getloadavg()[0]
    with fixed_delay_server(delay) as endpoint:
        os.environ["SYNTHUGC_LLM_ENDPOINT_LLM"] = endpoint
        print(f"executor benchmark ({os.cpu_count()} cpus, load {load:.2f}): 3 LLM strategies x 4 shards of "
              f"{docs_per_shard} docs, server delay {delay} s per request")
        sequential, seq_summary = bench("sequential", 1)
        concurrent, con_summary = bench("concurrent", parallel)
        cached, cached_summary = bench("concurrent", parallel)
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
    record("flow_executor", f"speedup={sequential / concurrent:.2f} sequential_s={sequential:.2f} concurrent_s={concurrent:.2f} "
          f"cached_ms_per_stage={1000 * cached / n_stages:.0f} identical={same} load={load:.2f}")



def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--sizes", type=int, nargs="+", metavar="N",
                      help="scaling mode: run the flow at each corpus size (documents of conventions)")
    mode.add_argument("--executor", action="store_true",
                      help="executor mode: sequential vs concurrent stages against a fixed-delay LLM server")
    mode.add_argument("--child-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, default=CONFIG, help="experiment config (default: %(default)s)")
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--docs-per-shard", type=int, default=24, help="executor mode: documents per shard")
    parser.add_argument("--delay", type=float, default=0.25, help="executor mode: server seconds per request")
    parser.add_argument("--parallel", type=int, default=4, help="executor mode: stages at once")
    args = parser.parse_args(argv)
    if args.executor:
        executor_speedup(args.docs_per_shard, args.delay, args.parallel)
        return
    if args.child_size is not None:
        result = run_one_size(args.child_size, args.config)
        args.child_out.write_text(json.dumps(result))
        return
    print(f"benchmarks/flow.py: {os.cpu_count()} CPUs, {platform.python_version()}, load average "
          f"{load_average()}, config {args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config}")
    scaling(sorted(set(args.sizes)), args.config)


if __name__ == "__main__":
    main()
