"""What every ``synthugc`` command shares: the environment defaults, the one-line error exit (code 2), the
write guard, the ``synthugc:`` status line, the ``--verbose`` option, ``key=value`` option parsing, the command classes (flags shown as flags),
the choices several commands take, and the hidden options under old names that say the new one.

Kept apart from the commands so that each command module (flows/cli/) imports only these light helpers at
module level; what a command runs it imports inside its own function (see flows/cli/__init__.py).
"""

from __future__ import annotations

import ast
import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from enum import Enum, StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from typer.core import TyperCommand, TyperGroup

from tasks.budgets import DECIDE_ON
from tasks.errors import SynthUGCError, key_path, shown
from tasks.privacy.attribution import SETTINGS as ADVERSARY_SETTINGS


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
    """Default console: no INFO flood from Dask/distributed or the HTTP clients, and no model-loading progress bars
    (transformers reads huggingface_hub's switch when it is imported) (``--verbose`` keeps them)."""
    import os
    import warnings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

    for name in ("distributed", "dask", "httpx", "httpcore", "asyncio", "uvicorn"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module=r"distributed(\.|$)")  # e.g. "Port 8787 is already in use"
    # The fits that may stop at max_iter ignore it themselves, but ``catch_warnings`` is process-wide: two stages
    # on the flow's threads restore each other's filters, and the warning leaked into the demo's log.
    warnings.filterwarnings("ignore", message="Liblinear failed to converge")


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


def _plain_flags(params: list) -> list:
    """``params`` with each flag's value label blanked: Typer's help shows ``<bool>`` after every flag (``--help``
    too), which reads as if it took a value."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


_NOT_ONE_OF = re.compile(r"(?:Value error, )?(.+?) is not one of ")


def option_choices(param: Any) -> list[str]:
    """The choices an option takes, as typed on the command line (none: it takes any value)."""
    descriptor = getattr(param, "type_descriptor", None)  # Typer 0.29's own parameter types
    found = descriptor.choices if descriptor is not None else getattr(getattr(param, "type", None), "choices", None)
    return [str(c.value if isinstance(c, Enum) else c) for c in found or ()]


class Command(TyperCommand):
    """A ``synthugc`` command: its flags show as flags in its help, and a value that is not one of an option's choices
    ends with exit 2 and one line naming them, as every other bad input does."""

    def get_params(self, ctx: Any) -> list:
        """The command's parameters, its help option among them, flags shown as flags."""
        return _plain_flags(super().get_params(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Typer's parsing, a bad choice said in one line."""
        try:
            return super().parse_args(ctx, args)
        except typer.BadParameter as exc:
            known = option_choices(exc.param)
            given = _NOT_ONE_OF.match(exc.message)
            if not known or given is None:
                raise
            try:
                value = shown(ast.literal_eval(given.group(1)))
            except (ValueError, SyntaxError):
                value = shown(given.group(1))
            _fail(f"{exc.param.opts[0]} {value}: must be one of {', '.join(known)}")
            raise  # unreachable: _fail exits


class Group(TyperGroup):
    """A ``synthugc`` command group: its flags show as flags in its help."""

    def get_params(self, ctx: Any) -> list:
        """The group's parameters, its help option among them, flags shown as flags."""
        return _plain_flags(super().get_params(ctx))


def renamed(old: str, new: str) -> Any:
    """A hidden option under a name the CLI no longer uses (issue 59): given, the command ends at once
    with exit 2 and one line naming the new one, before any other option is checked."""

    def refuse(value: object) -> None:
        if value not in (None, False, ()):
            _fail(f"{old} is now {new}")

    return typer.Option(old, hidden=True, is_eager=True, callback=refuse)


VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Prefect, Dask and HTTP logs on the console.")]


def choice(values: Iterable[str]) -> Any:
    """A ``Literal`` of ``values`` (the tuple the code validates against): Typer shows it as a choice in the help
    and names the choices when a value is not one of them."""
    return Literal[tuple(values)]  # type: ignore[valid-type]


def choices(name: str, values: Iterable[str]) -> type[StrEnum]:
    """``values`` as a StrEnum, the choice type of a repeatable option (Typer takes no list of a ``Literal``);
    its members are the strings themselves (``.value`` gives the plain string)."""
    return StrEnum(name, [(v, v) for v in values])  # type: ignore[return-value]


#: A budget's decision rule (tasks/budgets.py's DECIDE_ON).
DecideOn = choice(DECIDE_ON)
#: What the adversary holds (tasks/privacy/attribution.py's SETTINGS), or both settings in turn.
BOTH = "both"
Adversary = choice((*ADVERSARY_SETTINGS, BOTH))


def adversary_settings(adversary: str) -> tuple[str, ...]:
    """The adversary settings an ``--adversary`` value names."""
    return tuple(ADVERSARY_SETTINGS) if adversary == BOTH else (adversary,)
