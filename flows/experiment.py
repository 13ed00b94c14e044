"""The experiment flow: ingest -> split -> generate (per strategy x shard) -> metrics, privacy, utility (per
strategy) -> report, as a plan of cached stages (:mod:`flows.plan`) run side by side by the executor
(:mod:`flows.executor`).

A failing stage is recorded and everything that does not read it goes on; the run then ends Failed, so a
retry (CLI, ``prefect flow-run retry`` or the UI) recomputes only what failed.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from flows import progress
from flows.cluster import check_dask_workers, check_here, run_needs
from flows.config import load_config, parse_config
from flows.config_sections import ExperimentConfig
from flows.executor import Listener, Outcome, execute, stage_task_runner
from flows.plan import STAGE_FAMILIES, Plan, plan_prepare, plan_stages
from flows.run_summary import (
    RunSummary,
    StageFailed,
    cached_run,
    human_evaluation_refs,
    result_dir,
    summarized,
)
from tasks.runlock import open_run
from tasks.settings import get_settings
from tasks.store import ArtifactStore

__all__ = ["STAGE_FAMILIES", "RunSummary", "StageFailed", "cached_run", "experiment", "experiment_from_mapping",
           "run_experiment"]


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

    summary = summarized(cfg, store, execution)
    if execution.failed:
        raise StageFailed(f"{len(execution.failed)} stage(s) failed: "
                          + "; ".join(f"{k}: {v}" for k, v in execution.failed.items()), summary)
    return summary


@flow(name="experiment", log_prints=True, task_runner=stage_task_runner())
def experiment(config: str, overrides: list[str] | None = None) -> RunSummary:
    """Run an experiment from a YAML config file (with optional key.path=value overrides)."""
    return run_experiment(load_config(config, overrides))


@flow(name="experiment-from-mapping", log_prints=True, task_runner=stage_task_runner())
def experiment_from_mapping(config: dict[str, Any]) -> RunSummary:
    """Run an experiment from an already-parsed config mapping."""
    return run_experiment(parse_config(config, source="parameters"))
