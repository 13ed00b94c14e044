"""Style preservation (seed 000 §4.2, Table 2): style-embedding cosine and Fréchet distance, POS-trigram
Jaccard (sample level, the "POS score") and POS-trigram Jensen-Shannon divergence (distribution level).

Choices, all in the signatures:

- style vectors: :func:`tasks.models.style_encoders.load_style_encoder` (offline default: the
  stylometric vector; production: idiolect embeddings, Zhu & Jurgens 2021);
- POS tags: spaCy Universal POS (``tagset="upos"``; ``"ptb"`` for Penn tags), whitespace tokens dropped,
  each distinct text tagged once (:func:`pos_tags`);
- POS trigrams: contiguous tag trigrams of each text; with ``padding=True`` the tag sequence is first padded
  with two ``<s>`` and two ``</s>`` markers (so texts of 1-2 tokens have trigrams and sentence starts/ends
  count); default ``padding=False``, the plain definition;
- ``pos_jaccard`` is the Jaccard *similarity* |A∩B| / |A∪B| of the trigram sets (higher = more similar, as
  the paper's Table 3 "POS score", where higher is better; Jaccard distance = 1 - it). When neither text
  has a trigram it is NaN with a reason; when only one has none it is 0;
- ``pos_jsd``: trigram counts pooled over each whole set, normalised to distributions over the union of
  trigrams, JSD with log base 2 (in [0, 1]; equal to ``scipy.spatial.distance.jensenshannon(p, q, 2)**2``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from tasks.metrics.base import DistributionScore, MetricResult, reason_column
from tasks.metrics.frechet import FD_METHODS, cov_tag, frechet_between
from tasks.models.embeddings import EmbeddingCache
from tasks.models.style_encoders import (
    StyleEncoder,
    load_style_encoder,
    pos_tags,
    resolve_tagger,
    style_vectors,
)
from tasks.signatures import make_signature

__all__ = ["pos_jaccard", "pos_jsd", "pos_tags", "pos_trigrams", "style_cosine", "style_frechet"]

BOS, EOS = "<s>", "</s>"


def _encoder_signature(metric: str, encoder: StyleEncoder, **extra: object) -> str:
    return make_signature(metric, **encoder.signature_fields(), **extra)


def style_cosine(sources: Sequence[str], synthetic: Sequence[str], *, encoder: Any = None,
                 cache: EmbeddingCache | None = None) -> MetricResult:
    """Cosine similarity between the style vectors of each source and its synthetic text (column
    ``style_cosine``, higher = style kept). A pair where either vector is zero (e.g. an empty text with
    the stylometric encoder) is NaN, and ``style_cosine_reason`` says why."""
    sources, synthetic = list(sources), list(synthetic)
    if len(sources) != len(synthetic):
        raise ValueError(f"style_cosine: {len(sources)} sources but {len(synthetic)} synthetic texts")
    encoder = load_style_encoder(encoder)
    n = len(sources)
    scores = np.full(n, np.nan)
    reasons: list[str | None] = [None] * n
    if n:
        vecs = style_vectors(sources + synthetic, encoder, cache=cache)
        a, b = vecs[:n], vecs[n:]
        na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
        ok = (na > 0) & (nb > 0)
        scores[ok] = np.einsum("ij,ij->i", a[ok], b[ok]) / (na[ok] * nb[ok])
        scores = np.clip(scores, -1.0, 1.0)
        for i in np.flatnonzero(~ok):
            side = "source and synthetic" if na[i] == 0 and nb[i] == 0 else ("source" if na[i] == 0 else "synthetic")
            reasons[i] = f"zero style vector ({side} text empty)"
    frame = pd.DataFrame({"style_cosine": scores, reason_column("style_cosine"): pd.array(reasons, dtype="string")})
    return MetricResult(scores=frame, signatures={"style_cosine": _encoder_signature("style_cosine", encoder,
                                                                                     sim="cosine")})


def style_frechet(real: Sequence[str], synthetic: Sequence[str], *, encoder: Any = None,
                  cache: EmbeddingCache | None = None, shrinkage: float | str | None = None,
                  method: str = "eigh") -> DistributionScore:
    """Fréchet distance between Gaussian fits of the real and synthetic style vectors (seed 000: "idiolect
    embedding Fréchet distance", lower = closer), via :func:`tasks.metrics.frechet.frechet_between` (sample
    covariance by default). NaN with a reason when a side has fewer than 2 texts."""
    real, synthetic = list(real), list(synthetic)
    if method not in FD_METHODS:
        raise ValueError(f"method must be one of {FD_METHODS}, not {method!r}")
    encoder = load_style_encoder(encoder)
    signature = _encoder_signature("style_frechet", encoder, cov=cov_tag(shrinkage), fd=f"squared-{method}")
    if len(real) < 2 or len(synthetic) < 2:
        return DistributionScore("style_frechet", float("nan"), signature,
                                 reason=f"needs at least 2 texts on each side (real {len(real)}, "
                                        f"synthetic {len(synthetic)})")
    vecs = style_vectors(real + synthetic, encoder, cache=cache)
    value = frechet_between(vecs[:len(real)], vecs[len(real):], shrinkage=shrinkage, method=method)
    return DistributionScore("style_frechet", value, signature)


def pos_trigrams(tags: Sequence[str], *, padding: bool = False) -> list[tuple[str, str, str]]:
    """Contiguous tag trigrams, optionally padded with two BOS and two EOS markers (none for no tags)."""
    seq = list(tags)
    if padding and seq:
        seq = [BOS, BOS, *seq, EOS, EOS]
    return list(zip(seq, seq[1:], seq[2:], strict=False))


def _pos_signature(metric: str, tagger_id: str, tagset: str, padding: bool, **extra: object) -> str:
    return make_signature(metric, model=tagger_id, tagset=tagset, n=3, pad=padding, tokenizer="spacy",
                          ws="drop", **extra)


def pos_jaccard(sources: Sequence[str], synthetic: Sequence[str], *, tagger: Any = None, tagset: str = "upos",
                padding: bool = False, cache: EmbeddingCache | None = None) -> MetricResult:
    """Jaccard similarity of the sets of POS trigrams of each source and its synthetic text (column
    ``pos_jaccard``; seed 000's sample-level POS score, Roemmele et al. 2017). NaN with a reason in
    ``pos_jaccard_reason`` when neither text has a trigram (fewer than 3 tokens each, unless padded)."""
    sources, synthetic = list(sources), list(synthetic)
    if len(sources) != len(synthetic):
        raise ValueError(f"pos_jaccard: {len(sources)} sources but {len(synthetic)} synthetic texts")
    _, tagger_id = resolve_tagger(tagger)
    n = len(sources)
    tags = pos_tags(sources + synthetic, tagger, tagset=tagset, cache=cache) if n else []
    scores = np.full(n, np.nan)
    reasons: list[str | None] = [None] * n
    for i in range(n):
        a = set(pos_trigrams(tags[i], padding=padding))
        b = set(pos_trigrams(tags[n + i], padding=padding))
        union = a | b
        if union:
            scores[i] = len(a & b) / len(union)
        else:
            reasons[i] = "no POS trigram in either text (fewer than 3 tokens)" if not padding else "both texts empty"
    frame = pd.DataFrame({"pos_jaccard": scores, reason_column("pos_jaccard"): pd.array(reasons, dtype="string")})
    return MetricResult(scores=frame, signatures={"pos_jaccard": _pos_signature(
        "pos_jaccard", tagger_id, tagset, padding, sim="jaccard")})


def trigram_distributions(real_tags: Sequence[Sequence[str]], synthetic_tags: Sequence[Sequence[str]], *,
                          padding: bool = False) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str, str]]]:
    """(p, q, trigrams): pooled trigram relative frequencies of both sets over the union of their trigrams
    (sorted); a side without trigrams gives an all-zero vector."""
    cr: Counter = Counter()
    cs: Counter = Counter()
    for t in real_tags:
        cr.update(pos_trigrams(t, padding=padding))
    for t in synthetic_tags:
        cs.update(pos_trigrams(t, padding=padding))
    grams = sorted(set(cr) | set(cs))
    p = np.array([cr[g] for g in grams], dtype=np.float64)
    q = np.array([cs[g] for g in grams], dtype=np.float64)
    if p.sum() > 0:
        p /= p.sum()
    if q.sum() > 0:
        q /= q.sum()
    return p, q, grams


def jensen_shannon_base2(p: np.ndarray, q: np.ndarray) -> float:
    """JSD(p, q) = H(m) - (H(p) + H(q))/2 with m = (p+q)/2, log base 2 (in [0, 1]); 0 log 0 = 0."""
    m = (p + q) / 2

    def kl(x: np.ndarray) -> float:
        nz = x > 0
        return float(np.sum(x[nz] * np.log2(x[nz] / m[nz])))

    return min(max((kl(p) + kl(q)) / 2, 0.0), 1.0)


def pos_jsd(real: Sequence[str], synthetic: Sequence[str], *, tagger: Any = None, tagset: str = "upos",
            padding: bool = False, cache: EmbeddingCache | None = None) -> DistributionScore:
    """Jensen-Shannon divergence (base 2, in [0, 1], lower = closer) between the POS-trigram distributions
    of the real and the synthetic set (seed 000, distribution-level syntactic style). NaN with a reason
    when a set is empty or has no trigram."""
    real, synthetic = list(real), list(synthetic)
    _, tagger_id = resolve_tagger(tagger)
    signature = _pos_signature("pos_jsd", tagger_id, tagset, padding, divergence="jsd", base=2)
    if not real or not synthetic:
        return DistributionScore("pos_jsd", float("nan"), signature,
                                 reason=f"empty text set (real {len(real)}, synthetic {len(synthetic)})")
    tags = pos_tags(real + synthetic, tagger, tagset=tagset, cache=cache)
    p, q, _ = trigram_distributions(tags[:len(real)], tags[len(real):], padding=padding)
    if p.sum() == 0 or q.sum() == 0:
        side = "real" if p.sum() == 0 else "synthetic"
        return DistributionScore("pos_jsd", float("nan"), signature,
                                 reason=f"no POS trigram in the {side} set (all texts shorter than 3 tokens)")
    return DistributionScore("pos_jsd", jensen_shannon_base2(p, q), signature)
