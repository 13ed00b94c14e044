"""The embedding attack (mean sentence embeddings per author), as the registry runs it; the method is
:mod:`tasks.privacy.embedding_attack`."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.privacy.attacks import ProfilingAttack, register_attack
from tasks.privacy.attribution import Setting
from tasks.privacy.embedding_attack import (
    EmbeddingProfiles,
    embedding_attack,
    embedding_signature,
    profile_histories,
)
from tasks.privacy.reidentify import HistorySource, ReidResult
from tasks.settings import run_cache_dir

#: History posts the attack encodes on CPU when ``all`` attacks are asked for (MiniLM on 2 cores: ~140 posts/s,
#: so about a minute, once: every text's vector is kept in the embedding cache); above it, only on a GPU.
CPU_POSTS = 10_000


@dataclass(frozen=True)
class EmbeddingAttackParams:
    """The sentence encoder (a short name, local folder or hub id; default: the ``sentence_encoder`` role's)."""

    model: str | None = None

    @property
    def signature(self) -> str:
        return embedding_signature(self.model)


@functools.cache
def _cache_in(folder: Path) -> Any:
    """The embedding cache every attack of one run's cache folder shares in this process
    (``<folder>/embeddings.sqlite``, the file the metric stages use)."""
    # deferred: loads sqlite3 only when this runs
    from tasks.models.embeddings import EmbeddingCache

    folder.mkdir(parents=True, exist_ok=True)
    return EmbeddingCache(folder / "embeddings.sqlite")


@register_attack("embedding", params=EmbeddingAttackParams, needs_gpu=True, cpu_posts=CPU_POSTS)
class EmbeddingAttack(ProfilingAttack):
    """Topics: mean sentence embedding per author, nearest by cosine (encodes every history post: a GPU attack)."""

    params: EmbeddingAttackParams

    def __init__(self, params: EmbeddingAttackParams) -> None:
        super().__init__(params)
        #: the run's cache folder, taken where the attack is built (the stage's thread): the threads that
        #: prepare it later keep the run's embedding cache (:func:`tasks.settings.run_cache_dir`)
        self.cache_dir = run_cache_dir()

    def _cache(self) -> Any:
        return _cache_in(self.cache_dir)

    def profile(self, histories: HistorySource, held_out: frozenset[str] | None) -> EmbeddingProfiles:
        """Authors x 384 x 8 B per setting with MiniLM: 116 MB at the article's 37.9k authors."""
        return profile_histories(histories, model=self.params.model, held_out=held_out, cache=self._cache())

    def attribute(self, profiles: EmbeddingProfiles, timelines: pd.DataFrame, setting: Setting) -> ReidResult:
        return embedding_attack(profiles, timelines, setting, cache=self._cache())
