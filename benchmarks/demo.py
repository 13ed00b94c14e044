"""Benchmark of the README's first command: ``make demo`` on a fresh clone, then the cached rerun.

Clones the repository's committed HEAD into a temporary folder (uncommitted changes are not part of it),
then times, in that clone: ``make setup`` (venv, pip, byte-compiling, Debian packages, public data), the
first ``synthugc demo`` run (``make demo`` once set up: every stage computed), and ``make demo`` again (every
stage cached). A first ``make demo`` is the setup plus the first run. It prints each time with the load
average, the five slowest stage kinds of the first run (the flow's own stage table), its eight slowest single
stages, the seconds of its protect part (each round and certificate computed, per meaning floor), the CPU-seconds the
machine spent busy during the first run (``/proc/stat``, every process: on a quiet machine, what the run used) and
the time that CPU would take with every core busy all the time (the floor that scheduling alone cannot go under),
and each time against its target (first ``make demo`` <= 180 s on 2 cores, cached rerun <= 5 s): the targets are
the reference, there being no other way to make a demo on this machine to compare with.

The pip packages come from the configured index (or its cache), so the setup time depends on it; run on a
quiet machine, nothing else running, and quote the load. Ends with ``RESULT first_s=... setup_s=...
run_s=... rerun_s=... run_cpu_s=... run_floor_s=... first_over_target=... rerun_over_target=... load=...``.

Run: ``.venv/bin/python benchmarks/demo.py`` (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from flow import busy_cpu_seconds, load_average

from benchmarks.results import record

ROOT = Path(__file__).resolve().parents[1]
FIRST_TARGET_S = 180.0
RERUN_TARGET_S = 5.0
STAGE_ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s*$")


def timed_make(target: str, clone: Path, log: Path) -> float:
    """Seconds ``make <target>`` took in ``clone`` (output appended to ``log``); exits 1 if it failed."""
    start = time.perf_counter()
    with log.open("a") as out:
        done = subprocess.run(["make", target], cwd=clone, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"benchmarks/demo.py: make {target} failed (exit {done.returncode}); see {log}")
    return seconds


STAGE_LINE = re.compile(r"^(\S+)\s+(?:Completed|Cached|Failed)\s+([\d.]+) s\s*$")
# "round 1: ... (53.2 s)", "certificate: ... (5 attack(s) ...; 74.1 s)"; a cached round ends "(62.2 s, cached)"
PROTECT_LINE = re.compile(r"^synthugc: (round \d+|certificate)\b.*(?:\(|; )([\d.]+) s\)")


def slowest_single_stages(output: str, n: int = 8) -> list[tuple[str, float]]:
    """The ``n`` single stages with the most seconds (one line each in the flow's output)."""
    rows = [(m[1], float(m[2])) for line in output.splitlines() if (m := STAGE_LINE.match(line))]
    return sorted(rows, key=lambda r: -r[1])[:n]


def protect_seconds(output: str) -> list[tuple[str, float]]:
    """The demo's protect part: seconds per round and certificate computed (a round another frontier point computed
    is cached here), per frontier point, in order."""
    rows, floor = [], ""
    for line in output.splitlines():
        if line.startswith("synthugc: frontier point: meaning floor "):
            floor = line.rsplit(" ", 1)[-1]
        elif m := PROTECT_LINE.match(line):
            rows.append((f"floor {floor} {m[1]}", float(m[2])))
    return rows


def slowest_stages(output: str, n: int = 5) -> list[tuple[str, float]]:
    """The ``n`` stage kinds with the most seconds in the flow's stage table (``all`` left out)."""
    rows = [(m[1], float(m[6])) for line in output.splitlines() if (m := STAGE_ROW.match(line))]
    return sorted((r for r in rows if r[0] != "all"), key=lambda r: -r[1])[:n]


def main(argv: Sequence[str] | None = None) -> None:
    """Clone, set up, run, rerun, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = parser.parse_args(argv)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="synthugc-demo-bench-"))
    clone = work / "synthugc"
    try:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        print(f"synthugc demo benchmark: fresh clone of {head} in {clone}; {os.cpu_count()} cpus; "
              f"load average at start {load_average()}", flush=True)
        env_note = "PYTHONDONTWRITEBYTECODE set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode written"
        print(f"python {sys.version.split()[0]}; {env_note}", flush=True)
        setup_log, first_log, rerun_log = work / "setup.log", work / "first.log", work / "rerun.log"
        setup_s = timed_make("setup", clone, setup_log)
        print(f"make setup (venv, pip, compileall, Debian packages, data)  {setup_s:8.1f} s   load {load_average()}",
              flush=True)
        cpu_before = busy_cpu_seconds()
        run_s = timed_make("demo", clone, first_log)
        run_cpu_s = busy_cpu_seconds() - cpu_before
        cores = os.cpu_count() or 1
        print(f"first demo run (every stage computed)                      {run_s:8.1f} s   load {load_average()}",
              flush=True)
        rerun_s = timed_make("demo", clone, rerun_log)
        print(f"make demo again (every stage cached)                       {rerun_s:8.1f} s   load {load_average()}",
              flush=True)
        first_s = setup_s + run_s
        print("\nslowest stage kinds of the first run (stage seconds; stages run side by side):")
        first_output = first_log.read_text()
        for name, seconds in slowest_stages(first_output):
            print(f"  {name:<16} {seconds:8.1f} s")
        print("slowest single stages:")
        for name, seconds in slowest_single_stages(first_output):
            print(f"  {name:<48} {seconds:8.1f} s")
        protect = protect_seconds(first_output)
        print(f"protect part: {sum(s for _, s in protect):.1f} s over {len(protect)} rounds and certificates; the "
              "slowest:")
        for name, seconds in sorted(protect, key=lambda r: -r[1])[:6]:
            print(f"  {name:<48} {seconds:8.1f} s")
        print(f"the first run used {run_cpu_s:.1f} CPU-seconds on the machine ({run_cpu_s / run_s:.2f} of its {cores} "
              f"cores busy on average): with every core busy all the time it would take {run_cpu_s / cores:.1f} s")
        print(f"\nfirst make demo = setup + first run: {first_s:.1f} s, target {FIRST_TARGET_S:.0f} s "
              f"-> {first_s / FIRST_TARGET_S:.2f}x of target ({'met' if first_s <= FIRST_TARGET_S else 'NOT met'})")
        print(f"cached rerun: {rerun_s:.1f} s, target {RERUN_TARGET_S:.0f} s -> {rerun_s / RERUN_TARGET_S:.2f}x "
              f"of target ({'met' if rerun_s <= RERUN_TARGET_S else 'NOT met'})")
        print(f"load average at end {load_average()}")
        record("demo", f"first_s={first_s:.1f} setup_s={setup_s:.1f} run_s={run_s:.1f} rerun_s={rerun_s:.1f} "
              f"run_cpu_s={run_cpu_s:.1f} run_floor_s={run_cpu_s / cores:.1f} "
              f"first_over_target={first_s / FIRST_TARGET_S:.2f} rerun_over_target={rerun_s / RERUN_TARGET_S:.2f} "
              f"load={os.getloadavg()[0]:.2f}")
    finally:
        if args.keep:
            print(f"clone kept: {clone}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
