"""Benchmark of the metric suite (tasks.metrics.suite.score_strategy) on real public text.

Builds N (source, synthetic) pairs: sentences of the 2012 convention speeches (group = speech) plus
Rotten Tomatoes snippets (group = movie, taken from the doc id) to reach N; the synthetic side is the
``stymask`` strategy (rule-based, deterministic, fast). Then times

1. each metric (or the metrics that come out of one computation, e.g. bertscore_p/r/f1) alone on a fresh
   embedding cache, and the whole suite in one call on a fresh cache (shared embeddings);
2. the reference for the whole suite: one plain forward pass of the encoder (MiniLM, already loaded) over the
   same distinct texts the suite embeds (tokenizer padding, batches of 64 sorted by length, inference mode,
   nothing cached or pooled), in the same run; the ratio suite / forward (target <= 1.5);
   next to it our own forward over those texts (:func:`tasks.models.embeddings.token_embeddings`, no cache,
   batches within the device's token budget) and the ratio suite / our forward;
3. our ``bertscore`` against ``bert_score.score`` (same MiniLM folder, layer 6, batch 64, texts, machine,
   run; three rounds each, alternating, medians compared), with the max |F1 difference|, and our
   warm-cache time.

``--token-budgets 512 1024 ...`` times our forward over the suite's texts at each padded-token budget per
batch, next to the plain forward reference: the measurement behind ``CPU_TOKEN_BUDGET``.

``--pairs 500 2000 10000`` is the scale curve: each size runs in its own process (the whole suite and the
forward reference; peak RSS is that process's), then the exponent of seconds vs pairs is fitted on log-log
(1 = linear). The ratios and pairs/s of the RESULT line are those of the smallest size.

Run: ``.venv/bin/python benchmarks/metrics.py --pairs 500`` (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks.results import record  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tasks.corpus.datasets import fetch_dataset  # noqa: E402
from tasks.corpus.schema import STATUS_OK  # noqa: E402
from tasks.generate.base import build_strategy, generate_synthetic  # noqa: E402
from tasks.metrics import catalogue, suite  # noqa: E402
from tasks.metrics.meaning import bertscore  # noqa: E402
from tasks.models.embeddings import EmbeddingCache, token_embeddings  # noqa: E402
from tasks.models.registry import resolve_model  # noqa: E402

#: Metrics that come out of one computation and are timed together (one call).
SHARED_COMPUTATION: dict[str, tuple[str, ...]] = {
    compute.__name__.lstrip("_"): tuple(cols) for level in ("sample", "variant")
    for compute, cols in suite.compute_groups(level, catalogue.names(level)) if len(cols) > 1}
#: Metrics that read the same cached embeddings (they share work only when run in one call).
SHARED_EMBEDDINGS: dict[str, str] = {
    **dict.fromkeys(("bertscore", "fbd"), "token emb. (MiniLM L6)"),
    **dict.fromkeys(("cps", "fbd_sbert", "fcsd", "pair_sbert", "align_sbert", "clus_sbert"),
                    "sentence emb. (MiniLM)"),
    **dict.fromkeys(("style_cosine", "style_frechet", "pos_jaccard", "pos_jsd"), "POS tags (spaCy)"),
}
REFERENCE = "bert_score 0.3.13, same model, layer, texts, machine, this run"


@dataclass
class Timing:
    """One timed unit: its label, the metrics it scores, its level and the seconds it took."""

    label: str
    metrics: tuple[str, ...]
    level: str
    seconds: float


def level_of(metric: str) -> str:
    """sample | variant | distribution | bag (the catalogue's level)."""
    return catalogue.CATALOGUE[metric].level


def timing_units(selected: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(label, metrics) per timed call: shared-computation groups together, every other metric alone."""
    units: list[tuple[str, tuple[str, ...]]] = []
    seen: set[str] = set()
    for metric in suite.ALL_METRICS:
        if metric not in selected or metric in seen:
            continue
        label, group = next(((g, cols) for g, cols in SHARED_COMPUTATION.items() if metric in cols),
                            (metric, (metric,)))
        chosen = tuple(m for m in group if m in selected)
        seen.update(chosen)
        units.append((label, chosen))
    return units


def build_pairs(n: int, data_dir: Path, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(corpus, synthetic) of ``n`` pairs with non-empty texts: convention sentences in speech order plus
    Rotten Tomatoes snippets (at least a tenth of ``n``, more when conventions run out)."""
    conv = pd.read_parquet(fetch_dataset("conventions", data_dir))
    rt = pd.read_parquet(fetch_dataset("rotten_tomatoes", data_dir))
    rt["group_id"] = rt["doc_id"].str.rsplit("-", n=2).str[0]  # rotten_tomatoes-<movie>
    keep = ["doc_id", "text", "author_id", "group_id", "position", "label"]
    pool_conv = conv[conv["text"].str.strip() != ""][keep]
    pool_rt = rt.reindex(columns=keep)
    pool_rt = pool_rt[pool_rt["text"].str.strip() != ""]
    if n > len(pool_conv) + len(pool_rt):
        raise SystemExit(f"--pairs {n}: only {len(pool_conv) + len(pool_rt)} texts available")
    n_rt = max(n - len(pool_conv), n // 10)
    corpus = pd.concat([pool_conv.iloc[:n - n_rt], pool_rt.sample(n=len(pool_rt), random_state=seed)],
                       ignore_index=True)
    strategy = build_strategy("stymask", {}).fit(corpus.iloc[:n])
    synthetic = generate_synthetic(strategy, corpus, seed=seed)
    ok = (synthetic["status"] == STATUS_OK) & synthetic["text"].fillna("").str.strip().ne("")
    ok &= corpus["text"].str.strip().ne("").to_numpy()
    rows = np.flatnonzero(ok.to_numpy())
    conv_rows = rows[rows < n - n_rt]
    rt_rows = rows[rows >= n - n_rt][:n - len(conv_rows)]
    take = np.concatenate([conv_rows, rt_rows])
    if len(take) < n:
        raise SystemExit(f"--pairs {n}: only {len(take)} pairs have a non-empty stymask output")
    return corpus.iloc[take].reset_index(drop=True), synthetic.iloc[take].reset_index(drop=True)


@contextlib.contextmanager
def fresh_cache() -> Iterator[Path]:
    """A path for an empty SQLite embedding cache in a temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        yield Path(tmp) / "embeddings.sqlite"


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def metric_options() -> suite.MetricOptions:
    """The offline default models, as the CLI resolves them."""
    return suite.MetricOptions(token_encoder=resolve_model("token_encoder"),
                               sentence_encoder=resolve_model("sentence_encoder"),
                               pos_tagger=resolve_model("pos_tagger"))


def warm_up(corpus: pd.DataFrame, synthetic: pd.DataFrame, selected: Sequence[str],
            options: suite.MetricOptions, client: Any) -> float:
    """Load every model once (as the flow does before scoring, then on 8 pairs, throwaway cache) so no timed
    unit pays a one-off load."""
    def load_all(path: Path) -> None:
        suite.prepare_metrics(selected, options, str(path))
        suite.score_strategy(corpus.iloc[:8], synthetic.iloc[:8], selected, options, path, client=client)

    with fresh_cache() as path:
        seconds, _ = timed(lambda: load_all(path))
    return seconds


def time_each_metric(corpus: pd.DataFrame, synthetic: pd.DataFrame, selected: Sequence[str],
                     options: suite.MetricOptions, client: Any) -> list[Timing]:
    """Each timing unit alone, each on a fresh cache."""
    timings = []
    for label, metrics in timing_units(selected):
        with fresh_cache() as path:
            seconds, _ = timed(lambda m=metrics, p=path: suite.score_strategy(corpus, synthetic, m, options, p,
                                                                               client=client))
        timings.append(Timing(label, metrics, level_of(metrics[0]), seconds))
        print(f"  {label:<20} {seconds:9.2f} s", flush=True)
    return timings


@dataclass
class BertScoreComparison:
    """Seconds for bert_score.score and ours cold (each round), ours warm, ours with the sources cached, and
    the max |F1 difference|."""

    reference_rounds: list[float]
    ours_rounds: list[float]
    ours_warm_s: float
    ours_sources_cached_s: float
    max_abs_f1: float

    @property
    def reference_s(self) -> float:
        """Median of bert_score's rounds."""
        return float(np.median(self.reference_rounds))

    @property
    def ours_s(self) -> float:
        """Median of our cold rounds."""
        return float(np.median(self.ours_rounds))


def compare_bertscore(cands: list[str], refs: list[str], rounds: int = 3) -> BertScoreComparison:
    """Time bert_score.score and our bertscore on the same pairs (MiniLM, layer 6, batch 64), ``rounds``
    times each, alternating (ours first, then bert_score), so neither always runs on a colder process.

    bert_score.score loads its model inside the call, so each of our cold rounds starts with the loaders'
    process cache cleared (it loads the same model) and a fresh embedding cache; both run once on 2 pairs
    first so neither pays first-call imports. After the rounds, ours runs warm (every embedding cached) and
    on a cache holding only the sources (as for a second strategy rewriting the same corpus)."""
    import bert_score

    from tasks.models import loaders

    spec = resolve_model("token_encoder")
    with fresh_cache() as path:  # first-call imports and initialisation, for both sides, untimed
        bertscore(cands[:2], refs[:2], spec=spec, layer=6, cache=EmbeddingCache(path))
        bert_score.score(cands[:2], refs[:2], model_type=spec.path, num_layers=6, batch_size=64)
    ours_rounds, reference_rounds = [], []
    for _ in range(rounds):
        with fresh_cache() as path:
            loaders.load_token_encoder.cache_clear()
            loaders.load_tokenizer.cache_clear()
            cache = EmbeddingCache(path)
            score = functools.partial(bertscore, cands, refs, spec=spec, layer=6, cache=cache, batch_size=64)
            ours_s, ours = timed(score)
            ours_rounds.append(ours_s)
            if len(ours_rounds) == rounds:
                warm_s, _ = timed(score)
            cache.close()
        ref_s, (_, _, f_ref) = timed(lambda: bert_score.score(cands, refs, model_type=spec.path, num_layers=6,
                                                              batch_size=64))
        reference_rounds.append(ref_s)
    with fresh_cache() as path, EmbeddingCache(path) as cache:
        token_embeddings(refs, spec, 6, cache=cache)
        sources_s, _ = timed(lambda: bertscore(cands, refs, spec=spec, layer=6, cache=cache, batch_size=64))
    diff = np.abs(ours.scores["bertscore_f1"].to_numpy() - f_ref.numpy().astype(np.float64))
    return BertScoreComparison(reference_rounds, ours_rounds, warm_s, sources_s, float(diff.max()))


def suite_texts(corpus: pd.DataFrame, synthetic: pd.DataFrame) -> list[str]:
    """The distinct texts the suite embeds: every corpus text and every ok synthetic text."""
    ok = synthetic.loc[synthetic["status"] == STATUS_OK, "text"].fillna("").astype(str)
    return list(dict.fromkeys([*corpus["text"].astype(str), *ok]))


def plain_forward(texts: Sequence[str], batch_size: int = 64) -> float:
    """Seconds of the reference: the token encoder (loaded beforehand, untimed) over ``texts`` with its
    tokenizer's padding, batches of ``batch_size`` sorted by length, inference mode; nothing kept."""
    import torch

    from tasks.models.loaders import load_token_encoder

    tokenizer, model = load_token_encoder(resolve_model("token_encoder"))
    ordered = sorted(texts, key=len, reverse=True)
    start = time.perf_counter()
    with torch.inference_mode():
        for b in range(0, len(ordered), batch_size):
            batch = tokenizer(ordered[b:b + batch_size], padding=True, truncation=True, return_tensors="pt")
            model(**batch.to(model.device))
        if model.device.type == "cuda":  # the last batch's kernels are queued, not done
            torch.cuda.synchronize()
    return time.perf_counter() - start


def own_forward(texts: Sequence[str], budget: int | None = None) -> float:
    """Seconds of our forward over ``texts`` (model loaded beforehand, untimed): layer-6 token matrices with
    no cache, in batches within ``budget`` padded tokens (default: the device's)."""
    spec = resolve_model("token_encoder")
    token_embeddings(texts[:2], spec, 6)
    return timed(lambda: token_embeddings(texts, spec, 6, budget=budget))[0]


def budget_sweep(texts: Sequence[str], budgets: Sequence[int]) -> int:
    """Print our forward's seconds at each token budget, fastest of two runs, against the plain forward
    reference; returns the fastest budget."""
    print(f"\nforward of MiniLM over {len(texts)} distinct texts by padded-token budget per batch "
          f"(fastest of 2; plain forward reference, batch 64: {plain_forward(texts):.2f} s):")
    seconds = {b: min(own_forward(texts, b) for _ in range(2)) for b in budgets}
    for b, sec in seconds.items():
        print(f"  budget {b:>6}: {sec:6.2f} s")
    return min(seconds, key=seconds.__getitem__)


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_whole(corpus: pd.DataFrame, synthetic: pd.DataFrame, selected: Sequence[str],
               options: suite.MetricOptions, client: Any) -> tuple[float, float]:
    """(whole suite on a fresh cache, plain forward reference) seconds, measured back to back."""
    with fresh_cache() as path:
        suite_s, _ = timed(lambda: suite.score_strategy(corpus, synthetic, selected, options, path, client=client))
    return suite_s, plain_forward(suite_texts(corpus, synthetic))


def scale_point(n: int, data_dir: Path, selected: Sequence[str]) -> None:
    """One size of the scale curve (run in a child process): prints ``POINT pairs= suite_s= forward_s=
    peak_rss_mb=``."""
    corpus, synthetic = build_pairs(n, data_dir)
    options = metric_options()
    warm_up(corpus, synthetic, selected, options, None)
    suite_s, forward_s = time_whole(corpus, synthetic, selected, options, None)
    print(f"POINT pairs={n} suite_s={suite_s:.3f} forward_s={forward_s:.3f} peak_rss_mb={peak_rss_mb():.0f}",
          flush=True)


def scale_curve(sizes: Sequence[int], data_dir: Path, metrics: Sequence[str]) -> list[dict[str, float]]:
    """Run :func:`scale_point` for each size in a fresh process; prints a row per size and returns them."""
    points = []
    print("\nscale curve (each size in its own process; suite and forward reference back to back):")
    print(f"{'pairs':>7} {'suite s':>9} {'pairs/s':>9} {'forward s':>10} {'suite/fwd':>10} {'peak RSS MiB':>13}")
    for n in sizes:
        cmd = [sys.executable, __file__, "--scale-point", "--pairs", str(n), "--data-dir", str(data_dir),
               "--metrics", *metrics]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        line = next((x for x in out.stdout.splitlines() if x.startswith("POINT ")), None)
        if out.returncode != 0 or line is None:
            raise SystemExit(f"--pairs {n}: the scale point failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
        point = {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
        points.append(point)
        print(f"{n:>7} {point['suite_s']:9.2f} {n / point['suite_s']:9.1f} {point['forward_s']:10.2f} "
              f"{point['suite_s'] / point['forward_s']:10.2f} {point['peak_rss_mb']:13.0f}", flush=True)
    return points


def fitted_exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """Slope of log(seconds) against log(size): 1 = linear, 2 = quadratic."""
    return float(np.polyfit(np.log(sizes), np.log(seconds), 1)[0])


def print_table(n: int, timings: list[Timing], whole: Timing) -> None:
    """metric | level | seconds | pairs/s | shares embeddings with."""
    print(f"\n{'metric':<44} {'level':<12} {'seconds':>9} {'pairs/s':>10}  shared embeddings (in one call)")
    print("-" * 110)
    for t in timings:
        name = ", ".join(t.metrics) if len(t.metrics) > 1 else t.label
        print(f"{name:<44} {t.level:<12} {t.seconds:9.2f} {n / t.seconds:10.1f}  "
              f"{SHARED_EMBEDDINGS.get(t.label, '-')}")
    print("-" * 110)
    total = sum(t.seconds for t in timings)
    print(f"{'sum of the separate calls':<44} {'':<12} {total:9.2f} {n / total:10.1f}")
    print(f"{'whole suite, one call (' + str(len(whole.metrics)) + ' metrics)':<44} {'all':<12} "
          f"{whole.seconds:9.2f} {n / whole.seconds:10.1f}  embeddings computed once, shared")


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments, build the pairs, run the timings and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[500],
                        help="number of (source, synthetic) pairs; several sizes = the scale curve")
    parser.add_argument("--metrics", nargs="+", default=list(suite.ALL_METRICS),
                        help="metric names (default: all); 'none' skips the suite timings")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the datasets are")
    parser.add_argument("--dask", action=argparse.BooleanOptionalAction, default=False,
                        help="score on an in-process Dask LocalCluster (default: sequential)")
    parser.add_argument("--no-bertscore-ratio", dest="ratio", action="store_false",
                        help="skip the bert_score comparison")
    parser.add_argument("--per-metric", action=argparse.BooleanOptionalAction, default=True,
                        help="also time each metric alone (single size only)")
    parser.add_argument("--token-budgets", type=int, nargs="+", default=[],
                        help="also time our forward at each padded-token budget per batch")
    parser.add_argument("--scale-point", action="store_true", help=argparse.SUPPRESS)  # one size, in a child
    args = parser.parse_args(argv)
    selected = [] if args.metrics == ["none"] else suite.check_metric_names(args.metrics)
    sizes = sorted(set(args.pairs))
    if args.scale_point:
        scale_point(sizes[0], args.data_dir, selected)
        return
    args.pairs = sizes[0]

    import torch

    print(f"synthugc metrics benchmark: {args.pairs} pairs, stymask synthetic side, "
          f"{'dask (local threads)' if args.dask else 'sequential'}")
    print(f"python {platform.python_version()}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"{os.cpu_count()} cpus, load average at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    build_s, (corpus, synthetic) = timed(lambda: build_pairs(args.pairs, args.data_dir))
    n_groups = corpus["group_id"].nunique()
    print(f"pairs built in {build_s:.1f} s: {(corpus['doc_id'].str.startswith('conventions')).sum()} "
          f"convention sentences + {corpus['doc_id'].str.startswith('rotten').sum()} Rotten Tomatoes snippets, "
          f"{n_groups} groups")

    if args.ratio:
        cands = synthetic["text"].astype(str).tolist()
        refs = corpus["text"].astype(str).tolist()
        cmp = compare_bertscore(cands, refs)
        ratio = cmp.reference_s / cmp.ours_s
        print(f"\nBERTScore, {args.pairs} pairs (MiniLM-L6 layer 6, batch 64, no idf):")
        print(f"  reference  {REFERENCE}: median {cmp.reference_s:8.2f} s  {args.pairs / cmp.reference_s:8.1f} "
              f"pairs/s  (rounds {', '.join(f'{x:.2f}' for x in cmp.reference_rounds)} s)")
        print(f"  ours       tasks.metrics.meaning.bertscore, fresh cache (incl. model load): median "
              f"{cmp.ours_s:8.2f} s  {args.pairs / cmp.ours_s:8.1f} pairs/s  (rounds {', '.join(f'{x:.2f}' for x in cmp.ours_rounds)} s)")
        print(f"  ratio      bert_score / ours = {ratio:.2f}x (target >= 1.5) {'OK' if ratio >= 1.5 else 'BELOW'}")
        print(f"  ours warm  second call, embeddings cached: {cmp.ours_warm_s:8.2f} s  "
              f"{args.pairs / cmp.ours_warm_s:8.1f} pairs/s")
        print(f"  ours       sources already cached (a 2nd strategy on the same corpus): "
              f"{cmp.ours_sources_cached_s:8.2f} s  {args.pairs / cmp.ours_sources_cached_s:8.1f} pairs/s, "
              f"ratio {cmp.reference_s / cmp.ours_sources_cached_s:.2f}x")
        agree = cmp.max_abs_f1 <= 1e-4 and not math.isnan(cmp.max_abs_f1)
        print(f"  agreement  max |F1 ours - bert_score| = {cmp.max_abs_f1:.2e} "
              f"({'within' if agree else 'NOT within'} 1e-4)")
    speedup = cmp.reference_s / cmp.ours_s if args.ratio else math.nan
    best_budget = budget_sweep(suite_texts(corpus, synthetic), args.token_budgets) if args.token_budgets else 0
    pairs_per_s = over_forward = over_own = exponent = math.nan
    if selected and len(sizes) > 1:
        points = scale_curve(sizes, args.data_dir, selected)
        exponent = fitted_exponent(sizes, [pt["suite_s"] for pt in points])
        pairs_per_s = sizes[0] / points[0]["suite_s"]
        over_forward = points[0]["suite_s"] / points[0]["forward_s"]
        print(f"fitted exponent of suite seconds vs pairs ({', '.join(map(str, sizes))}): {exponent:.2f} "
              f"(1 = linear); forward reference alone: "
              f"{fitted_exponent(sizes, [pt['forward_s'] for pt in points]):.2f}")
    elif selected:
        with contextlib.ExitStack() as stack:
            client = None
            if args.dask:
                from tasks.parallel import dask_client

                client = stack.enter_context(dask_client())
            options = metric_options()
            print(f"model warm-up: {warm_up(corpus, synthetic, selected, options, client):.1f} s")
            suite_s, forward_s = time_whole(corpus, synthetic, selected, options, client)
            pairs_per_s, over_forward = args.pairs / suite_s, suite_s / forward_s
            n_texts = len(suite_texts(corpus, synthetic))
            print(f"\nwhole suite, one call, fresh cache ({len(selected)} metrics): {suite_s:8.2f} s  "
                  f"{pairs_per_s:8.1f} pairs/s (target >= 60)")
            print(f"reference  one plain forward pass of MiniLM over the same {n_texts} distinct texts "
                  f"(batch 64, sorted by length, model loaded): {forward_s:8.2f} s")
            print(f"ratio      suite / forward = {over_forward:.2f}x (target <= 1.5) "
                  f"{'OK' if over_forward <= 1.5 else 'ABOVE'}; peak RSS {peak_rss_mb():.0f} MiB")
            own_s = own_forward(suite_texts(corpus, synthetic))
            over_own = suite_s / own_s
            print(f"our forward over the same texts (token_embeddings, batches within the device's token budget, "
                  f"no cache): {own_s:8.2f} s; suite / our forward = {over_own:.2f}x")
            if args.per_metric:
                print("each metric alone, each on a fresh embedding cache:")
                timings = time_each_metric(corpus, synthetic, selected, options, client)
                print_table(args.pairs, timings, Timing("whole suite", tuple(selected), "all", suite_s))

    print(f"\nload average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    record("metrics", f"pairs={args.pairs} pairs_per_s={pairs_per_s:.1f} suite_over_forward={over_forward:.2f} "
          f"suite_over_own_forward={over_own:.2f} bertscore_speedup={speedup:.2f} exponent={exponent:.2f} "
          f"best_token_budget={best_budget} load={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
