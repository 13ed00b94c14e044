"""Benchmark of the whole experiment flow (flows.experiment) on real public text.

Mode ``--sizes N [N ...]`` (scaling): runs ``deployments/configs/conventions.yaml`` (2012 convention
sentences; stymask and syntr; the default metrics in sample shards; privacy; utility with one seed) with
``data.max_docs = N`` for each N, each size in a fresh Python process with a fresh storage root and
embedding cache (nothing is reused between sizes). For every stage kind (``generate``, ``metrics``, ...;
the shards and strategies of a kind added up) it prints the seconds and the peak RSS of the process while
that kind ran, then the growth exponent of each kind's seconds against the corpus size (the slope of a
least-squares line through log seconds vs log N): 1 is linear, above ~1.2 is superlinear. The reference
is the smallest size of the same run: each figure is also printed as a ratio to it.

Peak RSS is sampled every 50 ms in the flow's process (the local Dask cluster is threads in it); the
stages run one after another, so each peak includes what earlier stages left loaded (models stay cached).

Run: ``.venv/bin/python benchmarks/flow.py --sizes 500 2000 8862`` (see benchmarks/README.md).
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
CONFIG = ROOT / "deployments" / "configs" / "conventions.yaml"
PAGE = os.sysconf("SC_PAGE_SIZE")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


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

    def finished(self, name: str, state: str) -> None:
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
        print("RESULT sizes= error=no-size-completed")
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
    print("RESULT " + " ".join([
        f"sizes={','.join(map(str, done))}",
        "total_s=" + ",".join(f"{t:.1f}" for t in totals),
        "peak_rss_mib=" + ",".join(f"{r['peak_rss'] / 2**20:.0f}" for r in results),
        f"exponent_total={exponents['total']:.2f}",
        f"worst_stage={worst}",
        f"exponent_worst={finite.get(worst, float('nan')):.2f}",
        *(f"exponent_{k.replace('-', '_')}={v:.2f}" for k, v in finite.items()),
    ]))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--sizes", type=int, nargs="+", metavar="N",
                      help="scaling mode: run the flow at each corpus size (documents of conventions)")
    # (room for further modes, e.g. the executor speedup of issue 12, as another option of this group)
    mode.add_argument("--child-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, default=CONFIG, help="experiment config (default: %(default)s)")
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_size is not None:
        result = run_one_size(args.child_size, args.config)
        args.child_out.write_text(json.dumps(result))
        return
    print(f"benchmarks/flow.py: {os.cpu_count()} CPUs, {platform.python_version()}, load average "
          f"{load_average()}, config {args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config}")
    scaling(sorted(set(args.sizes)), args.config)


if __name__ == "__main__":
    main()
