"""Runs of one experiment into one storage root, with real `synthugc run` processes: a second concurrent run
refuses (or waits with --wait) and deletes nothing of the first's; a run killed with SIGKILL leaves no
temporary Prefect server behind, and the next run takes its lock over and resumes; symlinks that lead a run
folder out of the storage root are refused, a storage root that is itself a link is allowed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from test_deployments import _wait
from test_hostile_inputs import CLI, _config

from tasks.store import ArtifactRef, ArtifactStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def module_prefect_home(tmp_path_factory) -> Path:
    """One Prefect home for this module's runs: its database is created and migrated by the first run's server
    (seconds that each later test's first server would spend again on a fresh home)."""
    return tmp_path_factory.mktemp("prefect-home")


@pytest.fixture(autouse=True)
def prefect_home(tmp_path, module_prefect_home) -> Iterator[Path]:
    """``tmp/prefect-home``, the module's Prefect home; each test starts and must end with no server recorded
    in it, so what one test's runs leave there cannot reach the next test."""
    (tmp_path / "prefect-home").symlink_to(module_prefect_home, target_is_directory=True)
    assert _server_records(tmp_path) == {}
    yield module_prefect_home
    assert _server_records(tmp_path) == {}


def _env(tmp: Path) -> dict[str, str]:
    """The user's environment with the module's Prefect home (its database and server records)."""
    return {**os.environ, "PREFECT_HOME": str(tmp / "prefect-home")}


def _start(tmp: Path, *args: str) -> subprocess.Popen:
    """`synthugc ARGS` in ``tmp``, its stdout and stderr into a log file read by :func:`_output`."""
    log = tmp / f"run-{time.monotonic_ns()}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(CLI), *args], stdout=out, stderr=subprocess.STDOUT, text=True, env=_env(tmp),
                                cwd=tmp)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def _output(proc: subprocess.Popen) -> str:
    return proc.log.read_text()  # type: ignore[attr-defined]


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    return proc.wait(timeout=timeout), _output(proc)


def _wait_for(check: Callable[[], object], what: str, timeout: float = 120) -> object:
    return _wait(check, timeout, what, poll=0.1)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _lock_holder(run_dir: Path) -> dict | None:
    try:
        text = (run_dir.parent / ".locks" / f"{run_dir.name}.lock").read_text()
    except FileNotFoundError:
        return None
    return json.loads(text) if text.strip() else None


def _server_records(tmp: Path) -> dict[int, dict]:
    folder = tmp / "prefect-home" / "synthugc-servers"
    return {int(p.stem): json.loads(p.read_text()) for p in folder.glob("*.json")} if folder.is_dir() else {}


def _servers_alive(tmp: Path) -> set[int]:
    """The temporary Prefect servers (uvicorn on Prefect's app) running on the module's Prefect home."""
    home = str(tmp / "prefect-home")
    found = set()
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any("prefect.server.api.server:create_app" in part for part in process.info["cmdline"] or ()) \
                    and process.environ().get("PREFECT_HOME") == home and _alive(process.pid):
                found.add(process.pid)
        except psutil.Error:
            continue
    return found


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("synthugc: ")]


def _run_dir(config: Path) -> Path:
    return Path(yaml.safe_load(config.read_text())["storage_root"]) / "x"


def _verify_against_manifest(run_dir: Path) -> dict:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    store = ArtifactStore(run_dir.parent)
    assert manifest["artifacts"] and all(store.is_intact(ArtifactRef(**ref)) for ref in manifest["artifacts"].values())
    return manifest


def test_a_second_concurrent_run_refuses_or_waits_and_deletes_nothing_of_the_first(tmp_path):
    config = _config(tmp_path)
    run_dir = _run_dir(config)
    first = _start(tmp_path, "run", str(config))
    _wait_for(lambda: (_lock_holder(run_dir) or {}).get("pid") == first.pid, "the first run's lock")
    _wait_for(lambda: _server_records(tmp_path), "the first run's server (launched once it holds the lock)")
    os.kill(first.pid, signal.SIGSTOP)  # the first run holds its lock, frozen mid-run
    in_the_making = run_dir / "generate" / ".tmp-0123abcd-shard-00000.parquet"  # as a write of the first run
    in_the_making.parent.mkdir(parents=True, exist_ok=True)
    in_the_making.write_bytes(b"PAR1 being written")
    try:
        (first_server,) = _server_records(tmp_path)
        rc, output = _finish(_start(tmp_path, "run", str(config)))
        assert rc == 2, output
        # the refused run met the lock before starting a server: only the first run's server runs
        assert _servers_alive(tmp_path) == {first_server} and set(_server_records(tmp_path)) == {first_server}
        assert _errors(output) == [f"synthugc: error: experiment x is running (pid {first.pid} on host "
                                   f"{socket.gethostname()}); wait for it to end, or rerun with --wait to start "
                                   f"when it does"], output
        assert "Traceback" not in output and in_the_making.exists()
        waiting = _start(tmp_path, "run", str(config), "--wait")
        _wait_for(lambda: "waiting for it to end" in _output(waiting), "the --wait run to say it waits")
        assert waiting.poll() is None
    finally:
        os.kill(first.pid, signal.SIGCONT)
    rc, output = _finish(first)
    assert rc == 0, output
    first_manifest = _verify_against_manifest(run_dir)
    rc, output = _finish(waiting)
    assert rc == 0, output
    assert f"synthugc: experiment x is running (pid {first.pid} on host {socket.gethostname()}); waiting for it " \
           f"to end (--wait)" in _errors(output)
    manifest = _verify_against_manifest(run_dir)
    assert set(manifest["artifacts"]) == set(first_manifest["artifacts"])
    assert {s["state"] for s in manifest["stages"].values()} == {"Cached"}  # after the first, not beside it
    assert _lock_holder(run_dir) is None  # both ended cleanly: the lock file is empty


def test_a_killed_run_leaves_no_server_and_the_next_run_takes_over_and_resumes(tmp_path):
    config = _config(tmp_path)
    run_dir = _run_dir(config)
    first = _start(tmp_path, "run", str(config))
    # the split's parquet is written before Prefect records its result; generation starting means it is recorded
    _wait_for(lambda: any((run_dir / "generate").rglob("*")), "the first run's generation to start")
    (server,) = _server_records(tmp_path)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    _wait_for(lambda: not _alive(server), f"the killed run's server (pid {server}) to end", timeout=30)
    assert _lock_holder(run_dir)["pid"] == first.pid  # left behind, as by any killed run

    # a server left by a run that died where no parent-death signal reached it: a real process, recorded by the
    # run-side code from a process that then ended
    helper = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys; from flows.temporary_server import _record; "
         "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True, "
         "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
         "_record(p.pid); print(p.pid, flush=True)"],
        capture_output=True, text=True, env=_env(tmp_path), check=True, timeout=60)
    leftover = int(helper.stdout.split()[0])
    assert _alive(leftover)
    leftover_run = _server_records(tmp_path)[leftover]["run_pid"]

    rerun = _start(tmp_path, "run", str(config))
    own = _wait_for(lambda: set(_server_records(tmp_path)) - {server, leftover}, "the rerun's server")
    rc, output = _finish(rerun)
    assert rc == 0, output
    host = socket.gethostname()
    assert _errors(output)[:2] == [
        f"synthugc: experiment x: took over the lock left by pid {first.pid} on host {host}, which no longer "
        f"runs (an interrupted run)",
        f"synthugc: ended the temporary Prefect server (pid {leftover}) left running by an interrupted run "
        f"(pid {leftover_run})"], output
    manifest = _verify_against_manifest(run_dir)
    states = {name: s["state"] for name, s in manifest["stages"].items()}
    assert states["ingest"] == states["split"] == "Cached" and states["report"] == "Completed", states
    assert not [pid for pid in (server, leftover, *own) if _alive(pid)]
    assert _server_records(tmp_path) == {} and _lock_holder(run_dir) is None


def test_links_out_of_the_storage_root_are_refused_and_a_linked_root_is_allowed(tmp_path):
    real_root = tmp_path / "disk" / "runs"
    real_root.mkdir(parents=True)
    (tmp_path / "runs").symlink_to(real_root)
    config = _config(tmp_path, storage_root=str(tmp_path / "runs"))
    rc, output = _finish(_start(tmp_path, "run", str(config)))
    assert rc == 0, output
    run_dir = real_root.resolve() / "x"
    assert f"manifest: {run_dir}/manifest.json" in output.splitlines()
    manifest = _verify_against_manifest(run_dir)
    assert all(ref["path"].startswith(f"{run_dir}/") for ref in manifest["artifacts"].values())

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(run_dir / "metrics")
    (run_dir / "metrics").symlink_to(elsewhere)  # the rerun wrote the metrics there, recorded under the run
    rc, output = _finish(_start(tmp_path, "run", str(config)))
    assert rc == 2 and "Traceback" not in output, output
    assert _errors(output) == [f"synthugc: error: {run_dir}/metrics is a symlink to {elsewhere}, outside the "
                               f"storage root {real_root.resolve()}; remove the link (a storage root that is "
                               f"itself a link is allowed)"], output
    assert list(elsewhere.iterdir()) == []

    (run_dir / "metrics").unlink()
    moved = tmp_path / "moved-run"
    run_dir.rename(moved)
    run_dir.symlink_to(moved)  # the experiment folder itself
    before = {p: p.stat().st_mtime_ns for p in moved.rglob("*")}
    rc, output = _finish(_start(tmp_path, "run", str(config)))
    assert rc == 2, output
    assert _errors(output) == [f"synthugc: error: {run_dir} is a symlink to {moved}, outside the storage root "
                               f"{real_root.resolve()}; remove the link (a storage root that is itself a link is "
                               f"allowed)"], output
    assert {p: p.stat().st_mtime_ns for p in moved.rglob("*")} == before  # nothing written, not even the lock
