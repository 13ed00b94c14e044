"""The stylometric attack's evidence, which protect's moves mask: per timeline, the character and word
n-grams that contribute most to the cosine with its true author (:func:`stylometric_evidence`), scored
against :class:`EvidenceProfiles` fitted once per process for a set of authors, and the n-grams' names as
the reference analyzer writes them (:func:`ngram_names`)."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from tasks.privacy.minhash import fmix64, utf8_at
from tasks.privacy.reidentify import HistorySource, history_rows
from tasks.privacy.stylometric.features import (
    _exact_counts,
    _exact_tfidf,
    _l2_rows,
    _mean_rows,
    _ngram_keys,
    _smooth_idf,
    _sublinear_rows,
    normalize_texts,
    reference_vectorizer,
)
from tasks.privacy.stylometric.kernels import _views
from tasks.privacy.stylometric.params import StyloParams
from tasks.privacy.stylometric.profiles import author_batches, history_text_bytes

#: Evidence columns: per timeline, the features that drove its attribution to its true author.
EVIDENCE_COLUMNS = ["group_id", "author_id", "feature", "kind", "contribution"]
_EVIDENCE_CHUNK = 5_000  # posts whose n-gram keys are held at once while fitting (~700 keys of 16 B per post)
_WORD_KEY = 0x100        # a word n-gram's key suffix: 0x100 + n (a character n-gram's: its length)


@nb.njit(cache=True)
def _string_keys(offsets, data, suffix):
    """The 64-bit key of each string as one n-gram (:func:`_doc_ngrams`: FNV-1a over its code points, then
    fmix64 of it xor ``suffix``: the n-gram's length for characters, 0x100 + n for n words joined by spaces)."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.uint64)
    for d in range(n):
        h = np.uint64(0xCBF29CE484222325)
        i = offsets[d]
        while i < offsets[d + 1]:
            c, w = utf8_at(data, i)
            i += w
            h = (h ^ np.uint64(c)) * np.uint64(0x100000001B3)
        out[d] = fmix64(h ^ np.uint64(suffix[d]))
    return out


def _merge_counts(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, their summed counts)."""
    distinct, inverse = np.unique(keys, return_inverse=True)
    return distinct, np.bincount(inverse, weights=counts, minlength=len(distinct)).astype(np.int64)


@dataclass
class EvidenceProfiles:
    """What :func:`stylometric_evidence` scores timelines against, fitted once for a set of authors (a protect
    loop's: the authors of the timelines its round 0 left caught): the IDF over those authors' history posts and a sample of everyone
    else's, each author's profile as in the attack (the L2-normalised mean of its posts' TF-IDF rows, or in
    text mode the sublinear TF-IDF of its posts' summed counts) over the 64-bit n-gram keys of ``exact`` mode.
    The posts themselves are not kept: a later round reads nothing and holds authors x their distinct
    n-grams."""

    authors: frozenset[str]
    params: StyloParams
    vocab: np.ndarray        # sorted uint64 n-gram keys of the fitted posts
    idf: np.ndarray          # smooth IDF per key
    rows: dict[str, int]     # author -> profile row
    profiles: sp.csr_matrix  # fitted authors with history x vocab
    text: bool = False       # text mode (``params.resolved_mode`` of the histories): timelines as one text

    @classmethod
    def fit(cls, histories: HistorySource, authors: set[str], params: StyloParams, held_out: frozenset[str] | None,
            idf_sample: int, chunk_rows: int) -> EvidenceProfiles:
        total = history_rows(histories)
        stride = max(1, -(-total // idf_sample)) if total else 1
        own: list[pa.Array] = []
        own_author: list[pa.Array] = []
        others: list[pa.Array] = []
        seen = 0
        value_set = pa.array(sorted(authors), pa.string())
        for batch in author_batches(histories, chunk_rows, held_out):
            author = batch.column("author_id").cast(pa.string())
            mine = pc.is_in(author, value_set=value_set).to_numpy(zero_copy_only=False)
            picks = (np.arange(seen, seen + batch.num_rows) % stride) == 0
            own.append(batch.column("text").filter(pa.array(mine)).cast(pa.large_string()))
            own_author.append(author.filter(pa.array(mine)))
            others.append(batch.column("text").filter(pa.array(picks & ~mine)).cast(pa.large_string()))
            seen += batch.num_rows
        texts = normalize_texts(pa.chunked_array(own + others, pa.large_string()) if own else
                                pa.array([], pa.large_string()), params.lowercase)
        n_own = sum(len(a) for a in own)
        owner = pd.factorize(pa.chunked_array(own_author, pa.string()).to_numpy(zero_copy_only=False)
                             if own else np.array([], object))
        # pass 1: document frequencies (each post's distinct keys), merged chunk by chunk
        vocab, df = np.zeros(0, np.uint64), np.zeros(0, np.int64)
        for start in range(0, len(texts), _EVIDENCE_CHUNK):
            docs, keys = _ngram_keys(texts.slice(start, _EVIDENCE_CHUNK), params)
            distinct, col = np.unique(keys, return_inverse=True)
            pairs = pd.unique(docs * len(distinct) + col) % max(1, len(distinct))  # each post's distinct keys
            vocab, df = _merge_counts(np.concatenate([vocab, distinct]),
                                      np.concatenate([df, np.bincount(pairs, minlength=len(distinct))]))
        idf = _smooth_idf(df, len(texts))
        # pass 2: the fitted authors' posts as L2-normalised TF-IDF rows (text mode: n-gram counts), summed
        # per author
        text = params.resolved_mode(history_text_bytes(histories)) == "text"
        n_authors = len(owner[1])
        sums = sp.csr_matrix((n_authors, len(vocab)))
        for start in range(0, n_own, _EVIDENCE_CHUNK):
            part = texts.slice(start, min(_EVIDENCE_CHUNK, n_own - start))
            rows = _exact_counts(part, params, vocab)[0] if text else _exact_tfidf(part, params, vocab, idf)[0]
            code = owner[0][start:start + len(part)]
            sums = sums + sp.csr_matrix((np.ones(len(code)), (code, np.arange(len(code)))),
                                        shape=(n_authors, len(code))) @ rows
        posts = np.bincount(owner[0][:n_own], minlength=n_authors).astype(float) if n_own else np.zeros(0)
        if not n_authors:
            profiles = sums
        elif text:
            profiles = _sublinear_rows(sums.tocsr(), idf)
        else:
            profiles = _l2_rows(sp.diags(1.0 / np.maximum(posts, 1.0)) @ sums).tocsr()
        return cls(frozenset(authors), params, vocab, idf, {str(a): i for i, a in enumerate(owner[1])}, profiles,
                   text)

    def evidence(self, timelines: pd.DataFrame, top: int) -> pd.DataFrame:
        """:func:`stylometric_evidence` of ``timelines`` whose authors were fitted."""
        codes, uniques = pd.factorize(timelines["group_id"].to_numpy())
        texts = timelines["text"].fillna("").astype(str).tolist()
        normalized = normalize_texts(pa.array(texts, pa.large_string()), self.params.lowercase)
        if self.text:  # the timeline's posts as one text; ``rows`` (which post holds a key) are its counts
            rows = _exact_counts(normalized, self.params, self.vocab)[0]
            means = _sublinear_rows((sp.csr_matrix((np.ones(len(codes)), (codes, np.arange(len(codes)))),
                                                   shape=(len(uniques), len(codes))) @ rows).tocsr(), self.idf)
        else:
            rows = _exact_tfidf(normalized, self.params, self.vocab, self.idf)[0]
            means = _l2_rows(_mean_rows(rows, codes, len(uniques))).tocsr()
        posts = pd.Series(np.arange(len(codes))).groupby(codes, sort=True).indices
        authors = timelines["author_id"].astype(str).to_numpy()
        found = []  # (timeline, key, contribution, the first of its posts that holds the key)
        for g, mine in posts.items():
            if authors[mine[0]] not in self.rows:
                continue
            t, a = means[g], self.profiles[self.rows[authors[mine[0]]]]
            cols, in_t, in_a = np.intersect1d(t.indices, a.indices, assume_unique=True, return_indices=True)
            values = t.data[in_t] * a.data[in_a]
            cols, values = cols[values > 0], values[values > 0]
            if len(values) > top:  # the top ones and any tied with the last: ties are broken by name below
                keep = values >= np.partition(values, len(values) - top)[len(values) - top]
                values, cols = values[keep], cols[keep]
            held = rows[mine]  # the timeline's posts, in order: the first that holds each key names it (t_f > 0)
            post = np.repeat(mine, np.diff(held.indptr))
            hit = np.isin(held.indices, cols)
            key_cols, at = np.unique(held.indices[hit], return_index=True)
            first = dict(zip(key_cols.tolist(), post[hit][at].tolist(), strict=True))
            found += zip([g] * len(cols), self.vocab[cols].tolist(), values.tolist(), [first[c] for c in cols.tolist()],
                         strict=True)
        names = ngram_names([texts[i] for i in sorted({f[3] for f in found})], sorted({f[3] for f in found}),
                            self.params)
        out: dict[int, list[tuple[str, str, float]]] = {}
        for g, key, c, post in found:
            # a key the post holds has its name among its n-grams; one the analyzer writes otherwise (a character
            # whose lowercase differs between Arrow and Python) cannot be masked and is left out
            if key in names[post]:
                out.setdefault(g, []).append((*names[post][key], c))
        frame = []
        for g, named in out.items():
            # largest first, ties in the reference vectorizer's feature order (words, keyed by a leading NUL, first)
            named.sort(key=lambda f: (-f[2], ("\x00" if f[1] == "word" else "") + f[0]))
            frame += [(uniques[g], authors[posts[g][0]], *f) for f in named[:top]]
        return pd.DataFrame(frame, columns=EVIDENCE_COLUMNS)


def ngram_names(texts: list[str], ids: list[int], params: StyloParams, *,
                as_written: bool = False) -> dict[int, dict[int, tuple[str, str]]]:
    """Per post (``ids``: its position), 64-bit n-gram key -> (the n-gram as the reference analyzer writes it,
    ``char`` or ``word``): the names of the keys the exact features hold, so evidence can be masked where a
    text carries it. ``as_written`` (with ``params.lowercase``): each key named by its first occurrence as
    the post writes it (its capitals kept), which is what a case-sensitive :func:`tasks.protect.moves.mask_evidence`
    finds in the text; otherwise lowercased, as the features are."""
    written = as_written and params.lowercase
    analyzer = reference_vectorizer(dataclasses.replace(params, lowercase=False) if written else params
                                    ).build_analyzer()
    grams = [analyzer(t) for t in texts]
    plain = [g[1:] if g.startswith("\x00") else g for gs in grams for g in gs]
    words = np.fromiter((g.startswith("\x00") for gs in grams for g in gs), bool, len(plain))
    keyed = [g.lower() for g in plain] if written else plain
    suffix = np.where(words, [_WORD_KEY + g.count(" ") + 1 for g in keyed], [len(g) for g in keyed]) \
        if plain else np.zeros(0, np.int64)
    offsets, data, _ = _views(pa.array(keyed, pa.large_string()))
    keys = _string_keys(offsets, data, suffix.astype(np.uint64)).tolist()
    out: dict[int, dict[int, tuple[str, str]]] = {}
    start = 0
    for post, gs in zip(ids, grams, strict=True):
        names: dict[int, tuple[str, str]] = {}
        for k, g, w in zip(keys[start:start + len(gs)], plain[start:start + len(gs)],
                           words[start:start + len(gs)].tolist(), strict=True):
            names.setdefault(k, (g, "word" if w else "char"))  # the first occurrence names it
        out[post] = names
        start += len(gs)
    return out


@functools.cache
def _evidence_memo() -> Any:
    """The evidence profiles fitted per (history file, parameters, fitted authors, held-out documents), the
    last two kept: a :class:`tasks.privacy.attacks.HistoryMemo` (imported late: the attack registry imports
    this module)."""
    # deferred: loads fsspec only when this runs
    from tasks.privacy.attacks import HistoryMemo

    return HistoryMemo()


def evidence_profiles(histories: HistorySource, authors: set[str], params: StyloParams, *,
                      held_out: frozenset[str] | None, idf_sample: int = 5_000,
                      chunk_rows: int = 1_000_000) -> EvidenceProfiles:
    """:class:`EvidenceProfiles` fitted for ``authors``, once per process for a history file."""
    import hashlib

    who = hashlib.sha256("\n".join(sorted(authors)).encode()).hexdigest()
    return _evidence_memo().get(histories, (params, idf_sample, chunk_rows, who), held_out,
                                lambda source: EvidenceProfiles.fit(source, authors, params, held_out, idf_sample,
                                                                    chunk_rows))


def evidence_key(histories: HistorySource, held_out: frozenset[str] | None, params: StyloParams) -> Hashable:
    """What :func:`stylometric_evidence` reads besides its timelines (a file by its path, a frame by its identity;
    every parameter, not only those the signature names)."""
    source = os.fspath(histories) if isinstance(histories, str | os.PathLike) else id(histories)
    return ("stylometric", source, held_out, params)


def stylometric_evidence(histories: HistorySource, timelines: pd.DataFrame, params: StyloParams, *,
                         held_out: frozenset[str] | None, top: int = 20, idf_sample: int = 5_000,
                         chunk_rows: int = 1_000_000, authors: set[str] | None = None) -> pd.DataFrame:
    """Per timeline (group_id, author_id, text), the ``top`` character and word n-grams with the largest
    contribution ``t_f * a_f`` to the cosine of the timeline's profile ``t`` and its true author's ``a``
    (both L2-normalised means of TF-IDF post vectors, :func:`reference_vectorizer`'s features, so the n-grams
    are named as its analyzer writes them). The IDF is fitted on the history posts of ``authors`` (default:
    the timelines' authors; a protect loop passes the authors its round 0 left caught, so that every round scores
    against the same fit) plus up to ``idf_sample`` other posts (one in every ``stride`` by row): the features
    an author shares with everyone weigh little, as in the attack. Columns :data:`EVIDENCE_COLUMNS`; ``kind``
    is ``char`` or ``word``; a timeline whose author has no history, or was not fitted, gets no rows. The fit
    is kept per process (:func:`evidence_profiles`): a later call for the same authors reads nothing, and a
    call with ``authors`` and no timelines fits ahead."""
    if authors is None and (timelines.empty or top < 1):
        return pd.DataFrame(columns=EVIDENCE_COLUMNS)
    fitted = set(timelines["author_id"].astype(str)) if authors is None else set(authors)
    profiles = evidence_profiles(histories, fitted, params, held_out=held_out, idf_sample=idf_sample,
                                 chunk_rows=chunk_rows)
    return pd.DataFrame(columns=EVIDENCE_COLUMNS) if timelines.empty or top < 1 else profiles.evidence(timelines, top)
