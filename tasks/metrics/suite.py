"""The metric suite: every intrinsic metric by name and level, run for one strategy's synthetic table.

Levels:

- sample: one score per (source, synthetic) pair; scored in shards (on Dask when a client is given);
- distribution: one number per (real set, synthetic set);
- bag: one number per group (context, conversation or user; ``bag_group``), summarised as the mean over groups.

"Real" for distribution and bag metrics is every source text of the corpus being rewritten (the same
set for every strategy, so strategies are comparable); "synthetic" is the strategy's ``ok`` outputs.
Sample scores of failed rows are NaN with the generation failure as the reason. Embeddings go through
one shared :class:`~tasks.models.embeddings.EmbeddingCache`, so BERTScore and FBD share token
embeddings, and FBD-SBERT, FCSD, CPS and the SBERT bag metrics share sentence embeddings.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.corpus.schema import STATUS_OK
from tasks.metrics import bags as bag_metrics
from tasks.metrics import catalogue
from tasks.metrics.base import DistributionScore, reason_column
from tasks.models.embeddings import EmbeddingCache, embed_once
from tasks.models.loaders import import_model_libraries
from tasks.models.registry import ModelSpec
from tasks.parallel import map_shards, prepare_workers, split_even
from tasks.scores import (
    DISTRIBUTIONS,
    METAEVAL_ROWS,
    METAEVAL_SUMMARY,
    METRIC_CORRELATIONS,
    SAMPLE_SCORES,
    SCORES,
    score_frame,
    variant_epsilons,
)

#: The catalogue levels the suite computes.
INTRINSIC_LEVELS: tuple[str, ...] = ("sample", "variant", "distribution", "bag", "pair")

#: Views of the catalogue (tasks.metrics.catalogue) at import, for callers that list the built-in metrics; the
#: dispatch below reads the catalogue itself, so a metric registered later is computed too.
SAMPLE_METRICS: tuple[str, ...] = catalogue.names("sample")
#: Diversity among the variants of one input (needs several outputs per doc_id).
VARIANT_METRICS: tuple[str, ...] = catalogue.names("variant")
DISTRIBUTION_METRICS: tuple[str, ...] = catalogue.names("distribution")
BAG_METRICS: tuple[str, ...] = catalogue.names("bag")
ALL_METRICS: tuple[str, ...] = catalogue.names(*INTRINSIC_LEVELS)
#: What a run computes when the config does not list metrics.
DEFAULT_METRICS: tuple[str, ...] = ALL_METRICS

SAMPLE_ID_COLUMNS = list(SAMPLE_SCORES.columns)


@dataclass(frozen=True)
class MetricOptions:
    """Every choice the metrics take from the config (models, layers, classifiers, bags)."""

    token_encoder: ModelSpec | None = None
    sentence_encoder: ModelSpec | None = None
    style_encoder: str | None = None  # a value for tasks.models.style_encoders.load_style_encoder
    pos_tagger: ModelSpec | None = None
    bertscore_layer: int | None = None
    fbd_layer: int | None = None  # None: the token encoder's last layer (Xiang et al.)
    fbd_pooling: str = "cls"
    bertscore_idf: bool = False
    bertscore_baseline: str | None = None
    transfer_classifier: str = "subjectivity"  # subjectivity | vader | a sequence classifier folder or hub id
    transfer_target: str | None = None  # default: objective (subjectivity), neutral (vader), class 0 (others)
    cps_mask: str | None = None
    cps_threshold: float = 0.3
    bag_group: str = "group_id"
    seed: int = 0
    shard_size: int = 2000


@dataclass
class SuiteResult:
    """One strategy's scores: per pair, per distribution (incl. sample means), and plot series."""

    sample_scores: pd.DataFrame
    distribution_scores: pd.DataFrame
    distributions: pd.DataFrame
    signatures: dict[str, str] = field(default_factory=dict)


def check_metric_names(names: Sequence[str]) -> list[str]:
    """The names, validated against the catalogue (ValueError naming the first unknown one and the known ones)."""
    return catalogue.check_names(names, INTRINSIC_LEVELS)


def sample_groups(names: Sequence[str]) -> list[tuple[Callable[..., Any], list[str]]]:
    """The requested sample metrics grouped by their compute function (one call per group), in catalogue order."""
    groups: dict[Callable[..., Any], list[str]] = {}
    for metric in catalogue.metrics("sample"):
        if metric.name in names:
            groups.setdefault(metric.compute, []).append(metric.name)  # type: ignore[arg-type]
    return list(groups.items())


def _options_read(names: Sequence[str]) -> set[str]:
    """The suite options (models, layers, taggers) the named metrics read, from their catalogue entries."""
    return {option for name in names if (metric := catalogue.lookup(name)) for option in metric.options}


#: The shared, lazily loaded resources each metric reads (loaded by :func:`prepare_metrics` before a fan-out).
def prepare_metrics(names: Sequence[str], options: MetricOptions, cache_path: str) -> None:
    """Load, in this process, every shared resource the named metrics read (models through the loaders'
    cache, the TextBlob/VADER lexicons, the spaCy tagger, the embedding cache file), so the shards and
    metric tasks that start together on one worker's threads find them loaded instead of racing to load
    them. Each worker process runs it once before the fan-out (:func:`tasks.parallel.prepare_workers`)."""
    from tasks.models.loaders import load_sentence_encoder, load_token_encoder
    from tasks.models.registry import resolve_model
    from tasks.models.style_encoders import resolve_tagger

    reads = _options_read(names)
    with EmbeddingCache(cache_path) as cache:
        len(cache)  # creates the file and switches it to WAL once, before concurrent connections
    if "token_encoder" in reads:
        load_token_encoder(options.token_encoder or resolve_model("token_encoder"))
    if "sentence_encoder" in reads:
        load_sentence_encoder(options.sentence_encoder or resolve_model("sentence_encoder"))
    if "style_encoder" in reads:
        catalogue.style_encoder(options)
    if reads & {"style_encoder", "pos_tagger"}:
        resolve_tagger(options.pos_tagger)
    if "transfer_classifier" in reads:
        catalogue.transfer_classifier(options.transfer_classifier)
    if catalogue.reads_pii(names):
        from tasks.privacy.pii import prepare

        prepare()


def prefetch_embeddings(texts: Sequence[str], names: Sequence[str], options: MetricOptions,
                        cache_path: str, yield_core: Callable[[], bool] | None = None) -> int:
    """Embed every distinct text the named metrics will read, before they run: the token layers of BERTScore
    and FBD and the sentence vectors (CPS, FBD-SBERT, FCSD, *_sbert) in one forward pass per text when both
    roles are one model (:func:`tasks.models.embeddings.embed_once`, which leaves a core free while
    ``yield_core()`` is true). The metrics then find them cached. Returns the number of texts embedded by
    the shared pass."""
    from tasks.metrics.frechet import last_layer
    from tasks.metrics.meaning import bertscore_layer
    from tasks.models.registry import resolve_model

    reads = _options_read(names)
    token_spec = None
    layers: list[int] = []
    if reads & {"bertscore_layer", "fbd_layer"}:  # resolved only when a token metric runs
        token_spec = options.token_encoder or resolve_model("token_encoder")
        layers = [*([bertscore_layer(token_spec, options.bertscore_layer)] if "bertscore_layer" in reads else []),
                  *([options.fbd_layer if options.fbd_layer is not None else last_layer(token_spec)]
                    if "fbd_layer" in reads else [])]
    sentence_spec = (options.sentence_encoder or resolve_model("sentence_encoder")) if "sentence_encoder" in reads else None
    if not texts or (not layers and sentence_spec is None):
        return 0
    from filelock import FileLock

    Path(cache_path).parent.mkdir(parents=True, exist_ok=True)
    # Strategies scored side by side share the real texts: the first embeds them, the others wait on the
    # cache's lock and embed only their own outputs, instead of all of them computing the same vectors.
    with FileLock(f"{cache_path}.prefetch.lock"), EmbeddingCache(cache_path) as cache:
        return embed_once(texts, token_spec=token_spec, layers=layers,
                          sentence_spec=sentence_spec, cache=cache, yield_core=yield_core)


def prefetch_parses(pairs: pd.DataFrame, names: Sequence[str], options: MetricOptions, cache_path: str) -> int:
    """Scan the texts the PII metrics read before the metrics run, and keep the POS tags of those same spaCy
    parses for the POS and style metrics when they use the same spaCy model (one parse per text instead
    of two). Returns the number of texts whose tags were kept."""
    if not catalogue.reads_pii(names):
        return 0
    from tasks.metrics.pii import scanned_texts
    from tasks.models.style_encoders import PosTagRecorder, resolve_tagger, same_pipeline
    from tasks.privacy import pii

    reads = _options_read(names)
    recorder = None
    if reads & {"pos_tagger", "style_encoder"}:
        tagger, tagger_id = resolve_tagger(options.pos_tagger)
        if same_pipeline(tagger, pii.pipeline()):
            recorder = PosTagRecorder(pii.pipeline(), tagger_id)
    with EmbeddingCache(cache_path) as cache:
        pii.PiiDetector().detect(scanned_texts(pairs), cache=cache, on_doc=recorder)
        return recorder.save(cache) if recorder is not None else 0


def score_sample_shard(pairs: pd.DataFrame, names: Sequence[str], options: MetricOptions,
                       cache_path: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """Sample-level scores of one shard of pairs (columns doc_id, strategy, variant, status, source, text).

    Runs where the shard is (a Dask worker or this process); loads models through the process cache."""
    out = pairs[SAMPLE_ID_COLUMNS].reset_index(drop=True).copy()
    ok = (pairs["status"] == STATUS_OK).to_numpy()
    failure = pairs["reason"].astype("string").to_numpy() if "reason" in pairs.columns else None
    sources = pairs["source"].astype(str).to_numpy()[ok].tolist()
    outputs = pairs["text"].astype(str).to_numpy()[ok].tolist()
    signatures: dict[str, str] = {}
    cache = EmbeddingCache(cache_path)
    try:
        for compute, wanted in sample_groups(names):
            group = compute.__name__.lstrip("_")
            result = compute(sources, outputs, options, cache) if sources else None
            for col in wanted:
                values = np.full(len(out), np.nan)
                reasons = np.full(len(out), None, dtype=object)
                if failure is not None:
                    reasons[~ok] = [f"generation failed: {r}" for r in failure[~ok]]
                if result is not None:
                    values[ok] = result.scores[col].to_numpy(dtype=float)
                    own_reason = next((c for c in (reason_column(col), f"{group}_reason")
                                       if c in result.scores.columns), None)
                    if own_reason:
                        reasons[ok] = result.scores[own_reason].astype(object).where(
                            result.scores[own_reason].notna(), None).to_numpy()
                    signatures[col] = result.signatures[col]
                out[col] = values
                out[reason_column(col)] = pd.Series(reasons, dtype="string")
    finally:
        cache.close()
    return out, signatures


def _variant_scores(synthetic: pd.DataFrame, names: Sequence[str]) -> tuple[pd.DataFrame, dict[str, str]]:
    """self-BLEU among the ok outputs of each doc_id across the strategy's variants."""
    wanted = [m for m in catalogue.names("variant") if m in names]
    ok = synthetic[synthetic["status"] == STATUS_OK]
    doc_ids = list(dict.fromkeys(synthetic["doc_id"]))
    outputs = ok.groupby("doc_id", sort=False)["text"].agg(list)
    computes = {catalogue.CATALOGUE[m].compute for m in wanted}
    if len(computes) != 1:
        raise ValueError(f"variant metrics {wanted} need one shared compute function")
    result = computes.pop()([outputs.get(d, []) for d in doc_ids])
    frame = pd.DataFrame({"doc_id": doc_ids})
    for metric in wanted:
        frame[metric] = result.scores[metric].to_numpy(dtype=float)
        frame[reason_column(metric)] = result.scores["self_bleu_reason"].astype("string").to_numpy()
    return frame, {m: result.signatures[m] for m in wanted}


def score_distribution(metric: str, real: list[str], synthetic: list[str], options: MetricOptions,
                       cache_path: str) -> DistributionScore:
    """One distribution-level metric of the real set against the synthetic set."""
    compute = catalogue.CATALOGUE[metric].compute
    assert compute is not None
    with EmbeddingCache(cache_path) as cache:
        return compute(real, synthetic, options, cache)


def score_bags(reference: pd.DataFrame, generated: pd.DataFrame, names: Sequence[str], options: MetricOptions,
               cache_path: str) -> pd.DataFrame:
    """Bag metrics per group of ``options.bag_group`` (one call, so corpus-level IDF stays exact)."""
    group = options.bag_group
    if group not in reference.columns or reference[group].isna().all():
        group = "doc_id"  # a post-level corpus has no groups: every document is its own bag
    with EmbeddingCache(cache_path) as cache:
        return catalogue.CATALOGUE[names[0]].compute(reference, generated, group_col=group, metrics=list(names),
                                      sentence_spec=options.sentence_encoder, cache=cache, seed=options.seed)


def _summary_row(strategy: str, variant: str, level: str, metric: str, values: np.ndarray, n_failed: int,
                 signature: str, reason: str | None) -> dict[str, Any]:
    finite = values[~np.isnan(values)]
    return {"strategy": strategy, "variant": variant, "level": level, "metric": metric,
            "value": float(finite.mean()) if len(finite) else np.nan,
            "std": float(finite.std(ddof=1)) if len(finite) > 1 else np.nan,
            "median": float(np.median(finite)) if len(finite) else np.nan,
            "n": len(finite), "n_failed": n_failed, "signature": signature,
            "reason": reason if not len(finite) else None}


def score_strategy(corpus: pd.DataFrame, synthetic: pd.DataFrame, names: Sequence[str], options: MetricOptions,
                   cache_path: str | Path, client: Any = None) -> SuiteResult:
    """Every requested metric for one strategy's synthetic table (all its variants) against the corpus.

    With a Dask ``client``, sample shards, distribution metrics and bag metrics run as parallel tasks;
    without one they run here, in order. The numbers are the same either way."""
    names = check_metric_names(names)
    cache_path = str(cache_path)
    sources = corpus[["doc_id", "text"]].rename(columns={"text": "source"})
    pairs = synthetic.merge(sources, on="doc_id", how="left", validate="many_to_one")
    missing = pairs["source"].isna()
    if missing.any():
        raise ValueError(f"synthetic doc_id '{pairs.loc[missing, 'doc_id'].iloc[0]}' is not in the corpus")
    sample_names = [n for n in names if n in catalogue.names("sample")]
    variant_names = [n for n in catalogue.names("variant") if n in names]
    dist_names = [n for n in names if n in catalogue.names("distribution")]
    bag_names = [n for n in names if n in catalogue.names("bag")]
    real = corpus["text"].astype(str).tolist()
    variants = list(dict.fromkeys(synthetic["variant"]))
    ok_by_variant = {v: synthetic[(synthetic["variant"] == v) & (synthetic["status"] == STATUS_OK)] for v in variants}

    ok_outputs = synthetic.loc[synthetic["status"] == STATUS_OK, "text"].fillna("").astype(str).tolist()
    # spaCy's parses (one thread) beside the encoder's forward passes (torch's threads, GIL released), which
    # leave spaCy its core until it is done
    with ThreadPoolExecutor(1) as pool:
        parses = pool.submit(prefetch_parses, pairs, names, options, cache_path)
        prefetch_embeddings([*real, *ok_outputs], names, options, cache_path,
                            yield_core=lambda: not parses.done())
        parses.result()
    shards = [pairs.iloc[s] for s in split_even(len(pairs), max(1, -(-len(pairs) // options.shard_size)))]
    dist_jobs = [(v, m) for v in variants for m in dist_names]
    if client is not None:
        import_model_libraries()
        prepare_workers(client, functools.partial(prepare_metrics, names, options, cache_path))
        sample_future = client.map(score_sample_shard, shards, names=sample_names, options=options,
                                   cache_path=cache_path, pure=False) if sample_names else []
        dist_futures = [client.submit(score_distribution, m, real, ok_by_variant[v]["text"].astype(str).tolist(),
                                      options, cache_path, pure=False) for v, m in dist_jobs]
        bag_futures = [client.submit(score_bags, corpus, ok_by_variant[v], bag_names, options, cache_path,
                                     pure=False) for v in variants] if bag_names else []
        sample_parts = client.gather(sample_future) if sample_names else []
        dist_scores = client.gather(dist_futures)
        bag_tables = client.gather(bag_futures)
    else:
        sample_parts = map_shards(_Sequential(), score_sample_shard, shards, names=sample_names, options=options,
                                  cache_path=cache_path) if sample_names else []
        dist_scores = [score_distribution(m, real, ok_by_variant[v]["text"].astype(str).tolist(), options,
                                          cache_path) for v, m in dist_jobs]
        bag_tables = [score_bags(corpus, ok_by_variant[v], bag_names, options, cache_path)
                      for v in variants] if bag_names else []

    signatures: dict[str, str] = {}
    if sample_parts:
        samples = pd.concat([part for part, _ in sample_parts], ignore_index=True)
        for _, sigs in sample_parts:
            signatures.update(sigs)
    else:
        samples = pairs[SAMPLE_ID_COLUMNS].reset_index(drop=True).copy()
    if variant_names:
        variant_frame, variant_sigs = _variant_scores(synthetic, names)
        samples = samples.merge(variant_frame, on="doc_id", how="left")
        signatures.update(variant_sigs)

    rows, series = [], []
    strategy = str(synthetic["strategy"].iloc[0]) if len(synthetic) else ""
    for variant in variants:
        part = samples[samples["variant"] == variant]
        n_failed = int((part["status"] != STATUS_OK).sum())
        for metric in [*sample_names, *variant_names]:
            if metric not in part.columns:
                continue
            reasons = part[reason_column(metric)].dropna()
            rows.append(_summary_row(strategy, variant, catalogue.SUMMARY_LEVEL["sample"], metric, part[metric].to_numpy(dtype=float),
                                     n_failed, signatures.get(metric, ""),
                                     str(reasons.iloc[0]) if len(reasons) else "no scored pairs"))
    for (variant, _metric), score in zip(dist_jobs, dist_scores, strict=True):
        n_failed = int((synthetic.loc[synthetic["variant"] == variant, "status"] != STATUS_OK).sum())
        rows.append({"strategy": strategy, "variant": variant, "level": catalogue.SUMMARY_LEVEL["distribution"], "metric": score.metric,
                     "value": score.value, "std": np.nan, "median": np.nan, "n": len(ok_by_variant[variant]),
                     "n_failed": n_failed, "signature": score.signature, "reason": score.reason})
        signatures[score.metric] = score.signature
        series += [{"strategy": strategy, "variant": variant, "metric": score.metric, "series": name,
                    "values": [float(x) for x in values]} for name, values in score.distributions.items()]
    for variant, table in zip(variants if bag_names else [], bag_tables, strict=True):
        n_failed = int((synthetic.loc[synthetic["variant"] == variant, "status"] != STATUS_OK).sum())
        group_col = table.columns[0]
        for score in bag_metrics.summarise_bags(table, group_col=group_col):
            agg = bag_metrics.aggregate_bags(score.distributions.get("per_group", []))
            rows.append({"strategy": strategy, "variant": variant, "level": catalogue.SUMMARY_LEVEL["bag"],
                         "metric": score.metric, "value": score.value, "std": agg.std, "median": agg.median,
                         "n": agg.n, "n_failed": n_failed, "signature": score.signature, "reason": score.reason})
            signatures[score.metric] = score.signature
    pair_names = [n for n in names if n in catalogue.names("pair")]
    for compute in dict.fromkeys(catalogue.lookup(n).compute for n in pair_names):
        wanted = [n for n in pair_names if catalogue.lookup(n).compute is compute]
        with EmbeddingCache(cache_path) as cache:
            pair_samples, pair_rows = compute(pairs, wanted, cache)
        samples = samples.merge(pair_samples, on=["doc_id", "variant"], how="left")
        rows += pair_rows.assign(level=catalogue.SUMMARY_LEVEL["pair"]).to_dict("records")
        signatures.update(dict(zip(pair_rows["metric"], pair_rows["signature"], strict=True)))
    epsilons = variant_epsilons(synthetic)
    for row in rows:
        row["epsilon"] = epsilons.get(str(row["variant"]), np.nan)
    return SuiteResult(sample_scores=score_frame(samples, SAMPLE_SCORES), distribution_scores=score_frame(rows, SCORES),
                       distributions=score_frame(series, DISTRIBUTIONS), signatures=signatures)


class _Sequential:
    """A stand-in for a Dask client that runs ``map`` here, in order (no cluster needed)."""

    def map(self, func: Callable[..., Any], items: list[Any], pure: bool = False, **kwargs: Any) -> list[Any]:
        return [func(item, **kwargs) for item in items]

    def gather(self, results: list[Any]) -> list[Any]:
        return results


def score_synthetic(corpus: pd.DataFrame, synthetic: pd.DataFrame, names: Sequence[str], options: MetricOptions,
                    cache_path: str | Path, client: Any = None) -> SuiteResult:
    """:func:`score_strategy` for every strategy in a synthetic table, concatenated."""
    parts = [score_strategy(corpus, part, names, options, cache_path, client=client)
             for _, part in synthetic.groupby("strategy", sort=True)]
    if not parts:
        raise ValueError("the synthetic table has no rows")
    signatures: dict[str, str] = {}
    for part in parts:
        signatures.update(part.signatures)
    return SuiteResult(
        sample_scores=pd.concat([p.sample_scores for p in parts], ignore_index=True),
        distribution_scores=pd.concat([p.distribution_scores for p in parts], ignore_index=True),
        distributions=pd.concat([p.distributions for p in parts], ignore_index=True),
        signatures=signatures,
    )


def strategy_metric_table(distribution_scores: pd.DataFrame) -> pd.DataFrame:
    """One row per (strategy, variant), one column per metric value (sample means, distribution, bag)."""
    if distribution_scores.empty:
        return pd.DataFrame()
    if "entity" in distribution_scores.columns:  # the per-type PII rows detail the overall one
        distribution_scores = distribution_scores[distribution_scores["entity"].isna()
                                                  | (distribution_scores["entity"] == "all")]
    wide = distribution_scores.set_index(["strategy", "variant", "metric"])["value"].unstack("metric")
    return wide.reset_index().rename_axis(columns=None)


def metric_correlation_matrix(distribution_scores: pd.DataFrame) -> pd.DataFrame:
    """Absolute Spearman correlations between metrics across the strategies of a run (seed 000 Fig. 5);
    NaN where fewer than 3 strategy variants have both values."""
    from tasks.metrics.metaeval import metric_correlations

    table = strategy_metric_table(distribution_scores)
    if table.empty:
        return pd.DataFrame()
    columns = [c for c in table.columns if c not in ("strategy", "variant")]
    matrix = metric_correlations(table.replace([np.inf, -np.inf], np.nan), columns).reset_index(names="metric")
    return score_frame(matrix, METRIC_CORRELATIONS)




def comparison_metrics(names: Sequence[str], options: MetricOptions,
                       cache_path: str | Path) -> dict[str, Callable[[Sequence[str], Sequence[str]], float]]:
    """Distribution- and bag-level metrics as ``f(reference_bag, generated_bag) -> float``, the form the
    meta-evaluation (seed 003 §4.2) ranks manipulated bags with. Sample-level metrics need aligned pairs,
    which manipulated bags (re-weighted, injected) do not have, so they are left out."""
    cache_path = str(cache_path)
    bag_options = replace(options, bag_group="group_id")

    def distribution(metric: str) -> Callable[[Sequence[str], Sequence[str]], float]:
        return lambda ref, gen: score_distribution(metric, list(ref), list(gen), options, cache_path).value

    names = check_metric_names(names)
    bag_names = [n for n in names if catalogue.CATALOGUE[n].level == "bag"]

    def scored_bags(ref: Sequence[str], gen: Sequence[str], metrics: list[str]) -> dict[str, float]:
        table = score_bags(pd.DataFrame({"group_id": "bag", "text": list(ref)}),
                           pd.DataFrame({"group_id": "bag", "text": list(gen)}), metrics, bag_options, cache_path)
        return {m: float(v) for m, v in zip(table["metric"], table["value"], strict=True)}

    @functools.lru_cache(maxsize=64)  # the metrics ask in turn for the same few bags: one call scores them all
    def every_bag_metric(ref: tuple[str, ...], gen: tuple[str, ...]) -> dict[str, float] | None:
        try:
            return scored_bags(ref, gen, bag_names)
        except Exception:  # one metric's error stays that metric's: each is then scored (and raises) alone
            return None

    def bag(metric: str) -> Callable[[Sequence[str], Sequence[str]], float]:
        def one_bag(ref: Sequence[str], gen: Sequence[str]) -> float:
            together = every_bag_metric(tuple(ref), tuple(gen))
            return together[metric] if together is not None else scored_bags(ref, gen, [metric])[metric]
        return one_bag

    out: dict[str, Callable[[Sequence[str], Sequence[str]], float]] = {}
    for name in names:
        level = catalogue.CATALOGUE[name].level
        if level == "distribution":
            out[name] = distribution(name)
        elif level == "bag":
            out[name] = bag(name)
    return out


@dataclass(frozen=True)
class MetaevalResult:
    """The meta-evaluation of a run's metrics: per-bag rows, their summary, and the metric correlations."""

    rows: pd.DataFrame
    summary: pd.DataFrame
    correlations: pd.DataFrame


def metaeval_metrics(texts: Sequence[str], names: Sequence[str], options: MetricOptions, cache_path: str | Path, *,
                     bag_size: int = 100, bags: int = 1, seed: int = 0) -> MetaevalResult:
    """Check the distribution- and bag-level metrics themselves (seed 003 §4.2) on reference bags drawn from
    ``texts``: Spearman of each metric with the true ranking of increasingly manipulated bags, and the
    metrics' correlations over the manipulated bags. Used by ``synthugc metaeval`` and the flow's stage."""
    from tasks.metrics.metaeval import metric_correlations, run_metaeval, summarize_metaeval

    functions = comparison_metrics(names, options, cache_path)
    if not functions:
        raise ValueError("none of these is a distribution- or bag-level metric: " + ", ".join(names))
    rows = run_metaeval(list(texts), functions, bag_size=bag_size, n_bags=bags, seed=seed,
                        higher_is_better={m: bool(catalogue.CATALOGUE[m].closer_is_higher) for m in functions},
                        prefetch=lambda bag_texts: prefetch_embeddings(bag_texts, list(functions), options,
                                                                       str(cache_path)))
    per_level = rows.explode("scores").assign(level=lambda f: f.groupby(["metric", "manipulation", "bag"]).cumcount())
    wide = per_level.pivot_table(index=["bag", "manipulation", "level"], columns="metric", values="scores",
                                 aggfunc="first")
    correlations = metric_correlations(wide.astype(float).replace([np.inf, -np.inf], np.nan)).reset_index(names="metric")
    rows = rows.assign(scores=rows["scores"].map(lambda v: [float(x) for x in v]))
    return MetaevalResult(rows=score_frame(rows, METAEVAL_ROWS), summary=score_frame(summarize_metaeval(rows),
                                                                                      METAEVAL_SUMMARY),
                          correlations=score_frame(correlations, METRIC_CORRELATIONS))
