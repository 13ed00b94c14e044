"""Deployments against a real `prefect server start` and a real `flow.serve` process: typed UI parameters,
prefect.yaml, `synthugc deploy`, per-stage artifacts, and rerunning failed stages by `prefect flow-run retry`
and by a forced AwaitingRetry (the UI's Retry button).

The session's server and serve process are shared with tests/test_faults.py (module-level singletons).
A test strategy, ``flaky``, is registered here and loaded into the served flow runs through
SYNTHUGC_PLUGINS: it fails or pauses while a marker file exists, so a fault can be cleared between runs
without changing any parameter (a retry reruns with the same parameters).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from tasks.generate.base import Strategy, available_strategies, register_strategy

REPO = Path(__file__).resolve().parent.parent
PREFECT = [sys.executable, "-m", "prefect"]
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


# ---------------------------------------------------------------- the fault-injection strategy


class FlakyParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fail_if: str = ""  # raise while this file exists
    pause_if: str = ""  # sleep pause_s while this file exists
    pause_s: float = 0.0
    started: str = ""  # touched when the stage starts


if "flaky" not in available_strategies():

    @register_strategy("flaky", params=FlakyParams)
    class Flaky(Strategy):
        """Upper-cases texts; fails or pauses in fit() (outside the per-row error capture) on a marker file."""

        params: FlakyParams

        def fit(self, corpus: pd.DataFrame) -> Strategy:
            p = self.params
            if p.started:
                Path(p.started).touch()
            if p.pause_if and Path(p.pause_if).exists():
                time.sleep(p.pause_s)
            if p.fail_if and Path(p.fail_if).exists():
                raise RuntimeError(f"injected fault: {p.fail_if} exists")
            return self

        def generate(self, batch: pd.DataFrame, *, seed: int) -> list[str]:
            return [str(t).upper() for t in batch["text"]]


# ---------------------------------------------------------------- server and serve process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    """SIGTERM the process group we started, a second SIGTERM (workers may ignore one), then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace / 2 if sig == signal.SIGTERM else grace)
            return
        except subprocess.TimeoutExpired:
            continue


class PrefectServer:
    """`prefect server start` on 127.0.0.1:<free port> with its own PREFECT_HOME (SQLite database there)."""

    def __init__(self, home: Path) -> None:
        self.home, self.port = home, free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        self.proc: subprocess.Popen | None = None
        self.log = home / "server.log"

    def env(self) -> dict[str, str]:
        return {**os.environ, "PREFECT_HOME": str(self.home), "PREFECT_API_URL": self.url,
                "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(self.port),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "PREFECT_UI_ENABLED": "false",
                "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore"}

    def start(self, deadline_s: float = 90.0) -> None:
        import httpx

        env = self.env()
        del env["PREFECT_API_URL"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prefect server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        _stop(self.proc)
        raise RuntimeError(f"prefect server not healthy within {deadline_s}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        _stop(self.proc)


class Served:
    """`flows.deployments.serve()` in its own process group (flow runs are its child processes)."""

    def __init__(self, server: PrefectServer, cache_dir: Path) -> None:
        self.server, self.cache_dir = server, cache_dir
        self.proc: subprocess.Popen | None = None
        self.log = cache_dir.parent / "serve.log"

    def start(self) -> None:
        env = {**self.server.env(), "SYNTHUGC_CACHE_DIR": str(self.cache_dir), "SYNTHUGC_PLUGINS": "test_deployments",
               "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]), "PREFECT_RUNNER_POLL_FREQUENCY": "1",
               "PREFECT_CLIENT_MAX_RETRIES": "8"}
        code = "from flows.deployments import serve; serve(['experiment'])"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait(lambda: _served_deployment("synthugc-experiment/experiment"), 60, "served deployment registered")
        except TimeoutError:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the serve process and its flow-run children (its process group)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        _stop(self.proc)


def _wait(check: Any, timeout: float, what: str, poll: float = 0.5) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError(f"timed out after {timeout}s waiting for: {what}")


def _served_deployment(name: str) -> bool:
    """The deployment exists without a work pool (a served one, not `synthugc deploy`'s version)."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            return client.read_deployment_by_name(name).work_pool_name is None
    except Exception:
        return False


_SHARED: dict[str, Any] = {}


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory) -> Iterator[PrefectServer]:
    """One real server per session (shared by test_deployments and test_faults)."""
    if "server" not in _SHARED:
        server = PrefectServer(tmp_path_factory.mktemp("prefect-home"))
        server.start()
        _SHARED["server"] = server
    yield _SHARED["server"]
    if "served" in _SHARED:
        _SHARED.pop("served").stop()
    if "server" in _SHARED:
        _SHARED.pop("server").stop()


@pytest.fixture()
def api(prefect_server, monkeypatch) -> Iterator[PrefectServer]:
    """Point this process (settings and env for subprocesses) at the session server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setenv("PREFECT_API_URL", prefect_server.url)
    with temporary_settings(updates={PREFECT_API_URL: prefect_server.url}):
        yield prefect_server


@pytest.fixture()
def served(api, tmp_path_factory) -> Served:
    """The serve process (restarted when a test killed it)."""
    current = _SHARED.get("served")
    if current is None or not current.alive() or not _served_deployment("synthugc-experiment/experiment"):
        if current is not None:
            current.stop()
        base = _SHARED.setdefault("serve_base", tmp_path_factory.mktemp("served"))
        current = Served(api, base / "cache")
        current.start()
        _SHARED["served"] = current
    return current


# ---------------------------------------------------------------- helpers


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """12 real debate turns from two debates."""
    from debate_sample import debate_turns

    sample = debate_turns(2, 6)
    path = tmp_path_factory.mktemp("tiny") / "tiny.parquet"
    sample.to_parquet(path)
    return path


def write_config(tmp: Path, corpus: Path, flaky: dict | None = None, name: str | None = None) -> Path:
    """A tiny experiment: stymask + flaky, bleu_divergence only, no privacy; returns the YAML path."""
    strategies: list[dict] = [{"name": "stymask"}]
    if flaky is not None:
        strategies.append({"name": "flaky", "params": flaky})
    cfg = {"experiment": name or f"x{uuid.uuid4().hex[:8]}", "seed": 5, "storage_root": str(tmp / "runs"),
           "data": {"path": str(corpus)}, "generate": {"shard_size": 50, "strategies": strategies},
           "metrics": {"names": ["bleu_divergence"]}, "privacy": {"enabled": False}, "utility": {"enabled": False}}
    path = tmp / f"{cfg['experiment']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start_run(config: Path, **params: Any) -> Any:
    from prefect.deployments import run_deployment

    return run_deployment("synthugc-experiment/experiment", parameters={"params": {"config": str(config), **params}},
                          timeout=0)


def read_run(run_id: Any) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(run_id)


def wait_final(run_id: Any, timeout: float = 150, after: float | None = None) -> Any:
    """The flow run once it is in a final state (entered after ``after``, a unix time, when given)."""

    def check() -> Any:
        run = read_run(run_id)
        if run.state and run.state.type.value in FINAL and (after is None or run.state.timestamp.timestamp() > after):
            return run
        return None

    return _wait(check, timeout, f"flow run {run_id} final", poll=0.2)  # one small API read per poll


def manifest(config: Path) -> dict:
    cfg = yaml.safe_load(config.read_text())
    return json.loads((Path(cfg["storage_root"]) / cfg["experiment"] / "manifest.json").read_text())


def states(manifest: dict) -> dict[str, str]:
    """Each stage call's final state, from a run manifest."""
    return {name: stage["state"] for name, stage in manifest["stages"].items()}


def partials(config: Path) -> list[str]:
    from tasks.store import ArtifactStore

    cfg = yaml.safe_load(config.read_text())
    return ArtifactStore(cfg["storage_root"]).list_partials(cfg["experiment"])


def cli_retry(run_id: Any, env_url: str) -> None:
    proc = subprocess.run([*PREFECT, "flow-run", "retry", str(run_id)], env={**os.environ, "PREFECT_API_URL": env_url},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def artifact_keys(prefix: str) -> set[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=prefix)))
    return {a.key for a in found if a.key}


# ---------------------------------------------------------------- fast tests (no server)


def test_flow_parameters_are_a_typed_model_with_defaults_and_descriptions():
    from flows.deployments import evaluate_flow, experiment_flow, generate_flow, privacy_flow, utility_flow

    for f in (experiment_flow, generate_flow, evaluate_flow, privacy_flow, utility_flow):
        schema = f.parameters.model_dump()
        assert list(schema["properties"]) == ["params"] and schema["required"] == []
        model = schema["definitions"]["ExperimentParams"]
        for name in ("config", "strategies", "dataset", "seed", "metrics", "overrides"):
            assert model["properties"][name]["description"], name
            assert "default" in model["properties"][name], name
        assert model["properties"]["config"]["default"] == "deployments/configs/demo.yaml"
        assert schema["properties"]["params"]["default"]["config"] == "deployments/configs/demo.yaml"


def test_params_apply_overrides_and_name_bad_keys(tiny_corpus, tmp_path):
    from flows.params import ExperimentParams
    from tasks.errors import ConfigError

    config = write_config(tmp_path, tiny_corpus, flaky={})
    cfg = ExperimentParams(config=str(config), strategies=["stymask"], seed=9, metrics=["bleu_divergence"],
                           experiment="renamed", overrides=["generate.shard_size=7"]).to_config()
    assert [s.key for s in cfg.generate.strategies] == ["stymask"]
    assert (cfg.seed, cfg.experiment, cfg.generate.shard_size) == (9, "renamed", 7)
    demo = ExperimentParams(dataset="conventions", max_docs=30).to_config()
    assert demo.data.dataset == "conventions" and demo.data.max_docs == 30
    with pytest.raises(ConfigError, match="strategies: nope"):
        ExperimentParams(config=str(config), strategies=["nope"]).to_config()
    with pytest.raises(ConfigError, match=r"generate\.shard_size"):
        ExperimentParams(config=str(config), overrides=["generate.shard_size=-1"]).to_config()


def test_prefect_yaml_mirrors_the_served_deployments():
    from flows.deployments import DEPLOYMENTS, PREFECT_FILE, WORK_POOLS

    spec = yaml.safe_load(PREFECT_FILE.read_text())
    by_name = {d["name"]: d for d in spec["deployments"]}
    assert set(by_name) == {d.name for d in DEPLOYMENTS}
    pools = {p[0] for p in WORK_POOLS}
    for d in DEPLOYMENTS:
        y = by_name[d.name]
        assert y["entrypoint"] == d.entrypoint and y["work_pool"]["name"] == d.work_pool in pools
        assert y["concurrency_limit"] == d.concurrency_limit and y["description"] == d.description
        assert set(y["tags"]) == set(d.tags)
        schedules = y.get("schedules") or []
        assert [(s["cron"], s["active"]) for s in schedules] == ([(d.cron, d.schedule_active)] if d.cron else [])
    assert by_name["generate"]["work_pool"]["name"] == "synthugc-gpu"
    assert by_name["nightly-reevaluation"]["schedules"][0]["active"] is False


# ---------------------------------------------------------------- real server


@pytest.mark.slow
def test_synthugc_deploy_creates_pools_and_deployments(api):
    from prefect.client.orchestration import get_client
    from typer.testing import CliRunner

    from flows.cli import app

    result = CliRunner().invoke(app, ["deploy"])
    assert result.exit_code == 0, result.output
    try:
        _check_deployed()
    finally:  # the served deployments of the other tests have the same names, without a pool
        with get_client(sync_client=True) as client:
            for d in client.read_deployments():
                client.delete_deployment(d.id)


def _check_deployed() -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        pools = {p.name: p for p in client.read_work_pools()}
        assert pools["synthugc-cpu"].type == "process" and pools["synthugc-gpu"].type == "process"
        assert pools["synthugc-gpu"].concurrency_limit == 1
        nightly = client.read_deployment_by_name("synthugc-evaluate/nightly-reevaluation")
        assert [s.schedule.cron for s in nightly.schedules] == ["0 3 * * *"]
        assert [s.active for s in nightly.schedules] == [False]
        gen = client.read_deployment_by_name("synthugc-generate/generate")
        assert gen.work_pool_name == "synthugc-gpu"
        assert gen.global_concurrency_limit is not None and gen.global_concurrency_limit.limit == 1
        exp = client.read_deployment_by_name("synthugc-experiment/experiment")
        props = exp.parameter_openapi_schema["definitions"]["ExperimentParams"]["properties"]
        assert props["strategies"]["description"] and props["seed"]["description"]
        assert exp.pull_steps and "set_working_directory" in json.dumps(exp.pull_steps)


@pytest.mark.slow
def test_failed_stage_rerun_by_cli_retry_then_forced_awaiting_retry(served, tiny_corpus, tmp_path):
    """One stage fails; `prefect flow-run retry` reruns only it and its dependents; the others are Cached.
    Then the same through a forced AwaitingRetry state (the UI's Retry button), and a new run with one
    changed parameter reuses every unaffected stage."""
    from prefect.client.orchestration import get_client
    from prefect.states import AwaitingRetry

    flag = tmp_path / "fail.flag"
    flag.touch()
    config = write_config(tmp_path, tiny_corpus, flaky={"fail_if": str(flag)})
    run = start_run(config)
    first = wait_final(run.id)
    assert first.state.type.value == "FAILED", first.state
    stages = states(manifest(config))
    assert stages["generate[flaky][0]"] == "Failed"
    assert stages["metrics[stymask]"] == "Completed" and stages["metrics[flaky]"] == "NotRun"
    exp = yaml.safe_load(config.read_text())["experiment"]
    keys = artifact_keys(f"{exp}-%")
    assert {f"{exp}-generate-flaky-0", f"{exp}-metrics-stymask", f"{exp}-metrics-stymask-table",
            f"{exp}-stages"} <= keys, keys

    # the UI's Retry button: force AwaitingRetry; the fault is still there, so only the flaky stage reruns
    t0 = time.time()
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run.id, AwaitingRetry(), force=True)
    second = wait_final(run.id, after=t0)
    assert second.state.type.value == "FAILED", second.state
    stages = states(manifest(config))
    assert {k: v for k, v in stages.items() if v != "Cached"} == {"generate[flaky][0]": "Failed",
                                                                  "metrics[flaky]": "NotRun"}, stages

    # fault cleared: `prefect flow-run retry` reruns the failed stage and what depends on it
    flag.unlink()
    t1 = time.time()
    cli_retry(run.id, served.server.url)
    third = wait_final(run.id, after=t1)
    assert third.state.type.value == "COMPLETED", third.state
    stages = states(manifest(config))
    assert {k for k, v in stages.items() if v != "Cached"} == {"generate[flaky][0]", "metrics[flaky]", "report"}
    assert partials(config) == []

    # a new run with one changed parameter: only the stymask branch and the report recompute
    changed = wait_final(start_run(config, overrides=["generate.strategies.0.params.intensity=0.5"]).id)
    assert changed.state.type.value == "COMPLETED", changed.state
    stages = states(manifest(config))
    assert {k for k, v in stages.items() if v != "Cached"} == {"generate[stymask][0]", "metrics[stymask]", "report"}


@pytest.mark.slow
def test_partial_flows_run_their_stages_and_share_the_experiment_cache(api, tiny_corpus, tmp_path, monkeypatch):
    """generate-only, then evaluate-only: the second finds generation Cached and adds metrics and report."""
    from flows.deployments import evaluate_flow, generate_flow
    from flows.params import ExperimentParams

    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    config = write_config(tmp_path, tiny_corpus, name="partial")
    generated = generate_flow(ExperimentParams(config=str(config)))
    assert all(k in ("ingest", "split") or k.startswith("generate[") for k in generated.stages)
    assert set(generated.stages.values()) == {"Completed"}
    evaluated = evaluate_flow(ExperimentParams(config=str(config)))
    made = {k for k, v in evaluated.stages.items() if v == "Completed"}
    assert made == {k for k in evaluated.stages if k.startswith("metrics[")} | {"report"}
    assert all(v == "Cached" for k, v in evaluated.stages.items() if k.startswith("generate["))


@pytest.mark.slow
def test_a_process_worker_started_in_another_folder_runs_a_pool_deployment(api, tiny_corpus, tmp_path):
    """A deployment of a process work pool, picked up by `prefect worker start` running in another folder with
    another HOME: the flow run checks its machine first, then runs every stage."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from flows.deployments import CPU_POOL, ensure_work_pools, experiment_flow

    ensure_work_pools()
    deployment_id = experiment_flow.from_source(source=str(REPO), entrypoint="flows/deployments.py:experiment_flow") \
        .deploy(name="elsewhere", work_pool_name=CPU_POOL, build=False, push=False, print_next_steps=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**api.env(), "HOME": str(elsewhere), "SYNTHUGC_CACHE_DIR": str(tmp_path / "cache"),
           "PREFECT_WORKER_QUERY_SECONDS": "1"}
    log = tmp_path / "worker.log"
    with open(log, "ab") as out:
        worker = subprocess.Popen([*PREFECT, "worker", "start", "--pool", CPU_POOL, "--type", "process"], cwd=elsewhere,
                                  env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        config = write_config(tmp_path, tiny_corpus, name="pooled")
        run = run_deployment("synthugc-experiment/elsewhere", parameters={"params": {"config": str(config)}}, timeout=0)
        final = wait_final(run.id, timeout=300)
        assert final.state.type.value == "COMPLETED", (final.state, log.read_text()[-3000:])
        stages = states(manifest(config))
        assert stages["generate[stymask][0]"] == "Completed" and stages["report"] == "Completed"
        assert not list(elsewhere.glob("runs"))  # nothing written where the worker was started
    finally:
        _stop(worker)
        with get_client(sync_client=True) as client:
            client.delete_deployment(deployment_id)
