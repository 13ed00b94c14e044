"""Errors that the CLI turns into exit code 2 and one line (no traceback)."""

from __future__ import annotations


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
