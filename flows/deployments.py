"""Deployable flows, their deployments (pools, schedules, concurrency) and per-stage UI artifacts.

Flows (each takes one typed :class:`~flows.params.ExperimentParams`, so the UI shows a form):

- ``synthugc-experiment``: the whole DAG (:func:`flows.experiment.run_experiment`);
- ``synthugc-generate``: ingest -> split -> generate (strategy x shard), calling the stage tasks directly
  with the same arguments as the experiment flow, so both share every cache entry;
- ``synthugc-evaluate``: the experiment flow with privacy off: metrics + report over cached generation
  (the nightly re-evaluation: a changed metric picks up new code, everything else comes back Cached);
- ``synthugc-privacy``: ingest -> split -> generate -> privacy audit per strategy (stage tasks directly;
  re-identification runs in the experiment flow).

- ``synthugc-utility``: the downstream utility runs and the report.

Every flow publishes, per stage, a markdown
artifact (state, links to its parquet files) and a table artifact (its files' rows and statuses, or its
scores), plus one run-level stage table. ``SYNTHUGC_PLUGINS`` lists modules every flow imports first
(extra strategies registered on workers).

The same deployments exist twice on purpose: :data:`DEPLOYMENTS` (``synthugc serve``: one process serves
them all, no pools) and ``deployments/prefect.yaml`` (``synthugc deploy``: work pools + workers);
tests check they agree.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.config_sections import ExperimentConfig
from flows.executor import stage_task_runner
from flows.experiment import STAGE_FAMILIES, RunSummary, StageFailed, run_experiment
from flows.params import REPO_ROOT, ExperimentParams
from tasks.layout import StageResult, stage_files
from tasks.report.build import SCORE_OUTPUTS
from tasks.settings import get_settings
from tasks.store import ArtifactStore

PREFECT_FILE = REPO_ROOT / "deployments" / "prefect.yaml"
CPU_POOL = "synthugc-cpu"
GPU_POOL = "synthugc-gpu"
NIGHTLY_CRON = "0 3 * * *"


# ---------------------------------------------------------------- plugins


def load_plugins() -> list[str]:
    """Import the modules named in SYNTHUGC_PLUGINS (comma-separated); returns their names."""
    names = [n.strip() for n in get_settings().plugins.split(",") if n.strip()]
    for name in names:
        importlib.import_module(name)
    return names


# ---------------------------------------------------------------- per-stage artifacts


def _slug(text: str) -> str:
    """An artifact key: lower-case letters, digits and dashes."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")


def _link(store: ArtifactStore, path: str) -> str:
    if "file" in store.fs.protocol:
        return Path(path).as_uri()
    proto = store.fs.protocol[0] if isinstance(store.fs.protocol, tuple) else store.fs.protocol
    return path if "://" in path else f"{proto}://{path}"


def _file_row(store: ArtifactStore, path: str) -> dict[str, Any]:
    """One row describing an artifact: name, rows, ok/failed (synthetic tables), link."""
    import pyarrow.parquet as pq

    row: dict[str, Any] = {"file": path.rsplit("/", 1)[-1], "exists": store.fs.exists(path), "rows": None,
                           "ok": None, "failed": None, "link": _link(store, path)}
    if row["exists"] and path.endswith(".parquet"):
        with store.fs.open(path, "rb") as f:
            parquet = pq.ParquetFile(f)
            row["rows"] = parquet.metadata.num_rows
            if "status" in parquet.schema_arrow.names:
                status = parquet.read(columns=["status"]).column("status").to_pylist()
                row["ok"], row["failed"] = status.count("ok"), len(status) - status.count("ok")
    return row


def publish_stage_artifacts(store: ArtifactStore, experiment: str, states: dict[str, str],
                            results: dict[str, StageResult], failed: dict[str, str] | None = None) -> list[str]:
    """Publish, per stage, a markdown artifact (state, reason, links) and a table artifact (its files, or its
    scores for a stage that writes scores), and one run-level stage table; returns the artifact keys."""
    failed = failed or {}
    files = stage_files(results.values())
    exp = _slug(experiment)
    keys: list[str] = []
    overview: list[dict[str, Any]] = []
    for stage, state in states.items():
        paths = files.get(stage, [])
        rows = [_file_row(store, p) for p in paths]
        key = f"{exp}-{_slug(stage)}"
        lines = [f"### {stage}: {state}", ""]
        if stage in failed:
            lines += [f"**Failed:** `{failed[stage]}`", ""]
        lines += [f"- [{r['file']}]({r['link']})" + (f": {r['rows']} rows" if r["rows"] is not None else "")
                  + (f" ({r['ok']} ok, {r['failed']} failed)" if r["ok"] is not None else "")
                  + ("" if r["exists"] else " (missing)") for r in rows] or ["(no files)"]
        create_markdown_artifact(markdown="\n".join(lines), key=key, description=f"{experiment}: stage {stage}")
        table: list[dict[str, Any]] = rows
        result = results.get(stage)
        scores = [result.outputs[o].path for k, o in SCORE_OUTPUTS if result is not None and result.kind == k]
        if scores and store.fs.exists(scores[0]):
            frame = store.read_table(scores[0])
            cols = [c for c in ("strategy", "variant", "level", "metric", "value", "n", "n_failed", "reason")
                    if c in frame.columns]
            table = json.loads(frame[cols].round(6).to_json(orient="records"))
        if table:
            create_table_artifact(table=table, key=f"{key}-table", description=f"{experiment}: stage {stage}")
            keys.append(f"{key}-table")
        keys.append(key)
        overview.append({"stage": stage, "state": state, "reason": failed.get(stage, ""),
                         "files": ", ".join(r["link"] for r in rows)})
    if overview:
        create_table_artifact(table=overview, key=f"{exp}-stages", description=f"{experiment}: every stage's state")
        keys.append(f"{exp}-stages")
    return keys


def manifest_stages(store: ArtifactStore, experiment: str) -> tuple[dict[str, str], dict[str, StageResult],
                                                                   dict[str, str]]:
    """Each stage call's state, result (the files it wrote) and failure reason, from the run's manifest."""
    manifest = json.loads(store.read_text(store.path(experiment, "manifest.json")))
    stages: dict[str, dict[str, Any]] = manifest.get("stages", {})
    return ({name: s["state"] for name, s in stages.items()},
            {name: StageResult.from_json(s["result"]) for name, s in stages.items() if s.get("result")},
            {name: s["reason"] for name, s in stages.items() if s.get("reason")})


# ---------------------------------------------------------------- flows


def _run_with_artifacts(cfg: ExperimentConfig, families: tuple[str, ...] = STAGE_FAMILIES) -> RunSummary:
    """Run the requested stage families and publish per-stage artifacts (also for a failed run)."""
    store = ArtifactStore(cfg.storage_root or get_settings().storage_root)
    try:
        summary = run_experiment(cfg, families)
    except StageFailed:
        if store.fs.exists(store.path(cfg.experiment, "manifest.json")):
            publish_stage_artifacts(store, cfg.experiment, *manifest_stages(store, cfg.experiment))
        raise
    publish_stage_artifacts(store, cfg.experiment, *manifest_stages(store, cfg.experiment))
    return summary


@flow(name="synthugc-experiment", log_prints=True, task_runner=stage_task_runner())
def experiment_flow(params: ExperimentParams = ExperimentParams()) -> RunSummary:
    """The whole experiment DAG for a config file with typed overrides; per-stage artifacts in the UI."""
    load_plugins()
    return _run_with_artifacts(params.to_config())


@flow(name="synthugc-generate", log_prints=True, task_runner=stage_task_runner())
def generate_flow(params: ExperimentParams = ExperimentParams()) -> RunSummary:
    """Only generation: ingest, split, and every strategy x shard (the experiment flow's cached stages)."""
    load_plugins()
    return _run_with_artifacts(params.to_config(), families=())


@flow(name="synthugc-evaluate", log_prints=True, task_runner=stage_task_runner())
def evaluate_flow(params: ExperimentParams = ExperimentParams()) -> RunSummary:
    """Re-evaluation: intrinsic metrics and the report over (cached) generation."""
    load_plugins()
    return _run_with_artifacts(params.to_config(), families=("metrics", "report"))


@flow(name="synthugc-privacy", log_prints=True, task_runner=stage_task_runner())
def privacy_flow(params: ExperimentParams = ExperimentParams()) -> RunSummary:
    """Only the privacy attacks (profiling, membership, re-identification, LLM profiling) and the report."""
    load_plugins()
    return _run_with_artifacts(params.to_config(), families=("privacy", "report"))


@flow(name="synthugc-utility", log_prints=True, task_runner=stage_task_runner())
def utility_flow(params: ExperimentParams = ExperimentParams()) -> RunSummary:
    """Only the downstream utility experiments (substitution, augmentation, baseline) and the report."""
    load_plugins()
    return _run_with_artifacts(params.to_config(), families=("utility", "report"))


# ---------------------------------------------------------------- deployments


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment: which flow, which pool, schedule and concurrency (mirrored in prefect.yaml)."""

    name: str
    flow_name: str
    entrypoint: str
    work_pool: str
    description: str
    concurrency_limit: int
    tags: tuple[str, ...] = ()
    cron: str | None = None
    schedule_active: bool = False
    parameters: dict[str, Any] = field(default_factory=dict)


DEPLOYMENTS: tuple[DeploymentSpec, ...] = (
    DeploymentSpec("experiment", "synthugc-experiment", "flows/deployments.py:experiment_flow", CPU_POOL,
                   "The whole DAG: ingest, split, generate, metrics, privacy, report.", 2, ("synthugc", "experiment")),
    DeploymentSpec("generate", "synthugc-generate", "flows/deployments.py:generate_flow", GPU_POOL,
                   "Generation only (GPU-bound strategies run on the GPU pool's workers).", 1,
                   ("synthugc", "generate", "gpu")),
    DeploymentSpec("evaluate", "synthugc-evaluate", "flows/deployments.py:evaluate_flow", CPU_POOL,
                   "Metrics and report over cached generation.", 2, ("synthugc", "evaluate")),
    DeploymentSpec("nightly-reevaluation", "synthugc-evaluate", "flows/deployments.py:evaluate_flow", CPU_POOL,
                   "Nightly re-evaluation of the demo config (schedule paused by default: activate it in the UI "
                   "or with `prefect deployment schedule resume`).", 1, ("synthugc", "evaluate", "nightly"),
                   cron=NIGHTLY_CRON, schedule_active=False),
    DeploymentSpec("utility", "synthugc-utility", "flows/deployments.py:utility_flow", CPU_POOL,
                   "Downstream utility (substitution, augmentation) over cached generation.", 2,
                   ("synthugc", "utility")),
    DeploymentSpec("privacy", "synthugc-privacy", "flows/deployments.py:privacy_flow", CPU_POOL,
                   "Privacy attacks (profiling, membership, re-identification) over cached generation.", 2, ("synthugc", "privacy")),
)

#: Work pools ``synthugc deploy`` creates: (name, type, concurrency limit, description).
WORK_POOLS: tuple[tuple[str, str, int, str], ...] = (
    (CPU_POOL, "process", 4, "CPU work: ingest, split, metrics (Dask), privacy, report."),
    (GPU_POOL, "process", 1, "GPU-bound generation; one worker per GPU machine (vLLM beside it)."),
)



def deployment_flow(spec: DeploymentSpec) -> Any:
    """The flow object a deployment's entrypoint names (one list of deployments: :data:`DEPLOYMENTS`)."""
    path, _, name = spec.entrypoint.partition(":")
    if path != "flows/deployments.py" or not hasattr(sys.modules[__name__], name):
        raise ValueError(f"deployment {spec.name}: entrypoint {spec.entrypoint} is not a flow of flows/deployments.py")
    return getattr(sys.modules[__name__], name)


def runner_deployments(names: list[str] | None = None) -> list[Any]:
    """RunnerDeployments for ``flow.serve``/``prefect.serve`` (same schedules and limits as prefect.yaml)."""
    from prefect.schedules import Cron

    chosen = [d for d in DEPLOYMENTS if names is None or d.name in names]
    unknown = sorted(set(names or []) - {d.name for d in DEPLOYMENTS})
    if unknown:
        raise ValueError(f"unknown deployment(s) {', '.join(unknown)}; known: {', '.join(d.name for d in DEPLOYMENTS)}")
    return [
        deployment_flow(d).to_deployment(
            name=d.name, description=d.description, tags=list(d.tags), concurrency_limit=d.concurrency_limit,
            parameters=d.parameters or None,
            schedules=[Cron(d.cron, timezone="UTC", active=d.schedule_active)] if d.cron else None)
        for d in chosen
    ]


def serve(names: list[str] | None = None, limit: int | None = None) -> None:
    """Serve the deployments from this process (no work pool needed); blocks until interrupted."""
    from prefect import serve as prefect_serve

    prefect_serve(*runner_deployments(names), limit=limit)


def ensure_work_pools() -> list[str]:
    """Create the work pools that do not exist yet (process type, with their concurrency limits)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    created = []
    with get_client(sync_client=True) as client:
        for name, kind, limit, description in WORK_POOLS:
            try:
                client.read_work_pool(name)
            except ObjectNotFound:
                client.create_work_pool(WorkPoolCreate(name=name, type=kind, concurrency_limit=limit,
                                                       description=description))
                created.append(name)
    return created


def deploy(prefect_file: Path = PREFECT_FILE, names: list[str] | None = None) -> subprocess.CompletedProcess:
    """Create the work pools, then ``prefect deploy`` every deployment in ``prefect_file`` from the repo root."""
    ensure_work_pools()
    env = {**os.environ, "SYNTHUGC_REPO": os.environ.get("SYNTHUGC_REPO", str(REPO_ROOT))}
    which = [a for n in names for a in ("--name", n)] if names else ["--all"]
    cmd = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", *which, "--prefect-file", str(prefect_file)]
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
