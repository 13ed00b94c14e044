"""The clustering bag metrics ClusTF and ClusSBERT (Filice et al. §3, Algorithm 1; choices in
:mod:`tasks.metrics.bags`): DBSCAN over both bags' encodings, scored by how far each cluster's share of
reference texts is from the bags' overall share."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import numpy as np

from tasks.metrics.bag_common import Embed, _check_bags, _unit_rows, default_embed, word_tokens

# --- clustering (Algorithm 1) ---------------------------------------------------------------------------


def _cosine_distances(x: np.ndarray) -> np.ndarray:
    """1 - cos between rows; two all-zero rows (empty texts) are at distance 0, zero vs non-zero at 1."""
    unit = _unit_rows(x)
    dist = np.clip(1.0 - unit @ unit.T, 0.0, 2.0)
    zero = np.linalg.norm(x, axis=1) == 0
    dist[np.ix_(zero, ~zero)] = 1.0
    dist[np.ix_(~zero, zero)] = 1.0
    dist[np.ix_(zero, zero)] = 0.0
    np.fill_diagonal(dist, 0.0)
    return dist


def tf_encode(texts: Sequence[str]) -> np.ndarray:
    """Dense TF vectors (``word_tokens`` counts) of the texts over their own vocabulary."""
    counts = [Counter(word_tokens(t)) for t in texts]
    vocab = {w: i for i, w in enumerate(sorted(set().union(*counts)))} if counts else {}
    out = np.zeros((len(texts), max(len(vocab), 1)), dtype=np.float64)
    for i, c in enumerate(counts):
        for w, k in c.items():
            out[i, vocab[w]] = k
    return out


def cluster_score(reference: Sequence[str], generated: Sequence[str], *,
                  encoder: Literal["tf", "sbert"] = "tf", embed: Embed | None = None, eps: float = 0.5,
                  min_samples: int = 1) -> float:
    """Algorithm 1 (bag similarity by clustering): B = G + R (duplicates kept), p(B) = |R|/|B|; DBSCAN over
    the encodings of B (cosine distance, ``eps``, ``min_samples``; noise points are singleton clusters);
    per cluster d(C) = |p(B) - p(C)| weighted by |C|/|B|; returns ``1 / sum_C dbar(C)`` (``inf`` when
    every cluster has exactly the expected share of R; sums below 1e-12 count as 0).
    ``encoder='tf'`` is the article's ClusTF; ``'sbert'`` uses the sentence encoder."""
    from sklearn.cluster import DBSCAN

    _check_bags(reference, generated)
    texts = [*reference, *generated]
    is_ref = np.array([True] * len(reference) + [False] * len(generated))
    if encoder == "tf":
        x = tf_encode(texts)
    elif encoder == "sbert":
        unique = list(dict.fromkeys(texts))
        vectors = np.asarray((embed or default_embed())(unique), dtype=np.float64)
        pos = {t: i for i, t in enumerate(unique)}
        x = vectors[[pos[t] for t in texts]]
    else:
        raise ValueError(f"cluster_score: encoder must be 'tf' or 'sbert', not {encoder!r}")
    labels = DBSCAN(eps=eps, min_samples=min_samples, metric="precomputed").fit(_cosine_distances(x)).labels_
    labels = labels.copy()
    noise = labels == -1
    labels[noise] = labels.max(initial=-1) + 1 + np.arange(int(noise.sum()))  # singleton clusters
    size_b = len(texts)
    p_b = len(reference) / size_b
    total = 0.0
    for c in np.unique(labels):
        members = labels == c
        p_c = is_ref[members].mean()
        total += abs(p_b - p_c) * members.sum() / size_b
    return math.inf if total < 1e-12 else 1.0 / total

