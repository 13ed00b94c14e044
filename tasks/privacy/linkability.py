"""Linkability: how well a style model tells pairs of posts by one author from pairs by two.

A release at post unit (``synthugc release --unit post``) drops the author and group pseudonyms and shuffles the
rows, so no column or order links an author's posts. Their style still can: an adversary who scores every pair of
released posts by how alike they read, and links the most alike, rebuilds timelines. This module measures that
threat so the dataset card does not overstate what unlinking buys.

Pairs: every same-author pair of the given posts (a uniform sample without replacement of ``max_pairs // 2`` of
them when there are more) and as many different-author pairs drawn at random, both seeded.

Score of a pair: the centred cosine of the two posts' style vectors, the stylometric attack's representation
(:func:`tasks.privacy.stylometric.features.reference_vectorizer` with its default :class:`StyloParams`: sublinear
TF-IDF of character 2-4-grams and word 1-2-grams, case kept, L2-normalised) less the mean vector of the released
posts. It needs no author label of the released posts: the IDF is fitted on the adversary's histories when given
(a parquet file with a ``text`` column), else on the released texts themselves. Centring is the stronger choice
measured: on the 2012 conventions corpus (1,834 posts of 5 consecutive sentences of 181 speakers, IDF on the
posts, seed 0) the plain cosine read AUC 0.631 [0.606, 0.661], the centred one 0.674 [0.649, 0.702] (character
2-4-grams alone 0.628, word unigrams 0.647): the n-grams every speaker uses make every pair alike, and the mean
removes them.

Figure: the AUC of the score for same-author against different-author pairs (0.5: style tells nothing; 1: every
same-author pair reads more alike than every other pair), equal to ``sklearn.metrics.roc_auc_score`` (ties count
half). Its 95% interval is a percentile cluster bootstrap over authors (drawn as
:func:`tasks.intervals.bootstrap` draws, :data:`tasks.intervals.N_RESAMPLES` resamples; a resample without pairs of
both kinds is skipped): the authors are resampled with replacement and each pair
weighted by the multiplicity of its author (same-author pair) or the product of its two authors' (different-author
pair). Pairs that share an author, or a post, are not independent, so DeLong's or a pair bootstrap's interval
would be too narrow; the author is the unit of the privacy claim.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tasks.errors import InputError
from tasks.intervals import CONFIDENCE, N_RESAMPLES

#: At most this many history posts (a seeded sample) fit the IDF: seconds, not minutes, at the article's scale.
HISTORY_FIT_POSTS = 100_000
#: Enumerate every pair of posts below this many pairs; above, draw different-author pairs by rejection.
ENUMERATE_PAIRS = 4_000_000
#: The interval, as the card and the certificate name it.
INTERVAL = (f"{CONFIDENCE:.0%} percentile cluster bootstrap over authors ({N_RESAMPLES:,} resamples; pairs "
            "weighted by their authors' multiplicities)")
KEYS: tuple[str, ...] = ("value", "ci_low", "ci_high", "n_same", "n_other", "n_authors", "n_posts", "model",
                         "interval", "n_resamples")


def _triangle(k: np.ndarray) -> np.ndarray:
    """Pairs among ``k`` items."""
    return k * (k - 1) // 2


def _same_author_pairs(codes: np.ndarray, limit: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) of every same-author pair, or a uniform sample of ``limit`` of them without replacement: a pair is
    a linear index into the authors' triangles, decoded without listing them all."""
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pairs = _triangle(counts.astype(np.int64))
    offsets = np.concatenate([[0], np.cumsum(pairs)])
    total = int(offsets[-1])
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    index = np.arange(total) if total <= limit else np.sort(rng.choice(total, size=limit, replace=False))
    author = np.searchsorted(offsets, index, side="right") - 1
    within = index - offsets[author]
    # within-author linear index -> (a, b), a < b, in row-major order of the upper triangle of a k x k matrix
    k = counts[author].astype(np.int64)
    a = (2 * k - 1 - np.sqrt((2 * k - 1) ** 2 - 8 * within)) // 2
    a = a.astype(np.int64)
    a -= (within < a * (2 * k - a - 1) // 2)  # floating-point guards: a's first pair is <= within
    a += (within >= (a + 1) * (2 * k - a - 2) // 2)
    b = within - a * (2 * k - a - 1) // 2 + a + 1
    return order[starts[author] + a], order[starts[author] + b]


def _other_author_pairs(codes: np.ndarray, want: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``want`` distinct different-author pairs drawn uniformly (all of them when there are fewer)."""
    n = len(codes)
    if want <= 0 or n < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if n * (n - 1) // 2 <= ENUMERATE_PAIRS:
        i, j = np.triu_indices(n, 1)
        keep = codes[i] != codes[j]
        i, j = i[keep], j[keep]
        if len(i) > want:
            pick = np.sort(rng.choice(len(i), size=want, replace=False))
            i, j = i[pick], j[pick]
        return i.astype(np.int64), j.astype(np.int64)
    found = np.empty(0, np.int64)
    for _ in range(100):  # many pairs: almost every draw is a new different-author pair
        i, j = rng.integers(0, n, 2 * want), rng.integers(0, n, 2 * want)
        keep = codes[i] != codes[j]
        low, high = np.minimum(i, j)[keep], np.maximum(i, j)[keep]
        found = np.unique(np.concatenate([found, low * n + high]))
        if len(found) >= want:
            break
    if len(found) > want:
        found = np.sort(rng.choice(found, size=want, replace=False))
    return found // n, found % n


def _codes(authors: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct authors (as strings) and each post's index among them."""
    labels, codes = np.unique(np.asarray([str(a) for a in authors], dtype=object), return_inverse=True)
    return labels, codes.astype(np.int64)


def sample_pairs(authors: Sequence[object], *, seed: int = 0, max_pairs: int = 20_000
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, same): the pairs of posts :func:`same_author_auc` scores, same-author ones first (all of them, or a
    uniform sample of ``max_pairs // 2``), then as many different-author ones drawn at random; seeded."""
    rng = np.random.default_rng(seed)
    _, codes = _codes(authors)
    same_i, same_j = _same_author_pairs(codes, max_pairs // 2, rng)
    other_i, other_j = _other_author_pairs(codes, len(same_i), rng)
    same = np.arange(len(same_i) + len(other_i)) < len(same_i)
    return np.concatenate([same_i, other_i]), np.concatenate([same_j, other_j]), same


def _history_texts(histories: str | Path, rng: np.random.Generator) -> list[str]:
    """The ``text`` column of the histories parquet, a seeded sample of :data:`HISTORY_FIT_POSTS` when longer."""
    import pyarrow.parquet as pq

    path = Path(histories)
    if not path.is_file():
        raise InputError("histories: no such file", file=str(path))
    try:
        column = pq.read_table(path, columns=["text"]).column("text")
    except (KeyError, ValueError) as exc:
        raise InputError(f"histories: needs a 'text' column ({exc})", file=str(path), column="text") from None
    texts = [t if isinstance(t, str) else "" for t in column.to_pylist()]
    if len(texts) > HISTORY_FIT_POSTS:
        texts = [texts[i] for i in np.sort(rng.choice(len(texts), size=HISTORY_FIT_POSTS, replace=False))]
    return texts


def _style_vectorizer(fit_on: Sequence[str]) -> Any:
    """The stylometric attack's TF-IDF (:func:`~tasks.privacy.stylometric.features.reference_vectorizer`) fitted
    on ``fit_on``."""
    # deferred: loads llvmlite, numba, pyarrow, yaml only when this runs
    from tasks.privacy.stylometric.features import reference_vectorizer
    from tasks.privacy.stylometric.params import StyloParams

    return reference_vectorizer(StyloParams()).fit(list(fit_on))


@functools.lru_cache(maxsize=2)
def _history_vectorizer(path: str, stamp: tuple[int, int], seed: int) -> tuple[Any, int]:
    """(vectorizer fitted on the histories' posts, posts it was fitted on), once per file version (``stamp``: its
    size and mtime) and seed: a protect run's frontier points share one fit."""
    texts = _history_texts(path, np.random.default_rng([seed, 1]))
    return _style_vectorizer(texts), len(texts)


def pair_scores(texts: Sequence[str], i: np.ndarray, j: np.ndarray, fit_on: Sequence[str] | Any) -> np.ndarray:
    """Centred cosine of the style vectors of posts ``i`` and ``j``: the stylometric attack's TF-IDF (IDF fitted on
    ``fit_on``, or ``fit_on`` itself when it is an already fitted vectorizer; an n-gram it never saw is dropped),
    less the mean vector of ``texts``, so the n-grams every post shares do not make every pair look alike. Sparse
    throughout (the mean is folded into the dot products)."""
    vectorizer = fit_on if hasattr(fit_on, "transform") else _style_vectorizer(fit_on)
    vectors = vectorizer.transform(list(texts)).tocsr()
    mean = np.asarray(vectors.mean(axis=0)).ravel()
    along = vectors @ mean  # x . mean per post
    squared = float(mean @ mean)
    norms = np.sqrt(np.maximum(np.asarray(vectors.multiply(vectors).sum(axis=1)).ravel() - 2 * along + squared,
                               1e-12))
    dots = np.asarray(vectors[i].multiply(vectors[j]).sum(axis=1)).ravel() - along[i] - along[j] + squared
    return dots / (norms[i] * norms[j])


def weighted_auc(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray | None = None) -> float:
    """The AUC of ``scores`` for the ``positive`` pairs against the others, each pair weighted (ties count half;
    unweighted it is ``roc_auc_score``'s). nan when either side weighs nothing."""
    weights = np.ones(len(scores)) if weights is None else np.asarray(weights, dtype=float)
    _, bins = np.unique(scores, return_inverse=True)
    pos = np.bincount(bins, weights=np.where(positive, weights, 0.0))
    neg = np.bincount(bins, weights=np.where(positive, 0.0, weights))
    total_pos, total_neg = pos.sum(), neg.sum()
    if total_pos <= 0 or total_neg <= 0:
        return math.nan
    below = np.cumsum(neg) - neg
    return float((pos * (below + 0.5 * neg)).sum() / (total_pos * total_neg))


def same_author_auc(texts: Sequence[str], authors: Sequence[str], *, histories: str | Path | None = None,
                    seed: int = 0, max_pairs: int = 20_000, n_resamples: int = N_RESAMPLES) -> dict[str, Any]:
    """How well style links the posts of one author: the AUC of the style model's pair score for same-author
    pairs against different-author pairs, with its 95% cluster-bootstrap interval over authors.

    Returns ``{value, ci_low, ci_high, n_same, n_other, n_authors, n_posts, model, interval, n_resamples}``
    (JSON-ready; ``n_resamples``: the bootstrap resamples that had pairs of both kinds); with no same-author or no
    different-author pair, ``value`` and its interval are nan and ``reason`` says why.
    ``histories``: the adversary's posts (parquet with ``text``) to fit the IDF on; default the released texts.
    Deterministic for a seed."""
    if len(texts) != len(authors):
        raise ValueError(f"texts and authors differ in length ({len(texts)} and {len(authors)})")
    if max_pairs < 2:
        raise ValueError(f"max_pairs must be at least 2, got {max_pairs!r}")
    texts = [t if isinstance(t, str) else "" for t in texts]
    labels, codes = _codes(authors)
    i, j, positive = sample_pairs(authors, seed=seed, max_pairs=max_pairs)
    same_i, other_i = i[positive], i[~positive]
    if histories is not None:
        path = Path(histories)
        if not path.is_file():
            raise InputError("histories: no such file", file=str(path))
        stat = path.stat()
        fit_on, n_fit = _history_vectorizer(str(path.resolve()), (stat.st_size, stat.st_mtime_ns), seed)
    else:
        fit_on, n_fit = texts, len(texts)
    where = (f"the IDF fitted on {n_fit:,} posts of the adversary's histories" if histories is not None else
             f"the IDF fitted on the {n_fit:,} released posts themselves (no histories given)")
    out: dict[str, Any] = {
        "value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n_same": len(same_i), "n_other": len(other_i),
        "n_authors": len(labels), "n_posts": len(texts),
        "model": "centred cosine similarity of two posts' style vectors (sublinear TF-IDF of character 2-4-grams and "
                 f"word 1-2-grams, case kept: the stylometric attack's; less the released posts' mean vector), {where};"
                 " no author label used",
        "interval": INTERVAL, "n_resamples": 0}
    if not len(same_i) or not len(other_i):
        out["reason"] = ("no two posts share an author" if not len(same_i) else
                         "every post has the same author: no different-author pair")
        return out
    scores = pair_scores(texts, i, j, fit_on)
    first, second = codes[i], codes[j]

    def resampled(drawn: np.ndarray) -> float:
        times = np.bincount(drawn, minlength=len(labels)).astype(float)
        return weighted_auc(scores, positive, np.where(positive, times[first], times[first] * times[second]))

    draws = np.random.default_rng(seed).integers(0, len(labels), (n_resamples, len(labels)))  # as bootstrap draws
    theta = np.array([resampled(row) for row in draws])
    theta = theta[~np.isnan(theta)]  # a resample of one author's pairs only (few authors) has no AUC
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(theta, [alpha, 1 - alpha]) if len(theta) else (math.nan, math.nan)
    out.update(value=weighted_auc(scores, positive), ci_low=float(low), ci_high=float(high),
               n_resamples=len(theta))
    return out
