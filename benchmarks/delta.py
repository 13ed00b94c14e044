"""Benchmark the Burrows' Delta attack against the stylometric attack on simulated histories, measured in the
same run, under both adversary settings and at several rewrite strengths.

    .venv/bin/python benchmarks/delta.py                  # 1M history posts, 4,356 users, 500 timelines
    .venv/bin/python benchmarks/delta.py --posts 8700000  # the article's scale (37.9k users)

Users scale with the posts as in the article (37.9k users for 8.7M posts). Histories are simulated once into
--data-dir (not timed; ``benchmarks/reidentify.py`` reuses them). Each (attack, setting) runs in a fresh child process through the attack registry
(``prepare`` then ``run`` per strength, as a run does for each strategy) and reports its profiling time, its
attack time and its peak RSS (the child's ru_maxrss: interpreter and libraries included); numba kernels are
compiled and cached before, untimed. Ends with a ``RESULT`` line: the profiling times (the slower setting of
each attack), their ratio (stylometric over delta: below 1 where delta is slower) and every accuracy@1.

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.reidentify import in_fresh_process, simulated_data
from benchmarks.results import record
from tasks.privacy.attacks import build_attack, run_attacks
from tasks.privacy.attribution import held_out_doc_ids

ATTACKS = ("delta", "stylometric")
ARTICLE_POSTS, ARTICLE_USERS = 8_700_000, 37_900


def _child(attack: str, setting: str, hist: str, syn_paths: dict[float, str], queue: mp.Queue) -> None:
    built = build_attack(attack)
    syns = {s: pd.read_parquet(p) for s, p in syn_paths.items()}
    t0 = time.perf_counter()
    prepared = built.prepare(hist, setting, held_out_doc_ids(next(iter(syns.values())), setting))  # type: ignore[arg-type]
    t_profile = time.perf_counter() - t0
    out = []
    for strength, syn in syns.items():
        t0 = time.perf_counter()
        summary = built.run(prepared, syn).summary
        out.append((strength, time.perf_counter() - t0, summary))
    queue.put((t_profile, out, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2))


def run_child(attack: str, setting: str, hist: str, syn_paths: dict[float, str]) -> tuple[float, list, float]:
    """(profiling s, [(strength, attack s, summary)], peak RSS GB) of one attack and setting in a fresh process."""
    return in_fresh_process(_child, attack, setting, hist, syn_paths)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--posts", type=int, default=1_000_000, help="history posts (users scale with them)")
    ap.add_argument("--timelines", type=int, default=500)
    ap.add_argument("--timeline-posts", type=int, default=20, help="posts per synthetic timeline")
    ap.add_argument("--strengths", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    ap.add_argument("--settings", nargs="+", default=["full", "disjoint"], choices=["full", "disjoint"])
    ap.add_argument("--data-dir", default=".cache/synthugc/bench")
    args = ap.parse_args()

    n_posts = args.posts
    n_users = max(args.timelines, round(ARTICLE_USERS * n_posts / ARTICLE_POSTS))
    hist, syn_paths = simulated_data(Path(args.data_dir), n_users, n_posts, args.timelines,
                                     args.timelines * args.timeline_posts, args.strengths)
    warm = pd.read_parquet(syn_paths[args.strengths[0]]).head(200)  # compile and cache the kernels, untimed
    run_attacks(warm, warm, [build_attack(name) for name in ATTACKS], ["full"])

    load = os.getloadavg()
    rows = []
    for attack in ATTACKS:
        for setting in args.settings:
            t_profile, out, rss = run_child(attack, setting, hist, syn_paths)
            rows += [(attack, setting, strength, t_profile, t_run, rss, s) for strength, t_run, s in out]
    load_after = os.getloadavg()

    print(f"\n{n_posts:,} history posts of {n_users:,} users; {args.timelines} timelines of {args.timeline_posts} "
          f"posts; default parameters ({build_attack('delta').signature})")
    print(f"load average (1/5/15 min) before {'/'.join(f'{x:.1f}' for x in load)}, after "
          f"{'/'.join(f'{x:.1f}' for x in load_after)} on {os.cpu_count()} cores")
    table = pd.DataFrame([{"attack": a, "setting": st, "rewrite": strength, "profile s": round(t_profile, 1),
                           "attack s": round(t_run, 2), "peak GB": round(rss, 2),
                           **{k: round(s[k], 3) for k in ("accuracy_at_1", "accuracy_at_10", "mrr")},
                           "chance": f"{s['chance']:.2e}"} for a, st, strength, t_profile, t_run, rss, s in rows])
    print(table.to_string(index=False))
    profile = {a: max(r[3] for r in rows if r[0] == a) for a in ATTACKS}  # the slower setting of each
    peak = {a: max(r[5] for r in rows if r[0] == a) for a in ATTACKS}
    result = {"posts": n_posts, "users": n_users, "timelines": args.timelines,
              **{f"{a}_profile_s": f"{profile[a]:.1f}" for a in ATTACKS},
              "ratio": f"{profile['stylometric'] / profile['delta']:.2f}",
              "delta_posts_per_s": f"{n_posts / profile['delta']:.0f}",
              **{f"{a}_peak_gb": f"{peak[a]:.2f}" for a in ATTACKS},
              **{f"acc_{a}_{st}_{strength:g}": f"{s['accuracy_at_1']:.3f}" for a, st, strength, *_, s in rows},
              "load1": f"{load_after[0]:.1f}"}
    record("delta", result)

if __name__ == "__main__":
    main()
