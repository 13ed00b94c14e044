"""The metric suite: every intrinsic metric by name and level, run for one strategy's synthetic table.

Levels (the catalogue's, :mod:`tasks.metrics.catalogue`, each computed by the jobs of :data:`LEVEL_SCORERS`):

- sample: one score per (source, synthetic) pair; scored in shards;
- variant: one score per input, from the outputs of its variants (self-BLEU);
- distribution: one number per (real set, synthetic set);
- bag: one number per group (context, conversation or user; ``bag_group``), summarised as the mean over groups;
- pair: a strategy's aligned pairs as a whole (PII), per pair and per strategy.

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
from tasks.intervals import bootstrap
from tasks.metrics import bags as bag_metrics
from tasks.metrics import catalogue
from tasks.metrics.base import DistributionScore, MetricOptions, reason_column
from tasks.metrics.frechet import last_layer
from tasks.metrics.meaning import bertscore_layer
from tasks.metrics.metaeval import metric_correlations, run_metaeval, summarize_metaeval
from tasks.metrics.pii import scanned_texts
from tasks.models import pii
from tasks.models.embeddings import EmbeddingCache, embed_once
from tasks.models.loaders import (
    import_model_libraries,
    load_causal_lm,
    load_sentence_encoder,
    load_token_encoder,
)
from tasks.models.pii import prepare
from tasks.models.registry import resolve_model
from tasks.models.style_encoders import PosTagRecorder, resolve_tagger, same_pipeline
from tasks.parallel import prepare_workers, split_even
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
INTRINSIC_LEVELS: tuple[str, ...] = catalogue.COMPUTED_LEVELS

#: Views of the catalogue (tasks.metrics.catalogue) at import, for callers that list the built-in metrics; the
#: dispatch below reads the catalogue itself, so a metric registered later is computed too.
SAMPLE_METRICS: tuple[str, ...] = catalogue.names("sample")
#: Diversity among the variants of one input (needs several outputs per doc_id).
VARIANT_METRICS: tuple[str, ...] = catalogue.names("variant")
DISTRIBUTION_METRICS: tuple[str, ...] = catalogue.names("distribution")
BAG_METRICS: tuple[str, ...] = catalogue.names("bag")
ALL_METRICS: tuple[str, ...] = catalogue.names(*INTRINSIC_LEVELS)
#: What a run computes when the config does not list metrics.
DEFAULT_METRICS: tuple[str, ...] = tuple(m.name for m in catalogue.metrics(*INTRINSIC_LEVELS) if m.by_default)

SAMPLE_ID_COLUMNS = list(SAMPLE_SCORES.columns)


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


def compute_groups(level: str, names: Sequence[str]) -> list[tuple[Callable[..., Any], list[str]]]:
    """The requested metrics of ``level`` grouped by their compute function (one call per group), in catalogue order."""
    groups: dict[Callable[..., Any], list[str]] = {}
    for metric in catalogue.metrics(level):
        if metric.name in names:
            groups.setdefault(metric.compute, []).append(metric.name)  # type: ignore[arg-type]
    return list(groups.items())


def _reasons(scores: pd.DataFrame, metric: str, compute: Callable[..., Any]) -> np.ndarray:
    """Why each of ``metric``'s values in a compute function's result is NaN (``<metric>_reason``, else the
    function's ``<function>_reason``; None where defined or where the result has no reason column)."""
    group = compute.__name__.lstrip("_")
    column = next((c for c in (reason_column(metric), f"{group}_reason") if c in scores.columns), None)
    if column is None:
        return np.full(len(scores), None, dtype=object)
    return scores[column].astype(object).where(scores[column].notna(), None).to_numpy()


def _options_read(names: Sequence[str]) -> set[str]:
    """The suite options (models, layers, taggers) the named metrics read, from their catalogue entries."""
    return {option for name in names if (metric := catalogue.lookup(name)) for option in metric.options}


def _load_token_encoder(options: MetricOptions) -> None:
    load_token_encoder(options.token_encoder or resolve_model("token_encoder"))


def _load_sentence_encoder(options: MetricOptions) -> None:
    load_sentence_encoder(options.sentence_encoder or resolve_model("sentence_encoder"))


def _load_tagger(options: MetricOptions) -> None:
    resolve_tagger(options.pos_tagger)


#: What :func:`prepare_metrics` loads for each suite option that names a model or pipeline (transformers,
#: sentence-transformers, spaCy); the style encoder reads the tagger too.
MODEL_LOADS: dict[str, Callable[[MetricOptions], Any]] = {
    "token_encoder": _load_token_encoder,
    "sentence_encoder": _load_sentence_encoder,
    "style_encoder": lambda options: (catalogue.style_encoder(options), _load_tagger(options)),
    "pos_tagger": _load_tagger,
    "transfer_classifier": lambda options: catalogue.transfer_classifier(options.transfer_classifier),
    "fluency_lm": lambda options: load_causal_lm(catalogue.fluency_model(options)),
}


def loads_models(names: Sequence[str]) -> bool:
    """Whether the named metrics load a model (:data:`MODEL_LOADS`) or scan for PII (spaCy). Only then are
    the model libraries imported before a fan-out: the import takes seconds that model-free metrics (BLEU
    divergence, character JSD) need not pay."""
    return bool(_options_read(names) & MODEL_LOADS.keys()) or catalogue.reads_pii(names)


def prepare_metrics(names: Sequence[str], options: MetricOptions, cache_path: str) -> None:
    """Load, in this process, every shared resource the named metrics read (models through the loaders'
    cache, the TextBlob/VADER lexicons, the spaCy tagger, the embedding cache file), so the shards and
    metric tasks that start together on one worker's threads find them loaded instead of racing to load
    them. Each worker process runs it once before the fan-out (:func:`tasks.parallel.prepare_workers`)."""
    reads = _options_read(names)
    with EmbeddingCache(cache_path) as cache:
        len(cache)  # creates the file and switches it to WAL once, before concurrent connections
    for option, load in MODEL_LOADS.items():
        if option in reads:
            load(options)
    if catalogue.reads_pii(names):
        prepare()


def prefetch_embeddings(texts: Sequence[str], names: Sequence[str], options: MetricOptions,
                        cache_path: str, yield_core: Callable[[], bool] | None = None) -> int:
    """Embed every distinct text the named metrics will read, before they run: the token layers of BERTScore
    and FBD and the sentence vectors (CPS, FBD-SBERT, FCSD, *_sbert) in one forward pass per text when both
    roles are one model (:func:`tasks.models.embeddings.embed_once`, which leaves a core free while
    ``yield_core()`` is true). The metrics then find them cached. Returns the number of texts embedded by
    the shared pass."""
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
    with EmbeddingCache(cache_path) as cache:
        for compute, wanted in compute_groups("sample", names):
            result = compute(sources, outputs, options, cache) if sources else None
            for col in wanted:
                values = np.full(len(out), np.nan)
                reasons = np.full(len(out), None, dtype=object)
                if failure is not None:
                    reasons[~ok] = [f"generation failed: {r}" for r in failure[~ok]]
                if result is not None:
                    values[ok] = result.scores[col].to_numpy(dtype=float)
                    reasons[ok] = _reasons(result.scores, col, compute)
                    signatures[col] = result.signatures[col]
                out[col] = values
                out[reason_column(col)] = pd.Series(reasons, dtype="string")
    return out, signatures


def score_variants(doc_ids: Sequence[str], outputs_by_input: Sequence[Sequence[str]], names: Sequence[str],
                   options: MetricOptions, cache_path: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """Variant-level scores: one row per input (``doc_id``) from the ok outputs of its variants."""
    frame = pd.DataFrame({"doc_id": list(doc_ids)})
    signatures: dict[str, str] = {}
    with EmbeddingCache(cache_path) as cache:
        for compute, wanted in compute_groups("variant", names):
            result = compute([list(o) for o in outputs_by_input], options, cache)
            for metric in wanted:
                frame[metric] = result.scores[metric].to_numpy(dtype=float)
                frame[reason_column(metric)] = pd.Series(_reasons(result.scores, metric, compute), dtype="string")
                signatures[metric] = result.signatures[metric]
    return frame, signatures


def score_distribution(metric: str, real: list[str], synthetic: list[str], options: MetricOptions,
                       cache_path: str) -> DistributionScore:
    """One distribution-level metric of the real set against the synthetic set."""
    compute = catalogue.CATALOGUE[metric].compute
    assert compute is not None
    with EmbeddingCache(cache_path) as cache:
        return compute(real, synthetic, options, cache)


def score_bags(reference: pd.DataFrame, generated: pd.DataFrame, names: Sequence[str], options: MetricOptions,
               cache_path: str) -> pd.DataFrame:
    """Bag metrics per group of ``options.bag_group``, one call per compute function (so corpus-level IDF stays
    exact): one row per (group, metric), the group column first."""
    group = options.bag_group
    if group not in reference.columns or reference[group].isna().all():
        group = "doc_id"  # a post-level corpus has no groups: every document is its own bag
    grouped = replace(options, bag_group=group)
    with EmbeddingCache(cache_path) as cache:
        return pd.concat([compute(reference, generated, wanted, grouped, cache)
                          for compute, wanted in compute_groups("bag", names)], ignore_index=True)


def score_pairs(pairs: pd.DataFrame, names: Sequence[str], options: MetricOptions,
                cache_path: str) -> tuple[list[pd.DataFrame], pd.DataFrame]:
    """Pair-level scores of a strategy's aligned pairs: per compute function, its per-pair frame (``doc_id``,
    ``variant``, a column and a reason per metric), and the long rows of all of them."""
    with EmbeddingCache(cache_path) as cache:
        parts = [compute(pairs, wanted, options, cache) for compute, wanted in compute_groups("pair", names)]
    return [per_pair for per_pair, _ in parts], pd.concat([rows for _, rows in parts], ignore_index=True)


@dataclass(frozen=True)
class StrategyInputs:
    """One strategy's inputs as every level reads them: the corpus, the strategy's synthetic table (all its
    variants) and its rows aligned with their sources (``pairs``: the synthetic columns plus ``source``)."""

    corpus: pd.DataFrame
    synthetic: pd.DataFrame
    pairs: pd.DataFrame
    options: MetricOptions
    cache_path: str

    @functools.cached_property
    def real(self) -> list[str]:
        """Every source text of the corpus (the real set of the distribution metrics)."""
        return self.corpus["text"].astype(str).tolist()

    @functools.cached_property
    def variants(self) -> list[str]:
        return list(dict.fromkeys(self.synthetic["variant"]))

    @functools.cached_property
    def strategy(self) -> str:
        """The strategy's name ("" when the table has no rows)."""
        return str(self.synthetic["strategy"].iloc[0]) if len(self.synthetic) else ""

    def ok(self, variant: str) -> pd.DataFrame:
        """The variant's generated rows (status ok)."""
        return self.synthetic[(self.synthetic["variant"] == variant) & (self.synthetic["status"] == STATUS_OK)]

    def n_failed(self, variant: str) -> int:
        return int((self.synthetic.loc[self.synthetic["variant"] == variant, "status"] != STATUS_OK).sum())

    def row(self, variant: str, level: str, score: DistributionScore, n: int, std: float = np.nan,
            median: float = np.nan) -> dict[str, Any]:
        """One long score row of a level's number for a variant."""
        return {"strategy": self.strategy, "variant": variant,
                "level": catalogue.SUMMARY_LEVEL[level], "metric": score.metric, "value": score.value, "std": std,
                "median": median, "n": n, "n_failed": self.n_failed(variant), "signature": score.signature,
                "reason": score.reason}


@dataclass
class LevelScores:
    """What one level adds to a strategy's scores: per-row frames (merged into the sample table on ``on``;
    ``on=()``: aligned with the pairs' rows), long score rows, plot series and signatures."""

    columns: list[pd.DataFrame] = field(default_factory=list)
    on: tuple[str, ...] = ()
    rows: list[dict[str, Any]] = field(default_factory=list)
    series: list[dict[str, Any]] = field(default_factory=list)
    signatures: dict[str, str] = field(default_factory=dict)


#: One unit of work: a key the level reads back (the variant, or None), a function and its arguments.
Job = tuple[Any, Callable[..., Any], tuple[Any, ...]]


def _sample_jobs(s: StrategyInputs, names: list[str]) -> list[Job]:
    shards = split_even(len(s.pairs), max(1, -(-len(s.pairs) // s.options.shard_size)))
    return [(None, score_sample_shard, (s.pairs.iloc[shard], names, s.options, s.cache_path)) for shard in shards]


def _sample_scores(s: StrategyInputs, names: list[str], done: list[tuple[Any, Any]]) -> LevelScores:
    frame = pd.concat([part for _, (part, _) in done], ignore_index=True)
    return LevelScores(columns=[frame.drop(columns=SAMPLE_ID_COLUMNS)],
                       signatures={m: sig for _, (_, sigs) in done for m, sig in sigs.items()})


def _variant_jobs(s: StrategyInputs, names: list[str]) -> list[Job]:
    outputs = s.synthetic[s.synthetic["status"] == STATUS_OK].groupby("doc_id", sort=False)["text"].agg(list)
    doc_ids = list(dict.fromkeys(s.synthetic["doc_id"]))
    return [(None, score_variants, (doc_ids, [outputs.get(d, []) for d in doc_ids], names, s.options, s.cache_path))]


def _variant_scores(s: StrategyInputs, names: list[str], done: list[tuple[Any, Any]]) -> LevelScores:
    [(_, (frame, signatures))] = done
    return LevelScores(columns=[frame], on=("doc_id",), signatures=signatures)


def _distribution_jobs(s: StrategyInputs, names: list[str]) -> list[Job]:
    return [(v, score_distribution, (m, s.real, s.ok(v)["text"].astype(str).tolist(), s.options, s.cache_path))
            for v in s.variants for m in names]


def _distribution_scores(s: StrategyInputs, names: list[str], done: list[tuple[Any, Any]]) -> LevelScores:
    out = LevelScores()
    for variant, score in done:
        out.rows.append(s.row(variant, "distribution", score, n=len(s.ok(variant))))
        out.signatures[score.metric] = score.signature
        out.series += [{"strategy": s.strategy, "variant": variant, "metric": score.metric,
                        "series": name, "values": [float(x) for x in values]}
                       for name, values in score.distributions.items()]
    return out


def _bag_jobs(s: StrategyInputs, names: list[str]) -> list[Job]:
    return [(v, score_bags, (s.corpus, s.ok(v), names, s.options, s.cache_path)) for v in s.variants]


def _bag_scores(s: StrategyInputs, names: list[str], done: list[tuple[Any, Any]]) -> LevelScores:
    out = LevelScores()
    for variant, table in done:
        for score in bag_metrics.summarise_bags(table, group_col=table.columns[0]):
            agg = bag_metrics.aggregate_bags(score.distributions.get("per_group", []))
            out.rows.append(s.row(variant, "bag", score, n=agg.n, std=agg.std, median=agg.median))
            out.signatures[score.metric] = score.signature
    return out


def _pair_jobs(s: StrategyInputs, names: list[str]) -> list[Job]:
    return [(None, score_pairs, (s.pairs, names, s.options, s.cache_path))]


def _pair_scores(s: StrategyInputs, names: list[str], done: list[tuple[Any, Any]]) -> LevelScores:
    [(_, (per_pair, rows))] = done
    return LevelScores(columns=per_pair, on=("doc_id", "variant"),
                       rows=rows.assign(level=catalogue.SUMMARY_LEVEL["pair"]).to_dict("records"),
                       signatures=dict(zip(rows["metric"], rows["signature"], strict=True)))


#: Per computed catalogue level: the jobs for its requested metrics of one strategy (run here or on Dask),
#: and what their results add to the strategy's scores. Sample and variant levels add per-row columns, which
#: :func:`score_strategy` summarises as sample means; the others add their own rows.
LEVEL_SCORERS: dict[str, tuple[Callable[[StrategyInputs, list[str]], list[Job]],
                               Callable[[StrategyInputs, list[str], list[tuple[Any, Any]]], LevelScores]]] = {
    "sample": (_sample_jobs, _sample_scores), "variant": (_variant_jobs, _variant_scores),
    "distribution": (_distribution_jobs, _distribution_scores), "bag": (_bag_jobs, _bag_scores),
    "pair": (_pair_jobs, _pair_scores)}


def _summary_row(strategy: str, variant: str, level: str, metric: str, values: np.ndarray, n_failed: int,
                 signature: str, reason: str | None, options: MetricOptions) -> dict[str, Any]:
    """The mean of a variant's scored documents, with its 95% interval: the seeded percentile bootstrap over
    those documents (:func:`tasks.intervals.bootstrap`, ``options.n_bootstrap`` resamples, the run's seed)."""
    finite = values[~np.isnan(values)]
    low, high = bootstrap(finite, n_resamples=options.n_bootstrap, seed=options.seed)
    return {"strategy": strategy, "variant": variant, "level": level, "metric": metric,
            "value": float(finite.mean()) if len(finite) else np.nan,
            "std": float(finite.std(ddof=1)) if len(finite) > 1 else np.nan,
            "median": float(np.median(finite)) if len(finite) else np.nan,
            "n": len(finite), "n_failed": n_failed, "ci_low": low, "ci_high": high, "signature": signature,
            "reason": reason if not len(finite) else None}


def _run(jobs: list[Job], client: Any, names: Sequence[str], options: MetricOptions, cache_path: str) -> list[Any]:
    """The jobs' results in order: on the Dask ``client`` as parallel tasks (its workers prepared first), or
    here, in order."""
    if client is None:
        return [func(*args) for _, func, args in jobs]
    if loads_models(names):
        import_model_libraries()
    prepare_workers(client, functools.partial(prepare_metrics, names, options, cache_path))
    return client.gather([client.submit(func, *args, pure=False) for _, func, args in jobs])


def score_strategy(corpus: pd.DataFrame, synthetic: pd.DataFrame, names: Sequence[str], options: MetricOptions,
                   cache_path: str | Path, client: Any = None) -> SuiteResult:
    """Every requested metric for one strategy's synthetic table (all its variants) against the corpus.

    Each requested level's jobs (:data:`LEVEL_SCORERS`) run as parallel tasks on a Dask ``client``, or here,
    in order, without one; the numbers are the same either way."""
    names = check_metric_names(names)
    cache_path = str(cache_path)
    pairs = synthetic.merge(corpus[["doc_id", "text"]].rename(columns={"text": "source"}), on="doc_id", how="left",
                            validate="many_to_one")
    missing = pairs["source"].isna()
    if missing.any():
        raise ValueError(f"synthetic doc_id '{pairs.loc[missing, 'doc_id'].iloc[0]}' is not in the corpus")
    s = StrategyInputs(corpus, synthetic, pairs, options, cache_path)
    ok_outputs = synthetic.loc[synthetic["status"] == STATUS_OK, "text"].fillna("").astype(str).tolist()
    # spaCy's parses (one thread) beside the encoder's forward passes (torch's threads, GIL released), which
    # leave spaCy its core until it is done
    with ThreadPoolExecutor(1) as pool:
        parses = pool.submit(prefetch_parses, pairs, names, options, cache_path)
        prefetch_embeddings([*s.real, *ok_outputs], names, options, cache_path, yield_core=lambda: not parses.done())
        parses.result()

    wanted = {level: [n for n in names if catalogue.CATALOGUE[n].level == level] for level in INTRINSIC_LEVELS}
    wanted = {level: level_names for level, level_names in wanted.items() if level_names}
    jobs = {level: LEVEL_SCORERS[level][0](s, level_names) for level, level_names in wanted.items()}
    results = iter(_run([job for level_jobs in jobs.values() for job in level_jobs], client, names, options,
                        cache_path))
    levels = [LEVEL_SCORERS[level][1](s, wanted[level], [(key, next(results)) for key, _, _ in jobs[level]])
              for level in wanted]

    samples = pairs[SAMPLE_ID_COLUMNS].reset_index(drop=True).copy()
    signatures: dict[str, str] = {}
    for level in levels:
        for frame in level.columns:
            samples = (samples.merge(frame, on=list(level.on), how="left") if level.on
                       else pd.concat([samples, frame.reset_index(drop=True)], axis=1))
        signatures.update(level.signatures)
    mean = catalogue.SUMMARY_LEVEL["sample"]
    means = [n for level, level_names in wanted.items() if catalogue.SUMMARY_LEVEL[level] == mean for n in level_names]
    rows = []
    for variant in s.variants:
        part = samples[samples["variant"] == variant]
        for metric in means:
            reasons = part[reason_column(metric)].dropna()
            rows.append(_summary_row(s.strategy, variant, mean, metric, part[metric].to_numpy(dtype=float),
                                     s.n_failed(variant), signatures.get(metric, ""),
                                     str(reasons.iloc[0]) if len(reasons) else "no scored pairs", s.options))
    rows += [row for level in levels for row in level.rows]
    epsilons = variant_epsilons(synthetic)
    for row in rows:
        row["epsilon"] = epsilons.get(str(row["variant"]), np.nan)
    return SuiteResult(sample_scores=score_frame(samples, SAMPLE_SCORES), distribution_scores=score_frame(rows, SCORES),
                       distributions=score_frame([x for level in levels for x in level.series], DISTRIBUTIONS),
                       signatures=signatures)


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
