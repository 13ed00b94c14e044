"""Benchmark the classifier attack's exact mode (:func:`tasks.privacy.classifier.exact.fit_exact`: C tuned over
its grid, then refitted) on the 2012 convention speakers' histories, as the demo's protect step fits it: the C
grid's fits side by side in processes of their own against the same fits one after the other in this process
(``SYNTHUGC_FIT_PROCESSES=1``: the reference, measured in the same run).

    .venv/bin/python benchmarks/exact_fit.py              # the demo's histories (5-sentence timelines held out)
    .venv/bin/python benchmarks/exact_fit.py --repeat 2   # each way twice, the faster kept

The histories are ``synthugc datasets timelines --posts 5 --seed 0`` of ``data/conventions.parquet`` (7,880
sentences of 181 speakers; the certificate fits on all of them, each half of protect's round 0 on about half).
Checks that both ways give the same C, validation figures and weights. Ends with ``RESULT
posts=... authors=... sequential_s=... processes_s=... speedup=... processes=... identical=... load=...``.

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import record
from tasks.corpus.importers import read_corpus
from tasks.corpus.splits import author_timelines
from tasks.parallel import fit_process_count
from tasks.privacy.classifier.exact import ExactModel, fit_exact
from tasks.privacy.classifier.params import ClassifierParams


def timed_fit(histories, processes: str, repeat: int) -> tuple[float, ExactModel]:
    """(fastest seconds of ``repeat`` fits, the model) with ``SYNTHUGC_FIT_PROCESSES=processes``."""
    os.environ["SYNTHUGC_FIT_PROCESSES"] = processes
    best, model = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        model = fit_exact(histories, ClassifierParams(), None)
        best = min(best, time.perf_counter() - t0)
    return best, model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path("data/conventions.parquet"))
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    if not args.corpus.exists():
        sys.exit(f"{args.corpus} missing: run `synthugc datasets fetch conventions`")
    _, histories = author_timelines(read_corpus(args.corpus).corpus, 5, seed=0)
    histories = histories[histories["author_id"].notna()].reset_index(drop=True)
    processes = str(fit_process_count(len(ClassifierParams().c_grid)))
    load_before = os.getloadavg()[0]
    sequential_s, here = timed_fit(histories, "1", args.repeat)
    processes_s, apart = timed_fit(histories, processes, args.repeat)
    identical = apart.c == here.c and apart.validation == here.validation and np.array_equal(apart.coef, here.coef)
    load = os.getloadavg()[0]
    print(f"{len(histories):,} history posts of {histories['author_id'].nunique()} authors; C grid "
          f"{ClassifierParams().c_grid} -> C = {here.c}")
    print(f"one after the other, in this process: {sequential_s:.1f} s (the reference)")
    print(f"side by side, {processes} processes: {processes_s:.1f} s; speedup {sequential_s / processes_s:.2f}; "
          f"same model: {identical}")
    print(f"load average before {load_before:.2f}, after {load:.2f} on {os.cpu_count()} cores")
    record("exact_fit", f"posts={len(histories)} authors={histories['author_id'].nunique()} sequential_s={sequential_s:.1f} "
          f"processes_s={processes_s:.1f} speedup={sequential_s / processes_s:.2f} processes={processes} "
          f"identical={str(identical).lower()} load={load:.2f}")


if __name__ == "__main__":
    main()
