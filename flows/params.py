"""Typed flow parameters for deployments: what the Prefect UI's run form shows.

Each field has a default and a description, so "Run > Custom run" in the UI is a usable form: the
experiment YAML on the worker plus the overrides people change most (strategies, dataset, seed,
metrics, privacy), and free ``key.path=value`` overrides for the rest. ``to_config`` turns them into a
validated :class:`~flows.config_sections.ExperimentConfig` with the same errors (key paths) as the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows.config import parse_config, read_config_file
from flows.config_sections import ExperimentConfig
from tasks.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = "deployments/configs/demo.yaml"


def resolve_config_path(config: str) -> Path:
    """A config path as given, else relative to the repository root (where workers start)."""
    path = Path(config).expanduser()
    if path.is_absolute() or path.is_file():
        return path
    return REPO_ROOT / path


class ExperimentParams(BaseModel):
    """One experiment run: a config file plus the overrides most often changed from the UI."""

    model_config = ConfigDict(extra="forbid", title="Experiment")

    config: str = Field(DEFAULT_CONFIG, description="Experiment YAML on the worker (absolute, or relative to the "
                                                    "repository root), e.g. deployments/configs/demo.yaml.")
    experiment: str | None = Field(None, description="Run name (artifacts under <storage root>/<name>); "
                                                     "default: the config's.")
    strategies: list[str] | None = Field(None, description="Keep only these strategy labels from the config "
                                                           "(default: all of them).")
    dataset: str | None = Field(None, description="Public dataset instead of the config's data "
                                                  "(debates, conventions, rotten_tomatoes).")
    data_path: str | None = Field(None, description="Corpus file (parquet/csv/jsonl in the schema) instead of the "
                                                    "config's data.")
    max_docs: int | None = Field(None, gt=0, description="Keep at most this many documents (whole groups).")
    seed: int | None = Field(None, description="Random seed (default: the config's).")
    metrics: list[str] | None = Field(None, description="Metric names (default: the config's, else all).")
    privacy: bool | None = Field(None, description="Run the privacy attacks (default: the config's).")
    goals: list[str] | None = Field(None, description="Goals the report ranks the strategies for: augment, "
                                                      "augment-longitudinal, share-model, share-model-dp, share-data, "
                                                      "share-data-dp (default: the config's).")
    examples: int | None = Field(None, ge=0, description="Example outputs in the report (0 = off; they show real "
                                                         "text; default: the config's).")
    storage_root: str | None = Field(None, description="Artifact root, a path or fsspec URL "
                                                        "(default: the config's, else SYNTHUGC_STORAGE_ROOT).")
    overrides: list[str] = Field([], description="More overrides as key.path=value, applied "
                                                                   "last (e.g. generate.shard_size=100).")

    def raw_config(self) -> dict[str, Any]:
        """The config mapping after the typed overrides (before ``overrides`` and validation)."""
        path = resolve_config_path(self.config)
        raw = read_config_file(path)
        if self.experiment is not None:
            raw["experiment"] = self.experiment
        if self.seed is not None:
            raw["seed"] = self.seed
        if self.storage_root is not None:
            raw["storage_root"] = self.storage_root
        if self.dataset is not None or self.data_path is not None:
            if self.dataset is not None and self.data_path is not None:
                raise ConfigError("parameters: give dataset or data_path, not both")
            data = {k: v for k, v in (raw.get("data") or {}).items() if k not in ("dataset", "path")}
            raw["data"] = {**data, **({"dataset": self.dataset} if self.dataset else {"path": self.data_path})}
        if self.max_docs is not None:
            raw.setdefault("data", {})["max_docs"] = self.max_docs
        if self.strategies is not None:
            listed = (raw.get("generate") or {}).get("strategies") or []
            by_key = {s.get("label") or s.get("name"): s for s in listed if isinstance(s, dict)}
            unknown = [s for s in self.strategies if s not in by_key]
            if unknown:
                raise ConfigError(f"parameters: strategies: {', '.join(unknown)} not in {path} "
                                  f"(has: {', '.join(by_key) or 'none'})")
            raw["generate"]["strategies"] = [by_key[s] for s in self.strategies]
        if self.metrics is not None:
            raw.setdefault("metrics", {})["names"] = list(self.metrics)
        if self.privacy is not None:
            raw.setdefault("privacy", {})["enabled"] = self.privacy
        if self.goals is not None:
            raw.setdefault("report", {})["goals"] = list(self.goals)
        if self.examples is not None:
            raw.setdefault("report", {})["examples"] = self.examples
        return raw

    def to_config(self) -> ExperimentConfig:
        """The validated experiment config (ConfigError names the key path on a bad value)."""
        return parse_config(self.raw_config(), source=self.config, overrides=list(self.overrides), flag="overrides")
