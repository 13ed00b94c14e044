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

The server process takes about 3.5 s to answer (its imports, the database check); a run launches it as soon as
its config is valid (:func:`launch_temporary_server`, which imports nothing of Prefect's server) and waits for it
only when the flow starts (:func:`start_temporary_server`), so the server starts while the run imports its own
code.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_HOME,
    PREFECT_SERVER_EPHEMERAL_ENABLED,
    get_current_settings,
)

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
    """Prefect's temporary-server command (uvicorn on its app factory), bound to this process's life and recorded."""
    import prefect  # its package folder only (already imported by prefect.settings)

    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
           **get_current_settings().to_environment_variables(exclude_unset=True)}
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
         "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "error", "--lifespan", "on"],
        env=env, preexec_fn=_die_with(os.getpid()))
    _record(process.pid)
    return process


@dataclass
class LaunchedServer:
    """A server process launched ahead of the flow (:func:`launch_temporary_server`), not yet waited for."""

    port: int
    process: subprocess.Popen[Any]
    adopted: bool = False

    def discard(self) -> None:
        """End it if no flow took it (the run stopped before its flow: a held lock, a failed check)."""
        if not self.adopted and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not self.adopted:
            (registry() / f"{self.process.pid}.json").unlink(missing_ok=True)


def _server_class() -> type:
    """RunBoundServer, defined on first use: its base class is in Prefect's server package (~2.4 s to import),
    which a run imports only once its server has been launched."""
    from prefect.server.api.server import SubprocessASGIServer  # heavy: deferred on purpose (see above)

    global _RunBoundServer
    if _RunBoundServer is None:
        class RunBoundServer(SubprocessASGIServer):
            """Prefect's temporary server (the same uvicorn command), bound to the life of the process that starts
            it; the first process it runs may be one launched earlier."""

            launched: LaunchedServer | None = None

            def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
                launched, self.launched = self.launched, None
                if launched is not None and launched.port == self.port and launched.process.poll() is None:
                    launched.adopted = True
                    return launched.process
                if launched is not None:
                    launched.discard()
                return _uvicorn(self.port)

            def stop(self) -> None:
                pid = self.server_process.pid if self.server_process else None
                super().stop()
                if pid is not None:
                    (registry() / f"{pid}.json").unlink(missing_ok=True)

        _RunBoundServer = RunBoundServer
    return _RunBoundServer


_RunBoundServer: type | None = None


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


def _wanted() -> bool:
    """A run starts its own server unless the user set one (``PREFECT_API_URL``) or turned them off."""
    return not PREFECT_API_URL.value() and bool(PREFECT_SERVER_EPHEMERAL_ENABLED.value())


def launch_temporary_server() -> LaunchedServer | None:
    """Launch the run's temporary server process now (main thread) without waiting for it; None where the run
    will not start one. :func:`start_temporary_server` takes it; :meth:`LaunchedServer.discard` ends it if not."""
    if not _wanted():
        return None
    port = _free_port()
    return LaunchedServer(port, _uvicorn(port))


def start_temporary_server(launched: LaunchedServer | None = None) -> Any:
    """Start the run's temporary server (main thread), taking ``launched`` if given, and wait until it answers,
    unless the user set a server (``PREFECT_API_URL``) or turned temporary servers off; Prefect's clients then
    use it. Returns it, or None."""
    if not _wanted():
        if launched is not None:
            launched.discard()
        return None
    from prefect.server.api.server import SubprocessASGIServer  # heavy: see _server_class

    cls = _server_class()
    current = SubprocessASGIServer._instances.get(None)
    if current is not None and current.running:
        if launched is not None:
            launched.discard()
        return current if isinstance(current, cls) else None
    SubprocessASGIServer._instances.pop(None, None)  # a stopped one: the slot then takes ours
    server = cls()
    if launched is not None:
        server.port, server.launched = launched.port, launched
    server.start()
    return server
