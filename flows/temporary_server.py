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

The run then points Prefect at it (``PREFECT_API_URL`` for this process), so Prefect's clients use it without
importing Prefect's server package (2.5 s). The server takes about 3.5 s to answer (its imports, the database
check): a run launches it as soon as it holds its lock and its stages' cache look-ups miss
(:func:`launch_temporary_server`; a run whose every stage is cached starts none) and waits for it only when its
flow starts (:meth:`LaunchedServer.wait_ready`), so it starts while the run imports the flow's code.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from prefect.context import refresh_global_settings_context
from prefect.settings import PREFECT_HOME, get_current_settings

_PR_SET_PDEATHSIG = 1
_PORTS = range(8000, 9000)  # Prefect's own range for its temporary servers


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


def _free_port() -> int:
    """A free port of Prefect's range (chosen at random, as Prefect does)."""
    for port in random.sample(_PORTS, 20):
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORTS.start}-{_PORTS.stop - 1} for the temporary Prefect server")


def _uvicorn(port: int) -> subprocess.Popen[Any]:
    """Prefect's temporary-server command (uvicorn on its app factory, as Prefect runs it), bound to this process's
    life and recorded."""
    import prefect  # its package folder only (already imported by prefect.settings)

    # block types are registered by a server you start yourself; a run's flows save no block (0.5 s of start-up)
    env = {"PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
           **{k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}, "PREFECT_UI_ENABLED": "0",
           "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
         "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "error", "--lifespan", "on"],
        env=env, preexec_fn=_die_with(os.getpid()))
    _record(process.pid)
    return process


_PORT_IN_USE = 3  # uvicorn's exit code when its port was taken between our check and its bind


@dataclass
class LaunchedServer:
    """The run's temporary server process, launched by :func:`launch_temporary_server`; Prefect's clients in this
    process use it (``PREFECT_API_URL``) until :meth:`stop`."""

    port: int
    process: subprocess.Popen[Any]
    used: bool = False

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def _point_prefect_here(self) -> None:
        os.environ["PREFECT_API_URL"] = self.api_url
        refresh_global_settings_context()  # every thread's settings, not only this context's

    def wait_ready(self) -> None:
        """Wait until the server answers (up to Prefect's ephemeral start-up timeout; relaunched on another port
        if its port was taken)."""
        timeout = get_current_settings().server.ephemeral.startup_timeout_seconds
        deadline = time.monotonic() + timeout
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                code = self.process.poll()
                if code == _PORT_IN_USE:
                    self._forget()
                    self.port = _free_port()
                    self.process = _uvicorn(self.port)
                    self._point_prefect_here()
                    continue
                if code is not None:
                    raise RuntimeError(f"the temporary Prefect server exited with code {code} before it answered")
                try:
                    if client.get(f"{self.api_url}/health").status_code == 200:
                        self.used = True
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"the temporary Prefect server did not answer within {timeout} s "
                           "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)")

    def _forget(self) -> None:
        (registry() / f"{self.process.pid}.json").unlink(missing_ok=True)

    def stop_unless_used(self) -> None:
        """End it now if no flow waited for it (the run stopped before its flow); a used one stops at exit, after
        Prefect's own exit hooks have sent what they hold."""
        if not self.used:
            self.stop()

    def stop(self) -> None:
        """End the server and forget it; Prefect's clients in this process lose it (its URL, which only this run set,
        is unset)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._forget()
        if os.environ.get("PREFECT_API_URL") == self.api_url:
            del os.environ["PREFECT_API_URL"]
            refresh_global_settings_context()


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


def launch_temporary_server() -> LaunchedServer | None:
    """Launch the run's temporary server now (main thread) and point Prefect at it, without waiting for it to
    answer; None where the user set a server (``PREFECT_API_URL``) or turned temporary servers off. It stops at
    interpreter exit, or with its run's death."""
    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        return None
    port = _free_port()
    server = LaunchedServer(port, _uvicorn(port))
    server._point_prefect_here()
    atexit.register(server.stop)  # registered before Prefect's exit hooks, so it runs after them
    return server
