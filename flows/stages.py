"""The Prefect layer: one coarse task per stage (x strategy x shard) that reads its input artifacts,
calls the plain functions in tasks/, and writes its declared outputs (:mod:`tasks.layout`).

Every stage takes its input artifacts, the run's location and ONE typed options object built from its
config section by :mod:`flows.plan` (environment-derived settings such as the LLM endpoint and model are
folded in there, so they reach the cache key). It returns a :class:`~tasks.layout.StageResult` listing
every file it wrote. Stages are cached with :func:`flows.caching.key_fn_for` (input content + options +
code version) and persist their small result to the local result folder, so a repeated or retried run
returns ``Cached`` for every stage whose inputs, settings and code are unchanged.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from flows.caching import key_fn_for
from tasks.corpus.importers import read_corpus, write_parquet_atomic
from tasks.corpus.schema import corpus_level
from tasks.corpus.splits import assign_splits, cap_documents, undersample
from tasks.generate.base import build_strategy, generate_synthetic, with_llm_settings
from tasks.generate.pseudonymize import pseudonymize_corpus
from tasks.intervals import N_RESAMPLES
from tasks.layout import RunLayout, StageResult, StageWriter
from tasks.metrics.suite import MetricOptions, metaeval_metrics, score_strategy
from tasks.models.embeddings import EmbeddingCache
from tasks.models.llm import llm_backend_for
from tasks.parallel import dask_client
from tasks.privacy.audit import (
    PrivacyOptions,
    audit_strategy,
    llm_profiling_rows,
    summary_frame,
)
from tasks.privacy.dp_audit import audit_strategy as audit_dp_strategy
from tasks.privacy.llm_profiling import llm_profile as run_llm_profiling
from tasks.report.build import collect_report_data
from tasks.report.goals import parse_goal
from tasks.report.render import article_table_frames, render_markdown, render_report
from tasks.scores import METRIC_CORRELATIONS, score_frame
from tasks.settings import RunPaths, get_settings, planned_paths
from tasks.store import ArtifactRef, ArtifactStore, fingerprint_config, fingerprint_file
from tasks.training.dialogue import sentence_embedder
from tasks.training.utility import run_one


@dataclass(frozen=True)
class RunPlace:
    """Where a run's artifacts go (storage root + experiment) and its cache folder (absolute, made so where the
    run is planned): every path a stage uses besides its artifacts is under it, on whichever machine the stage
    runs, except the LLM request cache, which is where ``SYNTHUGC_LLM_CACHE`` said where the run was planned (None:
    none). The root, experiment and cache folder are part of every stage's cache key (a result names files
    under them); the request cache is not (it changes no result)."""

    root: str
    experiment: str
    cache_dir: str
    llm_cache: str | None = field(default=None, metadata={"cache_key": False})

    def caching(self) -> AbstractContextManager[RunPaths]:
        """The block's tasks keep their caches (embeddings, fitted models, model exports, scratch, LLM requests)
        where this run's plan says (:func:`tasks.settings.planned_paths`); every stage runs in it
        (:class:`StageTask`)."""
        return planned_paths(self.cache_dir, self.llm_cache)

    def store(self) -> ArtifactStore:
        return ArtifactStore(self.root)

    def writer(self, kind: str, *, private: bool = False, **keys: Any) -> StageWriter:
        return StageWriter(self.store(), self.experiment, kind, private=private, **keys)

    @property
    def embeddings(self) -> Path:
        return Path(self.cache_dir) / "embeddings.sqlite"


# ---------------------------------------------------------------- options (one per stage, from its config section)


@dataclass(frozen=True)
class IngestOptions:
    """``private``: the run pseudonymises, so the ingested corpus (raw identifiers) goes under private/."""

    max_chars: int
    private: bool = False


@dataclass(frozen=True)
class SplitOptions:
    train: float
    val: float
    test: float
    train_fraction: float
    max_docs: int | None
    seed: int
    private: bool = False  # as IngestOptions.private


@dataclass(frozen=True)
class PseudonymizeOptions:
    entities: tuple[str, ...]
    scope: str
    seed: int


@dataclass(frozen=True)
class GenerateOptions:
    """One strategy's generation; ``llm`` is the resolved LLM role setting (endpoint, model) from the config's
    ``models.llm`` and the environment, so changing the served model recomputes generation."""

    strategy: str
    params: dict[str, Any]
    shard_size: int
    seed: int
    llm: dict[str, str] = field(default_factory=dict)
    private: bool = False  # rewrites the original texts in a pseudonymising run: its outputs hold raw identifiers


@dataclass(frozen=True)
class ReidentifyOptions:
    """The attacks (registered name, parameters) and the adversary settings; ``indexed`` names the attacks
    whose history index the stage receives, in the order of its ``indexes``."""

    attacks: tuple[tuple[str, dict[str, Any]], ...]
    adversaries: tuple[str, ...] = ("full",)
    indexed: tuple[str, ...] = ()
    timeline_posts: int | None = None  # split each timeline into runs of at most this many consecutive posts
    #: attacks asked for by ``all`` only: left out, with why, where they cannot run on these histories here
    optional: tuple[str, ...] = ()


@dataclass(frozen=True)
class LLMProfilingOptions:
    backend: dict[str, str]  # the profiling_llm role's endpoint and model: another model is another attack
    max_tokens: int
    n: int | None
    seed: int


@dataclass(frozen=True)
class AuditDPOptions:
    """One strategy's DP audit: the strategy as configured, the audit's settings (``privacy.audit_dp``) and the
    generation seed (the outputs audited are those generation emitted)."""

    strategy: str
    params: dict[str, Any]
    neighbours: int
    trials: int
    max_docs: int
    seed: int


@dataclass(frozen=True)
class UtilityOptions:
    task: str
    model: str
    label: str
    coverage: str = "timeline"


@dataclass(frozen=True)
class MetaevalOptions:
    names: tuple[str, ...]
    metrics: MetricOptions
    bag_size: int
    bags: int


@dataclass(frozen=True)
class ReportOptions:
    title: str
    facts: tuple[tuple[str, str], ...]  # pairs: their order is the report's
    level: str
    families: tuple[tuple[str, str], ...]  # strategy label -> registered name, in config order
    utility_signature: str
    goals: tuple[str, ...]
    examples: int
    seed: int
    budget: str | None = None
    decide_on: str = "bound"
    n_bootstrap: int = N_RESAMPLES  # resamples of the utility scores' intervals (utility.n_bootstrap)
    budget_adversaries: tuple[str, ...] | None = None  # report.adversaries: the budget's threat model


class StageTask:
    """A stage as the plan and the executor use it: its function, its cache key function (``cache_key_fn``, as
    Prefect calls it) and its Prefect task, built on first use. A run whose every stage is cached is looked up with
    the keys alone and never imports Prefect (about 2 s of a command's start)."""

    def __init__(self, name: str, fn: Callable[..., StageResult]) -> None:
        self.name, self.fn = name, _in_run_cache(fn)
        self.cache_key_fn = key_fn_for(name)
        self._task: Any = None
        functools.update_wrapper(self, fn)

    @property
    def task(self) -> Any:
        """The Prefect task: its result persisted under this stage's cache key."""
        if self._task is None:
            from prefect import task

            self._task = task(name=self.name, cache_key_fn=self.cache_key_fn, persist_result=True)(self.fn)
        return self._task

    def with_options(self, **options: Any) -> Any:
        """The Prefect task with ``options`` (``Task.with_options``)."""
        return self.task.with_options(**options)


def _in_run_cache(fn: Callable[..., StageResult]) -> Callable[..., StageResult]:
    """``fn`` run inside its ``place``'s cache folder (:meth:`RunPlace.caching`): the one place a stage is handed
    the paths the client planned, so no task below it reads a path from the settings of the process it runs in
    (a cluster worker's working directory, HOME or environment)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> StageResult:
        place = signature.bind(*args, **kwargs).arguments["place"]
        with place.caching():
            return fn(*args, **kwargs)

    return run


def _stage(name: str) -> Callable[[Callable[..., StageResult]], StageTask]:
    return lambda fn: StageTask(name, fn)


def _synthetic(store: ArtifactStore, shards: list[ArtifactRef]) -> pd.DataFrame:
    return pd.concat([store.read_table(s) for s in shards], ignore_index=True)


# ---------------------------------------------------------------- stages


@_stage("ingest")
def ingest(source: ArtifactRef, place: RunPlace, options: IngestOptions) -> StageResult:
    """Read the source corpus, validate it, and write the valid rows and the failure records."""
    validated = read_corpus(source.path, max_chars=options.max_chars)
    out = place.writer("ingest", private=options.private)
    out.table("corpus", validated.corpus)
    out.table("failures", validated.failures)
    return out.result(level=corpus_level(validated.corpus).value)


@_stage("split")
def split(corpus: ArtifactRef, place: RunPlace, options: SplitOptions) -> StageResult:
    """Assign splits by group, cap the corpus size and undersample the training split."""
    o = options
    df = assign_splits(place.store().read_table(corpus), fractions=(o.train, o.val, o.test), seed=o.seed)
    if o.max_docs is not None:
        df = cap_documents(df, o.max_docs, seed=o.seed)
    if o.train_fraction < 1.0:
        df = undersample(df, o.train_fraction, seed=o.seed)
    out = place.writer("split", private=o.private)
    out.table("corpus", df.sort_values("doc_id", kind="stable").reset_index(drop=True))
    return out.result()


@_stage("pseudonymize")
def pseudonymize(corpus: ArtifactRef, place: RunPlace, options: PseudonymizeOptions) -> StageResult:
    """Replace the corpus's direct identifiers by consistent surrogates before any strategy rewrites it; the
    mapping stays in the run's private folder (never in the manifest's report context or the report)."""
    replaced, mapping = pseudonymize_corpus(place.store().read_table(corpus), list(options.entities), options.scope,
                                            options.seed)
    out = place.writer("pseudonymize")
    out.table("corpus", replaced)
    out.table("mapping", mapping)
    return out.result()


@_stage("generate")
def generate(corpus: ArtifactRef, place: RunPlace, label: str, shard: int, options: GenerateOptions) -> StageResult:
    """Rewrite one shard of the corpus with one strategy: one output row per input row."""
    whole = place.store().read_table(corpus)
    params = with_llm_settings(options.strategy, options.params, options.llm)
    rewriter = build_strategy(options.strategy, params).fit(whole)
    size = options.shard_size
    synthetic = generate_synthetic(rewriter, whole.iloc[shard * size:(shard + 1) * size], seed=options.seed)
    synthetic["strategy"] = label
    out = place.writer("generate", label=label, shard=shard, private=options.private)
    out.table("shard", synthetic)
    return out.result()


def _run_log(line: str) -> None:
    """A line for the run's log in the Prefect UI (and the console with --verbose)."""
    from contextlib import suppress

    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    with suppress(MissingContextError):  # called outside a flow run (tests calling the stage function)
        get_run_logger().info(line)


@_stage("protect")
def protect(corpus: ArtifactRef, histories: ArtifactRef, place: RunPlace, options: Any,
            split: str | None = None) -> StageResult:
    """Rewrite the corpus until the judge attacks fail at the budget (tasks/protect/loop.py); its rounds are cached
    in the local cache folder as they end, so a killed stage resumes at the round it was in."""
    import json

    # deferred: loads llvmlite, numba only when this runs
    from tasks.protect.loop import protect_corpus

    store = place.store()
    source = store.local_or_table(histories)
    folder = Path(place.cache_dir) / "protect"
    if not isinstance(source, str):  # a remote store: the loop streams a local copy
        source_path = folder / f"histories-{histories.fingerprint[:16]}.parquet"
        if not source_path.exists():
            write_parquet_atomic(source, source_path)
        source = str(source_path)
    documents = store.read_table(corpus)
    if split is not None:  # only this split is protected (and shared); the users' other documents stay history
        documents = documents[documents["split"] == split].reset_index(drop=True)
    result = protect_corpus(documents, source, options, cache_dir=folder,
                            corpus_fingerprint=f"{corpus.fingerprint}:{split or 'all'}",
                            histories_fingerprint=histories.fingerprint,
                            log=_run_log)
    out = place.writer("protect")
    out.table("shard", result.table)
    out.table("rounds", result.rounds)
    out.table("failures", result.failures)
    out.table("frontier", result.frontier)
    out.text("summary", json.dumps(result.summary, indent=2, sort_keys=True))
    return out.result(verdict=result.summary["verdict"], met=result.met)


@_stage("metrics")
def metrics(corpus: ArtifactRef, shards: list[ArtifactRef], place: RunPlace, label: str, names: tuple[str, ...],
            options: MetricOptions) -> StageResult:
    """Every requested intrinsic metric of one strategy's outputs, fanned out on Dask."""
    store = place.store()
    with dask_client(get_settings().dask_address) as client:
        result = score_strategy(store.read_table(corpus), _synthetic(store, shards), list(names), options,
                                place.embeddings, client=client)
    out = place.writer("metrics", label=label)
    out.table("sample_scores", result.sample_scores)
    out.table("distribution_scores", result.distribution_scores)
    out.table("distributions", result.distributions)
    return out.result(signatures=dict(result.signatures))


@_stage("privacy")
def privacy(corpus: ArtifactRef, shards: list[ArtifactRef], place: RunPlace, label: str,
            options: PrivacyOptions) -> StageResult:
    """Attribute profiling and membership audit of one strategy's outputs."""
    store = place.store()
    tables = audit_strategy(store.read_table(corpus), _synthetic(store, shards), label, options)
    out = place.writer("privacy", label=label)
    for name in ("profiling", "top_words", "word_bins", "membership"):
        out.table(name, getattr(tables, name))
    out.table("scores", tables.summary)
    return out.result()


@_stage("index-histories")
def index_histories(histories: ArtifactRef, place: RunPlace, attack: str, params: dict[str, Any]) -> StageResult:
    """Index the adversary's posting histories once for one attack (MinHash: band keys); every strategy's
    attack under every setting reuses it. Written under the local cache folder, named by the content
    fingerprint of the histories and the attack's parameters."""
    # deferred: loads llvmlite, numba only when this runs
    from tasks.privacy.attacks import build_attack

    frame = place.store().read_table(histories)
    frame = frame.loc[frame["author_id"].notna(), [c for c in ("author_id", "text", "doc_id") if c in frame.columns]]
    out = place.writer("index-histories", attack=attack)
    name = f"{histories.fingerprint[:16]}-{fingerprint_config(params)[:12]}"
    path = Path(place.cache_dir) / out.kind.relative_path("index", {"attack": attack, "fingerprint": name})
    build_attack(attack, params).build_index(frame, path)
    out.record("index", ArtifactRef(path=str(path), fingerprint=fingerprint_file(str(path)), rows=len(frame)))
    return out.result()


@_stage("reidentify")
def reidentify(indexes: list[ArtifactRef], histories: ArtifactRef, shards: list[ArtifactRef], place: RunPlace,
               label: str, options: ReidentifyOptions) -> StageResult:
    """Every configured re-identification attack under every adversary setting (full: the histories hold the
    rewritten originals; disjoint: only the users' other posts) against one strategy's synthetic timelines:
    one row set per (attack, adversary), so the verdicts can take the worst case."""
    # deferred: loads llvmlite, numba only when this runs
    from tasks.privacy.attacks import attack_class, attack_synthetic, build_attack, gpu_present

    # deferred: loads llvmlite, numba only when this runs
    from tasks.privacy.reidentify import history_rows

    store = place.store()
    source = store.local_or_table(histories)
    gpu = gpu_present() if options.optional else False
    posts = histories.rows if histories.rows is not None else history_rows(source)
    left_out = {name: why for name in options.optional
                if (why := attack_class(name).skip_reason(int(posts), gpu)) is not None}
    for name, why in sorted(left_out.items()):
        _run_log(f"reidentify[{label}]: attack {name} left out: {why}")
    attacks = [build_attack(name, params) for name, params in options.attacks if name not in left_out]
    index_paths = {name: ref.path for name, ref in zip(options.indexed, indexes, strict=True)}
    tables = attack_synthetic(source, _synthetic(store, shards), label, attacks, options.adversaries,
                              indexes=index_paths, timeline_posts=options.timeline_posts, left_out=left_out)
    out = place.writer("reidentify", label=label)
    out.table("per_timeline", tables.per_timeline)
    out.table("scores", tables.scores)
    return out.result()


@_stage("llm-profile")
def llm_profile(corpus: ArtifactRef, shards: list[ArtifactRef], place: RunPlace, label: str,
                options: LLMProfilingOptions) -> StageResult:
    """Zero-shot LLM profiling (seed 000 §5.2.2, A.5) of the real and the synthetic transcripts."""
    store = place.store()
    synthetic = _synthetic(store, shards).assign(strategy=label)
    result = run_llm_profiling(store.read_table(corpus), backend=llm_backend_for("profiling_llm", options.backend),
                               synthetic=synthetic, max_tokens=options.max_tokens, n=options.n, seed=options.seed)
    out = place.writer("llm-profile", label=label)
    out.table("predictions", result.predictions)
    out.table("scores", summary_frame(llm_profiling_rows(result, label)))
    return out.result()


@_stage("audit-dp")
def audit_dp(corpus: ArtifactRef, place: RunPlace, label: str, options: AuditDPOptions) -> StageResult:
    """The empirical DP audit of one strategy with a privacy mechanism on the first ``max_docs`` documents it
    rewrote: per document its measured privacy loss (DP-Prompt) or epsilon lower bound (DP-BART) against the
    nominal epsilon (:func:`tasks.privacy.dp_audit.audit_strategy`)."""
    documents = place.store().read_table(corpus).iloc[:options.max_docs]
    table = audit_dp_strategy(options.strategy, options.params, documents[["doc_id", "text"]],
                              neighbours=options.neighbours, trials=options.trials, seed=options.seed)
    out = place.writer("audit-dp", label=label)
    out.table("audit", table)
    return out.result()


@_stage("utility")
def utility(corpus: ArtifactRef, shards: list[ArtifactRef], place: RunPlace, label: str, setting: str,
            fraction: float, seed: int, options: UtilityOptions) -> StageResult:
    """One downstream run: train on the (setting, fraction) training set of one strategy (or the real
    baseline, ``label='original'`` without shards) with one seed, test on the real test split."""
    store = place.store()
    synthetic = _synthetic(store, shards) if shards else None
    embed = None if options.task == "post" else sentence_embedder(cache=EmbeddingCache(place.embeddings))
    predictions: list[pd.DataFrame] = []
    results = run_one(store.read_table(corpus), synthetic, label, setting, fraction, seed, task=options.task,
                      model=options.model, label_col=options.label, embed=embed, coverage=options.coverage,
                      predictions=predictions)
    out = place.writer("utility", label=label, setting=setting, fraction=fraction, seed=seed)
    out.table("run", results)
    if predictions:  # the test predictions the report's interval resamples (post tasks)
        out.table("predictions", pd.concat(predictions, ignore_index=True))
    return out.result()


@_stage("metaeval")
def metaeval(corpus: ArtifactRef, place: RunPlace, options: MetaevalOptions) -> StageResult:
    """Meta-evaluate the run's distribution- and bag-level metrics on manipulated bags of the real corpus:
    rho per metric x manipulation, the per-bag rows, and the correlations between metrics."""
    texts = place.store().read_table(corpus)["text"].tolist()
    result = metaeval_metrics(texts, list(options.names), options.metrics, place.embeddings,
                              bag_size=options.bag_size, bags=options.bags, seed=options.metrics.seed)
    out = place.writer("metaeval")
    out.table("summary", result.summary)
    out.table("rows", result.rows)
    out.table("metric_pair_correlations", result.correlations)
    return out.result()


@_stage("report")
def report(results: list[StageResult], human_eval: list[ArtifactRef], failed_stages: dict[str, str],
           place: RunPlace, options: ReportOptions) -> StageResult:
    """Render the markdown and HTML report from the run's stage results and publish them (and the article
    tables) as Prefect artifacts. ``human_eval`` are the imported human ratings (part of the cache key)."""
    store = place.store()
    o = options
    data = collect_report_data(
        RunLayout(results), store.read_table, title=o.title, facts=dict(o.facts), level=o.level,
        families=dict(o.families), failed_stages=failed_stages, utility_signature=o.utility_signature,
        human_eval_dir=Path(human_eval[0].path).parent if human_eval else None, examples=o.examples, seed=o.seed,
        goals=[parse_goal(g) for g in o.goals], budget=o.budget, decide_on=o.decide_on, n_bootstrap=o.n_bootstrap,
        budget_adversaries=o.budget_adversaries, read_text=store.read_text)
    out = place.writer("report")
    out.table("scores", data.summary)
    if data.utility_runs is not None:
        out.table("utility_runs", data.utility_runs)
        out.table("utility_scores", data.summary[data.summary["level"] == "utility"])
    # written every time (empty when undefined) so a file from an earlier run never passes for this one's
    out.table("strategy_metric_correlations", score_frame(
        data.correlations if data.correlations is not None else [], METRIC_CORRELATIONS))
    markdown, page = render_report(data)
    md, html = out.text("markdown", markdown), out.text("html", page)
    experiment = place.experiment
    key = experiment.lower().replace("_", "-").replace(".", "-")
    # the example outputs are real text: they stay in the run's files, not on a (possibly remote) Prefect API
    published = markdown if data.examples is None else render_markdown(replace(data, examples=None))
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

    create_markdown_artifact(markdown=published + f"\n\nHTML report: `{html.path}`\n",
                             key=f"{key}-report", description=f"synthugc report for {experiment}")
    html_link = Path(html.path).as_uri() if "://" not in html.path else html.path
    create_link_artifact(link=html_link, link_text=f"{experiment} report (HTML, self-contained)",
                         key=f"{key}-report-html", description=f"the HTML report of {experiment}")
    if not data.summary.empty:
        create_table_artifact(table=data.summary.drop(columns=["signature"]).round(6).to_dict(orient="records"),
                              key=f"{key}-scores", description=f"every score of {experiment}")
    for table_key, frame in article_table_frames(data).items():
        create_table_artifact(table=frame.round(6).to_dict(orient="records"), key=f"{key}-{table_key}",
                              description=f"{table_key} of {experiment}")
    del md
    return out.result(context={  # what `synthugc report RUN_DIR` needs besides the artifacts
        "title": o.title, "facts": [list(p) for p in o.facts], "level": o.level,
        "families": [list(p) for p in o.families], "failed_stages": dict(failed_stages),
        "utility_signature": o.utility_signature})
