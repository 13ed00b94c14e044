"""The demo's protect-and-release part, as ``make demo`` runs it, against the same commands on the code before the
fluency floor (the reference, measured in the same run on a git worktree of that commit).

    .venv/bin/python benchmarks/demo_protect.py                 # the current code and the reference
    .venv/bin/python benchmarks/demo_protect.py --no-reference  # the current code only (no ratio)

Each side runs ``synthugc datasets timelines``, ``synthugc protect`` (the demo's floors, unit and budget) and
``synthugc release`` in its own fresh cache and output folder, so both pay the cold costs a first ``make demo``
pays. It prints the frontier (per floor: certificate, rows released, meaning and fluency of the released rows,
substitution macro-F1), ten released sentences beside their sources (a fixed seed), and ends with ``RESULT
key=value ...``: the share of the input released, the meaning and fluency of the released rows, whether the
certificate met the budget, the protect-and-release seconds of both sides and their ratio, and the load average
at both ends. The data must be fetched: ``synthugc datasets fetch conventions``.

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402
from flows.cli.runs import DEMO_PROTECT  # noqa: E402


def reference_commit() -> str:
    """The commit before the one that added the fluency figure (the code whose demo this one is measured against)."""
    added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", "tasks/metrics/fluency.py"],
                           capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    return subprocess.run(["git", "rev-parse", f"{added[-1]}^"], capture_output=True, text=True, cwd=ROOT,
                          check=True).stdout.strip()


def run_demo_protect(code: Path, work: Path, corpus: Path) -> float:
    """The demo's three commands with the code in ``code`` (its own cache in ``work``); protect and release seconds."""
    env = {**os.environ, "SYNTHUGC_CACHE_DIR": str(work / "cache"), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(code)}
    cli = [sys.executable, "-m", "flows.cli"]
    folder = work / "demo-protect"
    subprocess.run([*cli, "datasets", "timelines", "--corpus", str(corpus), "--out-dir", str(folder), "--posts",
                    DEMO_PROTECT["posts"]], cwd=code, env=env, check=True, capture_output=True)
    started = time.perf_counter()
    protect = subprocess.run([*cli, "protect", "--corpus", str(folder / "timelines.parquet"), "--histories",
                              str(folder / "histories.parquet"), "--out", str(folder / "P.parquet"),
                              "--meaning-floor", DEMO_PROTECT["floors"], "--unit", DEMO_PROTECT["unit"],
                              "--budget", DEMO_PROTECT["budget"]], cwd=code, env=env, capture_output=True, text=True)
    print(protect.stdout.strip().splitlines()[0] if protect.stdout.strip() else protect.stderr[-2000:], flush=True)
    if protect.returncode not in (0, 1):
        raise SystemExit(f"protect failed in {code}: {protect.stderr[-2000:]}")
    release = subprocess.run([*cli, "release", str(folder / "P.parquet"), "--out", str(folder / "release"),
                              "--overwrite"], cwd=code, env=env, capture_output=True, text=True)
    print(release.stdout.strip() or release.stderr[-500:], flush=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-reference", action="store_true", help="Only the current code (no ratio).")
    parser.add_argument("--work", type=Path, default=None, help="Folder for both sides (default: a temporary one).")
    args = parser.parse_args()
    corpus = ROOT / "data" / f"{DEMO_PROTECT['dataset']}.parquet"
    if not corpus.exists():
        raise SystemExit(f"{corpus} is missing: .venv/bin/synthugc datasets fetch {DEMO_PROTECT['dataset']}")
    work = args.work or Path(tempfile.mkdtemp(prefix="demo-protect-"))
    load_start = os.getloadavg()[0]
    seconds = run_demo_protect(ROOT, work / "current", corpus)
    reference_s = float("nan")
    if not args.no_reference:
        commit = reference_commit()
        tree = work / "reference-code"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            (tree / "data").symlink_to(ROOT / "data")
            reference_s = run_demo_protect(tree, work / "reference", corpus)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)

    folder = work / "current" / "demo-protect"
    summary = json.loads((folder / "P.protect.json").read_text())
    frontier = pd.read_parquet(folder / "P.frontier.parquet").drop_duplicates("floor")
    print(frontier[["floor", "chosen", "met", "value", "ci_high", "documents_released", "documents_held_back",
                    "meaning", "fluency", "substitution_macro_f1", "moves"]].to_string(index=False))
    table = pd.read_parquet(folder / "P.parquet")
    released = table[~table["verbatim"].astype(bool)]
    sources = pd.read_parquet(folder / "timelines.parquet").set_index("doc_id")["text"]
    for i in np.random.default_rng(58).choice(len(released), size=min(10, len(released)), replace=False):
        row = released.iloc[i]
        print(f"- source:  {sources[row['doc_id']]}\n  release: {row['text']}  [{row['move']}]")
    docs = summary["documents"]
    record("demo_protect", {
        "input": docs["input"], "released": docs["released"], "released_share": round(docs["released"] / docs["input"], 3),
        "meaning_released": round(float(released["meaning"].mean()), 3),
        "fluency_released": round(float(released["fluency"].mean()), 3),
        "fluency_worst": round(float(released["fluency"].min()), 3), "met": bool(summary["met"]),
        "chosen_floor": summary["frontier"]["chosen_floor"], "protect_release_s": round(seconds, 1),
        "reference_s": round(reference_s, 1), "ratio": round(seconds / reference_s, 2),
        "load_start": round(load_start, 2), "load": round(os.getloadavg()[0], 2)})


if __name__ == "__main__":
    main()
