"""Embedding re-identification: the mean sentence embedding of each history author against the mean
sentence embedding of each synthetic timeline, by cosine (a semantic linkage attack, beside the
stylometric one; it finds users who keep writing about the same things).

It encodes every history post with the shared sentence encoder (role ``sentence_encoder``, cached per
text), so it belongs on a GPU machine at the article's scale; on CPU it is off by default and meant for
small corpora. Attribution follows :mod:`tasks.privacy.attribution`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tasks.errors import InputError
from tasks.metrics.base import make_signature
from tasks.privacy.attribution import Setting, attribute_scores, held_out_doc_ids, timeline_codes
from tasks.privacy.reidentify import HistorySource, ReidResult, text_batches


def _mean_unit(vectors: np.ndarray, owner: np.ndarray, n_owners: int) -> np.ndarray:
    """L2-normalised mean vector per owner (zero where an owner has none)."""
    sums = np.zeros((n_owners, vectors.shape[1] if vectors.ndim == 2 else 0))
    if len(owner):
        np.add.at(sums, owner, vectors)
    norms = np.linalg.norm(sums, axis=1)
    return sums / np.where(norms > 0, norms, 1.0)[:, None]


def reidentify_embedding(histories: HistorySource, synthetic: pd.DataFrame, *, setting: Setting = "full",
                         model: str | None = None, cache: Any = None, chunk_rows: int = 100_000) -> ReidResult:
    """Attribute each synthetic timeline to the history author with the closest mean embedding."""
    from tasks.models.embeddings import sentence_embeddings
    from tasks.models.registry import model_id, resolve_model

    for col in ("group_id", "author_id", "text"):
        if col not in synthetic.columns:
            raise InputError("synthetic data lacks required column", column=col)
    spec = resolve_model("sentence_encoder", model)
    held = held_out_doc_ids(synthetic, setting)
    frames = [b.to_pandas() for b in text_batches(histories, chunk_rows, held)]
    hist = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({"author_id": [], "text": []})
    hist = hist[hist["author_id"].notna()]
    codes, authors = pd.factorize(hist["author_id"], sort=False)
    texts = hist["text"].fillna("").astype(str).tolist()
    author_vecs = _mean_unit(sentence_embeddings(texts, spec, cache), codes, len(authors)) if texts \
        else np.zeros((0, 0))
    t_codes, groups, true_author, n_posts = timeline_codes(synthetic)
    syn_vecs = sentence_embeddings(synthetic["text"].fillna("").astype(str).tolist(), spec, cache)
    timeline_vecs = _mean_unit(syn_vecs, t_codes, len(groups)) if len(synthetic) else np.zeros((0, 0))
    scores = timeline_vecs @ author_vecs.T if len(authors) and len(groups) else np.zeros((len(groups), len(authors)))
    per, summary = attribute_scores(scores, np.asarray(authors, dtype=object), groups, true_author, n_posts)
    signature = make_signature("reid_embedding", model=model_id(spec), profile="mean", sim="cosine")
    summary = {"attack": "embedding", "adversary": setting, **summary, "accuracy": summary["accuracy_at_1"],
               "n_history_posts": len(hist), "n_history_users": len(authors), "n_synthetic_posts": len(synthetic),
               "signature": signature}
    return ReidResult(per_timeline=per, summary=summary)
