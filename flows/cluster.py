"""Before the first stage: does every machine that will run stages have what the run needs?

On an external Dask cluster (``SYNTHUGC_TASK_RUNNER=dask`` with ``SYNTHUGC_DASK_ADDRESS``) the check runs on
every worker, after distributed's own version check; elsewhere (one machine, or a flow run a Prefect worker
picked up) it runs where the flow runs. A machine that lacks something stops the run with exit 2 and one
line per worker naming what is missing and what to do, instead of a stage's traceback.
"""

from __future__ import annotations

from typing import Any

from flows.config_sections import ExperimentConfig
from tasks.errors import SynthUGCError
from tasks.models.llm import llm_role_settings
from tasks.preflight import environment_problems, leave_probe, planned_versions, remove_probe

#: Roles the metric suite reads whatever the config says (their offline defaults when not configured).
_SUITE_ROLES = ("token_encoder", "sentence_encoder", "pos_tagger")
#: Roles an OpenAI-compatible server may serve (``SYNTHUGC_LLM_ENDPOINT_<ROLE>``): nothing to find on a worker then.
_LLM_ROLES = ("llm", "profiling_llm")


class PreflightError(SynthUGCError):
    """A worker lacks what the run needs: one line per worker and problem."""


def run_needs(cfg: ExperimentConfig, storage_root: str, corpus: str) -> dict[str, Any]:
    """What a machine needs for this run: the storage root, the input files, the models by role."""
    files = {"corpus": corpus}
    if cfg.privacy.reidentify.histories:
        files["histories"] = cfg.privacy.reidentify.histories

    models: dict[str, str | None] = {role: cfg.models.get(role) for role in _SUITE_ROLES}
    models.update({role: name for role, name in cfg.models.items()  # a served LLM is the server's, not a file
                   if role not in _LLM_ROLES or not llm_role_settings(role, name).get("endpoint")})
    return {"storage_root": storage_root, "files": files, "models": models}


def check_here(needs: dict[str, Any]) -> None:
    """The check on this machine (no version comparison: it planned the run)."""
    problems = environment_problems(**needs, versions={})
    if problems:
        raise PreflightError("; ".join(problems))


def check_dask_workers(address: str, needs: dict[str, Any]) -> None:
    """The check on every worker of the Dask cluster at ``address``: distributed's version check, then ours
    (the storage root shared with this machine, the inputs, the models, the versions)."""
    from distributed import Client

    lines = []
    probe = leave_probe(needs["storage_root"])
    try:
        with Client(address, timeout="30s") as client:
            try:
                client.get_versions(check=True)
            except ValueError as exc:  # distributed's mismatch report (dask, distributed, msgpack, ...)
                lines.append(f"Dask cluster {address}: {' '.join(str(exc).split())[:300]}")
            names = {addr: w.get("name", addr) for addr, w in client.scheduler_info()["workers"].items()}
            found = client.run(environment_problems, **needs, versions=planned_versions(), probe=probe,
                               on_error="return")
    finally:
        remove_probe(needs["storage_root"], probe[0])
    if not found:
        lines.append(f"Dask cluster {address}: no worker is connected; start one with `dask worker {address}`")
    for worker, problems in sorted(found.items()):
        if isinstance(problems, BaseException):  # the check itself failed there: old code, a broken install
            problems = [f"the check failed ({type(problems).__name__}: {' '.join(str(problems).split())[:200]}): "
                        "install this project's same code on every worker"]
        who = f"worker {names.get(worker, worker)} ({worker})" if names.get(worker, worker) != worker else f"worker {worker}"
        lines += [f"{who}: {problem}" for problem in problems]
    if lines:
        raise PreflightError("\n".join(lines))
