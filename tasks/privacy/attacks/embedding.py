"""The embedding attack (mean sentence embeddings per author), as the registry runs it; the method is
:mod:`tasks.privacy.embedding_attack`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from tasks.metrics.base import make_signature
from tasks.privacy.attacks import Attack, register_attack
from tasks.privacy.attribution import Setting
from tasks.privacy.reidentify import HistorySource, ReidResult


@dataclass(frozen=True)
class EmbeddingAttackParams:
    """The sentence encoder (a short name, local folder or hub id; default: the ``sentence_encoder`` role's)."""

    model: str | None = None


@register_attack("embedding", params=EmbeddingAttackParams, needs_gpu=True)
class EmbeddingAttack(Attack):
    """Topics: mean sentence embedding per author, nearest by cosine (encodes every history post: a GPU attack)."""

    params: EmbeddingAttackParams

    @property
    def signature(self) -> str:
        from tasks.models.registry import model_id, resolve_model

        return make_signature("reid_embedding", model=model_id(resolve_model("sentence_encoder", self.params.model)),
                              profile="mean", sim="cosine")

    def prepare(self, histories: HistorySource, setting: Setting, held_out: frozenset[str] | None, *,
                index: str | None = None) -> Any:
        """The histories and the setting: the run encodes them (the embedding cache keeps every text's vector)."""
        return histories, setting

    def run(self, prepared: Any, timelines: pd.DataFrame) -> ReidResult:
        from tasks.privacy.embedding_attack import reidentify_embedding

        histories, setting = prepared
        return reidentify_embedding(histories, timelines, setting=setting, model=self.params.model)
