"""Benchmark the protect loop (``synthugc protect``, :mod:`tasks.protect.loop`) on simulated histories: seconds
per round, peak RSS, and what each round did to the judge, the feedback attack and the meaning.

    .venv/bin/python benchmarks/protect.py                    # 200k history posts, 2k users, 50 timelines
    .venv/bin/python benchmarks/protect.py --full --scale 0.1 # 870k posts, 3,790 users, 500 timelines
    .venv/bin/python benchmarks/protect.py --full             # the article's 8.7M posts, 37.9k users

The histories and the timelines to protect are ``benchmarks/reidentify.py``'s (``simulated_data``: the same
files, simulated once into --data-dir, not timed): one corpus per starting style strength (``--strengths``,
simulate_synthetic's ``rewrite_strength``), every strength a rewrite of the same source posts. The loop runs
with its default attacks (feedback stylometric; judge every registered attack that can run here, on the other
half; disjoint adversary) and a ladder without model strategies (``--ladder``), both strengths in one fresh child
process on a fresh cache folder, so the histories are split and profiled once, in the first strength's round 0,
and every later round and the second strength reuse the profiles. After the last round the certificate runs every
registered attack again on the kept output against the full histories; its seconds are printed beside the
rounds (target: :data:`CERTIFICATE_TARGET_S`). Each round's seconds are the loop's own (``RoundState.seconds``); the peak
RSS is the child's ru_maxrss after each round (interpreter, models and profiles included). numba kernels are
compiled and cached before, untimed; round 0 pays the MiniLM load for the meaning.

Reference, measured in the same run: round 0 of the first strength (split, index, profiles, the start move and
the meaning of every document, every timeline scored); the RESULT line's ``ratio`` is that over the slowest
later round. ``--time-pseudonymize N`` first times the PII detector that ``--start pseudonymize`` runs on
every document, on N of the corpus posts, and extrapolates it to the corpus.
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing as mp
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.reidentify import SIZES, in_fresh_process, peak_gb, simulated_data
from benchmarks.results import record
from tasks.corpus.schema import STATUS_OK
from tasks.protect.settings import ProtectSettings

#: The issue's target for every round after the first, and for the peak RSS; the certificate of the output.
ROUND_TARGET_S, PEAK_TARGET_GB, CERTIFICATE_TARGET_S = 20.0, 4.0, 120.0
DEFAULT_LADDER = "mask-evidence,stymask,mask-evidence"


def _child(hist: str, syn_paths: dict[float, str], options: dict, cache: str, queue: mp.Queue) -> None:
    from flows.config_options import protect_settings
    from tasks.protect.loop import protect_corpus
    from tasks.store import fingerprint_file

    profile = options.pop("profile", None)
    settings = protect_settings(None, **{**options, "docs_per_round": options["docs_per_round"] or None})
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    out = []
    for strength, path in syn_paths.items():
        corpus = pd.read_parquet(path)
        peaks: list[float] = []

        def log(line: str, peaks: list[float] = peaks, strength: float = strength) -> None:
            if line.startswith(("round ", "certificate")):  # one peak per row of the table, not per log line
                peaks.append(peak_gb())
            print(f"  [rewrite {strength:g}] {line}", flush=True)

        result = protect_corpus(corpus, hist, settings, cache_dir=cache, corpus_fingerprint=fingerprint_file(path),
                                histories_fingerprint=fingerprint_file(hist), log=log)
        out.append((strength, result.rounds, peaks, result.summary["verdict"]))
        if result.summary["judge_strength"]:
            print(f"  [rewrite {strength:g}] judge-strength warning: {result.summary['judge_strength']}", flush=True)
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    queue.put(out)


def run_child(hist: str, syn_paths: dict[float, str], options: dict, cache: str) -> list:
    """[(strength, rounds table, peak RSS GB after each round, verdict)] of the loop in a fresh process."""
    return in_fresh_process(_child, hist, syn_paths, options, cache)


def time_pseudonymize(corpus: pd.DataFrame, n: int) -> tuple[float, float]:
    """(detector load s, detection s per post) of the PII detector on the first ``n`` posts, after a warm-up."""
    from tasks.models.pii import PiiDetector

    texts = corpus["text"].astype(str).tolist()[:n]
    t0 = time.perf_counter()
    detector = PiiDetector()
    detector.detect(texts[:8])
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    detector.detect(texts)
    return load, (time.perf_counter() - t0) / max(1, len(texts))


def _ci(row: pd.Series) -> str:
    return f"{row['accuracy_at_1']:.3f} [{row['accuracy_at_1_ci_low']:.3f}, {row['accuracy_at_1_ci_high']:.3f}]"


def round_table(rounds: pd.DataFrame, peaks: list[float]) -> pd.DataFrame:
    """One row per round: every attack's accuracy@1 (judges with their interval), meaning, rewritten, seconds;
    the certificate (every attack on the full histories, after the last round) in a row of its own."""
    out = []
    certificate = rounds[rounds["role"] == "certificate"]
    rounds = rounds[rounds["role"] != "certificate"]
    parts = [(k, part) for k, part in rounds.groupby("round", sort=True)]
    if len(certificate):
        parts.append(("certificate", certificate))
    for k, part in parts:
        row: dict = {"round": k if isinstance(k, str) else int(k)}
        for _, a in part.iterrows():
            role = "judge" if a["role"] in ("certificate", "check") else a["role"]
            row[f"{role} {a['attack']}"] = _ci(a) if role == "judge" else f"{a['accuracy_at_1']:.3f}"
        first = part.iloc[0]
        row |= {"meaning": round(float(first["meaning"]), 3), "rewritten": int(first["documents_rewritten"]),
                "seconds": round(float(first["seconds"]), 1),
                "peak GB": round(peaks[min(len(peaks) - 1, len(out))], 2)}
        out.append(row)
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="article scale: 8.7M posts of 37.9k users, 500 timelines")
    ap.add_argument("--scale", type=float, default=None, help="multiply the chosen size's posts and users")
    ap.add_argument("--timelines", type=int, default=None,
                    help="timelines to protect (default: the size's; posts per timeline stay the same)")
    ap.add_argument("--data-dir", default=".cache/synthugc/bench")
    ap.add_argument("--strengths", type=float, nargs="+", default=[0.0, 0.3],
                    help="rewrite strengths of the timelines to protect (simulate_synthetic)")
    ap.add_argument("--start", default="stymask", help="round 0's move (pseudonymize runs the PII detector on all)")
    ap.add_argument("--ladder", default=DEFAULT_LADDER, help="comma-separated moves")
    ap.add_argument("--max-rounds", type=int, default=3)
    ap.add_argument("--budget", default="reidentification<=0.10")
    ap.add_argument("--judge", default=None, help="comma-separated judge attacks (default: every registered attack "
                                                   "that can run here); a narrowed judge is checked at round 0")
    ap.add_argument("--feedback", default=None, help="comma-separated feedback attacks (default: stylometric)")
    ap.add_argument("--docs-per-round", type=int, default=ProtectSettings.docs_per_round, metavar="N",
                    help="documents moved per caught timeline and round (0: every document)")
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="run the loop under cProfile, write its stats to FILE and print where later rounds go")
    ap.add_argument("--time-pseudonymize", type=int, default=0, metavar="N",
                    help="first time the PII detector on N corpus posts (what --start pseudonymize adds)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    n_users, n_posts, n_tl, n_syn = SIZES["full" if args.full else "small"]
    if args.scale:
        n_users, n_posts = int(n_users * args.scale), int(n_posts * args.scale)
    if args.timelines:
        n_tl, n_syn = args.timelines, round(n_syn * args.timelines / n_tl)
    hist, syn_paths = simulated_data(Path(args.data_dir), n_users, n_posts, n_tl, n_syn, args.strengths)
    first = pd.read_parquet(syn_paths[args.strengths[0]])
    if args.time_pseudonymize:
        load_s, per_post = time_pseudonymize(first, args.time_pseudonymize)
        print(f"PII detector (--start pseudonymize): load + warm-up {load_s:.1f} s, {per_post * 1e3:.1f} ms per post "
              f"on {min(args.time_pseudonymize, len(first)):,} posts -> {per_post * len(first):.0f} s for the "
              f"{len(first):,} posts of round 0 (load {os.getloadavg()[0]:.1f})")
    from tasks.privacy.attacks import available_attacks, build_attack, run_attacks

    warm = first.head(200).assign(status=STATUS_OK)  # compile and cache the kernels, untimed
    run_attacks(warm, warm, [build_attack(name) for name in available_attacks() if name != "embedding"], ["full"])

    options = {"start": args.start, "ladder": args.ladder.split(","), "max_rounds": args.max_rounds,
               "budget": args.budget, "profile": args.profile, "docs_per_round": args.docs_per_round,
               "judge": args.judge.split(",") if args.judge else None,
               "feedback": args.feedback.split(",") if args.feedback else None}
    load = os.getloadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="protect-bench-", dir=args.data_dir) as cache:
        results = run_child(hist, syn_paths, options, cache)
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()

    print(f"\nprotect: {n_posts:,} history posts of {n_users:,} users; {n_tl} timelines, {len(first):,} posts per "
          f"corpus; start {args.start}, ladder {args.ladder}, budget {args.budget}, at most {args.max_rounds} rounds, "
          f"{args.docs_per_round or 'every'} document(s) per caught timeline and round; "
          f"{wall:.0f} s in all")
    print(f"load average (1/5/15 min) before {'/'.join(f'{x:.1f}' for x in load)}, after "
          f"{'/'.join(f'{x:.1f}' for x in load_after)} on {os.cpu_count()} cores")
    later, peak, certificates = [], 0.0, []
    for strength, rounds, peaks, verdict in results:
        print(f"\nrewrite strength {strength:g}: {verdict}")
        table = round_table(rounds, peaks)
        print(table.to_string(index=False))
        later += [(strength, r, s) for r, s in zip(table["round"], table["seconds"], strict=True)
                  if not isinstance(r, str) and r > 0]
        certified = rounds[rounds["role"] == "certificate"]
        certificates.append(float(certified["seconds"].iloc[0]) if len(certified) else float("nan"))
        peak = max(peak, max(peaks))
    first_round = float(results[0][1]["seconds"].iloc[0])
    slowest = max(later, key=lambda x: x[2]) if later else (None, None, float("nan"))
    print(f"\nround 0 of rewrite {results[0][0]:g} (split, index, profiles, every document and timeline): "
          f"{first_round:.1f} s; slowest later round: {slowest[2]:.1f} s (rewrite {slowest[0]}, round {slowest[1]}); "
          f"target <= {ROUND_TARGET_S:g} s per later round: "
          f"{'no later round ran' if not later else 'met' if slowest[2] <= ROUND_TARGET_S else 'NOT met'}; "
          f"peak RSS {peak:.2f} GB, target <= {PEAK_TARGET_GB:g} GB: {'met' if peak <= PEAK_TARGET_GB else 'NOT met'}")
    slowest_certificate = max(certificates) if certificates else float("nan")
    print(f"certificate (every registered attack on the full histories, after the last round): "
          f"{', '.join(f'{c:.1f} s' for c in certificates)}; target <= {CERTIFICATE_TARGET_S:g} s: "
          f"{'met' if slowest_certificate <= CERTIFICATE_TARGET_S else 'NOT met'}")
    result = {"posts": n_posts, "users": n_users, "timelines": n_tl, "start": args.start,
              "docs_per_round": args.docs_per_round or "all",
              "first_round_s": f"{first_round:.1f}", "slowest_later_round_s": f"{slowest[2]:.1f}",
              "ratio": f"{first_round / slowest[2]:.1f}" if later else "nan", "peak_rss_gb": f"{peak:.2f}",
              "certificate_s": f"{slowest_certificate:.1f}",
              **{f"{role}_{strength:g}_worst": f"{part['accuracy_at_1'].max():.3f}"
                 for strength, rounds, _, _ in results
                 for role, part in (("judge", rounds[(rounds["role"] == "judge")
                                                      & (rounds["round"] == rounds["round"].max())]),
                                    ("certificate", rounds[rounds["role"] == "certificate"])) if len(part)},
              "load1": f"{load_after[0]:.1f}"}
    if args.profile:
        print(f"\ncProfile of the loop ({args.profile}): what the later rounds (next_round) call, cumulative s")
        pstats.Stats(args.profile).sort_stats("cumulative").print_callees("next_round")
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)
    record("protect", result)


if __name__ == "__main__":
    main()
