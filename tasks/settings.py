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


def get_settings() -> Settings:
    """The current settings (read from the environment on every call, so tests can change it)."""
    return Settings()
