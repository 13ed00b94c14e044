"""Parquet artifact store: atomic writes, content fingerprints, cache keys and the run manifest.

The storage root is a local path (default ``./runs``) or any fsspec URL (``s3://bucket/runs``,
``memory://runs``). Artifacts are written to a temporary name beside the target and renamed, so a
reader never sees a partial file under the final name (on object stores, where rename is a copy,
the object appears whole once the copy completes).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.errors import UnsafePath

_CHUNK = 1 << 20
_REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ArtifactRef:
    """A written artifact: where it is and the sha256 of its bytes (what cache keys are built from)."""

    path: str
    fingerprint: str
    rows: int | None = None


def sha256_bytes(data: bytes) -> str:
    """sha256 hex digest of bytes."""
    return hashlib.sha256(data).hexdigest()


def fingerprint_file(path: str, fs: fsspec.AbstractFileSystem | None = None) -> str:
    """sha256 of a file's contents, streamed (a rewritten file at the same path gets a new fingerprint)."""
    fs = fs or fsspec.core.url_to_fs(str(path))[0]
    digest = hashlib.sha256()
    with fs.open(str(path), "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint_config(section: Any) -> str:
    """sha256 of a config section as canonical JSON (key order and whitespace do not matter)."""
    if hasattr(section, "model_dump"):
        section = section.model_dump(mode="json")
    return sha256_bytes(json.dumps(section, sort_keys=True, default=str, separators=(",", ":")).encode())


def fingerprint_frame(frame: pd.DataFrame) -> str:
    """sha256 of a table's rows in order (pandas' per-row hashes of every column, index left out): the key of
    what is computed from it, where row order matters as much as the values."""
    return sha256_bytes(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())


#: What counts as an area's source: its modules and the templates, styles and scripts it renders pages from.
SOURCE_SUFFIXES: frozenset[str] = frozenset({".py", ".j2", ".css", ".js"})


def code_version(*areas: str) -> str:
    """sha256 over the source of the given areas (package folders or modules under the repo, e.g.
    ``"tasks/generate"``, ``"tasks/store.py"``): a change in any helper, subpackage or template of an area
    changes it (files with a :data:`SOURCE_SUFFIXES` suffix, at any depth)."""
    digest = hashlib.sha256()
    for area in sorted(areas):
        target = _REPO_ROOT / area
        files = sorted(f for f in target.rglob("*") if f.suffix in SOURCE_SUFFIXES and f.is_file()
                       and "__pycache__" not in f.parts) if target.is_dir() else [target]
        if not files or not all(f.exists() for f in files):
            raise FileNotFoundError(f"code area {area} not found under {_REPO_ROOT}")
        for f in files:
            digest.update(str(f.relative_to(_REPO_ROOT)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()


@functools.cache
def tool_version() -> str:
    """``synthugc <version> (source <hash>)``: the installed package and the exact source it runs (read once per
    process: the source it imported)."""
    try:
        version = importlib.metadata.version("synthugc")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout without install
        version = "unknown"
    return f"synthugc {version} (source {code_version('tasks', 'flows')[:12]})"


def cache_key(stage: str, inputs: Iterable[ArtifactRef | str], config_hash: str, code_hash: str) -> str:
    """A stage's cache key: its name, its inputs' content fingerprints, its config hash and code version."""
    parts = [stage, config_hash, code_hash]
    parts += [i.fingerprint if isinstance(i, ArtifactRef) else str(i) for i in inputs]
    return sha256_bytes("\x1f".join(parts).encode())


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed versions of the named distributions (absent ones as 'not installed')."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


class ArtifactStore:
    """Reads and writes run artifacts under a root path or fsspec URL.

    A local root is resolved once (a root that is itself a symlink is the user's choice: artifacts are named by
    its real location). Below it, no artifact may lie outside the real root: a symlinked run folder, subfolder
    or file whose target is elsewhere is refused (:meth:`check_inside`), for writes and reads alike."""

    def __init__(self, root: str | Path = "runs") -> None:
        self.root = str(root)
        self.fs, self._root_path = fsspec.core.url_to_fs(self.root)
        #: the artifacts are files of this machine (a path or ``file://``), which readers may open directly;
        #: otherwise (``memory://``, ``s3://``) they are read through the store
        self.local = "file" in self.fs.protocol
        if self.local:
            self._root_path = os.path.realpath(self._root_path)

    @property
    def real_root(self) -> str:
        """The root every artifact path starts with (a local root with its symlinks resolved)."""
        return self._root_path

    def local_or_table(self, ref: ArtifactRef) -> str | pd.DataFrame:
        """What a streaming reader can take: the artifact's path when it is a local file (in the store or
        outside it), else the table read through the store."""
        if self.local or not ref.path.startswith(self._root_path):
            return ref.path
        return self.read_table(ref)

    def path(self, *parts: str) -> str:
        """The full path of an artifact under the root; a part may hold several segments (``"a/b"``).

        Raises UnsafePath for a ``.`` or ``..`` segment, or a symlink on the way whose target lies outside the
        real root: no path built from a name leaves the root."""
        segments = [s for part in parts for s in str(part).split("/") if s]
        if any(s in (".", "..") for s in segments):
            raise UnsafePath(f"artifact path {'/'.join(map(str, parts))} would leave the storage root {self.root}")
        return self.check_inside("/".join([self._root_path.rstrip("/"), *segments]))

    def _outside(self, real: str) -> bool:
        root = self._root_path.rstrip("/")
        return real != root and not real.startswith(root + "/")

    def check_inside(self, path: str) -> str:
        """``path`` unchanged, unless it names a place under the root whose real location (every symlink on
        the way followed) is outside the real root: then UnsafePath naming the first such link and its target.
        Paths outside the root (an input file) and non-local stores are not this store's to check."""
        if not self.local or self._outside(path) or not self._outside(os.path.realpath(path)):
            return path
        current = self._root_path.rstrip("/")
        for segment in path[len(current):].strip("/").split("/"):
            current = f"{current}/{segment}"
            if os.path.islink(current) and self._outside(target := os.path.realpath(current)):
                raise UnsafePath(f"{current} is a symlink to {target}, outside the storage root {self._root_path}; "
                                 f"remove the link (a storage root that is itself a link is allowed)")
        raise UnsafePath(f"{path} lies outside the storage root {self._root_path}")  # pragma: no cover - a race

    def check_tree(self, *parts: str) -> None:
        """Refuse (UnsafePath) a folder under the root, such as a run folder, holding a symlink anywhere below it
        (the folder itself included) whose target is outside the real root: checked when a run starts, so a
        planted link stops it before any work instead of failing (or being followed) in a stage."""
        top = self.path(*parts)
        if not self.local or not os.path.isdir(top):
            return
        for folder, dirs, files in os.walk(top):  # links to folders are listed in dirs, not followed
            for name in (*dirs, *files):
                if os.path.islink(entry := os.path.join(folder, name)):
                    self.check_inside(entry)

    def _write_atomic(self, data: bytes, path: str) -> None:
        parent = path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}"
        try:
            with self.fs.open(tmp, "wb") as f:
                f.write(data)
            self.fs.mv(tmp, path)
        finally:
            if self.fs.exists(tmp):
                self.fs.rm(tmp)

    def write_table(self, df: pd.DataFrame, *parts: str) -> ArtifactRef:
        """Write a DataFrame as parquet atomically and return its reference."""
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf)
        data = buf.getvalue()
        path = self.path(*parts)
        self._write_atomic(data, path)
        return ArtifactRef(path=path, fingerprint=sha256_bytes(data), rows=len(df))

    def write_text(self, text: str, *parts: str) -> ArtifactRef:
        """Write a text file (report, manifest) atomically and return its reference."""
        data = text.encode("utf-8")
        path = self.path(*parts)
        self._write_atomic(data, path)
        return ArtifactRef(path=path, fingerprint=sha256_bytes(data))

    def read_table(self, ref: ArtifactRef | str) -> pd.DataFrame:
        """Read a parquet artifact written by this store (or any parquet file the fs can open)."""
        path = self.check_inside(ref.path if isinstance(ref, ArtifactRef) else ref)
        with self.fs.open(path, "rb") as f:
            return pq.read_table(f).to_pandas()

    def read_text(self, ref: ArtifactRef | str) -> str:
        path = self.check_inside(ref.path if isinstance(ref, ArtifactRef) else ref)
        with self.fs.open(path, "rb") as f:
            return f.read().decode("utf-8")

    def is_intact(self, ref: ArtifactRef) -> bool:
        """True when the artifact exists and its bytes still have the recorded fingerprint."""
        path = self.check_inside(ref.path)
        return self.fs.exists(path) and fingerprint_file(path, self.fs) == ref.fingerprint

    def list_partials(self, *parts: str) -> list[str]:
        """Leftover temporary files under a folder (there should be none after any write)."""
        base = self.path(*parts)
        if not self.fs.exists(base):
            return []
        return [p for p in self.fs.find(base) if p.rsplit("/", 1)[-1].startswith(".tmp-")]

    def remove_partials(self, *parts: str) -> list[str]:
        """Delete leftover temporary files under a folder (a write killed before its rename); returns them.

        Call it when a run starts, before any stage writes: every partial then belongs to an earlier run."""
        partials = self.list_partials(*parts)
        for partial in partials:
            self.fs.rm(partial)
        return partials


def write_manifest(store: ArtifactStore, experiment: str, *, config: dict, models: dict[str, str],
                   signatures: dict[str, str], stages: dict[str, dict[str, Any]],
                   report: dict | None = None) -> ArtifactRef:
    """Write ``<experiment>/manifest.json``: config, package versions, models, signatures, every stage call
    (state, seconds, failure reason, and its result: each file it wrote with its fingerprint), every file of
    the run (``<stage call>/<output>``), and what the report needs besides the artifacts (``synthugc report
    RUN_DIR`` rebuilds from it)."""
    artifacts = {f"{name}/{output}": ref for name, stage in stages.items() if stage.get("result")
                 for output, ref in stage["result"]["outputs"].items()}
    manifest = {
        "experiment": experiment,
        "config": config,
        "versions": package_versions(
            ["synthugc", "torch", "transformers", "sentence-transformers", "prefect", "pandas", "pyarrow",
             "sacrebleu", "spacy"]),
        "models": models,
        "signatures": signatures,
        "stages": stages,
        "artifacts": dict(sorted(artifacts.items())),
        "report": report or {},
    }
    return store.write_text(json.dumps(manifest, indent=2, sort_keys=True), experiment, "manifest.json")
