"""Errors that the CLI turns into exit code 2 and one line (no traceback)."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import ConfigDict

if TYPE_CHECKING:
    from pydantic import ValidationError


class SynthUGCError(Exception):
    """A user-facing error: bad input, bad config or a missing resource. Its message is one line."""


class InputError(SynthUGCError):
    """Bad input data: names the file, the column and the first bad row where known."""

    def __init__(self, message: str, *, file: str | None = None, column: str | None = None,
                 row: int | None = None) -> None:
        self.file, self.column, self.row = file, column, row
        where = ", ".join(
            part for part in (
                f"file {file}" if file else "",
                f"column '{column}'" if column else "",
                f"row {row}" if row is not None else "",
            ) if part
        )
        super().__init__(f"{where}: {message}" if where else message)


class ConfigError(SynthUGCError):
    """Invalid experiment configuration: names the key path."""


class ModelUnavailable(SynthUGCError):
    """A model for a role cannot be loaded: names the role, the model and how to provide it."""


class UnsafePath(SynthUGCError):
    """A path would leave the folder it belongs in: a ``..`` or ``.`` segment, or a symlink whose target lies
    outside the storage root."""


#: pydantic settings for values a user typed (config sections, strategy and attack parameters): a number is a
#: number (no "5" for 5, no true for 1), finite (no .inf, no .nan); YAML's ints still validate as floats.
STRICT_INPUT = ConfigDict(strict=True, allow_inf_nan=False)

#: The most characters of an input value an error message echoes.
SHOWN_CHARS = 80

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 2 * SHOWN_CHARS  # long enough that the one cut below is the cut seen
_REPR.maxlevel = 3


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``value`` as an error message echoes it: its repr, at most ``limit`` characters (``...`` marks a cut).

    Bounded work whatever the value (reprlib looks at the first items and levels only), so a huge or deeply
    shared input (a YAML alias bomb) never becomes a huge line or a huge string in memory."""
    text = repr(value[:limit]) if isinstance(value, str) else _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def key_path(parts: Iterable[object]) -> str:
    """Config key parts as a dotted path (``generate.strategies.0.params``), each part cut as :func:`shown` cuts."""
    return ".".join(str(p) if len(str(p)) <= SHOWN_CHARS else shown(p) for p in parts)


#: pydantic error types whose message already says what is wrong without the input (or whose input is a whole
#: section: a model validator's).
_NO_INPUT_ECHO = frozenset({"missing", "extra_forbidden", "value_error", "assertion_error"})


def validation_line(exc: ValidationError, prefix: str = "") -> str:
    """A pydantic ValidationError as one line: each problem (the first per key) after its key path under
    ``prefix`` (a config key path, or a CLI flag such as ``--set``: ``--set intensity``), with the offending
    value as :func:`shown` echoes it."""
    sep = " " if prefix.startswith("--") and " " not in prefix else "."
    parts: dict[str, str] = {}
    for err in exc.errors():
        where = sep.join(p for p in (prefix, key_path(err["loc"])) if p)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] not in _NO_INPUT_ECHO and "input" in err:
            msg += f" (got {shown(err['input'])})"
        parts.setdefault(where, f"{where + ': ' if where else ''}{msg}")
    return "; ".join(parts.values())
