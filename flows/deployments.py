"""Deployable flows, their deployments (pools, schedules, concurrency) and per-stage UI artifacts.

Flows (each takes one typed :class:`~flows.params.ExperimentParams`, so the UI shows a form):

- ``synthugc-experiment``: the whole DAG (:func:`flows.experiment.run_experiment`);
- ``synthugc-generate``: ingest -> split -> generate (strategy x shard), calling the stage tasks directly
  with the same arguments as the experiment flow, so both share every cache entry;
- ``synthugc-evaluate``: the experiment flow with privacy off: metrics + report over cached generation
  (the nightly re-evaluation: a changed metric picks up new code, everything else comes back Cached);
- ``synthugc-privacy``: ingest -> split -> generate -> privacy audit per strategy (stage tasks directly;
  re-identification runs in the experiment flow).

There is no utility stage yet, so no utility deployment. Every flow publishes, per stage, a markdown
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

from flows.config import ExperimentConfig
from flows.experiment import STAGE_FAMILIES, RunSummary, StageFailed, run_experiment
from flows.params import REPO_ROOT, ExperimentParams
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


def _stage_files(store: ArtifactStore, experiment: str, stage: str, manifest_artifacts: dict[str, Any]) -> list[str]:
    """The artifact paths a stage wrote, from its name and the manifest's artifact list."""
    if m := re.fullmatch(r"generate\[(.+)\]\[(\d+)\]", stage):
        return [store.path(experiment, "generate", m.group(1), f"shard-{int(m.group(2)):05d}.parquet")]
    name, _, label = stage.partition("[")
    label = label.rstrip("]")
    reid = ("reidentification", "reid_scores")

    def belongs(parts: list[str]) -> bool:
        if name in ("ingest", "split"):
            return parts[0] == name
        if name == "report":
            return parts[0] in ("report.md", "report.html")
        if name in ("metrics", "utility"):
            return parts[:2] == [name, label]
        if name == "metaeval":
            return parts[0] == "metaeval"
        if name == "llm-profile":
            return parts[:2] == ["privacy", label] and parts[-1] == "llm_profiling"
        if name in ("privacy", "reidentify"):
            return (parts[:2] == ["privacy", label] and parts[-1] != "llm_profiling"
                    and ((parts[-1] in reid) == (name == "reidentify")))
        return False

    out = [ref["path"] for key, ref in manifest_artifacts.items() if belongs(key.split("/"))]
    return out


def publish_stage_artifacts(store: ArtifactStore, experiment: str, states: dict[str, str],
                            files: dict[str, list[str]], failed: dict[str, str] | None = None) -> list[str]:
    """Publish, per stage, a markdown artifact (state, reason, links) and a table artifact (its files, or its
    scores for a metrics stage), and one run-level stage table; returns the artifact keys."""
    failed = failed or {}
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
        scores = [p for p in paths if p.endswith("/distribution_scores.parquet") and store.fs.exists(p)]
        if scores:
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


def _manifest_artifacts(store: ArtifactStore, experiment: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    manifest = json.loads(store.read_text(store.path(experiment, "manifest.json")))
    states: dict[str, str] = manifest.get("stages", {})
    files = {s: _stage_files(store, experiment, s, manifest.get("artifacts", {})) for s in states}
    return states, files


def _failed_from_message(message: str, states: dict[str, str]) -> dict[str, str]:
    """Each failed stage's reason from a StageFailed message ('N stage(s) failed: a: why; b: why')."""
    body = message.split(" failed: ", 1)[-1]
    names = [s for s in states if states[s] not in ("Completed", "Cached")]
    out: dict[str, str] = {}
    for name in names:
        start = body.find(f"{name}: ")
        if start < 0:
            continue
        rest = body[start + len(name) + 2:]
        ends = [rest.find(f"; {other}: ") for other in names if other != name]
        end = min([e for e in ends if e >= 0], default=len(rest))
        out[name] = rest[:end]
    return out


# ---------------------------------------------------------------- flows


def _run_with_artifacts(cfg: ExperimentConfig, families: tuple[str, ...] = STAGE_FAMILIES) -> RunSummary:
    """Run the requested stage families and publish per-stage artifacts (also for a failed run)."""
    store = ArtifactStore(cfg.storage_root or get_settings().storage_root)
    try:
        summary = run_experiment(cfg, families)
    except StageFailed as exc:
        if store.fs.exists(store.path(cfg.experiment, "manifest.json")):
            states, files = _manifest_artifacts(store, cfg.experiment)
            publish_stage_artifacts(store, cfg.experiment, states, files, _failed_from_message(str(exc), states))
        raise
    states, files = _manifest_artifacts(store, cfg.experiment)
    publish_stage_artifacts(store, cfg.experiment, states, files)
    return summary


@flow(name="synthugc-experiment", log_prints=True)
def experiment_flow(params: ExperimentParams = ExperimentParams()) -> RunSummary:
    """The whole experiment DAG for a config file with typed overrides; per-stage artifacts in the UI."""
    load_plugins()
    return _run_with_artifacts(params.to_config())


@flow(name="synthugc-generate", log_prints=True)
def generate_flow(params: ExperimentParams = ExperimentParams()) -> RunSummary:
    """Only generation: ingest, split, and every strategy x shard (the experiment flow's cached stages)."""
    load_plugins()
    return _run_with_artifacts(params.to_config(), families=())


@flow(name="synthugc-evaluate", log_prints=True)
def evaluate_flow(params: ExperimentParams = ExperimentParams()) -> RunSummary:
    """Re-evaluation: intrinsic metrics and the report over (cached) generation."""
    load_plugins()
    return _run_with_artifacts(params.to_config(), families=("metrics", "report"))


@flow(name="synthugc-privacy", log_prints=True)
def privacy_flow(params: ExperimentParams = ExperimentParams()) -> RunSummary:
    """Only the privacy attacks (profiling, membership, re-identification, LLM profiling) and the report."""
    load_plugins()
    return _run_with_artifacts(params.to_config(), families=("privacy", "report"))


@flow(name="synthugc-utility", log_prints=True)
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

_FLOWS = {"synthugc-experiment": experiment_flow, "synthugc-generate": generate_flow,
          "synthugc-evaluate": evaluate_flow, "synthugc-privacy": privacy_flow}


def runner_deployments(names: list[str] | None = None) -> list[Any]:
    """RunnerDeployments for ``flow.serve``/``prefect.serve`` (same schedules and limits as prefect.yaml)."""
    from prefect.schedules import Cron

    chosen = [d for d in DEPLOYMENTS if names is None or d.name in names]
    unknown = sorted(set(names or []) - {d.name for d in DEPLOYMENTS})
    if unknown:
        raise ValueError(f"unknown deployment(s) {', '.join(unknown)}; known: {', '.join(d.name for d in DEPLOYMENTS)}")
    return [
        _FLOWS[d.flow_name].to_deployment(
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
