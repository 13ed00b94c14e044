"""Faults against the real server and serve process of tests/test_deployments.py: a flow-run process killed
with SIGKILL mid-run, the Prefect server restarted mid-run, the LLM endpoint down; and metrics on a real
2-worker Dask cluster."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from test_deployments import (  # shared session server and serve process
    _wait,
    api,
    cli_retry,
    manifest,
    partials,
    prefect_server,
    read_run,
    served,
    start_run,
    states,
    tiny_corpus,
    wait_final,
    write_config,
)

from tasks.store import ArtifactRef, ArtifactStore

__all__ = ["api", "prefect_server", "served", "tiny_corpus"]
pytestmark = pytest.mark.slow


def _wait_file(path: Path, timeout: float = 120) -> None:
    _wait(path.exists, timeout, f"{path} to appear", poll=0.3)


def task_runs(run_id: Any) -> list[Any]:
    """The task runs of flow run ``run_id``, as the server has them now."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))


def completed(runs: list[Any]) -> set[str]:
    """The names of the completed task runs among ``runs``."""
    return {t.name for t in runs if t.state is not None and t.state.is_completed()}


def test_worker_killed_mid_run_then_retried(served, tiny_corpus, tmp_path):
    """SIGKILL the serve process and its flow run while a stage runs; crash the run (what Prefect's zombie
    detection does), retry: completes, no completed stage recomputed, no partial artifact."""
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    pause, started = tmp_path / "pause.flag", tmp_path / "started.flag"
    pause.touch()
    config = write_config(tmp_path, tiny_corpus, flaky={"pause_if": str(pause), "pause_s": 120,
                                                        "started": str(started)})
    run = start_run(config)
    _wait_file(started)
    # the other strategy's generation runs beside the paused one; on a loaded machine it may not have finished
    # when flaky starts, so the kill waits for it: what completed before the kill must come back Cached
    _wait(lambda: "generate[stymask][0]" in completed(task_runs(run.id)), 90, "generate[stymask][0] completed")
    served.kill9()
    assert read_run(run.id).state.type.value == "RUNNING"
    done_before = completed(task_runs(run.id))
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run.id, Crashed(message="worker killed (SIGKILL)"), force=True)
    pause.unlink()
    served.start()
    t0 = time.time()
    cli_retry(run.id, served.server.url)
    final = wait_final(run.id, after=t0)
    assert final.state.type.value == "COMPLETED", final.state
    m = manifest(config)
    recomputed = {k for k, v in states(m).items() if v != "Cached"}
    # stages run side by side: what was still running when the worker died (metrics[stymask] may be) reruns,
    # what had completed comes back Cached
    assert {"generate[flaky][0]", "metrics[flaky]", "report"} <= recomputed, m["stages"]
    assert "ingest" in done_before and not recomputed & done_before, (recomputed, done_before)
    assert recomputed <= {"generate[flaky][0]", "metrics[flaky]", "metrics[stymask]", "report"}, recomputed
    assert partials(config) == []
    store = ArtifactStore(yaml.safe_load(config.read_text())["storage_root"])
    assert all(store.is_intact(ArtifactRef(**ref)) for ref in m["artifacts"].values())


def test_server_restarted_mid_run(served, tiny_corpus, tmp_path):
    """Stop and restart the server (same port, same database) while a stage runs: the run finishes, and its
    final state and stages are readable from the restarted server."""
    pause, started = tmp_path / "pause.flag", tmp_path / "started.flag"
    pause.touch()
    config = write_config(tmp_path, tiny_corpus, flaky={"pause_if": str(pause), "pause_s": 6,
                                                        "started": str(started)})
    run = start_run(config)
    _wait_file(started)
    served.server.stop()
    served.server.start()
    final = wait_final(run.id, timeout=180)
    assert final.state.type.value == "COMPLETED", final.state
    assert set(states(manifest(config)).values()) == {"Completed"}
    names = {t.name for t in task_runs(run.id)}
    assert {"ingest", "split", "generate[flaky][0]", "report"} <= names


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_llm_endpoint_down_fails_only_that_strategy(api, tiny_corpus, tmp_path, monkeypatch):
    from flows.deployments import experiment_flow
    from flows.experiment import StageFailed
    from flows.params import ExperimentParams

    url = f"http://127.0.0.1:{_closed_port()}/v1"
    monkeypatch.setenv("SYNTHUGC_LLM_ENDPOINT_LLM", url)
    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    config = write_config(tmp_path, tiny_corpus)
    cfg = yaml.safe_load(config.read_text())
    cfg["generate"]["strategies"].append({"name": "llm", "params": {"backend": {"max_retries": 1, "backoff_s": 0.05}}})
    config.write_text(yaml.safe_dump(cfg))
    with pytest.raises(StageFailed) as failure:
        experiment_flow(ExperimentParams(config=str(config)))
    assert "generate[llm][0]" in str(failure.value) and url in str(failure.value)
    stages = states(manifest(config))
    assert stages["generate[llm][0]"] == "Failed" and stages["metrics[stymask]"] == "Completed"


def test_metrics_on_a_real_two_worker_dask_cluster_equal_local(api, tiny_corpus, tmp_path, monkeypatch):
    from distributed import LocalCluster

    from flows.deployments import experiment_flow
    from flows.params import ExperimentParams

    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    config = write_config(tmp_path, tiny_corpus, name="local")
    experiment_flow(ExperimentParams(config=str(config)))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        monkeypatch.setenv("SYNTHUGC_DASK_ADDRESS", cluster.scheduler_address)
        summary = experiment_flow(ExperimentParams(config=str(config), experiment="cluster"))
        assert summary.stages["metrics[stymask]"] == "Completed"
        assert len(cluster.scheduler.workers) == 2
    root = tmp_path / "runs"
    for name in ("sample_scores", "distribution_scores"):
        local = pd.read_parquet(root / "local" / "metrics" / "stymask" / f"{name}.parquet")
        remote = pd.read_parquet(root / "cluster" / "metrics" / "stymask" / f"{name}.parquet")
        pd.testing.assert_frame_equal(local, remote)
