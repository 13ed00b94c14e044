"""Benchmark the re-identification attacks (MinHash near-duplicates, stylometric author profiles, the
classifier's linear SVM) on simulated data, under both adversary settings and at several rewrite strengths.

    .venv/bin/python benchmarks/reidentify.py            # 200k history posts, 2k users, 50 timelines
    .venv/bin/python benchmarks/reidentify.py --full     # the article's scale: 8.7M posts, 37.9k users, 500 timelines

Histories are simulated once into --data-dir (not timed); the synthetic timelines of every strength are
rewrites of the same source posts. Each (attack, setting) runs in a fresh child process that reports
wall time and peak RSS (ru_maxrss of the child: interpreter and libraries included). The stylometric
child profiles the histories once and attacks every strength with those profiles (as a run reuses them
for every strategy); its time per attack is the profiling plus one strength's attack. The classifier child
first builds the stylometric profiles its stage 1 takes (timed apart: in a run with both attacks they are
already there), then its own side (exact: the SVM; two stages: the re-ranker's IDF pass) and attacks every
strength; it reports its time without stage 1 (side + one strength's attack) and with it, and its peak RSS
(stage 1's profiles included). numba kernels are cached on disk, so compilation is not timed after the
first run.

Reference, measured in the same run: scikit-learn's ``TfidfVectorizer`` over the same features
(character 2-4-grams and word 1-2-grams, sublinear TF, smooth IDF: ``reference_vectorizer``) fitted on a
subsample of the history posts, author centroids and cosine with the timeline centroids; its time per
history post is extrapolated linearly to the full history and divided by the stylometric attack's time.
On the same subsample the sketch's cosines are compared with the exact mode's (mean and max absolute
error, top-1 agreement), and document frequencies from a sample at the full run's sampling rate with
those from every post.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import record
from tasks.corpus.simulate import simulate_histories, simulate_synthetic
from tasks.privacy.attribution import held_out_doc_ids
from tasks.privacy.reidentify import reidentify
from tasks.privacy.stylometric.features import reference_vectorizer
from tasks.privacy.stylometric.params import StyloParams
from tasks.privacy.stylometric.profiles import profile_histories
from tasks.privacy.stylometric.scoring import similarity, stylometric_attack, timeline_profiles

SIZES = {"full": (37_900, 8_700_000, 500, 17_800), "small": (2_000, 200_000, 50, 1_780)}


def simulated_data(data: Path, n_users: int, n_posts: int, n_tl: int, n_syn: int,
                   strengths: list[float]) -> tuple[str, dict[float, str]]:
    """(history parquet, {strength: synthetic parquet}) in ``data``: the histories simulated once (reused by
    later runs of any benchmark), the timelines of every strength rewritten from the same source posts."""
    data.mkdir(parents=True, exist_ok=True)
    hist = str(data / f"histories_{n_users}_{n_posts}_s0_v2.parquet")
    if not Path(hist).exists():
        t0 = time.perf_counter()
        simulate_histories(n_users, n_posts, seed=0, out_path=hist)
        print(f"simulated {n_posts:,} posts of {n_users:,} users in {time.perf_counter() - t0:.1f} s -> {hist}")
    syn_paths = {}
    for strength in strengths:
        syn_paths[strength] = str(data / f"synthetic_{n_users}_{n_posts}_{n_tl}_{n_syn}_{strength}.parquet")
        simulate_synthetic(hist, n_tl, n_syn, rewrite_strength=strength, seed=1).to_parquet(syn_paths[strength])
    return hist, syn_paths


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def _child(attack: str, setting: str, hist: str, syn_paths: dict[float, str], stylo: dict, queue: mp.Queue) -> None:
    syns = {s: pd.read_parquet(p) for s, p in syn_paths.items()}
    out = []
    if attack == "classifier":
        from tasks.privacy.classifier.attack import classifier_attack, fit_classifier
        from tasks.privacy.classifier.params import ClassifierParams
        from tasks.privacy.classifier.two_stage import stage1_profiles

        held = held_out_doc_ids(next(iter(syns.values())), setting)  # type: ignore[arg-type]
        params = ClassifierParams()
        t0 = time.perf_counter()
        if params.resolved_mode(hist) == "two_stage":
            stage1_profiles(hist, held)  # the stylometric attack's profiles, as a run with both attacks has them
        t_stage1 = time.perf_counter() - t0
        t0 = time.perf_counter()
        side = fit_classifier(hist, params, held)
        t_side = time.perf_counter() - t0
        for strength, syn in syns.items():
            t0 = time.perf_counter()
            res = classifier_attack(side, syn, setting)  # type: ignore[arg-type]
            wall = t_side + time.perf_counter() - t0
            out.append((strength, wall + t_stage1, t_stage1, res.summary))
    elif attack == "minhash":
        for strength, syn in syns.items():
            t0 = time.perf_counter()
            res = reidentify(hist, syn, setting=setting)  # type: ignore[arg-type]
            out.append((strength, time.perf_counter() - t0, 0.0, res.summary))
    else:
        held = held_out_doc_ids(next(iter(syns.values())), setting)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        profiles = profile_histories(hist, StyloParams(**stylo), held_out=held)
        t_profile = time.perf_counter() - t0
        for strength, syn in syns.items():
            t0 = time.perf_counter()
            res = stylometric_attack(profiles, syn, setting)  # type: ignore[arg-type]
            out.append((strength, t_profile + time.perf_counter() - t0, t_profile, res.summary))
    queue.put((out, peak_gb()))


def in_fresh_process(target: Callable[..., None], *args: Any) -> Any:
    """What ``target(*args, queue)`` puts on its queue, run in a fresh (spawned) process: its peak RSS is its own."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    out = queue.get()
    proc.join()
    return out


def run_child(attack: str, setting: str, hist: str, syn_paths: dict[float, str], stylo: dict) -> tuple[list, float]:
    """([(strength, wall s, of which profiling s, summary)], peak RSS GB) of one attack in a fresh process (the
    classifier's "profiling" is the stylometric stage 1 it takes)."""
    return in_fresh_process(_child, attack, setting, hist, syn_paths, stylo)


def sklearn_reference(hist: str, syn: pd.DataFrame, sample: int, stylo: dict, n_posts: int) -> dict:
    """Seconds per history post of the scikit-learn attack on the first ``sample`` posts, and the
    sketch's error against the exact mode there."""
    table = next(pq.ParquetFile(hist).iter_batches(batch_size=sample, columns=["author_id", "text"])).to_pandas()
    params = StyloParams(**stylo)
    t0 = time.perf_counter()
    vec = reference_vectorizer(params)
    x = vec.fit_transform(table["text"])
    codes, authors = pd.factorize(table["author_id"])
    import scipy.sparse as sp

    g = sp.csr_matrix((np.ones(len(codes)), (codes, np.arange(len(codes)))), shape=(len(authors), len(codes)))
    a = g @ x
    t_codes, groups = pd.factorize(syn["group_id"])
    tg = sp.csr_matrix((np.ones(len(t_codes)), (t_codes, np.arange(len(t_codes)))), shape=(len(groups), len(t_codes)))
    t = tg @ vec.transform(syn["text"])
    from sklearn.metrics.pairwise import cosine_similarity

    cosine_similarity(t, a)
    per_post = (time.perf_counter() - t0) / len(table)
    exact = profile_histories(table, StyloParams(**{**stylo, "mode": "exact"}))
    sketch = profile_histories(table, StyloParams(**{**stylo, "mode": "sketch", "df_sample": len(table)}))
    ref = similarity(timeline_profiles(exact, syn)[0], exact)
    got = similarity(timeline_profiles(sketch, syn)[0], sketch)
    err = np.abs(got - ref)
    # document frequencies from a sample at the full run's sampling rate, against all of them
    rate = min(1.0, params.df_sample / n_posts)
    sampled = profile_histories(table, StyloParams(**{**stylo, "mode": "sketch",
                                                      "df_sample": max(1, int(len(table) * rate))}))
    got_sampled = similarity(timeline_profiles(sampled, syn)[0], sampled)
    err_df = np.abs(got_sampled - got)
    return {"per_post": per_post, "n": len(table), "err_mean": float(err.mean()), "err_max": float(err.max()),
            "top1": float((got.argmax(1) == ref.argmax(1)).mean()), "df_rate": rate,
            "df_err_mean": float(err_df.mean()), "df_top1": float((got_sampled.argmax(1) == got.argmax(1)).mean())}


def public_corpora(data_dir: Path) -> None:
    """Every attack and setting on the shipped speaker corpora: one timeline of 8 consecutive verbatim
    turns from the middle of each speaker with >= 16 turns (the copy strategy); exact stylometric mode."""
    from tasks.privacy.attacks import attack_names, build_attack, run_attacks, setting_names, summary_table

    for name in ("debates", "conventions"):
        path = data_dir / f"{name}.parquet"
        if not path.exists():
            print(f"{path} missing: run `synthugc datasets fetch {name}`")
            continue
        corpus = pd.read_parquet(path).astype({"text": object, "author_id": object, "doc_id": object})
        corpus = corpus.sort_values(["author_id", "group_id", "position"], kind="stable")
        counts = corpus["author_id"].value_counts()
        parts = []
        for author in counts.index[counts >= 16]:
            posts = corpus[corpus["author_id"] == author]
            parts.append(posts.iloc[len(posts) // 2 - 4: len(posts) // 2 + 4])
        released = pd.concat(parts)
        syn = released[["doc_id", "author_id", "text"]].assign(group_id=released["author_id"])
        t0 = time.perf_counter()
        attacks = [build_attack(name, {"mode": "exact"} if name == "stylometric" else {})
                   for name in attack_names("all")]
        results = run_attacks(corpus[["doc_id", "author_id", "text"]], syn, attacks, setting_names("both"))
        table = summary_table([r.summary for r in results])
        print(f"\n{name}: {len(corpus):,} posts of {corpus['author_id'].nunique()} speakers; "
              f"{syn['group_id'].nunique()} timelines of 8 verbatim turns; {time.perf_counter() - t0:.0f} s")
        print(table[["attack", "adversary", "accuracy_at_1", "accuracy_at_10", "mrr", "chance", "n_timelines",
                     "n_no_history"]].to_string(index=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="article scale: 8.7M posts of 37.9k users, 500 timelines")
    ap.add_argument("--scale", type=float, default=None, help="multiply the chosen size's posts and users")
    ap.add_argument("--data-dir", default=".cache/synthugc/bench")
    ap.add_argument("--strengths", type=float, nargs="+", default=[0.2, 0.8])
    ap.add_argument("--attacks", nargs="+", default=["minhash", "stylometric", "classifier"],
                    choices=["minhash", "stylometric", "classifier"])
    ap.add_argument("--settings", nargs="+", default=["full", "disjoint"], choices=["full", "disjoint"])
    ap.add_argument("--width", type=int, default=4096, help="stylometric count-sketch width")
    ap.add_argument("--hash-bits", type=int, default=20, help="stylometric document-frequency buckets (log2)")
    ap.add_argument("--df-sample", type=int, default=StyloParams.df_sample,
                    help="stylometric: posts the document frequencies are estimated from")
    ap.add_argument("--no-words", dest="words", action="store_false", help="stylometric: character n-grams only")
    ap.add_argument("--sklearn-sample", type=int, default=None, help="history posts for the scikit-learn reference")
    ap.add_argument("--public", default=None, metavar="DATA_DIR",
                    help="also run every attack on the shipped debates and conventions corpora in DATA_DIR")
    args = ap.parse_args()
    if args.public:
        public_corpora(Path(args.public))

    n_users, n_posts, n_tl, n_syn = SIZES["full" if args.full else "small"]
    if args.scale:
        n_users, n_posts = int(n_users * args.scale), int(n_posts * args.scale)
    sample = args.sklearn_sample or (100_000 if args.full else 20_000)
    stylo = {"width": args.width, "hash_bits": args.hash_bits, "df_sample": args.df_sample,
             "word_max": 2 if args.words else 0}
    features = StyloParams(**stylo).features
    hist, syn_paths = simulated_data(Path(args.data_dir), n_users, n_posts, n_tl, n_syn, args.strengths)
    warm = pd.read_parquet(syn_paths[args.strengths[0]]).head(200)  # compile and cache the kernels, untimed
    for mode in ("sketch", "exact", "text"):
        stylometric_attack(profile_histories(warm, StyloParams(**{**stylo, "mode": mode})), warm)
    reidentify(warm, warm)
    if "classifier" in args.attacks:
        from tasks.privacy.classifier.attack import reidentify_classifier
        from tasks.privacy.classifier.params import ClassifierParams

        reidentify_classifier(warm, warm, ClassifierParams(mode="two_stage", top_k=3))
    load = os.getloadavg()
    rows = []
    for attack in args.attacks:
        for setting in args.settings:
            out, rss = run_child(attack, setting, hist, syn_paths, stylo)
            rows += [(attack, setting, strength, wall, prof, rss, s) for strength, wall, prof, s in out]
    ref = sklearn_reference(hist, pd.read_parquet(syn_paths[args.strengths[0]]), sample, stylo, n_posts)
    load_after = os.getloadavg()

    sk_full = ref["per_post"] * n_posts
    used_modes = "/".join(sorted({r[6].get("mode_used", "?") for r in rows if r[0] == "stylometric"})) or "auto"
    print(f"\nre-identification: {n_posts:,} history posts of {n_users:,} users, {n_syn:,} synthetic posts in "
          f"{n_tl} timelines; stylometric {features} n-grams in {used_modes} mode, sketch width "
          f"{args.width}, 2^{args.hash_bits} IDF buckets, IDF from {min(n_posts, args.df_sample):,} posts; "
          "minhash k=128, 16x8 bands")
    print(f"load average (1/5/15 min) before {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, after "
          f"{load_after[0]:.1f}/{load_after[1]:.1f}/{load_after[2]:.1f} on {os.cpu_count()} cores "
          "(the machine is shared with other agents: wall times are inflated by their load)")
    head = f"{'attack':>12} {'setting':>9} {'rewrite':>8} {'wall s':>8} {'stage s':>10} {'peak GB':>8} " \
           f"{'acc@1':>7} {'acc@10':>7} {'MRR':>7} {'chance':>9} {'no hist':>8}"
    print(head)
    print("-" * len(head))
    for attack, setting, strength, wall, prof, rss, s in rows:
        print(f"{attack:>12} {setting:>9} {strength:>8.2f} {wall:>8.1f} {prof:>10.1f} {rss:>8.2f} "
              f"{s['accuracy_at_1']:>7.3f} {s['accuracy_at_10']:>7.3f} {s['mrr']:>7.3f} {s['chance']:>9.2e} "
              f"{s['n_no_history']:>8d}")
    stylo_rows = [r for r in rows if r[0] == "stylometric"]
    ratio = sk_full / max(r[3] for r in stylo_rows) if stylo_rows else float("nan")  # against our slowest
    print(f"\nscikit-learn reference on {ref['n']:,} posts: {ref['per_post'] * 1e6:.0f} us per history post, "
          f"extrapolated to {n_posts:,} posts: {sk_full:.0f} s (single process; its memory grows with the "
          f"vocabulary x posts); stylometric sketch vs exact cosine on that sample: mean |err| "
          f"{ref['err_mean']:.4f}, max {ref['err_max']:.4f}, top-1 agreement {ref['top1']:.3f}; IDF from "
          f"{ref['df_rate']:.1%} of the posts vs all: mean |err| {ref['df_err_mean']:.4f}, top-1 agreement "
          f"{ref['df_top1']:.3f}")
    classifier = [r for r in rows if r[0] == "classifier"]
    if classifier:
        print("\nclassifier (wall s: its side + one strength's attack, then with the stylometric stage 1 it takes; "
              "two stages: re-ranked top-K):")
        for _, setting, strength, wall, prof, rss, s in classifier:
            stylo_row = next((r for r in stylo_rows if r[1] == setting and r[2] == strength), None)
            versus = f"{stylo_row[6]['accuracy_at_1']:.3f}" if stylo_row else "-"
            print(f"  {setting:>9} rewrite {strength:.2f}: {wall - prof:.1f} s without stage 1, {wall:.1f} s with it, "
                  f"{rss:.2f} GB; acc@1 {s['accuracy_at_1']:.3f} [{s['accuracy_at_1_ci_low']:.3f}, "
                  f"{s['accuracy_at_1_ci_high']:.3f}] (stylometric {versus}); mode {s['mode_used']}, top-K recall "
                  f"{s.get('top_k_recall', float('nan')):.3f}, {s.get('n_candidates', 0)} candidates")
    worst = max(rows, key=lambda r: r[3])
    classifier_keys = ""
    if classifier:
        classifier_keys = (f"classifier_s={max(r[3] - r[4] for r in classifier):.1f} "
                           f"classifier_with_stage1_s={max(r[3] for r in classifier):.1f} "
                           f"classifier_gb={max(r[5] for r in classifier):.2f} "
                           + " ".join(f"classifier_acc_{st}_{s_:g}={x['accuracy_at_1']:.3f}"
                                      for _, st, s_, _, _, _, x in classifier) + " ")
    record("reidentify", f"scale_posts={n_posts} users={n_users} timelines={n_tl} "
          f"slowest_attack_s={worst[3]:.1f} slowest={worst[0]}/{worst[1]} peak_rss_gb={max(r[5] for r in rows):.2f} "
          f"sklearn_ratio={ratio:.1f} sketch_err_mean={ref['err_mean']:.4f} df_sample_top1={ref['df_top1']:.3f} "
          + classifier_keys
          + " ".join(f"acc_{a}_{st}_{s_:g}={x['accuracy_at_1']:.3f}" for a, st, s_, _, _, _, x in rows)
          + f" load1={load_after[0]:.1f} load5={load_after[1]:.1f}")


if __name__ == "__main__":
    main()
