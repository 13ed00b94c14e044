"""The document bag metrics CosTF and CosTF-IDF (Filice et al. §3; choices in
:mod:`tasks.metrics.bags`): each bag one summed term-frequency vector, compared by cosine, with the IDF
table CosTF-IDF weighs them by."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tasks.metrics.bag_common import DegenerateBag, _check_bags, word_tokens

# --- document metrics ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdfTable:
    """Document frequencies of ``word_tokens`` over ``n_docs`` texts; sklearn's smooth IDF
    ``ln((1 + n) / (1 + df)) + 1`` (a word never seen gets df = 0)."""

    n_docs: int
    df: Mapping[str, int]

    @classmethod
    def fit(cls, texts: Iterable[str]) -> IdfTable:
        df: Counter[str] = Counter()
        n = 0
        for text in texts:
            n += 1
            df.update(set(word_tokens(text)))
        return cls(n, dict(df))

    def weights(self, vocab: Sequence[str]) -> np.ndarray:
        df = np.array([self.df.get(w, 0) for w in vocab], dtype=np.float64)
        return np.log((1.0 + self.n_docs) / (1.0 + df)) + 1.0


def _bag_tf(reference: Sequence[str], generated: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(vocab, summed term counts of R, of G): the bag vector is the sum of its texts' TF vectors."""
    r_counts: Counter[str] = Counter()
    g_counts: Counter[str] = Counter()
    for t in reference:
        r_counts.update(word_tokens(t))
    for t in generated:
        g_counts.update(word_tokens(t))
    vocab = sorted(r_counts.keys() | g_counts.keys())
    r = np.array([r_counts.get(w, 0) for w in vocab], dtype=np.float64)
    g = np.array([g_counts.get(w, 0) for w in vocab], dtype=np.float64)
    return vocab, r, g


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        raise DegenerateBag("a bag has no word token")
    return float(np.clip(a @ b / (na * nb), -1.0, 1.0))


def cos_tf(reference: Sequence[str], generated: Sequence[str]) -> float:
    """CosTF: cosine of the bags' term-frequency vectors (sum of the texts' raw TF vectors)."""
    _check_bags(reference, generated)
    _, r, g = _bag_tf(reference, generated)
    return _cosine(r, g)


def cos_tfidf(reference: Sequence[str], generated: Sequence[str], *, idf: IdfTable | None = None) -> float:
    """CosTF-IDF: cosine of the bags' TF-IDF vectors, each the sum of its texts' unnormalised TF-IDF vectors
    (= bag TF x IDF). ``idf`` defaults to the two bags' texts as documents (sklearn smooth IDF)."""
    _check_bags(reference, generated)
    vocab, r, g = _bag_tf(reference, generated)
    weights = (idf or IdfTable.fit([*reference, *generated])).weights(vocab)
    return _cosine(r * weights, g * weights)

