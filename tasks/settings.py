"""Process-wide settings from SYNTHUGC_* environment variables (one object; the config file can override
the storage root per experiment)."""

from __future__ import annotations

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
