"""Benchmark the MinHash LSH re-identification attack (seed 000 §5.3.2) on simulated data.

    .venv/bin/python benchmarks/reidentify.py            # 200k history posts, seconds
    .venv/bin/python benchmarks/reidentify.py --full     # the article's scale: 8.7M posts, 37.9k users

Histories are simulated once into --data-dir (not timed). Each attack (sign histories + index + probe +
vote) runs in a fresh child process that reports its wall time and peak RSS (ru_maxrss of the child:
interpreter and libraries included, simulation excluded). numba kernels are cached on disk, so
compilation is not timed after the first run. datasketch (MinHash.bulk + MinHashLSH insert of the
synthetic posts, query of each history post) is timed on a subsample of history posts in the same run
and extrapolated linearly to the full history size; the ratio is that estimate over our attack's time.
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
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tasks.corpus.simulate import simulate_histories, simulate_synthetic
from tasks.privacy.minhash import shingles
from tasks.privacy.reidentify import reidentify

SIZES = {"full": (37_900, 8_700_000, 500, 17_800), "small": (2_000, 200_000, 50, 1_780)}


def _attack(hist: str, syn_path: str, kwargs: dict, queue: mp.Queue) -> None:
    syn = pd.read_parquet(syn_path)
    t0 = time.perf_counter()
    res = reidentify(hist, syn, **kwargs)
    wall = time.perf_counter() - t0
    queue.put((wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, res.summary))


def run_attack(hist: str, syn_path: str, kwargs: dict) -> tuple[float, float, dict]:
    """(wall s, peak RSS GB, summary) of one attack in a fresh process."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_attack, args=(hist, syn_path, kwargs, queue))
    proc.start()
    out = queue.get()
    proc.join()
    return out


def datasketch_seconds(hist: str, syn: pd.DataFrame, sample: int, k: int, bands: int, rows: int) -> tuple[float, float]:
    """(seconds to index the synthetic posts, seconds per history post) with datasketch."""
    from datasketch import MinHash, MinHashLSH

    def sets(texts: list[str]) -> list[list[bytes]]:
        return [[s.encode() for s in shingles(t)] for t in texts]

    t0 = time.perf_counter()
    lsh = MinHashLSH(num_perm=k, params=(bands, rows))
    for i, m in enumerate(MinHash.bulk(sets(syn["text"].tolist()), num_perm=k)):
        lsh.insert(i, m)
    t_index = time.perf_counter() - t0
    texts = next(pq.ParquetFile(hist).iter_batches(batch_size=sample, columns=["text"])).column("text").to_pylist()
    t0 = time.perf_counter()
    for m in MinHash.bulk(sets(texts), num_perm=k):
        lsh.query(m)
    return t_index, (time.perf_counter() - t0) / len(texts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="article scale: 8.7M posts of 37.9k users, 17.8k synthetic")
    ap.add_argument("--data-dir", default=".cache/synthugc/bench")
    ap.add_argument("--strengths", type=float, nargs="+", default=[0.2, 0.5])
    ap.add_argument("--bands", type=int, default=16)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--jaccard-threshold", type=float, default=None)
    ap.add_argument("--chunk-rows", type=int, default=1_000_000)
    ap.add_argument("--datasketch-sample", type=int, default=None, help="history posts timed with datasketch")
    args = ap.parse_args()

    n_users, n_posts, n_tl, n_syn = SIZES["full" if args.full else "small"]
    sample = args.datasketch_sample or (20_000 if args.full else 2_000)
    data = Path(args.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    hist = str(data / f"histories_{n_users}_{n_posts}_s0.parquet")
    if not Path(hist).exists():
        t0 = time.perf_counter()
        simulate_histories(n_users, n_posts, seed=0, out_path=hist)
        print(f"simulated {n_posts:,} posts of {n_users:,} users in {time.perf_counter() - t0:.1f} s -> {hist}")
    load = os.getloadavg()
    kwargs = {"bands": args.bands, "rows": args.rows, "jaccard_threshold": args.jaccard_threshold,
              "chunk_rows": args.chunk_rows}
    rows = []
    for strength in args.strengths:
        syn = simulate_synthetic(hist, n_tl, n_syn, rewrite_strength=strength, seed=1)
        syn_path = str(data / f"synthetic_{n_tl}_{n_syn}_{strength}.parquet")
        syn.to_parquet(syn_path)
        wall, rss, s = run_attack(hist, syn_path, kwargs)
        rows.append((strength, wall, rss, s))
    t_index, per_post = datasketch_seconds(hist, syn, sample, 128, args.bands, args.rows)
    ds_full = t_index + per_post * n_posts
    load_after = os.getloadavg()

    print(f"\nre-identification attack: {n_posts:,} history posts, {rows[0][3]['n_history_users']:,} users, "
          f"{n_syn:,} synthetic posts in {n_tl} timelines; k=128, b={args.bands}, r={args.rows} "
          f"(S-curve threshold {rows[0][3]['s_curve_threshold']:.2f}), jaccard filter {args.jaccard_threshold}")
    print(f"load average (1/5/15 min) before {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, after "
          f"{load_after[0]:.1f}/{load_after[1]:.1f}/{load_after[2]:.1f} on {os.cpu_count()} cores")
    head = f"{'rewrite':>8} {'wall s':>8} {'peak RSS GB':>12} {'accuracy':>9} {'baseline':>10} {'recall':>7} " \
           f"{'no cand.':>8} {'pairs':>10} {'datasketch x':>13}"
    print(head)
    print("-" * len(head))
    for strength, wall, rss, s in rows:
        print(f"{strength:>8.2f} {wall:>8.1f} {rss:>12.2f} {s['accuracy']:>9.3f} {s['baseline']:>10.2e} "
              f"{s['candidate_recall']:>7.3f} {s['n_timelines_no_candidates']:>8d} {s['n_candidate_pairs']:>10,d} "
              f"{ds_full / wall:>12.0f}x")
    print(f"\ndatasketch: indexed {n_syn:,} synthetic posts in {t_index:.1f} s; {per_post * 1e6:.0f} us per history "
          f"post (measured on {sample:,} posts), extrapolated linearly to {n_posts:,} posts: {ds_full / 60:.1f} min")


if __name__ == "__main__":
    main()
