"""A run read from its stages' caches alone, and what every run ends with: its manifest and summary. Nothing here
imports Prefect, so a command whose every stage is cached starts in about half the time (``synthugc run`` and
``demo``: :func:`cached_run`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.config_options import metric_options
from flows.config_sections import ExperimentConfig
from flows.executor import Execution, lookup
from flows.plan import STAGE_FAMILIES, plan_prepare, plan_stages, planned_cache_dir
from tasks.errors import SynthUGCError
from tasks.layout import StageResult
from tasks.models.registry import model_id
from tasks.report.build import human_evaluation_files
from tasks.store import ArtifactRef, ArtifactStore, fingerprint_file, write_manifest


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
    """Where Prefect keeps the stages' result records (the cache the stages are looked up in): under the run's
    planned cache folder (:func:`flows.plan.planned_cache_dir`), absolute, so a worker writes them there too."""
    return planned_cache_dir() / "prefect-results"


def human_evaluation_refs(store: ArtifactStore, experiment: str) -> list[ArtifactRef]:
    """The imported human ratings of a local run (``synthugc annotate import``), fingerprinted."""
    folder = Path(store.path(experiment, "human_eval"))
    return [ArtifactRef(path=str(p), fingerprint=fingerprint_file(str(p))) for p in human_evaluation_files(folder)]


def _manifest_stages(execution: Execution) -> dict[str, dict[str, Any]]:
    return {name: {"state": o.state, "seconds": round(o.seconds, 3), "reason": o.reason,
                   "result": o.result.to_json() if o.result else None}
            for name, o in execution.outcomes.items()}


def summarized(cfg: ExperimentConfig, store: ArtifactStore, execution: Execution) -> RunSummary:
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
    without Prefect (no server, no flow run, no import) and its manifest rewritten; None when any stage would run.
    The caller holds the experiment's lock."""
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
    return summarized(cfg, store, first)
