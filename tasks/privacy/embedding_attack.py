"""Embedding re-identification: the mean sentence embedding of each history author against the mean
sentence embedding of each synthetic timeline, by cosine (a semantic linkage attack, beside the
stylometric one; it finds users who keep writing about the same things).

It encodes every history post with the shared sentence encoder (role ``sentence_encoder``, each text's vector
kept in an embedding cache), so it belongs on a GPU machine at the article's scale; on CPU it runs on histories
small enough to encode within minutes (the registry's ``cpu_posts``). The author profiles are computed once per
(histories, setting) and reused for every timeline set. Attribution follows :mod:`tasks.privacy.attribution`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tasks.errors import InputError
from tasks.models.registry import model_id, resolve_model
from tasks.privacy.attribution import Setting, attribute_scores, held_out_doc_ids, timeline_codes
from tasks.privacy.reidentify import HistorySource, ReidResult, text_batches
from tasks.signatures import make_signature


def _mean_unit(vectors: np.ndarray, owner: np.ndarray, n_owners: int) -> np.ndarray:
    """L2-normalised mean vector per owner (zero where an owner has none)."""
    sums = np.zeros((n_owners, vectors.shape[1] if vectors.ndim == 2 else 0))
    if len(owner):
        np.add.at(sums, owner, vectors)
    norms = np.linalg.norm(sums, axis=1)
    return sums / np.where(norms > 0, norms, 1.0)[:, None]


@dataclass
class EmbeddingProfiles:
    """Every history author's unit mean sentence embedding, and what they were built from."""

    authors: np.ndarray  # object ids, one per row
    vectors: np.ndarray  # (authors, d) unit rows
    n_posts: int
    model: str | None


def embedding_signature(model: str | None) -> str:
    """The attack's signature: the encoder, mean profiles, cosine."""
    return make_signature("reid_embedding", model=model_id(resolve_model("sentence_encoder", model)), profile="mean",
                          sim="cosine")


def profile_histories(histories: HistorySource, *, model: str | None = None, held_out: frozenset[str] | None = None,
                      cache: Any = None, chunk_rows: int = 100_000) -> EmbeddingProfiles:
    """Each history author's unit mean embedding, without the ``held_out`` documents."""
    # deferred: loads fsspec, sqlite3 only when this runs
    from tasks.models.embeddings import sentence_embeddings

    spec = resolve_model("sentence_encoder", model)
    frames = [b.to_pandas() for b in text_batches(histories, chunk_rows, held_out)]
    hist = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({"author_id": [], "text": []})
    hist = hist[hist["author_id"].notna()]
    codes, authors = pd.factorize(hist["author_id"], sort=False)
    texts = hist["text"].fillna("").astype(str).tolist()
    vectors = _mean_unit(sentence_embeddings(texts, spec, cache), codes, len(authors)) if texts else np.zeros((0, 0))
    return EmbeddingProfiles(np.asarray(authors, dtype=object), vectors, len(hist), model)


def embedding_attack(profiles: EmbeddingProfiles, synthetic: pd.DataFrame, setting: Setting = "full", *,
                     cache: Any = None) -> ReidResult:
    """Attribute each synthetic timeline to the history author with the closest mean embedding."""
    # deferred: loads fsspec, sqlite3 only when this runs
    from tasks.models.embeddings import sentence_embeddings

    for col in ("group_id", "author_id", "text"):
        if col not in synthetic.columns:
            raise InputError("synthetic data lacks required column", column=col)
    t_codes, groups, true_author, n_posts = timeline_codes(synthetic)
    spec = resolve_model("sentence_encoder", profiles.model)
    syn_vecs = sentence_embeddings(synthetic["text"].fillna("").astype(str).tolist(), spec, cache)
    timeline_vecs = _mean_unit(syn_vecs, t_codes, len(groups)) if len(synthetic) else np.zeros((0, 0))
    n_authors = len(profiles.authors)
    scores = timeline_vecs @ profiles.vectors.T if n_authors and len(groups) else np.zeros((len(groups), n_authors))
    per, summary = attribute_scores(scores, profiles.authors, groups, true_author, n_posts)
    summary = {"attack": "embedding", "adversary": setting, **summary, "accuracy": summary["accuracy_at_1"],
               "n_history_posts": profiles.n_posts, "n_history_users": n_authors,
               "n_synthetic_posts": len(synthetic), "signature": embedding_signature(profiles.model)}
    return ReidResult(per_timeline=per, summary=summary)


def reidentify_embedding(histories: HistorySource, synthetic: pd.DataFrame, *, setting: Setting = "full",
                         model: str | None = None, cache: Any = None, chunk_rows: int = 100_000) -> ReidResult:
    """Profile the histories (without the synthetic posts' sources in ``disjoint``) and attack."""
    profiles = profile_histories(histories, model=model, held_out=held_out_doc_ids(synthetic, setting), cache=cache,
                                 chunk_rows=chunk_rows)
    return embedding_attack(profiles, synthetic, setting, cache=cache)
