"""Where a finished run keeps its artifacts, so the report, the human-evaluation sheet and
``synthugc report RUN_DIR`` read a run the same way, without recomputing anything.

A run directory is ``<storage_root>/<experiment>``; its ``manifest.json`` (written at the end of every run)
holds the config and the artifact list. The layout below is the one the experiment flow writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.errors import InputError


@dataclass(frozen=True)
class RunFiles:
    """The files of one run directory (a local path)."""

    root: Path

    @classmethod
    def open(cls, run_dir: str | Path) -> RunFiles:
        """A run directory that has a manifest; otherwise one line saying what is missing."""
        root = Path(run_dir)
        if not (root / "manifest.json").is_file():
            raise InputError(f"{root}: not a run directory (no manifest.json); give <storage_root>/<experiment> "
                             "of a finished `synthugc run`")
        return cls(root)

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.root / "manifest.json").read_text(encoding="utf-8"))

    @cached_property
    def _recorded_root(self) -> str | None:
        """The run directory as the manifest recorded it (the split corpus sits right under it)."""
        corpus = self.manifest().get("artifacts", {}).get("split/corpus", {}).get("path", "")
        suffix = "/split/corpus.parquet"
        return corpus[: -len(suffix)] if corpus.endswith(suffix) else None

    def resolve(self, recorded: str) -> Path:
        """An artifact path from the manifest, under this run directory even when the run was moved."""
        old = self._recorded_root
        if old and recorded.startswith(old + "/"):
            return self.root / recorded[len(old) + 1:]
        return Path(recorded)

    def _generated(self) -> dict[str, list[Path]]:
        """Strategy label -> its shards as the manifest lists them (not whatever lies on disk: an earlier
        run's leftovers or a strategy since removed from the config are not this run's)."""
        out: dict[str, list[Path]] = {}
        for name, ref in sorted(self.manifest().get("artifacts", {}).items()):
            parts = name.split("/")
            if len(parts) == 3 and parts[0] == "generate":
                out.setdefault(parts[1], []).append(self.resolve(ref["path"]))
        return out

    def config(self) -> dict[str, Any]:
        return dict(self.manifest().get("config", {}))

    def strategy_families(self) -> dict[str, str]:
        """Strategy label -> registered strategy name (``dp``, ``stymask``, ...), from the run's config."""
        strategies = self.config().get("generate", {}).get("strategies", [])
        return {s.get("label") or s["name"]: s["name"] for s in strategies}

    def strategy_labels(self) -> list[str]:
        """Labels that have generated shards, in config order (then any others, sorted). Runs whose manifest
        predates the shard list fall back to the folders on disk."""
        present = set(self._generated()) or {p.name for p in (self.root / "generate").glob("*") if p.is_dir()}
        ordered = [label for label in self.strategy_families() if label in present]
        return ordered + sorted(present - set(ordered))

    def artifact(self, *parts: str) -> Path:
        """``<run>/<parts...>``; the manifest's absolute paths may point elsewhere once a run dir is moved."""
        return self.root.joinpath(*parts)

    def corpus(self) -> Path:
        return self.artifact("split", "corpus.parquet")

    def synthetic_shards(self, label: str) -> list[Path]:
        generated = self._generated()
        if generated:
            return generated.get(label, [])
        return sorted((self.root / "generate" / label).glob("shard-*.parquet"))

    def read_synthetic(self, label: str) -> pd.DataFrame:
        shards = self.synthetic_shards(label)
        if not shards:
            raise InputError(f"{self.root / 'generate' / label}: no generated shards for strategy {label!r}")
        return pd.concat([pd.read_parquet(p) for p in shards], ignore_index=True)

    def sample_scores(self, label: str) -> Path:
        return self.artifact("metrics", label, "sample_scores.parquet")

    @property
    def human_eval_dir(self) -> Path:
        return self.root / "human_eval"
