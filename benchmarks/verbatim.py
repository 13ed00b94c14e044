"""Benchmark of the ``verbatim`` figure (tasks/metrics/verbatim.py): pairs checked per second at the article's scale.

Data: N documents (default 17,800, the article's corpus size) of about 150 characters: the sentences of each
2012 convention speech (``conventions``, file order) joined and cut at the first word boundary after 150
characters, cycled when N needs more. Three synthetic sides, each timed with ``verbatim_flags`` (best of ``--repeats``):

- ``copy``: the source itself (every pair verbatim; the check stops at the first window);
- ``reversed words``: the source's words in reverse order (almost never a 30-character run: every window of
  the output is looked up, the slowest case);
- ``pseudonymised``: the real pseudonymiser (``pseudonymize_corpus``, scope document; names, e-mails, ... swapped)
  on the first ``--pseudo`` debate turns (2016 debates, mean ~256 characters), cycled to N: what a
  pseudonymised release looks like; its verbatim share is printed too. ``--pseudo 0`` skips it (no spaCy).

Run: ``.venv/bin/python benchmarks/verbatim.py [--n 17800] [--min-chars 30]``. The machine is shared: quote
the load average it prints.

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks.results import record  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tasks.corpus.datasets import fetch_dataset  # noqa: E402
from tasks.metrics.verbatim import verbatim_flags  # noqa: E402


def documents(conventions: pd.DataFrame, n: int, chars: int = 150) -> list[str]:
    """N documents of about ``chars`` characters: each speech's sentences joined, then cut at the first word
    boundary after ``chars`` characters (a speech's last piece may be shorter), cycled."""
    docs: list[str] = []
    for _, speech in conventions.groupby("group_id", sort=False):
        words = " ".join(speech["text"].astype(str)).split()
        current: list[str] = []
        for word in words:
            current.append(word)
            if sum(map(len, current)) + len(current) - 1 >= chars:
                docs.append(" ".join(current))
                current = []
        if current:
            docs.append(" ".join(current))
    return [docs[i % len(docs)] for i in range(n)]


def timed(sources: list[str], outputs: list[str], min_chars: int, repeats: int) -> tuple[float, float]:
    """(best seconds, verbatim share) of verbatim_flags over the pairs."""
    best, share = float("inf"), float("nan")
    for _ in range(repeats):
        start = time.perf_counter()
        flags = verbatim_flags(sources, outputs, min_chars)
        best = min(best, time.perf_counter() - start)
        share = float(flags.mean())
    return best, share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=17_800, help="pairs to check")
    parser.add_argument("--min-chars", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pseudo", type=int, default=1122, help="debate turns to pseudonymise (0: skip)")
    parser.add_argument("--data-dir", default=os.environ.get("SYNTHUGC_DATA_DIR", "data"))
    args = parser.parse_args()
    print(f"verbatim benchmark ({os.cpu_count()} cpus, load average at start "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; the machine is shared with other jobs)")
    sources = documents(pd.read_parquet(fetch_dataset("conventions", args.data_dir)), args.n)
    print(f"{len(sources)} documents, mean {sum(map(len, sources)) / len(sources):.0f} characters, "
          f"min_chars {args.min_chars}, best of {args.repeats}")
    sides = {"copy": (sources, sources),
             "reversed words": (sources, [" ".join(s.split()[::-1]) for s in sources])}
    if args.pseudo:
        from tasks.generate.pseudonymize import pseudonymize_corpus

        debates = pd.read_parquet(fetch_dataset("debates", args.data_dir)).head(args.pseudo).reset_index(drop=True)
        pseudo, _ = pseudonymize_corpus(debates, scope="document", seed=0)
        real, fake = debates["text"].astype(str).tolist(), pseudo["text"].astype(str).tolist()
        changed = sum(a != b for a, b in zip(real, fake, strict=True))
        print(f"pseudonymised {len(real)} debate turns (mean {sum(map(len, real)) / len(real):.0f} characters); "
              f"{changed} of them changed")
        sides["pseudonymised"] = ([real[i % len(real)] for i in range(args.n)],
                                  [fake[i % len(fake)] for i in range(args.n)])
    results = {}
    print(f"{'outputs':<16} {'seconds':>8} {'docs/s':>10} {'verbatim share':>15}")
    for name, (src, out) in sides.items():
        seconds, share = timed(src, out, args.min_chars, args.repeats)
        results[name] = len(src) / seconds
        print(f"{name:<16} {seconds:8.3f} {len(src) / seconds:10,.0f} {share:15.3f}")
    print(f"load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    record("verbatim", " ".join(f"{k.replace(' ', '_')}_docs_per_s={v:.0f}" for k, v in results.items())
          + f" n={args.n} min_chars={args.min_chars} load1={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
