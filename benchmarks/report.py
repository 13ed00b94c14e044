"""How long the report of a finished run takes to rebuild (not a test).

Times ``synthugc report RUN_DIR`` (:func:`tasks.report.rebuild.rebuild_report`) on a copy of a finished
run, split into gathering the artifacts, drawing the plots and writing the page, against a named
reference measured in the same run: reading every parquet artifact the run's manifest lists with pandas,
the least any rebuild from the artifacts must do.

    .venv/bin/python benchmarks/report.py [RUN_DIR (default runs/demo)] [--repeats 3]

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd

from benchmarks.results import record
from tasks.report.build import collect_report_data
from tasks.report.goals import parse_goal
from tasks.report.rebuild import rebuild_report, run_layout
from tasks.report.render import render_html, render_markdown
from tasks.report.run_files import RunFiles
from tasks.store import ArtifactStore


def median_seconds(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", default="runs/demo")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not (Path(args.run_dir) / "manifest.json").is_file():
        sys.exit(f"{args.run_dir}: no finished run there; run `make demo` first or give a run directory")
    print(f"synthugc report benchmark ({os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}): {args.run_dir}")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / Path(args.run_dir).name
        shutil.copytree(args.run_dir, copy)  # the rebuild rewrites report.* and the manifest: not the original's
        run = RunFiles.open(copy)
        layout = run_layout(run)
        artifacts = layout.artifacts()
        parquet = [ref for ref in artifacts.values() if ref.path.endswith(".parquet")]
        context, config = run.manifest()["report"], run.config()
        store = ArtifactStore(run.root)

        def gather():
            return collect_report_data(
                layout, store.read_table, title=context["title"], facts=dict(context["facts"]),
                level=context["level"], families=dict(context["families"]),
                utility_signature=context.get("utility_signature", ""), human_eval_dir=run.human_eval_dir,
                goals=[parse_goal(g) for g in config.get("report", {}).get("goals", [])])

        data = gather()
        reference = median_seconds(lambda: [pd.read_parquet(ref.path) for ref in parquet], args.repeats)
        timings = {
            "read every parquet artifact (reference)": reference,
            "gather the report data": median_seconds(gather, args.repeats),
            "markdown": median_seconds(lambda: render_markdown(data), args.repeats),
            "HTML page (tables, plots)": median_seconds(lambda: render_html(data), args.repeats),
            "synthugc report RUN_DIR (all of it, with integrity checks)": median_seconds(
                lambda: rebuild_report(copy), args.repeats),
        }
    print(f"{len(artifacts)} artifacts ({len(parquet)} parquet), median of {args.repeats}")
    print(f"{'step':<62} {'seconds':>8} {'x reference':>12}")
    for name, seconds in timings.items():
        print(f"{name:<62} {seconds:8.3f} {seconds / reference:12.1f}")
    print(f"load at end {os.getloadavg()[0]:.2f}")
    rebuild = timings["synthugc report RUN_DIR (all of it, with integrity checks)"]
    record("report", f"artifacts={len(artifacts)} reference_s={reference:.3f} rebuild_s={rebuild:.3f} "
          f"rebuild_ratio={rebuild / reference:.1f} load={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
