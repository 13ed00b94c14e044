"""The experiment flow: ingest -> split -> generate (per strategy x shard) -> metrics (per strategy) -> report.

It reads like the pipeline diagram; each call is a coarse cached stage from :mod:`flows.stages`.
A failing strategy branch is recorded and the others go on; the run then ends Failed, so a retry
(CLI, ``prefect flow-run retry`` or the UI) recomputes only what failed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.states import State

from flows import progress, stages
from flows.config import ExperimentConfig, load_config, metric_options, parse_config, privacy_options
from tasks.corpus.datasets import fetch_dataset
from tasks.errors import SynthUGCError
from tasks.metrics.base import make_signature
from tasks.metrics.suite import BAG_METRICS, DISTRIBUTION_METRICS
from tasks.models.registry import model_id
from tasks.report.build import human_evaluation_files
from tasks.settings import get_settings
from tasks.store import ArtifactRef, ArtifactStore, fingerprint_file, write_manifest
from tasks.training.utility import utility_design


class StageFailed(SynthUGCError):
    """One or more stages failed; the others completed and are cached for the retry."""


@dataclass
class RunSummary:
    """What a run produced: the report, the manifest, and each stage's final state name."""

    experiment: str
    report_html: str | None
    report_markdown: str | None
    manifest: str
    stages: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class _StageRunner:
    """Calls stages, records their state names, and re-runs a cached stage whose artifacts were lost."""

    def __init__(self, store: ArtifactStore, result_dir: Path) -> None:
        self.store, self.result_dir = store, result_dir
        self.states: dict[str, str] = {}
        self.failed: dict[str, str] = {}

    def __call__(self, name: str, stage_task: Any, **params: Any) -> Any:
        bar = progress.reporter()
        if bar:
            bar.started(name)
        configured = stage_task.with_options(result_storage=self.result_dir, task_run_name=name)
        state: State = configured(**params, return_state=True)
        if state.is_completed() and state.name == "Cached" and not self._intact(state.result()):
            get_run_logger().warning("%s: cached artifacts are missing or changed; recomputing", name)
            state = configured.with_options(refresh_cache=True)(**params, return_state=True)
        self.states[name] = state.name or state.type.value
        if bar:
            bar.finished(name, self.states[name])
        if not state.is_completed():
            self.failed[name] = _failure_reason(state)
            get_run_logger().error("%s failed: %s", name, self.failed[name])
            return None
        return state.result()

    def _intact(self, result: Any) -> bool:
        refs = [v for v in getattr(result, "__dict__", {}).values() if isinstance(v, ArtifactRef)]
        refs += [result] if isinstance(result, ArtifactRef) else []
        return all(self.store.is_intact(r) for r in refs)


def _failure_reason(state: State) -> str:
    try:
        state.result()
    except Exception as exc:  # the stage's own exception, reported in one line
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    return state.message or state.name or "failed"


def _source_ref(cfg: ExperimentConfig) -> ArtifactRef:
    settings = get_settings()
    if cfg.data.dataset:
        path = str(fetch_dataset(cfg.data.dataset, settings.data_dir))
    else:
        path = cfg.data.path
        if not Path(path).is_file():
            raise SynthUGCError(f"data.path: corpus file {path} does not exist")
    return ArtifactRef(path=str(path), fingerprint=fingerprint_file(str(path)))


def _profiling_backend() -> dict[str, str]:
    """The profiling LLM's endpoint and model from the environment (empty: the in-process default)."""
    return {key: value for key, value in (
        ("endpoint", os.environ.get("SYNTHUGC_LLM_ENDPOINT_PROFILING_LLM")),
        ("model", os.environ.get("SYNTHUGC_LLM_MODEL_PROFILING_LLM"))) if value}


def _histories_ref(path: str | None, corpus: ArtifactRef) -> ArtifactRef:
    """The adversary's histories: a configured parquet file, or the corpus itself (the adversary holds the
    originals, the strongest setting, as in the article where the full posting history includes them)."""
    if path is None:
        return corpus
    if not Path(path).is_file():
        raise SynthUGCError(f"privacy.reidentify.histories: file {path} does not exist")
    return ArtifactRef(path=str(Path(path).resolve()), fingerprint=fingerprint_file(path))


def utility_signature(cfg: ExperimentConfig) -> str:
    """The signature of the run's utility numbers (task, model, seeds, test split, label)."""
    return make_signature(f"utility_{cfg.utility.task}", model=cfg.utility.model, seeds=len(cfg.utility.seeds),
                          test="real-test-split", label=cfg.utility.label)


def human_evaluation_refs(store: ArtifactStore, experiment: str) -> list[ArtifactRef]:
    """The imported human ratings of a local run (``synthugc annotate import``), fingerprinted."""
    folder = Path(store.path(experiment, "human_eval"))
    return [ArtifactRef(path=str(p), fingerprint=fingerprint_file(str(p))) for p in human_evaluation_files(folder)]


#: Stage families after generation; a flow can run a subset (ingest, split and generate always run).
STAGE_FAMILIES: tuple[str, ...] = ("metrics", "privacy", "utility", "report")


def run_experiment(cfg: ExperimentConfig, families: Collection[str] = STAGE_FAMILIES) -> RunSummary:
    """Run the DAG for a validated config (call inside a flow): ingest, split, generate, then the
    requested ``families`` of stages (all by default). Every stage is the same cached task whichever
    subset runs, so the generate-only, evaluate-only and privacy-only flows share one cache."""
    unknown = sorted(set(families) - set(STAGE_FAMILIES))
    if unknown:
        raise ValueError(f"unknown stage families {unknown}; known: {', '.join(STAGE_FAMILIES)}")
    logger = get_run_logger()
    settings = get_settings()
    root = cfg.storage_root or settings.storage_root
    store = ArtifactStore(root)
    result_dir = (settings.cache_dir / "prefect-results").resolve()
    run = _StageRunner(store, result_dir)
    exp = cfg.experiment

    source = _source_ref(cfg)
    ingested: stages.IngestResult = run("ingest", stages.ingest, source=source, root=root, experiment=exp,
                                        max_chars=cfg.data.max_chars)
    if ingested is None:
        raise StageFailed(f"ingest failed: {run.failed['ingest']}")
    corpus: ArtifactRef = run("split", stages.split, corpus=ingested.corpus, root=root, experiment=exp,
                              fractions={"train": cfg.split.train, "val": cfg.split.val, "test": cfg.split.test},
                              train_fraction=cfg.split.train_fraction, max_docs=cfg.data.max_docs, seed=cfg.seed)
    if corpus is None:
        raise StageFailed(f"split failed: {run.failed['split']}")
    n_shards = max(1, math.ceil((corpus.rows or 0) / cfg.generate.shard_size))
    do_metrics, do_report = "metrics" in families, "report" in families
    do_privacy = "privacy" in families and cfg.privacy.enabled
    do_utility = "utility" in families and cfg.utility.enabled
    reid = cfg.privacy.reidentify
    do_reid, do_llm_profile = do_privacy and reid.enabled, do_privacy and cfg.privacy.llm_profiling.enabled
    if bar := progress.reporter():
        per_strategy = n_shards + do_metrics + do_privacy + do_reid + do_llm_profile
        n_utility = len(utility_design([s.key for s in cfg.generate.strategies], cfg.utility.settings,
                                       cfg.utility.fractions, cfg.utility.seeds)) if do_utility else 0
        do_metaeval = do_metrics and cfg.metrics.metaeval.enabled
        bar.planned(len(run.states) + do_reid + len(cfg.generate.strategies) * per_strategy + n_utility + do_report
                    + do_metaeval)
    logger.info("%s: %d documents (%s level), %d shard(s) per strategy", exp, corpus.rows, ingested.level, n_shards)

    options = metric_options(cfg)
    privacy_opts = privacy_options(cfg)
    privacy_results: dict[str, stages.PrivacyResult] = {}
    reid_results: dict[str, stages.ReidentifyResult] = {}
    llm_profiled: dict[str, ArtifactRef] = {}
    generated: dict[str, list[ArtifactRef]] = {}
    generated_shards: dict[str, list[ArtifactRef]] = {}
    signed = None
    if do_reid:
        histories = _histories_ref(reid.histories, corpus)
        lsh = {"n": reid.n, "k": reid.k, "seed": cfg.seed,
               **({"bands": reid.bands, "rows": reid.k // reid.bands} if reid.bands else {}),
               "with_signatures": reid.jaccard_threshold is not None}
        signed = run("sign-histories", stages.sign_adversary_histories, histories=histories, root=root,
                     experiment=exp, lsh=lsh, cache_dir=str(settings.cache_dir.resolve()))
    results: dict[str, stages.MetricsResult] = {}
    for strategy in cfg.generate.strategies:
        label = strategy.key
        shards = [
            run(f"generate[{label}][{i}]", stages.generate, corpus=corpus, root=root, experiment=exp, label=label,
                strategy=strategy.name, params=strategy.params, shard=i, shard_size=cfg.generate.shard_size,
                seed=cfg.seed)
            for i in range(n_shards)
        ]
        if any(s is None for s in shards):
            continue
        scored = None if not do_metrics else run(
            f"metrics[{label}]", stages.metrics, corpus=corpus, shards=shards, root=root, experiment=exp, label=label,
            names=list(cfg.metrics.names), options=options, cache_dir=str(settings.cache_dir.resolve()))
        if scored is not None:
            results[label] = scored
        if do_privacy:
            audited = run(f"privacy[{label}]", stages.privacy, corpus=corpus, shards=shards, root=root, experiment=exp,
                          label=label, options=privacy_opts)
            if audited is not None:
                privacy_results[label] = audited
        if do_llm_profile:
            profiled = run(f"llm-profile[{label}]", stages.llm_profile, corpus=corpus, shards=shards, root=root,
                           experiment=exp, label=label, backend=_profiling_backend(),
                           max_tokens=cfg.privacy.llm_profiling.max_tokens, n=cfg.privacy.llm_profiling.n,
                           seed=cfg.seed)
            if profiled is not None:
                llm_profiled[label] = profiled
        generated_shards[label] = shards
        if do_utility:
            generated[label] = shards
        if signed is not None:
            attacked = run(f"reidentify[{label}]", stages.reidentify, signed=signed, shards=shards, root=root,
                           experiment=exp, label=label, jaccard_threshold=reid.jaccard_threshold)
            if attacked is not None:
                reid_results[label] = attacked

    metaevaluated: ArtifactRef | None = None
    comparison_names = [m for m in cfg.metrics.names if m in DISTRIBUTION_METRICS + BAG_METRICS]
    if do_metrics and cfg.metrics.metaeval.enabled and comparison_names:
        metaevaluated = run("metaeval", stages.metaeval, corpus=corpus, root=root, experiment=exp,
                            names=comparison_names, options=options, bag_size=cfg.metrics.metaeval.bag_size,
                            bags=cfg.metrics.metaeval.bags, cache_dir=str(settings.cache_dir.resolve()))

    utility_runs: list[ArtifactRef] = []
    if do_utility:  # one cached stage per run; the baseline runs once for every strategy
        u = cfg.utility
        for label, setting, fraction, seed in utility_design(list(generated), u.settings, u.fractions, u.seeds):
            ran = run(f"utility[{label}][{setting}][{round(100 * fraction)}%][seed {seed}]", stages.utility,
                      corpus=corpus, shards=generated.get(label, []), root=root, experiment=exp, label=label,
                      setting=setting, fraction=fraction, seed=seed, config=u.model_dump(mode="json"),
                      cache_dir=str(settings.cache_dir.resolve()))
            if ran is not None:
                utility_runs.append(ran)

    token_spec = options.token_encoder
    facts = {"experiment": exp, "data": cfg.data.dataset or str(cfg.data.path), "level": ingested.level,
             "documents": str(corpus.rows), "strategies": ", ".join(s.key for s in cfg.generate.strategies),
             "token encoder": model_id(token_spec), "seed": str(cfg.seed),
             "input rows failed validation": str(ingested.failures.rows or 0)}
    artifacts: dict[str, ArtifactRef] = {"ingest/corpus": ingested.corpus, "ingest/failures": ingested.failures,
                                         "split/corpus": corpus}
    for label, shards in generated_shards.items():
        for i, ref in enumerate(shards):
            artifacts[f"generate/{label}/shard-{i:05d}"] = ref
    for label, p in privacy_results.items():
        for name in ("profiling", "top_words", "word_bins", "membership", "summary"):
            artifacts[f"privacy/{label}/{name}"] = getattr(p, name)
    for label, ref in llm_profiled.items():
        artifacts[f"privacy/{label}/llm_profiling"] = ref
    for ref in utility_runs:
        artifacts["utility/" + ref.path.rsplit("/utility/", 1)[-1].removesuffix(".parquet")] = ref
    for label, r in reid_results.items():
        artifacts[f"privacy/{label}/reidentification"] = r.per_timeline
        artifacts[f"privacy/{label}/reid_scores"] = r.summary
    for label, r in results.items():
        artifacts[f"metrics/{label}/sample_scores"] = r.sample_scores
        artifacts[f"metrics/{label}/distribution_scores"] = r.distribution_scores
        artifacts[f"metrics/{label}/distributions"] = r.distributions
    if metaevaluated is not None:
        artifacts["metaeval/summary"] = metaevaluated
    report_context = {"title": cfg.report.title or f"synthugc report: {exp}", "facts": facts, "level": cfg.utility.task,
                      "families": [[s.key, s.name] for s in cfg.generate.strategies],  # pairs: order counts
                      "failed_stages": dict(run.failed), "utility_signature": utility_signature(cfg)}
    reported: stages.ReportResult | None = None if not do_report else run(
        "report", stages.report, artifacts=dict(artifacts), human_eval=human_evaluation_refs(store, exp),
        root=root, experiment=exp, goals=list(cfg.report.goals), examples=cfg.report.examples, seed=cfg.seed,
        **report_context)
    if reported:
        artifacts["report.md"], artifacts["report.html"] = reported.markdown, reported.html
    signatures = {k: v for r in results.values() for k, v in r.signatures.items()}
    manifest = write_manifest(store, exp, config=cfg.model_dump(mode="json"),
                              models={role: model_id(spec) for role, spec in (
                                  ("token_encoder", options.token_encoder), ("sentence_encoder", options.sentence_encoder),
                                  ("pos_tagger", options.pos_tagger))},
                              signatures=signatures,
                              artifacts=artifacts, stages=run.states,
                              report={**report_context, "facts": list(facts.items())})  # pairs keep their order
    summary = RunSummary(experiment=exp, report_html=reported.html.path if reported else None,
                         report_markdown=reported.markdown.path if reported else None, manifest=manifest.path,
                         stages=run.states, failed=run.failed)
    if run.failed:
        raise StageFailed(f"{len(run.failed)} stage(s) failed: " + "; ".join(f"{k}: {v}" for k, v in run.failed.items()))
    return summary


@flow(name="experiment", log_prints=True)
def experiment(config: str, overrides: list[str] | None = None) -> RunSummary:
    """Run an experiment from a YAML config file (with optional key.path=value overrides)."""
    return run_experiment(load_config(config, overrides))


@flow(name="experiment-from-mapping", log_prints=True)
def experiment_from_mapping(config: dict[str, Any]) -> RunSummary:
    """Run an experiment from an already-parsed config mapping."""
    return run_experiment(parse_config(config, source="parameters"))
