"""Names that become path segments, and output locations checked before any work is done.

Every name a user chooses that ends up in an artifact path (experiment, strategy name and label, attribute)
is checked here, once: letters, digits, ``_``, ``-`` and ``.``, not starting with ``.`` or ``-`` (so never
``.``, ``..``, a hidden file or a ``.tmp-`` partial), at most 128 characters. The store refuses any other
path segment as well (:meth:`tasks.store.ArtifactStore.path`), so a name that slips past the config still
cannot leave the run folder.

Output files and folders given on the command line are checked before computing (an existing folder where a
file goes, a file where a folder goes, a location that cannot be written), so a bad ``--out`` fails in a
second with one line instead of after the work, or silently. Files the tool writes for itself go through
:func:`write_atomic`: a reader never sees half of one.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path

import fsspec

from tasks.errors import ConfigError, InputError

SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def is_url(path: str) -> bool:
    """A fsspec URL (``s3://...``, ``file://...``, ``memory://...``) rather than a local path."""
    return "://" in path


def absolute(path: str, base: str | os.PathLike | None = None) -> str:
    """A local path made absolute against ``base`` (default: the working directory), ``~`` expanded; a URL as
    it is. Resolved once where the run is planned, so no worker reads it against its own directory."""
    if is_url(path):
        return path
    expanded = Path(os.path.expanduser(path))
    return str(expanded if expanded.is_absolute() else Path(base or os.getcwd()) / expanded)


def segment_problem(value: object) -> str | None:
    """Why ``value`` cannot name a folder or file inside a run, or None when it can."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if SEGMENT.fullmatch(value):
        return None
    return (f"'{value}' cannot name a folder: use letters, digits, '_', '-' and '.', not starting with '.' "
            f"or '-', at most 128 characters")


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _check_writable(path: Path, what: str) -> None:
    """Fail unless the folder ``path`` (or the closest existing ancestor, where it will be created) takes a
    new file: a probe file is created and removed, which also catches read-only mounts (os.access does not
    for root)."""
    anchor = _nearest_existing(path)
    if not anchor.is_dir():
        raise InputError(f"{anchor} is a file, so the {what} folder {path} cannot be created", file=str(path))
    probe = anchor / f".tmp-{uuid.uuid4().hex}-probe"
    try:
        probe.touch(exist_ok=False)
    except OSError as exc:
        raise InputError(f"cannot write the {what} here ({exc.strerror or exc})", file=str(path)) from None
    probe.unlink(missing_ok=True)


def check_output_file(path: str | os.PathLike) -> Path:
    """Check that a file can be written at ``path`` before any work: not an existing folder, and its folder
    writable (or creatable). Returns the resolved path. Raises InputError (exit 2 in the CLI)."""
    path = Path(path).resolve()
    if path.is_dir():
        raise InputError("is a folder; give a file name for the output", file=str(path))
    _check_writable(path.parent, "output")
    return path


def check_output_folder(path: str | os.PathLike) -> Path:
    """Check that ``path`` can be an output folder before any work: not an existing file, and writable (or
    creatable). Returns the resolved path. Raises InputError (exit 2 in the CLI)."""
    path = Path(path).resolve()
    if path.exists() and not path.is_dir():
        raise InputError("is a file; give a folder for the outputs", file=str(path))
    _check_writable(path, "output")
    return path


def check_storage_root(root: str) -> None:
    """Check a local storage root before a run starts (a file there, or a place that cannot be written, would
    otherwise fail inside the first stage). fsspec URLs other than local files are left to the store."""
    fs, local = fsspec.core.url_to_fs(str(root))
    if "file" not in fs.protocol:
        return
    path = Path(local).resolve()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"storage_root {root} is a file, not a folder")
    try:
        _check_writable(path, "storage root")
    except InputError as exc:
        raise ConfigError(f"storage_root {root}: {str(exc).split(': ', 1)[-1]}") from None


def write_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """``write(tmp)`` to a temporary file beside ``path``, then an atomic rename: a reader sees the old file or the
    whole new one, and a failed write leaves no temporary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_bytes_atomic(data: bytes, path: str | Path) -> Path:
    """Write ``data`` through a temporary file beside the target and an atomic rename."""
    return write_atomic(path, lambda tmp: tmp.write_bytes(data))
