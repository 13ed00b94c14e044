"""What every ``synthugc`` command shares: the environment defaults, the one-line error exit (code 2), the
write guard, the ``synthugc:`` status line, the ``--verbose`` option and ``key=value`` option parsing.

Kept apart from the commands so that each command module (flows/cli/) imports only these light helpers at
module level; what a command runs it imports inside its own function (see flows/cli/__init__.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from tasks.errors import SynthUGCError, key_path, shown


def _environment() -> None:
    """Offline by default and a patient temporary Prefect server (docs/architecture.md)."""
    from tasks.settings import apply_environment_defaults

    apply_environment_defaults()
    # The temporary server is a throwaway: its shutdown (events still being flushed when a fast, fully
    # cached run ends) logs cancelled-task tracebacks that say nothing about the run. A real server set
    # through PREFECT_API_URL runs elsewhere and keeps its own logging.
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")


def _fail(message: str) -> None:
    typer.echo("\n".join(f"synthugc: error: {line}" for line in message.splitlines() or [""]), err=True)
    raise typer.Exit(code=2)


def _quiet_libraries() -> None:
    """Default console: no INFO flood from Dask/distributed or the HTTP clients (``--verbose`` keeps it)."""
    import warnings

    for name in ("distributed", "dask", "httpx", "httpcore", "asyncio", "uvicorn"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module=r"distributed(\.|$)")  # e.g. "Port 8787 is already in use"


@contextmanager
def _writing(out: Path) -> Iterator[None]:
    """Outputs are checked before the work (tasks/paths.py); a write that fails anyway (disk full, a folder
    made read-only meanwhile) still ends in one line, not a traceback."""
    try:
        yield
    except OSError as exc:
        _fail(f"cannot write {out}: {exc.strerror or exc}")


def _say(line: str) -> None:
    typer.echo(f"synthugc: {line}", err=True)


def _assignments(items: list[str] | None, flag: str) -> dict:
    """``key=value`` options as a mapping, each value read as YAML (``k=64`` is a number, ``mode=exact`` a string)
    as the config is read (:func:`flows.config.parse_yaml`: size and alias limits)."""
    from flows.config import parse_yaml

    params: dict = {}
    for item in items or []:
        if "=" not in item:
            _fail(f"{flag} {shown(item)}: expected key=value")
        key, value = item.split("=", 1)
        try:
            params[key] = parse_yaml(value, f"{flag} {key_path([key])}") if value else None
        except SynthUGCError as exc:
            _fail(str(exc))
    return params


VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Prefect, Dask and HTTP logs on the console.")]
