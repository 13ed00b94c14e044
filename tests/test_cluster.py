"""Runs that leave one machine: a real `dask scheduler` and two `dask worker` processes started in another
folder with another HOME run a whole small run whose scores equal the local run's; a worker keeps the attacks'
caches where the run's settings put them, never in its own folder or HOME; a worker that cannot see the storage
root stops the run with the preflight's lines, not a stage's traceback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

BIN = Path(sys.executable).parent
CONFIG = """experiment: cluster
seed: 5
storage_root: runs
data: {path: corpus.parquet}
generate: {shard_size: 20, strategies: [{name: stymask}]}
metrics: {names: [bleu_divergence, char_jsd]}
privacy: {profiling: {attributes: []}, membership: {enabled: false}, reidentify: {attacks: [minhash]}}
utility: {enabled: false}
report: {goals: []}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _can_hide_folders() -> bool:
    """Whether this machine lets a process mount over a folder in its own namespace (root, util-linux)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return probe.returncode == 0


class Cluster:
    """`dask scheduler` plus workers, each started in ``home`` (as working directory and HOME), or with
    ``workdir`` as working directory and the logs in ``logs`` where given."""

    def __init__(self, home: Path, workdir: Path | None = None, logs: Path | None = None) -> None:
        self.home, self.port, self.procs = home, _free_port(), []
        self.workdir, self.logs = workdir or home, logs or home
        self.env = {**os.environ, "HOME": str(home)}
        self.env.pop("SYNTHUGC_TASK_RUNNER", None)

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _spawn(self, args: list[str], log: str) -> None:
        out = open(self.logs / log, "w")  # noqa: SIM115 - closed with the process
        self.procs.append(subprocess.Popen(args, cwd=self.workdir, env=self.env, stdout=out,
                                           stderr=subprocess.STDOUT))

    def start(self, workers: int = 2, hidden: Path | None = None) -> None:
        self.spawn(workers, hidden)
        self.wait(workers)

    def spawn(self, workers: int = 2, hidden: Path | None = None) -> None:
        """Start the scheduler and the workers without waiting for them (see :meth:`wait`)."""
        self._spawn([str(BIN / "dask"), "scheduler", "--port", str(self.port), "--no-dashboard"], "scheduler.log")
        for i in range(workers):
            worker = [str(BIN / "dask"), "worker", self.address, "--nthreads", "1", "--no-dashboard",
                      "--name", f"w{i}"]
            if hidden is not None and i == workers - 1:  # this worker sees an empty folder where the run lives
                worker = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                          f"mount -t tmpfs none {hidden} && exec {' '.join(worker)}"]
            self._spawn(worker, f"worker{i}.log")

    def wait(self, workers: int) -> None:
        """Until ``workers`` workers are connected to the scheduler."""
        from distributed import Client

        with Client(self.address, timeout="60s") as client:
            client.wait_for_workers(workers, timeout=90)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture()
def project(tmp_path) -> Path:
    """The user's folder: a small corpus and a config with relative paths."""
    folder = tmp_path / "project"
    folder.mkdir()
    texts = [f"Honestly, I think we really must fix road {i} before winter, said speaker {i % 4}!" for i in range(40)]
    pd.DataFrame({"doc_id": [f"d{i:03d}" for i in range(40)], "text": texts,
                  "author_id": [f"a{i % 4}" for i in range(40)],
                  "group_id": [f"a{i % 4}" for i in range(40)]}).to_parquet(folder / "corpus.parquet")
    (folder / "c.yaml").write_text(CONFIG)
    return folder


@pytest.fixture()
def cluster(tmp_path) -> Iterator[Cluster]:
    home = tmp_path / "elsewhere"
    home.mkdir()
    cluster = Cluster(home)
    yield cluster
    cluster.stop()


def _run(project: Path, tmp_path: Path, address: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "SYNTHUGC_CACHE_DIR": str(tmp_path / "cache")}
    if address:
        env.update(SYNTHUGC_TASK_RUNNER="dask", SYNTHUGC_DASK_ADDRESS=address)
    return subprocess.run([str(BIN / "synthugc"), "run", "c.yaml"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_a_run_on_workers_started_elsewhere_equals_the_local_run(project, cluster, tmp_path):
    cluster.spawn(workers=2)  # they start up while the local run runs; that run does not know their address
    started = time.perf_counter()
    local = _run(project, tmp_path, None)
    local_s = time.perf_counter() - started
    assert local.returncode == 0, local.stderr
    expected = pd.read_parquet(project / "runs" / "cluster" / "report" / "scores.parquet")
    shutil.rmtree(project / "runs")
    shutil.rmtree(tmp_path / "cache")

    cluster.wait(workers=2)
    started = time.perf_counter()
    remote = _run(project, tmp_path, cluster.address)
    remote_s = time.perf_counter() - started
    assert remote.returncode == 0, remote.stderr
    print(f"local run {local_s:.1f} s, external cluster {remote_s:.1f} s")
    got = pd.read_parquet(project / "runs" / "cluster" / "report" / "scores.parquet")
    keys = ["strategy", "variant", "level", "metric", "attack", "adversary"]
    pd.testing.assert_frame_equal(got.sort_values(keys).reset_index(drop=True),
                                  expected.sort_values(keys).reset_index(drop=True), check_exact=False, atol=1e-6)
    assert {"bleu_divergence", "char_jsd", "reid_accuracy"} <= set(got["metric"])
    assert not list((cluster.home).glob("runs")) and not list((cluster.home).glob("*.parquet"))  # nothing there


CACHES_CONFIG = """experiment: caches
seed: 5
storage_root: runs
data: {path: corpus.parquet}
generate: {shard_size: 40, strategies: [{name: stymask}]}
metrics: {names: [char_jsd]}
privacy: {profiling: {attributes: []}, membership: {enabled: false}, reidentify: {attacks: [embedding, classifier], adversaries: [full]}}
utility: {enabled: false}
report: {goals: []}
"""


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.slow
def test_a_worker_keeps_the_attacks_caches_where_the_run_put_them(project, tmp_path):
    """A `dask worker` started in an empty folder with an empty HOME and its own (default, relative) cache setting
    runs the embedding and classifier attacks of a run planned with a relative cache folder: the embedding cache,
    the fitted classifier and the Prefect records land in that folder as the planning machine resolved it, and
    the worker's folder and HOME stay empty (matplotlib's font list, which the report's plots make, included)."""
    (project / "c.yaml").write_text(CACHES_CONFIG)
    workdir, home, logs = tmp_path / "worker-folder", tmp_path / "worker-home", tmp_path / "logs"
    for folder in (workdir, home, logs):
        folder.mkdir()
    cluster = Cluster(home, workdir=workdir, logs=logs)
    cluster.env.pop("SYNTHUGC_CACHE_DIR", None)  # the worker's own setting: .cache/synthugc in its folder
    # Prefect's own home (``import prefect`` makes it, ~/.prefect unless PREFECT_HOME says): docs/scaling.md
    cluster.env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    cluster.start(workers=1)
    try:
        env = {**os.environ, "SYNTHUGC_CACHE_DIR": "planned-cache", "SYNTHUGC_TASK_RUNNER": "dask",
               "SYNTHUGC_DASK_ADDRESS": cluster.address}
        proc = subprocess.run([str(BIN / "synthugc"), "run", "c.yaml"], cwd=project, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        from distributed import Client

        with Client(cluster.address, timeout="30s") as client:  # the attacks ran in the worker's process
            ran = client.run(lambda: "tasks.privacy.attacks.embedding" in sys.modules)
        assert list(ran.values()) == [True]
    finally:
        cluster.stop()
    assert (_files(workdir), _files(home)) == ([], [])
    cache = project / "planned-cache"
    assert (cache / "embeddings.sqlite").stat().st_size > 0
    assert list((cache / "classifier").glob("*.npz")), _files(cache)
    assert any((cache / "prefect-results").iterdir())
    scores = pd.read_parquet(project / "runs" / "caches" / "privacy" / "stymask" / "reid_scores.parquet")
    accuracy = scores[scores["metric"] == "reid_accuracy"]
    assert set(accuracy["attack"]) == {"embedding", "classifier"} and accuracy["value"].notna().all()


@pytest.mark.slow
@pytest.mark.skipif(not _can_hide_folders(), reason="needs unshare -m (root) to give one worker another view")
def test_a_worker_that_cannot_see_the_storage_root_stops_the_run_before_any_stage(project, cluster, tmp_path):
    cluster.start(workers=2, hidden=project)
    proc = _run(project, tmp_path, cluster.address)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("synthugc: error:")]
    assert errors == [
        f"synthugc: error: worker w1 ({next(iter(_worker_addresses(cluster, 'w1')))}): storage root "
        f"{project / 'runs'} is not the one the run was planned with (its probe file is not here): mount the "
        "storage root at the same path on every worker, or use a shared filesystem URL (SYNTHUGC_STORAGE_ROOT "
        "or the config's storage_root)",
        f"synthugc: error: worker w1 ({next(iter(_worker_addresses(cluster, 'w1')))}): corpus "
        f"{project / 'corpus.parquet'} is not readable here: put the input files on storage every worker "
        "mounts at the same path"]
    assert not (project / "runs" / "cluster" / "ingest").exists()  # no stage ran
    assert not list((project / "runs").glob(".synthugc-preflight-*"))  # the probe is gone


def _worker_addresses(cluster: Cluster, name: str) -> list[str]:
    from distributed import Client

    with Client(cluster.address, timeout="30s") as client:
        return [addr for addr, w in client.scheduler_info()["workers"].items() if w.get("name") == name]


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_a_storage_root_url_holds_a_whole_run_and_writes_stay_atomic(scheme, tmp_path, monkeypatch):
    """The storage root may be an fsspec URL (the supported protocols: local paths, file://, memory:// in
    one process, and any fsspec protocol with rename): the run's artifacts and manifest are written there,
    and a write that fails leaves nothing under a final name."""
    import json
    import uuid

    from prefect import flow

    from flows.config import parse_config
    from flows.experiment import run_experiment
    from tasks.store import ArtifactRef, ArtifactStore

    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    root = f"memory://runs-{uuid.uuid4().hex[:8]}" if scheme == "memory" else f"file://{tmp_path / 'runs'}"
    corpus = tmp_path / "corpus.parquet"
    pd.DataFrame({"doc_id": [f"d{i}" for i in range(12)], "text": [f"Well, road {i} needs fixing!" for i in range(12)],
                  "author_id": [f"a{i % 3}" for i in range(12)]}).to_parquet(corpus)
    config = {"experiment": "url", "seed": 1, "storage_root": root, "data": {"path": str(corpus)},
              "generate": {"shard_size": 6, "strategies": [{"name": "stymask"}]}, "utility": {"enabled": False},
              "privacy": {"profiling": {"attributes": []}, "membership": {"enabled": False}}}

    @flow(name="storage-url-test")
    def run():  # re-identification reads the histories (the corpus, in the store) through the store
        return run_experiment(parse_config(config), families=("privacy",))

    summary = run()
    assert set(summary.stages.values()) == {"Completed"} and "reidentify[stymask]" in summary.stages
    store = ArtifactStore(root)
    manifest = json.loads(store.read_text(store.path("url", "manifest.json")))
    shards = [out for name, stage in manifest["stages"].items() if name.startswith("generate[")
              for out in stage["result"]["outputs"].values()]
    assert len(shards) == 2 and all(store.is_intact(ArtifactRef(**s)) for s in shards)
    assert sum(len(store.read_table(s["path"])) for s in shards) == 12
    if scheme == "file":
        assert (tmp_path / "runs" / "url" / "manifest.json").is_file()

    class Unwritable:
        def __getattr__(self, name):
            raise RuntimeError("serialisation failed")

    with pytest.raises(Exception):  # noqa: B017 - pyarrow raises its own type for unconvertible objects
        store.write_table(pd.DataFrame({"text": [Unwritable()]}), "url", "broken.parquet")
    assert not store.fs.exists(store.path("url", "broken.parquet")) and store.list_partials("url") == []
