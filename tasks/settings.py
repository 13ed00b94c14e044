"""Process-wide settings from SYNTHUGC_* environment variables (one object; the config file can override
the storage root per experiment), and the one place a task finds the paths of the run it works for
(:func:`run_cache_dir`, :func:`run_llm_cache`: those the run's plan named, never relative to the working directory,
HOME or settings of the process that happens to run the task)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Where things live and what may reach the network."""

    model_config = SettingsConfigDict(env_prefix="SYNTHUGC_", extra="ignore")

    storage_root: str = Field("runs", description="Artifact root: a path or an fsspec URL (s3://..., memory://...).")
    data_dir: Path = Field(Path("data"), description="Where public datasets are downloaded and converted.")
    cache_dir: Path = Field(Path(".cache/synthugc"),
                            description="Embedding cache, Prefect results (cache records) and LLM request cache.")
    allow_downloads: bool = Field(False, description="Let model loaders reach the Hugging Face hub (offline when false).")
    dask_address: str | None = Field(None, description="Dask scheduler address; a LocalCluster when unset.")
    stage_concurrency: int = Field(4, ge=1, description="Stages the experiment flow runs side by side (1: one after "
                                                        "the other, the sequential executor).")
    stage_limits: str = Field("cpu=2,llm=4,gpu=1", description="Most stages of each resource class at once: cpu "
                                                               "(in-process work), llm (stages calling an LLM), gpu.")
    task_runner: str = Field("threads", pattern="^(threads|dask)$",
                             description="Where the flows' stages run: threads of this process, or the Dask "
                                         "cluster at dask_address (a local one when unset).")
    plugins: str = Field("", description="Comma-separated modules the deployment flows import first "
                                         "(e.g. to register extra strategies on workers).")
    cpu_attack_posts: int | None = Field(None, ge=0, description="Without a GPU, every attack asked for as 'all' that "
                                         "needs one (embedding) still runs on histories of at most this many posts "
                                         "(0: never on CPU); default: each attack's own limit.")
    fit_processes: int | None = Field(None, ge=1, description="Worker processes that single-core fits (the exact "
                                      "classifier's C grid) run in side by side; default: one per core this process "
                                      "may use; 1: one after the other, in this process.")

    @property
    def offline(self) -> bool:
        """True when nothing may be downloaded (the default)."""
        return not self.allow_downloads

    def resource_limits(self) -> dict[str, int]:
        """``stage_limits`` as a mapping (``cpu=2,llm=4`` -> ``{"cpu": 2, "llm": 4}``)."""
        limits: dict[str, int] = {}
        for item in filter(None, (p.strip() for p in self.stage_limits.split(","))):
            name, _, value = item.partition("=")
            if not value.strip().isdigit() or int(value) < 1:
                raise ValueError(f"SYNTHUGC_STAGE_LIMITS: {item!r} is not resource=N with N >= 1")
            limits[name.strip()] = int(value)
        return limits


def get_settings() -> Settings:
    """The current settings (read from the environment on every call, so tests can change it)."""
    return Settings()


def apply_environment_defaults(allow_downloads: bool | None = None) -> None:
    """Environment defaults for a run on this kind of machine, set only where the user set nothing:
    Hugging Face offline unless downloads are allowed, a patient temporary Prefect server (it takes
    5-18 s to start), no analytics, and quiet tokenizers and model loads. The CLI and the test suite both call it."""
    import os

    allow = get_settings().allow_downloads if allow_downloads is None else allow_downloads
    if not allow:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar per model in the log


#: The environment variable naming the LLM request cache (a SQLite file; none when unset).
LLM_CACHE_ENV = "SYNTHUGC_LLM_CACHE"


@dataclass(frozen=True)
class RunPaths:
    """The paths a stage keeps things in besides its artifacts, as the run's plan named them (absolute):
    ``cache_dir`` (embedding cache, fitted attack models, model exports, history indexes, scratch) and
    ``llm_cache`` (the LLM request cache, None without one)."""

    cache_dir: Path
    llm_cache: Path | None = None


#: The paths of the stage running in this context (set by :func:`planned_paths`).
_STAGE_PATHS: ContextVar[RunPaths | None] = ContextVar("synthugc_stage_paths", default=None)
#: The paths of the stages running in this process now, latest last: what a thread a stage started (a pool, a
#: threaded Dask cluster in the same process) finds, since threads do not inherit the context.
_ACTIVE: list[RunPaths] = []
_ACTIVE_LOCK = threading.Lock()
#: Libraries a stage may load that keep a cache under HOME unless told otherwise: the variable that tells them,
#: and the folder under the run's cache folder they get (matplotlib's font list: the report's plots).
_LIBRARY_CACHES = {"MPLCONFIGDIR": "matplotlib"}


@contextmanager
def planned_paths(cache_dir: str | Path, llm_cache: str | Path | None = None) -> Iterator[RunPaths]:
    """While the block runs, :func:`run_cache_dir` and :func:`run_llm_cache` give these paths (absolute: the
    run's plan made them so on the client), in this context and in the threads this process starts meanwhile.
    Every stage runs in its plan's paths (``flows.stages.RunPlace.caching``), so a stage on a cluster worker keeps
    its caches where the run's settings put them, whatever the worker's working directory, HOME or own settings.
    Libraries that would cache under HOME (:data:`_LIBRARY_CACHES`) are pointed under ``cache_dir`` too, where
    the process's environment names no folder for them."""
    paths = RunPaths(Path(cache_dir), Path(llm_cache) if llm_cache is not None else None)
    for path in (paths.cache_dir, paths.llm_cache):
        if path is not None and not path.is_absolute():
            raise ValueError(f"a run's paths must be absolute (planned on the client), got {str(path)!r}")
    for variable, sub in _LIBRARY_CACHES.items():  # read once, at the library's import
        os.environ.setdefault(variable, str(paths.cache_dir / sub))
    token = _STAGE_PATHS.set(paths)
    with _ACTIVE_LOCK:
        _ACTIVE.append(paths)
    try:
        yield paths
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.remove(paths)
        _STAGE_PATHS.reset(token)


def _planned() -> RunPaths | None:
    """The paths of the stage at hand: this context's, else the stage this process began last, else None."""
    planned = _STAGE_PATHS.get()
    if planned is not None:
        return planned
    with _ACTIVE_LOCK:
        return _ACTIVE[-1] if _ACTIVE else None


def run_cache_dir() -> Path:
    """The cache folder of the work at hand, absolute: every cache, derived model file and scratch file a task
    keeps goes under it. While a stage runs it is the folder the run's plan named (:func:`planned_paths`);
    elsewhere (a command working in its own process) this process's ``cache_dir`` setting, made absolute here.
    Tasks read the folder here, never from :func:`get_settings` themselves."""
    planned = _planned()
    return planned.cache_dir if planned is not None else get_settings().cache_dir.resolve()


def run_llm_cache(env: Mapping[str, str] | None = None) -> Path | None:
    """The LLM request cache of the work at hand: while a stage runs, the one the run's plan named (None: the run
    has none, whatever this process's environment says); elsewhere ``SYNTHUGC_LLM_CACHE`` of ``env`` (default:
    this process's environment), made absolute here."""
    planned = _planned()
    if planned is not None:
        return planned.llm_cache
    value = (os.environ if env is None else env).get(LLM_CACHE_ENV)
    return Path(value).expanduser().resolve() if value else None
