"""What a machine must have to run a run's stages: the storage root (readable and writable), the data files,
the models the run reads, and the same package versions as the machine that planned the run.

:func:`environment_problems` runs on each worker of an external cluster before the first stage (and in a
flow run a Prefect worker picked up), so a worker that cannot see the shared storage says so in one line
instead of failing a stage with a traceback. Plain functions: the flows layer sends them to the workers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any

from tasks.errors import SynthUGCError
from tasks.models.registry import resolve_model
from tasks.paths import is_url

#: The packages whose versions must match between the planning machine and every worker (numbers differ
#: across versions of these; distributed's own check covers dask, distributed, msgpack, cloudpickle, ...).
CHECKED_PACKAGES = ("synthugc", "torch", "transformers", "numpy", "pandas", "pyarrow", "scikit-learn")
SHARED_STORAGE_HINT = ("mount the storage root at the same path on every worker, or use a shared filesystem URL "
                       "(SYNTHUGC_STORAGE_ROOT or the config's storage_root)")
SHARED_DATA_HINT = "put the input files on storage every worker mounts at the same path"


def planned_versions() -> dict[str, str]:
    """What every worker must match: python and :data:`CHECKED_PACKAGES` versions, and this package's source
    hash (an editable install on a worker can hold other code under the same version)."""
    # deferred: loads pyarrow only when this runs
    from tasks.store import code_version, package_versions

    return {**package_versions(CHECKED_PACKAGES), "synthugc source": code_version("tasks", "flows")[:16]}


def _fs(root: str) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(root)


def leave_probe(root: str) -> tuple[str, str]:
    """Write a probe file with a fresh token into the storage root (created if absent), where the run is
    planned; every worker must then read the same token there (:func:`environment_problems`). Returns
    (probe path, token); :func:`remove_probe` takes it away."""
    fs, path = _fs(root)
    fs.makedirs(path, exist_ok=True)
    token = uuid.uuid4().hex
    probe = f"{path.rstrip('/')}/.synthugc-preflight-{token}"
    fs.pipe_file(probe, token.encode())
    return probe, token


def remove_probe(root: str, probe: str) -> None:
    fs, _ = _fs(root)
    fs.rm_file(probe)


def _storage_problem(root: str, probe: tuple[str, str] | None) -> str | None:
    """Why this machine does not share the run's storage root (None when it does): it must read the planning
    machine's probe token, and write and remove a file of its own."""
    try:
        fs, path = _fs(root)
        if probe is not None:
            try:
                seen = fs.cat_file(probe[0]).decode()
            except (OSError, UnicodeDecodeError):
                seen = None
            if seen != probe[1]:
                return f"storage root {root} is not the one the run was planned with (its probe file is not here)"
        else:  # the planning machine: the run creates its storage root
            fs.makedirs(path, exist_ok=True)
        own = f"{path.rstrip('/')}/.synthugc-preflight-{uuid.uuid4().hex}"
        fs.pipe_file(own, b"ok")
        fs.rm_file(own)
        return None
    except OSError as exc:
        return f"storage root {root} is not writable here ({exc.strerror or exc})"


def environment_problems(storage_root: str, files: Mapping[str, str], models: Mapping[str, str | None],
                         versions: Mapping[str, str], probe: tuple[str, str] | None = None) -> list[str]:
    """Everything this machine lacks to run the run's stages, one sentence each with what to do; empty when
    nothing is missing. ``files``: what each input is -> its path; ``models``: role -> the model asked for
    (None: the role's offline default); ``versions``: the planning machine's :func:`planned_versions`;
    ``probe``: the planning machine's :func:`leave_probe`."""
    problems = []
    if (problem := _storage_problem(storage_root, probe)) is not None:
        problems.append(f"{problem}: {SHARED_STORAGE_HINT}")
    for what, path in files.items():
        if not is_url(path) and not os.access(path, os.R_OK):
            problems.append(f"{what} {path} is not readable here: {SHARED_DATA_HINT}")
    for role, name in models.items():
        try:
            resolve_model(role, name)
        except SynthUGCError as exc:
            problems.append(f"{exc} (install it on every worker)")
    here = planned_versions()
    for name, version in versions.items():
        if here.get(name) != version:
            problems.append(f"{name} is {here.get(name)} here but {version} where the run was planned: install "
                            "the same versions (and this project's same code) on every worker")
    return problems
