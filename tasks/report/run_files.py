"""Where a finished run keeps its artifacts, so the report, the human-evaluation sheet and
``synthugc report RUN_DIR`` read a run the same way, without recomputing anything.

A run directory is ``<storage_root>/<experiment>``; its ``manifest.json`` (written at the end of every run)
holds the config and every stage's result; :class:`~tasks.layout.RunLayout` reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.errors import InputError
from tasks.layout import RunLayout, stage_kind


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
    def layout(self) -> RunLayout:
        """The run's stage results, with paths under this run directory even when the run was moved."""
        layout = RunLayout.from_manifest(self.manifest())
        corpus = layout.one("split", "corpus")
        private = any(r.private for r in layout.of("split"))  # under private/ in a pseudonymising run
        suffix = "/" + stage_kind("split").relative_path("corpus", {}, private=private)
        if corpus is None or not corpus.path.endswith(suffix):
            return layout
        recorded_run = corpus.path[: -len(suffix)]
        return layout.relocated(recorded_run, str(self.root.resolve()))

    def config(self) -> dict[str, Any]:
        return dict(self.manifest().get("config", {}))

    def strategy_families(self) -> dict[str, str]:
        """Strategy label -> registered strategy name (``dp``, ``stymask``, ...), from the run's config."""
        strategies = self.config().get("generate", {}).get("strategies", [])
        return {s.get("label") or s["name"]: s["name"] for s in strategies}

    def strategy_labels(self) -> list[str]:
        """Labels that have generated shards outside private/, in config order (then any others, sorted): in a
        pseudonymising run, not the strategies that rewrote the original texts."""
        present = set(self.layout.shards(public=True))
        ordered = [label for label in self.strategy_families() if label in present]
        return ordered + sorted(present - set(ordered))

    def corpus(self) -> Path:
        """The corpus a person may read beside the outputs: the pseudonymised one in a pseudonymising run."""
        ref = self.layout.one("pseudonymize", "corpus") or self.layout.one("split", "corpus")
        if ref is None:
            raise InputError(f"{self.root / 'manifest.json'}: the run has no split corpus; rerun it")
        return Path(ref.path)

    def synthetic_shards(self, label: str) -> list[Path]:
        return [Path(ref.path) for ref in self.layout.shards().get(label, [])]

    def read_synthetic(self, label: str) -> pd.DataFrame:
        shards = self.synthetic_shards(label)
        if not shards:
            raise InputError(f"{self.root / 'manifest.json'}: no generated shards for strategy {label!r}")
        return pd.concat([pd.read_parquet(p) for p in shards], ignore_index=True)

    def sample_scores(self, label: str) -> Path:
        return self.root / stage_kind("metrics").relative_path("sample_scores", {"label": label})

    @property
    def human_eval_dir(self) -> Path:
        return self.root / "human_eval"
