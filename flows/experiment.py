"""The experiment flow: ingest -> split -> generate (per strategy x shard) -> metrics, privacy, utility (per
strategy) -> report, as a plan of cached stages (:mod:`flows.plan`) run side by side by the executor
(:mod:`flows.executor`).

A failing stage is recorded and everything that does not read it goes on; the run then ends Failed, so a
retry (CLI, ``prefect flow-run retry`` or the UI) recomputes only what failed.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from flows import progress
from flows.cluster import check_dask_workers, check_here, run_needs
from flows.config import load_config, parse_config
from flows.config_options import metric_options
from flows.config_sections import ExperimentConfig
from flows.executor import Execution, Listener, Outcome, execute, lookup, stage_task_runner
from flows.plan import STAGE_FAMILIES, Plan, plan_prepare, plan_stages
from tasks.errors import SynthUGCError
from tasks.layout import StageResult
from tasks.models.registry import model_id
from tasks.report.build import human_evaluation_files
from tasks.runlock import open_run
from tasks.settings import get_settings
from tasks.store import ArtifactRef, ArtifactStore, fingerprint_file, write_manifest

__all__ = ["STAGE_FAMILIES", "RunSummary", "StageFailed", "cached_run", "experiment", "experiment_from_mapping",
           "run_experiment"]


@dataclass
class RunSummary:
    """What a run produced: the report, the manifest, each stage's final state, seconds and failure reason."""

    experiment: str
    report_html: str | None
    report_markdown: str | None
    manifest: str
    stages: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    peak_parallel: int = 0


class StageFailed(SynthUGCError):
    """One or more stages failed; the others completed and are cached for the retry. ``summary`` is the run's
    (states, seconds, failure reasons) when the run got past the split."""

    def __init__(self, message: str, summary: RunSummary | None = None) -> None:
        super().__init__(message)
        self.summary = summary


def result_dir() -> Path:
    """Where Prefect keeps the stages' result records (the cache the stages are looked up in)."""
    return (get_settings().cache_dir / "prefect-results").resolve()


def human_evaluation_refs(store: ArtifactStore, experiment: str) -> list[ArtifactRef]:
    """The imported human ratings of a local run (``synthugc annotate import``), fingerprinted."""
    folder = Path(store.path(experiment, "human_eval"))
    return [ArtifactRef(path=str(p), fingerprint=fingerprint_file(str(p))) for p in human_evaluation_files(folder)]


def _listener(logger: Any):
    """One log line per stage (name, state, seconds) and the progress bar, if the CLI installed one."""
    bar = progress.reporter()

    def on(event: str, name: str, outcome: Outcome | None) -> None:
        if event == "started" and bar:
            bar.started(name)
        elif event == "recompute":
            logger.warning("%s: cached artifacts are missing or changed; recomputing", name)
        elif event == "finished" and outcome is not None:
            line = f"{name}: {outcome.state} ({outcome.seconds:.1f} s)" + (f": {outcome.reason}" if outcome.reason else "")
            (logger.info if outcome.ok else logger.error)(line)
            if bar:
                bar.finished(name, outcome.state, outcome.seconds)
    return on


def _manifest_stages(execution: Execution) -> dict[str, dict[str, Any]]:
    return {name: {"state": o.state, "seconds": round(o.seconds, 3), "reason": o.reason,
                   "result": o.result.to_json() if o.result else None}
            for name, o in execution.outcomes.items()}


def run_experiment(cfg: ExperimentConfig, families: Collection[str] = STAGE_FAMILIES, *,
                   max_parallel: int | None = None) -> RunSummary:
    """Run the DAG for a validated config (call inside a flow): ingest, split, generate, then the requested
    ``families`` of stages (all by default), up to ``max_parallel`` stages at once (default: the
    ``SYNTHUGC_STAGE_CONCURRENCY`` setting; 1 runs them one after the other). Every stage is the same cached
    task whichever subset runs, so the generate-only, evaluate-only and privacy-only flows share one cache."""
    logger = get_run_logger()
    settings = get_settings()
    parallel = max_parallel or settings.stage_concurrency
    limits = settings.resource_limits()
    listen = _listener(logger)
    prepare = plan_prepare(cfg)
    place = prepare.place
    source = next(call.params["source"] for call in prepare.calls if call.kind == "ingest")
    needs = run_needs(cfg, place.root, source.path)
    if settings.task_runner == "dask" and settings.dask_address:  # an external cluster: ask every worker
        check_dask_workers(settings.dask_address, needs)
    else:
        check_here(needs)
    store = place.store()
    with open_run(store, cfg.experiment, local_dir=settings.cache_dir, say=logger.warning):  # the CLI's, if it ran us
        return _run_locked(cfg, families, prepare, store, parallel, limits, result_dir(), listen)


def _run_locked(cfg: ExperimentConfig, families: Collection[str], prepare: Plan, store: ArtifactStore,
                parallel: int, limits: dict[str, int], result_dir: Path, listen: Listener) -> RunSummary:
    logger = get_run_logger()
    place = prepare.place
    if bar := progress.reporter():
        bar.planned(len(prepare.calls))
    execution = execute(prepare, result_dir=result_dir, max_parallel=parallel, limits=limits, listener=listen)
    if execution.failed:
        name, reason = next(iter(execution.failed.items()))
        raise StageFailed(f"{name} failed: {reason}")
    ingested, split = execution.results["ingest"], execution.results["split"]
    corpus = split.outputs["corpus"]
    body = plan_stages(cfg, families, place, corpus_rows=corpus.rows or 0, ingested=ingested,
                       human_eval=lambda: human_evaluation_refs(store, cfg.experiment))
    n_shards = sum(1 for c in body.calls if c.kind == "generate") // max(1, len(cfg.generate.strategies))
    logger.info("%s: %d documents (%s level), %d shard(s) per strategy, %d stages, up to %d at once",
                cfg.experiment, corpus.rows, ingested.info.get("level"), n_shards, len(body.calls), parallel)
    if bar:
        bar.planned(len(prepare.calls) + len(body.calls))
    rest = execute(body, result_dir=result_dir, max_parallel=parallel, limits=limits, done=execution.results,
                   listener=listen)
    execution.outcomes.update(rest.outcomes)
    execution.peak_parallel = max(execution.peak_parallel, rest.peak_parallel)

    summary = _summarized(cfg, store, execution)
    if execution.failed:
        raise StageFailed(f"{len(execution.failed)} stage(s) failed: "
                          + "; ".join(f"{k}: {v}" for k, v in execution.failed.items()), summary)
    return summary


def _summarized(cfg: ExperimentConfig, store: ArtifactStore, execution: Execution) -> RunSummary:
    """The run's manifest written and its summary."""
    reported: StageResult | None = execution.results.get("report")
    options = metric_options(cfg)
    signatures = {k: v for r in execution.results.values() if r.kind == "metrics"
                  for k, v in r.info.get("signatures", {}).items()}
    report_context = dict(reported.info.get("context", {})) if reported is not None else None
    manifest = write_manifest(store, cfg.experiment, config=cfg.model_dump(mode="json"),
                              models={role: model_id(spec) for role, spec in (
                                  ("token_encoder", options.token_encoder),
                                  ("sentence_encoder", options.sentence_encoder), ("pos_tagger", options.pos_tagger))},
                              signatures=signatures, stages=_manifest_stages(execution), report=report_context)
    return RunSummary(experiment=cfg.experiment,
                      report_html=reported["html"].path if reported else None,
                      report_markdown=reported["markdown"].path if reported else None, manifest=manifest.path,
                      stages=execution.states, failed=execution.failed,
                      seconds={n: o.seconds for n, o in execution.outcomes.items()},
                      peak_parallel=execution.peak_parallel)


def cached_run(cfg: ExperimentConfig) -> RunSummary | None:
    """The summary of a run of every stage family whose every stage is cached with its artifacts intact, found
    without Prefect (no server, no flow run) and its manifest rewritten; None when any stage would run. The caller
    holds the experiment's lock."""
    prepare = plan_prepare(cfg)
    first = lookup(prepare, result_dir=result_dir())
    if first is None:
        return None
    place, store = prepare.place, prepare.place.store()
    corpus = first.results["split"].outputs["corpus"]
    body = plan_stages(cfg, STAGE_FAMILIES, place, corpus_rows=corpus.rows or 0, ingested=first.results["ingest"],
                       human_eval=lambda: human_evaluation_refs(store, cfg.experiment))
    rest = lookup(body, result_dir=result_dir(), done=first.results)
    if rest is None:
        return None
    first.outcomes.update(rest.outcomes)
    return _summarized(cfg, store, first)


@flow(name="experiment", log_prints=True, task_runner=stage_task_runner())
def experiment(config: str, overrides: list[str] | None = None) -> RunSummary:
    """Run an experiment from a YAML config file (with optional key.path=value overrides)."""
    return run_experiment(load_config(config, overrides))


@flow(name="experiment-from-mapping", log_prints=True, task_runner=stage_task_runner())
def experiment_from_mapping(config: dict[str, Any]) -> RunSummary:
    """Run an experiment from an already-parsed config mapping."""
    return run_experiment(parse_config(config, source="parameters"))
