"""The stylometric attack's features: text normalisation, the TF-IDF and L2 helpers, the exact mode's
n-gram counts and TF-IDF rows over 64-bit keys (with :func:`reference_vectorizer`, the scikit-learn
definition they reproduce) and the text mode's one-pass counts per owner. Profiles, scores and evidence are
built from these."""

from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from tasks.privacy.stylometric.kernels import _all_ngrams, _doc_ngrams, _maxlen, _views, character_classes
from tasks.privacy.stylometric.params import StyloParams

# ------------------------------------------------------------------------------------------- helpers

def normalize_texts(texts: pa.Array | pa.ChunkedArray, lowercase: bool) -> pa.Array:
    """scikit-learn's char analyzer preprocessing up to what the kernels do themselves (whitespace runs):
    lowercase (optional); nulls become empty texts."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if pa.types.is_null(texts.type):
        texts = pa.array([""] * len(texts), pa.large_string())
    if texts.null_count or not pa.types.is_large_string(texts.type):
        texts = pc.fill_null(texts.cast(pa.large_string()), "")
    return pc.utf8_lower(texts) if lowercase else texts


def _smooth_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """scikit-learn's smooth IDF, ln((1 + n) / (1 + df)) + 1, and 0 where df == 0 (outside the vocabulary)."""
    return np.where(df > 0, np.log((1.0 + n_docs) / (1.0 + df)) + 1.0, 0.0)


def _l2_rows(m: Any) -> Any:
    """Rows scaled to unit L2 norm (zero rows stay zero)."""
    if sp.issparse(m):
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        return sp.diags(np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)) @ m
    norms = np.linalg.norm(m, axis=1)
    return m / np.where(norms > 0, norms, 1.0)[:, None]


def _l2_rows_in_place(m: np.ndarray) -> np.ndarray:
    """:func:`_l2_rows` of a dense array without a second copy (a 37.9k-author sketch is 0.62 GB)."""
    norms = np.linalg.norm(m, axis=1)
    m /= np.where(norms > 0, norms, 1.0).astype(m.dtype)[:, None]
    return m


def _mean_rows(m: Any, owner: np.ndarray, n_owners: int) -> Any:
    """Mean row per owner (owner -1 rows left out) as a csr matrix."""
    keep = owner >= 0
    counts = np.bincount(owner[keep], minlength=n_owners).astype(float)
    g = sp.csr_matrix((1.0 / counts[owner[keep]], (owner[keep], np.flatnonzero(keep))),
                      shape=(n_owners, m.shape[0]))
    return g @ m


# ------------------------------------------------------------------------------------------ exact mode

def reference_vectorizer(params: StyloParams) -> Any:
    """The scikit-learn definition ``exact`` mode reproduces: one ``TfidfVectorizer`` (sublinear TF, smooth
    IDF, L2) over the character n-grams and, when ``word_max``, the word n-grams of each text (words keyed
    apart from characters), scikit-learn's own analyzers doing the splitting."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    chars = TfidfVectorizer(analyzer="char", ngram_range=(params.ngram_min, params.ngram_max),
                            lowercase=params.lowercase).build_analyzer()
    words = TfidfVectorizer(analyzer="word", ngram_range=(params.word_min, params.word_max),
                            lowercase=params.lowercase).build_analyzer() if params.word_max else None

    def analyzer(text: str) -> list[str]:
        return chars(text) + ([] if words is None else ["\x00" + w for w in words(text)])

    return TfidfVectorizer(analyzer=analyzer, sublinear_tf=True)


def _ngram_keys(texts: pa.Array, params: StyloParams) -> tuple[np.ndarray, np.ndarray]:
    """(doc index, key) of every n-gram of the normalised ``texts`` (:func:`normalize_texts`)."""
    offsets, data, _ = _views(texts)
    return _all_ngrams(offsets, data, *params.ngram_args(), character_classes())


def _exact_counts(texts: pa.Array, params: StyloParams, vocab: np.ndarray | None) -> tuple[sp.csr_matrix, np.ndarray]:
    """(n-gram counts per text as csr over ``vocab``, vocab): the vocabulary is fitted when not given, else
    keys outside it are dropped."""
    docs, keys = _ngram_keys(texts, params)
    if vocab is None:
        vocab, col = np.unique(keys, return_inverse=True)
    else:  # a hash lookup: searchsorted was 8x slower for 9M unsorted keys into 1.15M
        col = pd.Index(vocab).get_indexer(keys) if len(vocab) else np.full(len(keys), -1)
        docs, col = docs[col >= 0], col[col >= 0]
    counts = sp.csr_matrix((np.ones(len(col)), (docs, col)), shape=(len(texts), len(vocab)))
    counts.sum_duplicates()
    return counts, vocab


def _sublinear_rows(counts: sp.csr_matrix, idf: np.ndarray) -> sp.csr_matrix:
    """L2-normalised rows of ``(1 + ln(count)) * idf`` (zero rows stay zero)."""
    weighted = counts.copy()
    weighted.data = (1.0 + np.log(weighted.data)) * idf[weighted.indices]
    return _l2_rows(weighted).tocsr()


def _exact_tfidf(texts: pa.Array, params: StyloParams, vocab: np.ndarray | None,
                 idf: np.ndarray | None) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """(L2-normalised TF-IDF rows, vocab, idf): fit vocab and IDF when not given, else transform."""
    counts, vocab = _exact_counts(texts, params, vocab)
    if idf is None:
        idf = _smooth_idf(np.bincount(counts.indices, minlength=len(vocab)), len(texts))
    return _sublinear_rows(counts, idf), vocab, idf


# ------------------------------------------------------------------------------------------- text mode

@nb.njit
def _grown(a, size, fill):
    """``a`` with twice the room (its first ``size`` entries kept, the rest ``fill``)."""
    out = np.full(2 * a.shape[0], fill, a.dtype)
    out[:size] = a[:size]
    return out


@nb.njit(cache=True)
def _text_kernel(offsets, data, blocks, lo, hi, wlo, whi, classes):
    """The n-gram counts of every owner's texts (sketch-free text mode). Texts come grouped by owner:
    owner ``b`` holds texts ``blocks[b]:blocks[b + 1]``. Returns (key per id, document frequency per id,
    owner, id, count) with one (owner, id, count) triple per distinct n-gram of the owner. Keys get ids in
    an open-addressing table (keys are fmix64 outputs: their low bits index it); ``seen_doc`` and
    ``seen_owner`` per id tell a new document or owner without a second table."""
    cap = 1 << 16
    slot_key = np.zeros(cap, np.uint64)
    slot_id = np.full(cap, -1, np.int64)
    key = np.zeros(cap // 2, np.uint64)
    df = np.zeros(cap // 2, np.int64)
    seen_doc = np.full(cap // 2, -1, np.int64)
    seen_owner = np.full(cap // 2, -1, np.int64)
    count = np.zeros(cap // 2, np.int64)
    size = 0
    mine = np.empty(1024, np.int64)  # the current owner's ids
    out_owner = np.empty(1 << 16, np.int64)
    out_id = np.empty(1 << 16, np.int64)
    out_count = np.empty(1 << 16, np.int64)
    m = 0
    per = (hi - lo + 1) + (whi - wlo + 1 if whi > 0 else 0)
    maxlen = _maxlen(offsets)
    cps = np.empty(maxlen, np.uint32)
    tok = np.empty(maxlen + 2, np.int64)
    buf = np.empty(maxlen * per + 1, np.uint64)
    for b in range(blocks.shape[0] - 1):
        k = 0
        for d in range(blocks[b], blocks[b + 1]):
            g = _doc_ngrams(data, offsets[d], offsets[d + 1], lo, hi, wlo, whi, classes, cps, tok, buf)
            for j in range(g):
                h = buf[j]
                mask = np.uint64(cap - 1)
                slot = np.int64(h & mask)
                while slot_id[slot] >= 0 and slot_key[slot] != h:
                    slot = (slot + 1) & (cap - 1)
                i = slot_id[slot]
                if i < 0:
                    i = size
                    slot_key[slot] = h
                    slot_id[slot] = i
                    if i == key.shape[0]:
                        key = _grown(key, size, np.uint64(0))
                        df = _grown(df, size, 0)
                        seen_doc = _grown(seen_doc, size, -1)
                        seen_owner = _grown(seen_owner, size, -1)
                        count = _grown(count, size, 0)
                    key[i] = h
                    size += 1
                    if 2 * size > cap:  # rehash into a table twice the size
                        cap *= 2
                        slot_key = np.zeros(cap, np.uint64)
                        slot_id = np.full(cap, -1, np.int64)
                        for q in range(size):
                            s2 = np.int64(key[q] & np.uint64(cap - 1))
                            while slot_id[s2] >= 0:
                                s2 = (s2 + 1) & (cap - 1)
                            slot_key[s2] = key[q]
                            slot_id[s2] = q
                if seen_doc[i] != d:
                    seen_doc[i] = d
                    df[i] += 1
                if seen_owner[i] != b:
                    seen_owner[i] = b
                    count[i] = 0
                    if k == mine.shape[0]:
                        mine = _grown(mine, k, 0)
                    mine[k] = i
                    k += 1
                count[i] += 1
        while m + k > out_id.shape[0]:
            out_owner = _grown(out_owner, m, 0)
            out_id = _grown(out_id, m, 0)
            out_count = _grown(out_count, m, 0)
        for q in range(k):
            out_owner[m] = b
            out_id[m] = mine[q]
            out_count[m] = count[mine[q]]
            m += 1
    return key[:size], df[:size], out_owner[:m], out_id[:m], out_count[:m]


def _text_counts(texts: pa.Array, owner: np.ndarray, n_owners: int,
                 params: StyloParams) -> tuple[np.ndarray, np.ndarray, sp.csr_matrix]:
    """(sorted vocabulary, document frequency per key, owners x vocab n-gram counts summed over each owner's
    texts) of the normalised ``texts``; ``owner`` (>= 0) is each text's owner. One pass in owner order
    (:func:`_text_kernel`): memory is the vocabulary plus one (owner, key, count) triple per distinct n-gram
    of each owner."""
    order = np.argsort(owner, kind="stable")
    texts = texts.take(pa.array(order))
    sorted_owner = owner[order]
    starts = np.flatnonzero(np.r_[True, sorted_owner[1:] != sorted_owner[:-1]]) if len(order) else np.zeros(0, int)
    blocks = np.r_[starts, len(order)].astype(np.int64)
    offsets, data, _ = _views(texts)
    keys, df, who, ids, counts = _text_kernel(offsets, data, blocks, *params.ngram_args(), character_classes())
    rank = np.argsort(keys)  # sorted vocabulary, as the other modes keep it
    col = np.empty(len(keys), np.int64)
    col[rank] = np.arange(len(keys))
    matrix = sp.csr_matrix((counts.astype(np.float64), (sorted_owner[starts][who] if len(who) else who, col[ids])),
                           shape=(n_owners, len(keys)))
    matrix.sum_duplicates()
    return keys[rank], df[rank], matrix
