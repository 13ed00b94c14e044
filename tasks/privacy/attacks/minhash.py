"""The MinHash-LSH attack (seed 000 §5.3.2), as the registry runs it; the method is :mod:`tasks.privacy.reidentify`."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

import pandas as pd

from tasks.privacy.attacks import Attack, register_attack
from tasks.privacy.attribution import Setting
from tasks.privacy.reidentify import (
    HistorySource,
    LSHParams,
    ReidResult,
    reidentify,
    reidentify_signed,
    sign_histories,
)
from tasks.signatures import make_signature


@dataclass(frozen=True)
class MinHashAttackParams(LSHParams):
    """The LSH parameters and the optional Jaccard filter on candidate pairs."""

    jaccard_threshold: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.jaccard_threshold is not None and not 0 < self.jaccard_threshold <= 1:
            raise ValueError(f"jaccard_threshold must be in (0, 1]; got {self.jaccard_threshold}")

    @property
    def lsh(self) -> LSHParams:
        return LSHParams(**{f.name: getattr(self, f.name) for f in fields(LSHParams)})


@dataclass(frozen=True)
class _Prepared:
    histories: HistorySource
    setting: Setting
    index: str | tuple[str, ...] | None  # several: the signed shards of the histories (:func:`reidentify_signed`)


@register_attack("minhash", params=MinHashAttackParams, builds_index=True)
class MinHashAttack(Attack):
    """Near-duplicate posts: MinHash-LSH over character n-grams, a vote per matching post for its author."""

    params: MinHashAttackParams

    @property
    def signature(self) -> str:
        return make_signature("reid_minhash", **asdict(self.params.lsh), jaccard=self.params.jaccard_threshold)

    def build_index(self, histories: HistorySource, out_path: str | os.PathLike) -> None:
        """Sign the histories once (band keys, signatures when the Jaccard filter is on, doc ids)."""
        sign_histories(histories, out_path, **asdict(self.params.lsh),
                       with_signatures=self.params.jaccard_threshold is not None)

    def prepare(self, histories: HistorySource, setting: Setting, held_out: frozenset[str] | None, *,
                index: str | tuple[str, ...] | None = None) -> Any:
        """Nothing to build per setting: the run streams the histories (or reads the index), skipping the
        held-out documents as it goes."""
        return _Prepared(histories, setting, index)

    def run(self, prepared: _Prepared, timelines: pd.DataFrame) -> ReidResult:
        jaccard = self.params.jaccard_threshold
        if prepared.index is not None:
            return reidentify_signed(prepared.index, timelines, jaccard_threshold=jaccard, setting=prepared.setting)
        return reidentify(prepared.histories, timelines, **asdict(self.params.lsh), jaccard_threshold=jaccard,
                          setting=prepared.setting)
