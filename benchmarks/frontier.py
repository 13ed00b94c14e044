"""The risk-meaning frontier of protect on the 2012 convention speakers, with the default feedback against a
stylometric-only feedback (the reference, measured in the same run).

    .venv/bin/python benchmarks/frontier.py                                   # post unit, floors 0.9,0.8,0.7,0.6
    .venv/bin/python benchmarks/frontier.py --budget "reidentification<=0.10,verbatim<=0.05"   # the demo's

Split: :func:`tasks.corpus.splits.author_timelines` (per speaker one run of ``--posts`` consecutive sentences to
protect, the speaker's other sentences the adversary's history; authorless sentences left out), as ``synthugc
datasets timelines`` writes it. Each setting runs :func:`tasks.protect.loop.protect_corpus` with the default ladder
(``--ladder-without-llm`` is the default ladder without a served LLM) at every floor, in one process, on a fresh
rounds folder (the attacks' model and embedding caches stay in ``SYNTHUGC_CACHE_DIR``). Per setting and floor it
prints the certificate's worst attack with its 95% interval, the mean meaning, the rows kept and held back, the
substitution macro-F1 and the moves that made the kept rows. The last line is ``RESULT key=value ...``: the chosen
floor and its worst figure per setting, the ratio of the default feedback's worst figure over the reference's at
each floor (mean), seconds, and the load average. The data must be fetched: ``synthugc datasets fetch
conventions``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import record
from tasks.corpus.splits import author_timelines
from tasks.protect.loop import protect_corpus
from tasks.protect.settings import DEFAULT_FEEDBACK, ProtectSettings
from tasks.settings import get_settings

SETTINGS = {"default": DEFAULT_FEEDBACK, "reference": (("stylometric", {}),)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--unit", default="post", choices=("post", "timeline"))
    parser.add_argument("--floors", default="0.9,0.8,0.7,0.6")
    parser.add_argument("--budget", default="reidentification<=0.10")
    parser.add_argument("--posts", type=int, default=5)
    parser.add_argument("--max-rounds", type=int, default=6)
    args = parser.parse_args()
    corpus_path = Path(get_settings().data_dir) / "conventions.parquet"
    if not corpus_path.exists():
        sys.exit(f"{corpus_path} is missing: run `synthugc datasets fetch conventions`")
    timelines, histories = author_timelines(pd.read_parquet(corpus_path), args.posts, seed=0)
    histories = histories[histories["author_id"].notna()]
    floors = tuple(float(f) for f in args.floors.split(","))
    worst: dict[str, pd.DataFrame] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="synthugc-frontier-") as tmp:
        history_file = Path(tmp) / "histories.parquet"
        histories.to_parquet(history_file, index=False)
        for name, feedback in SETTINGS.items():
            settings = ProtectSettings(budget=args.budget, meaning_floors=floors, unit=args.unit, feedback=feedback,
                                       max_rounds=args.max_rounds)
            t = time.perf_counter()
            result = protect_corpus(timelines, str(history_file), settings, cache_dir=Path(tmp) / name,
                                    corpus_fingerprint=f"conventions-{args.posts}", histories_fingerprint="conventions",
                                    log=lambda _line: None)
            points = result.frontier.drop_duplicates("floor")
            worst[name] = points
            print(f"\n{name} feedback ({', '.join(n for n, _ in feedback)}), unit {args.unit}, budget {args.budget}: "
                  f"{time.perf_counter() - t:.1f} s")
            for p in points.itertuples():
                print(f"  floor {p.floor:g}: {p.worst_attack} {p.value:.3f} [{p.ci_low:.3f}, {p.ci_high:.3f}]; meaning "
                      f"{p.meaning:.3f}; kept {p.documents_kept} / held back {p.documents_held_back}; substitution F1 "
                      f"{p.substitution_macro_f1:.3f}; {'met' if p.met else 'not met'}"
                      f"{' (chosen)' if p.chosen else ''}; moves: {p.moves}")
            print(f"  {result.summary['verdict'].split('; protect:')[0]}")
    ratio = float(np.mean(worst["default"]["value"].to_numpy() / worst["reference"]["value"].to_numpy()))
    chosen = {n: w[w["chosen"]].iloc[0] for n, w in worst.items()}
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    record("frontier", f"unit={args.unit} chosen_floor={chosen['default']['floor']:g} "
          f"chosen_worst={chosen['default']['value']:.4f} reference_chosen_floor={chosen['reference']['floor']:g} "
          f"reference_chosen_worst={chosen['reference']['value']:.4f} worst_ratio_vs_reference={ratio:.3f} "
          f"seconds={time.perf_counter() - started:.1f} load={load.replace(' ', ',')}")


if __name__ == "__main__":
    main()
