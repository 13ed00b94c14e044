"""What the declared score schema costs a writer (not a test).

Times :func:`tasks.scores.score_frame` (declared columns, nulls for absent structure, casts and checks)
against a named reference measured in the same run: ``pandas.DataFrame(rows)``, the frame every writer
built before the schema existed. Rows are long score rows like a large run's summary (strategies x
variants x metrics, a third of them with utility structure).

    .venv/bin/python benchmarks/scores.py [--rows 100000] [--repeats 3]

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd

from benchmarks.results import record
from tasks.scores import SCORES, score_frame, validate_scores


def score_rows(n: int) -> list[dict]:
    """``n`` long score rows; every third a utility number with setting and fraction."""
    rows = []
    for i in range(n):
        row = {"strategy": f"s{i % 40}", "variant": f"v{i % 3}", "level": "sample-mean", "metric": f"m{i % 30}",
               "value": i / n, "std": 0.1, "median": i / n, "n": 100, "n_failed": i % 5,
               "signature": f"metric:m{i % 30}|model:x", "reason": None if i % 7 else "no scored pairs"}
        if i % 3 == 0:
            row.update(level="utility", setting="substitution", fraction=1.0)
        rows.append(row)
    return rows


def best_of(repeats: int, func) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = score_rows(args.rows)
    reference = best_of(args.repeats, lambda: pd.DataFrame(rows))
    built = best_of(args.repeats, lambda: score_frame(rows, SCORES))
    frame = score_frame(rows, SCORES)
    checked = best_of(args.repeats, lambda: validate_scores(frame, SCORES))
    load = os.getloadavg()[0]
    print(f"{args.rows} rows, best of {args.repeats}; load average {load:.1f} (the machine is shared with other agents)")
    print(f"reference pandas.DataFrame(rows): {reference * 1000:.0f} ms")
    print(f"score_frame(rows, SCORES):        {built * 1000:.0f} ms ({built / reference:.2f}x the reference)")
    print(f"validate_scores(frame):           {checked * 1000:.0f} ms")
    record("scores", f"rows={args.rows} reference_ms={reference * 1000:.0f} score_frame_ms={built * 1000:.0f} "
          f"ratio={built / reference:.2f} validate_ms={checked * 1000:.0f} load={load:.1f}")


if __name__ == "__main__":
    main()
