"""The temporary Prefect server of a CLI run: it ends with the run, even a run killed with SIGKILL.

Without ``PREFECT_API_URL`` Prefect starts a server process (uvicorn) the first time a client needs one and
stops it at interpreter exit; a killed run never gets there, so its server stayed alive, orphaned. Here the
run starts that server itself, in the main thread, before the flow:

- the server process asks the kernel for SIGTERM when the run dies (Linux ``prctl(PR_SET_PDEATHSIG)``, set in
  the child before it starts uvicorn; the signal follows the thread that started it, hence the main thread);
- it is recorded under Prefect's home (``synthugc-servers/<pid>.json``: its pid, the run's pid, both start
  times), and each run first ends the recorded servers whose run no longer runs (where the signal is not
  available, or the server outlived it), then forgets them. A pid is trusted only with its start time, so a
  reused pid is never signalled.

Prefect finds the started server as its own temporary one (same class, same registry slot) and reuses it.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_HOME,
    PREFECT_SERVER_EPHEMERAL_ENABLED,
    get_current_settings,
)

_PR_SET_PDEATHSIG = 1


def registry() -> Path:
    """Where the servers started by runs are recorded (one folder per Prefect home, as its database)."""
    return Path(PREFECT_HOME.value()).expanduser() / "synthugc-servers"


def _started(pid: int) -> float | None:
    """A process's start time, or None when no such process runs (a zombie counts as ended)."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process.create_time()
    except psutil.Error:
        return None


def _same_process(pid: int, started: float) -> bool:
    found = _started(pid)
    return found is not None and abs(found - started) < 1.0


def _die_with(parent: int) -> Callable[[], None]:
    """The child's first step: SIGTERM when ``parent`` dies; exit now if it already has (before the prctl).
    libc is looked up here, in the parent: the child only calls it."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return preexec


class RunBoundServer(SubprocessASGIServer):
    """Prefect's temporary server (the same uvicorn command), bound to the life of the process that starts it."""

    def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
        import prefect

        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
               **get_current_settings().to_environment_variables(exclude_unset=True)}
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
             "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "error", "--lifespan", "on"],
            env=env, preexec_fn=_die_with(os.getpid()))
        _record(process.pid)
        return process

    def stop(self) -> None:
        pid = self.server_process.pid if self.server_process else None
        super().stop()
        if pid is not None:
            (registry() / f"{pid}.json").unlink(missing_ok=True)


def _record(pid: int) -> None:
    folder = registry()
    folder.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    record = {"pid": pid, "started": _started(pid), "run_pid": me, "run_started": _started(me),
              "host": socket.gethostname()}
    (folder / f"{pid}.json").write_text(json.dumps(record))


def end_orphaned_servers() -> list[tuple[int, int]]:
    """End the recorded servers whose run no longer runs (SIGTERM, then SIGKILL after 5 s) and forget every
    record of an ended run; returns (server pid, run pid) of each server ended."""
    folder = registry()
    ended: list[tuple[int, int]] = []
    if not folder.is_dir():
        return ended
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
            pid, run_pid = int(record["pid"]), int(record["run_pid"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if record.get("host") != socket.gethostname():
            continue  # a Prefect home on a shared disk: another machine's processes are not ours to judge
        if record.get("run_started") and _same_process(run_pid, record["run_started"]):
            continue  # its run still runs
        if record.get("started") and _same_process(pid, record["started"]):
            process = psutil.Process(pid)
            process.terminate()
            for stuck in psutil.wait_procs([process], timeout=5)[1]:
                stuck.kill()
            ended.append((pid, run_pid))
        path.unlink(missing_ok=True)
    return ended


def start_temporary_server() -> RunBoundServer | None:
    """Start the run's temporary server now (main thread), unless the user set a server (``PREFECT_API_URL``)
    or turned temporary servers off; Prefect's clients then use it. Returns it, or None."""
    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return None
    current = SubprocessASGIServer._instances.get(None)
    if current is not None and current.running:
        return current if isinstance(current, RunBoundServer) else None
    SubprocessASGIServer._instances.pop(None, None)  # a stopped one: the slot then takes ours
    server = RunBoundServer()
    server.start()
    return server
