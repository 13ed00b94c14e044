"""Stylometric re-identification: character and word n-gram author profiles, compared by cosine with
each synthetic timeline's profile.

Follows authorship attribution with character n-grams (Keselj et al. 2003, "N-gram-based author
profiles for authorship attribution"; Stamatatos 2009, "A survey of modern authorship attribution
methods"; the stylometric linkage attacks of seed 000 §5.3.2): an author's habits (spelling, casing,
punctuation, favourite words) survive a rewrite that changes the words, and they are in the users'
other posts, which is what a realistic adversary holds (the ``disjoint`` setting).

Definition (the scikit-learn reference :func:`reference_vectorizer`): every history post is a document; its
features are the character n-grams of ``ngram_min..ngram_max`` of its text (lowercased when ``lowercase``;
runs of two or more whitespace characters replaced by one space; no padding) and its word n-grams of
``word_min..word_max`` (scikit-learn's tokens: runs of two or more ``\\w`` characters of any script, joined
by one space; none when ``word_max`` is 0), weighted by sublinear TF ``1 + ln(count)`` times the smooth IDF
of the history posts ``ln((1 + n) / (1 + df)) + 1`` and L2-normalised
(``TfidfVectorizer(analyzer="char", ngram_range, sublinear_tf=True, lowercase)``). n-grams unseen in the
histories are dropped from timelines. The score of (timeline, author) is the cosine of the two profiles;
attribution follows :mod:`tasks.privacy.attribution`. What a profile is depends on the mode:

- ``text`` (sparse, exact): an author's profile is the TF-IDF vector of all its posts as one text (the sum
  of its posts' n-gram counts, no n-gram across two posts, then sublinear TF, IDF and L2); a timeline's
  profile is its posts as one text likewise. One numba pass in author order (:func:`_text_kernel`);
  memory is the vocabulary plus one (author, n-gram, count) triple per distinct n-gram of each author:
  36 MB of simulated history text (200k posts of 2,000 users) took 14.2 s and 1.6 GB peak
  (``benchmarks/reidentify.py``; the sketch: 3.5 s, 0.6 GB), so it is for corpora that fit in memory. This is the profile-based attribution of Keselj et al. (an author's texts concatenated).
- ``exact`` and ``sketch``: an author's profile is the mean of its posts' L2-normalised vectors, a
  timeline's the mean of its posts' vectors.
- ``auto`` (the default): ``text`` when the histories hold at most ``text_max_mb`` MB of text (the text
  column's uncompressed size in the parquet metadata), ``sketch`` above (the article's scale: 1.5 GB).

Why ``text`` below the size: on the 2012 conventions corpus (181 speakers; a run of 5 consecutive
sentences of each speaker as its timeline, the speaker's other sentences as history, disjoint adversary;
10 seeded splits, :func:`tasks.corpus.splits.author_timelines`; ``benchmarks/conventions.py --seeds 0 1 2 3
4 5 6 7 8 9``) the mean of post vectors read accuracy@1 0.187 (``sketch``, the old default: 0.174) and the
``text`` profile 0.419 (scikit-learn word 1-2-gram centroids: 0.219 as means of posts, 0.417 as texts). The
sketch was not the cause (``exact`` and ``sketch`` both read 0.171 on seed 0): averaging unit
vectors of one-sentence posts, whose TF is almost always 1, weighs an n-gram by the share of the author's
posts that hold it, so the frequent n-grams every speaker uses drown the rare ones that tell speakers
apart; sublinear TF of the author's total counts damps them. On simulated posts both read about the same
(200k posts of 2,000 users, 50 timelines, rewrite 0.2 / 0.8: ``full`` 1.00 / 0.98 as text against 1.00 /
1.00 as sketch, ``disjoint`` 0.80 / 0.70 against 0.76 / 0.66).

Computing the mean-of-posts profile:

- ``exact``: n-grams keyed by a 64-bit hash of their code points (the chance of any collision among
  V distinct n-grams is about V^2 / 2^65: ~3e-8 for a million), sparse matrices; for corpora that fit
  in memory. Equal to the scikit-learn reference to float rounding (tested on the debates corpus).
- ``sketch`` (the article's scale, 8.7M posts of 37.9k users): two streaming passes over the histories.
  Pass 1 counts document frequencies in ``2**hash_bits`` buckets (feature hashing of the n-grams);
  pass 2 weights each post exactly as above over those buckets and adds it to its author's count sketch
  of ``width`` signed buckets (Weinberger et al. 2009; Charikar et al. 2002). Inner products of count
  sketches are unbiased with standard deviation about sqrt((1 + cos^2) / width) for unit vectors, so
  cosines move by ~0.02 at width 4096; ranks are kept where the top authors are further apart. Memory:
  4 B x width per author (37.9k authors x 4096: 0.62 GB). The measured error against ``exact`` is
  tested (``tests/test_stylometric.py``) and printed by ``benchmarks/reidentify.py``.

Above ``df_sample`` posts pass 1 counts document frequencies on the posts whose raw text hash is 0 modulo
``ceil(posts / df_sample)`` only (the same posts whichever shard holds them) and scales them up
(:func:`estimated_idf`), so pass 1 costs a fraction of pass 2 at the article's scale. At that sampling
rate (11.5%) the cosines moved by 0.0019 on average and the top-1 author stayed the same for 0.98 of the
timelines (on a 100k-post subsample, printed by ``benchmarks/reidentify.py --full``; tested on a tenth).

Histories are profiled once (:func:`profile_histories`, or :func:`profile_histories_dask` over shards,
which sums per-shard document frequencies and per-shard author sketches) and the profiles are reused by
every strategy's :func:`stylometric_attack`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import llvmlite.ir as llvm_ir
import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp
from numba.core import cgutils
from numba.extending import intrinsic

from tasks.limits import MAX_DOCS, MAX_NGRAM, MAX_SEED, check_range
from tasks.parallel import map_shards
from tasks.privacy.attribution import (
    Setting,
    attack_summary,
    attribute_scores,
    check_timelines,
    held_out_doc_ids,
    timeline_codes,
)
from tasks.privacy.minhash import _arrow_views, fmix64, utf8_at
from tasks.privacy.reidentify import HistorySource, ReidResult, history_rows, text_batches
from tasks.signatures import make_signature

Mode = Literal["auto", "text", "exact", "sketch"]
_WORD, _SPACE = 1, 2  # character_classes() flags


@dataclass(frozen=True)
class StyloParams:
    """What makes two profiles comparable: n-gram range, casing, mode and sketch sizes."""

    ngram_min: int = 2
    ngram_max: int = 4
    word_min: int = 1        # word n-grams (scikit-learn's word tokens); word_max 0 = characters only
    word_max: int = 2
    lowercase: bool = False  # casing is style; scikit-learn's default is True
    mode: Mode = "auto"      # text up to text_max_mb of history text, sketch above (resolved_mode)
    hash_bits: int = 20      # sketch: document-frequency buckets (2**20 x 4 B = 4 MB of IDF)
    width: int = 4096        # sketch: signed buckets per profile (power of two)
    df_sample: int = 1_000_000  # sketch: posts the document frequencies are estimated from (all, when fewer)
    seed: int = 1
    text_max_mb: int = 40    # auto: the most history text (MB) profiled in text mode (~250k posts of 150 chars)

    def __post_init__(self) -> None:
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max; got ({self.ngram_min}, {self.ngram_max})")
        if self.word_max and not 1 <= self.word_min <= self.word_max <= 4:
            raise ValueError(f"need 1 <= word_min <= word_max <= 4 (or word_max 0); got ({self.word_min}, "
                             f"{self.word_max})")
        check_range("ngram_max", self.ngram_max, 1, MAX_NGRAM)
        check_range("df_sample", self.df_sample, 1, MAX_DOCS)
        check_range("seed", self.seed, 0, MAX_SEED)
        check_range("text_max_mb", self.text_max_mb, 0, 1 << 20)
        if self.mode not in ("auto", "text", "exact", "sketch"):
            raise ValueError(f"mode must be 'auto', 'text', 'exact' or 'sketch'; got {self.mode!r}")
        if self.width < 2 or self.width > 1 << 24 or self.width & (self.width - 1):
            raise ValueError(f"width must be a power of two in [2, 2**24]; got {self.width}")
        if not 8 <= self.hash_bits <= 30:
            raise ValueError(f"hash_bits must be in [8, 30]; got {self.hash_bits}")

    @property
    def signature(self) -> str:
        sketch = self.mode in ("sketch", "auto")  # auto: the sketch's sizes count above text_max_mb
        profile = {"text": "text", "auto": f"text<={self.text_max_mb}MB|mean"}.get(self.mode, "mean")
        return make_signature("reid_stylometric", features=self.features,
                              tf="sublinear", idf="smooth-histories", norm="l2", profile=profile, sim="cosine",
                              lowercase=self.lowercase, mode=self.mode,
                              buckets=f"2^{self.hash_bits}" if sketch else None,
                              width=self.width if sketch else None, seed=self.seed if sketch else None,
                              df_sample=self.df_sample if sketch else None)

    def resolved_mode(self, text_bytes: int) -> Literal["text", "exact", "sketch"]:
        """The mode that profiles histories holding ``text_bytes`` of text (:func:`history_text_bytes`):
        ``auto`` is ``text`` up to ``text_max_mb`` and ``sketch`` above; the others are themselves."""
        if self.mode == "auto":
            return "text" if text_bytes <= self.text_max_mb * 1_000_000 else "sketch"
        return self.mode

    @property
    def features(self) -> str:
        """The n-grams profiled, e.g. ``char2-4+word1-2``."""
        words = f"+word{self.word_min}-{self.word_max}" if self.word_max else ""
        return f"char{self.ngram_min}-{self.ngram_max}{words}"

    def ngram_args(self) -> tuple[int, int, int, int]:
        """(char lo, char hi, word lo, word hi) as the kernels take them (word hi 0 = no word n-grams)."""
        return self.ngram_min, self.ngram_max, self.word_min if self.word_max else 0, self.word_max


@dataclass
class HistoryProfiles:
    """The adversary's side, computed once per run: author ids, IDF, and one L2-normalised profile per
    author (sparse over ``vocab`` in text and exact mode, a dense count sketch in sketch mode)."""

    params: StyloParams
    authors: np.ndarray      # object ids, one per profile row
    idf: np.ndarray          # float64 per vocabulary entry (text, exact) or float32 per bucket (sketch; 0 = unseen)
    vocab: np.ndarray | None  # text, exact: sorted uint64 n-gram keys
    profiles: Any            # text, exact: csr (authors x vocab); sketch: float32 (authors x width)
    n_posts: int
    mode: str = "exact"      # the mode that built them (``params.resolved_mode``: auto is text or sketch)


# ------------------------------------------------------------------------------------------- kernels

@nb.njit(inline="always")
def _code_points(data, start, end, classes, cps) -> int:
    """UTF-8 bytes -> code points in ``cps``, each run of two or more whitespace characters replaced by one
    space (scikit-learn's char preprocessing); returns their count."""
    m = 0
    i = start
    while i < end:
        c, w = utf8_at(data, i)
        i += w
        if classes[c] & _SPACE and i < end:
            c2, w2 = utf8_at(data, i)
            if classes[c2] & _SPACE:
                i += w2
                while i < end:
                    c2, w2 = utf8_at(data, i)
                    if not classes[c2] & _SPACE:
                        break
                    i += w2
                c = np.uint32(32)
        cps[m] = c
        m += 1
    return m


@nb.njit(inline="always")
def _doc_ngrams(data, start, end, lo, hi, wlo, whi, classes, cps, tok, out) -> int:
    """64-bit keys of the doc's character n-grams (lo <= n <= hi) and, when ``whi`` > 0, word n-grams
    (wlo <= n <= whi) into ``out``; returns their count. Words are scikit-learn's tokens (maximal runs of
    two or more ``\\w`` characters, :func:`character_classes`), joined by one space; word keys are in a
    domain of their own, so a word never shares a key with a character n-gram."""
    m = _code_points(data, start, end, classes, cps)
    g = 0
    for i in range(m - lo + 1):
        h = np.uint64(0xCBF29CE484222325)
        for t in range(hi):
            if i + t >= m:
                break
            h = (h ^ np.uint64(cps[i + t])) * np.uint64(0x100000001B3)
            if t + 1 >= lo:
                out[g] = fmix64(h ^ np.uint64(t + 1))
                g += 1
    if whi == 0:
        return g
    n_tok = 0
    i = 0
    while i < m:
        if not classes[cps[i]] & _WORD:
            i += 1
            continue
        j = i
        while j < m and classes[cps[j]] & _WORD:
            j += 1
        if j - i >= 2:
            tok[2 * n_tok] = i
            tok[2 * n_tok + 1] = j
            n_tok += 1
            for n in range(wlo, whi + 1):
                if n_tok < n:
                    break
                h = np.uint64(0xCBF29CE484222325)
                for q in range(n_tok - n, n_tok):
                    if q > n_tok - n:
                        h = (h ^ np.uint64(0x20)) * np.uint64(0x100000001B3)
                    for c in range(tok[2 * q], tok[2 * q + 1]):
                        h = (h ^ np.uint64(cps[c])) * np.uint64(0x100000001B3)
                out[g] = fmix64(h ^ np.uint64(0x100 + n))
                g += 1
        i = j
    return g


@nb.njit(inline="always")
def _doc_hash(data, start, end) -> np.uint64:
    """A 64-bit hash of the doc's bytes: which docs the document-frequency sample holds, the same in any shard."""
    h = np.uint64(0xCBF29CE484222325)
    for i in range(start, end):
        h = (h ^ np.uint64(data[i])) * np.uint64(0x100000001B3)
    return fmix64(h)


@nb.njit(cache=True)
def _all_ngrams(offsets, data, lo, hi, wlo, whi, classes):
    """(doc index, n-gram key) of every n-gram of every doc (exact mode)."""
    n = offsets.shape[0] - 1
    per = (hi - lo + 1) + (whi - wlo + 1 if whi > 0 else 0)
    total = 0
    for d in range(n):
        total += (offsets[d + 1] - offsets[d]) * per
    docs = np.empty(total, np.int64)
    keys = np.empty(total, np.uint64)
    maxlen = 1
    for d in range(n):
        maxlen = max(maxlen, offsets[d + 1] - offsets[d])
    cps = np.empty(maxlen, np.uint32)
    tok = np.empty(maxlen + 2, np.int64)
    buf = np.empty(maxlen * per + 1, np.uint64)
    p = 0
    for d in range(n):
        g = _doc_ngrams(data, offsets[d], offsets[d + 1], lo, hi, wlo, whi, classes, cps, tok, buf)
        for j in range(g):
            docs[p] = d
            keys[p] = buf[j]
            p += 1
    return docs[:p], keys[:p]


@nb.njit(inline="always")
def _maxlen(offsets) -> int:
    m = 1
    for d in range(offsets.shape[0] - 1):
        m = max(m, offsets[d + 1] - offsets[d])
    return m


@nb.njit(inline="always")
def _distinct_buckets(buf, g, shift, table, slots, buckets, counts) -> int:
    """The doc's n-gram count per bucket: ``buckets`` and ``counts`` get them in first-seen order; returns
    how many. ``table`` is a scratch open-addressing table of ``bucket << 32 | count`` words (-1 = free,
    sized to the doc so it stays in L1: one load per n-gram), left free again."""
    size = 64
    while size < 2 * g:
        size <<= 1
    mask = size - 1
    k = 0
    for j in range(g):
        b = np.int64(buf[j] >> shift)
        slot = b & mask
        while True:
            v = table[slot]
            if (v >> 32) == b:
                table[slot] = v + 1
                break
            if v == -1:
                table[slot] = (b << 32) | 1
                slots[k] = slot
                k += 1
                break
            slot = (slot + 1) & mask
    for j in range(k):
        v = table[slots[j]]
        buckets[j] = np.int32(v >> 32)
        counts[j] = np.int32(v & 0xFFFFFFFF)
        table[slots[j]] = -1
    return k


@intrinsic
def _prefetch(typingctx, arr, idx):
    """LLVM's prefetch of ``arr[idx]`` (read, keep in all cache levels): the IDF table is larger than L2,
    so each doc's bucket rows are requested while its n-grams are still being counted."""
    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = llvm_ir.IntType(8).as_pointer()
        i32 = llvm_ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, llvm_ir.FunctionType(llvm_ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), llvm_ir.Constant(i32, 0), llvm_ir.Constant(i32, 3),
                          llvm_ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return nb.types.void(arr, idx), codegen


@nb.njit(inline="always")
def _scratch(offsets, lo, hi, wlo, whi):
    """Per-thread buffers sized for the batch's longest doc: code points, word bounds, n-gram keys, the
    distinct-bucket table, its used slots, the doc's buckets and counts, weights."""
    maxlen = _maxlen(offsets)
    n_grams = maxlen * ((hi - lo + 1) + (whi - wlo + 1 if whi > 0 else 0)) + 1
    size = 64
    while size < 2 * n_grams:
        size <<= 1
    return (np.empty(maxlen, np.uint32), np.empty(maxlen + 2, np.int64), np.empty(n_grams, np.uint64),
            np.full(size, -1, np.int64), np.empty(n_grams, np.int64), np.empty(n_grams, np.int32),
            np.empty(n_grams, np.int32), np.empty(n_grams, np.float64))


@nb.njit(parallel=True, cache=True)
def _in_sample(offsets, data, stride):
    """Whether each doc is in the document-frequency sample: its hash is 0 modulo ``stride``."""
    n = offsets.shape[0] - 1
    out = np.zeros(n, np.bool_)
    for d in nb.prange(n):
        out[d] = _doc_hash(data, offsets[d], offsets[d + 1]) % np.uint64(stride) == 0
    return out


@nb.njit(nogil=True)
def _df_stripe(offsets, data, valid, lo, hi, wlo, whi, classes, shift, t, n_threads, df) -> int:
    """Document frequency per bucket of the valid documents t, t + n_threads, ... into ``df`` (sketch
    pass 1); returns how many there were."""
    n = offsets.shape[0] - 1
    cps, tok, buf, table, slots, buckets, counts, _ = _scratch(offsets, lo, hi, wlo, whi)
    sampled = 0
    for d in range(t, n, n_threads):
        if not valid[d]:
            continue
        sampled += 1
        g = _doc_ngrams(data, offsets[d], offsets[d + 1], lo, hi, wlo, whi, classes, cps, tok, buf)
        k = _distinct_buckets(buf, g, shift, table, slots, buckets, counts)
        for j in range(k):
            df[buckets[j]] += 1
    return sampled


@nb.njit(cache=True)
def _bucket_table(idf, width, seed):
    """Per bucket (IDF carrying the count sketch's sign, the bucket's sketch column): one 8-byte row
    holds all a doc's bucket needs, so a bucket costs one cache miss, not two lookups and a hash."""
    mask = np.uint64(width - 1)
    mix = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
    out = np.empty((idf.shape[0], 2), np.float32)
    for b in range(idf.shape[0]):
        h = fmix64((np.uint64(b) + np.uint64(1)) ^ mix)
        out[b, 0] = idf[b] if (h >> np.uint64(63)) == 0 else -idf[b]
        out[b, 1] = np.float32(h & mask)
    return out


@nb.njit(nogil=True)
def _sketch_stripe(offsets, data, valid, owner, order, lo, hi, wlo, whi, classes, shift, table, t, n_threads,
                   sketch):
    """Add each valid doc's L2-normalised sublinear TF-IDF vector (over hash buckets) to its owner's count
    sketch row (sketch pass 2), for the owners with owner % n_threads == t: no two stripes write one row.
    Docs go in ``order`` (by owner), so an owner's row stays in cache while its docs are added. ``table``
    is :func:`_bucket_table`."""
    n = offsets.shape[0] - 1
    flat = table.reshape(-1)
    cps, tok, buf, scratch, slots, buckets, counts, weight = _scratch(offsets, lo, hi, wlo, whi)
    for i in range(n):
        d = order[i]
        a = owner[d]
        if a < 0 or a % n_threads != t or not valid[d]:
            continue
        g = _doc_ngrams(data, offsets[d], offsets[d + 1], lo, hi, wlo, whi, classes, cps, tok, buf)
        for j in range(g):
            _prefetch(flat, np.int64(buf[j] >> shift) * 2)
        k = _distinct_buckets(buf, g, shift, scratch, slots, buckets, counts)
        norm2 = 0.0
        for j in range(k):
            c = counts[j]
            w = table[buckets[j], 0] * (1.0 + math.log(c) if c > 1 else 1.0)
            weight[j] = w
            norm2 += w * w
        if norm2 > 0.0:
            inv = 1.0 / math.sqrt(norm2)
            for j in range(k):
                sketch[a, np.int64(table[buckets[j], 1])] += np.float32(weight[j] * inv)


@nb.njit(parallel=True, cache=True)
def _bucket_df_parallel(offsets, data, valid, lo, hi, wlo, whi, classes, shift, n_buckets, n_threads):
    df = np.zeros((n_threads, n_buckets), np.int32)
    counted = np.zeros(n_threads, np.int64)
    for t in nb.prange(n_threads):
        counted[t] = _df_stripe(offsets, data, valid, lo, hi, wlo, whi, classes, shift, t, n_threads, df[t])
    return df.sum(axis=0, dtype=np.int64), counted.sum()


@nb.njit(nogil=True, cache=True)
def _bucket_df_serial(offsets, data, valid, lo, hi, wlo, whi, classes, shift, n_buckets, n_threads):
    df = np.zeros(n_buckets, np.int64)
    counted = _df_stripe(offsets, data, valid, lo, hi, wlo, whi, classes, shift, 0, 1, df)
    return df, counted


@nb.njit(parallel=True, cache=True)
def _sketch_add_parallel(offsets, data, valid, owner, order, lo, hi, wlo, whi, classes, shift, table, n_threads,
                         sketch):
    for t in nb.prange(n_threads):
        _sketch_stripe(offsets, data, valid, owner, order, lo, hi, wlo, whi, classes, shift, table, t, n_threads,
                       sketch)


@nb.njit(nogil=True, cache=True)
def _sketch_add_serial(offsets, data, valid, owner, order, lo, hi, wlo, whi, classes, shift, table, n_threads,
                       sketch):
    _sketch_stripe(offsets, data, valid, owner, order, lo, hi, wlo, whi, classes, shift, table, 0, 1, sketch)


def _bucket_df(offsets, data, valid, params: StyloParams, parallel: bool) -> tuple[np.ndarray, int]:
    """(document frequency per bucket, docs counted) of one batch."""
    kernel = _bucket_df_parallel if parallel else _bucket_df_serial
    df, counted = kernel(offsets, data, valid, *params.ngram_args(), character_classes(),
                         np.uint64(64 - params.hash_bits), 1 << params.hash_bits, _threads())
    return df, int(counted)


def _sample(texts: pa.Array | pa.ChunkedArray, stride: int) -> pa.Array | pa.ChunkedArray:
    """The texts in the document-frequency sample (by a hash of their raw bytes, so the same texts in any
    shard); all of them when ``stride`` is 1. Only the sample is normalised and counted."""
    if stride <= 1:
        return texts
    raw = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    if not (pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type)):
        raw = pc.fill_null(raw.cast(pa.large_string()), "")
    offsets, data, _ = _views(raw)
    return raw.filter(pa.array(_in_sample(offsets, data, stride)))


def _sketch_add(offsets, data, valid, owner, params: StyloParams, table, sketch, parallel: bool) -> None:
    """Add one batch's docs to their owners' sketch rows; ``table`` is :func:`_bucket_table` of the IDF."""
    kernel = _sketch_add_parallel if parallel else _sketch_add_serial
    order = np.argsort(owner, kind="stable")
    kernel(offsets, data, valid, owner, order, *params.ngram_args(), character_classes(),
           np.uint64(64 - params.hash_bits), table, _threads(), sketch)


@functools.cache
def character_classes() -> np.ndarray:
    """Per code point, bit flags: ``_WORD`` where Python's ``\\w`` matches (``str.isalnum()`` or ``_``:
    scikit-learn's word tokens are runs of these) and ``_SPACE`` where ``\\s`` does (``str.isspace()``:
    runs of these collapse to one space)."""
    chars = [chr(c) for c in range(0x110000)]
    table = np.fromiter((c.isalnum() for c in chars), dtype=np.uint8, count=0x110000) * np.uint8(_WORD)
    table |= np.fromiter((c.isspace() for c in chars), dtype=np.uint8, count=0x110000) * np.uint8(_SPACE)
    table[ord("_")] |= _WORD
    return table


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


def _views(texts: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _arrow_views(texts)


def _threads() -> int:
    return max(1, nb.get_num_threads())


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

@nb.njit(inline="always")
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


def _profile_text(table: pa.Table, params: StyloParams) -> HistoryProfiles:
    """Text mode: each author's posts as one text (the sum of its posts' n-gram counts, no n-gram across two
    posts), weighted by sublinear TF times the posts' smooth IDF and L2-normalised."""
    authors: dict[Any, int] = {}
    owner = author_codes(table.column("author_id"), authors, grow=True)
    vocab, df, counts = _text_counts(normalize_texts(table.column("text"), params.lowercase), owner, len(authors),
                                     params)
    idf = _smooth_idf(df, table.num_rows)
    return HistoryProfiles(params, ordered_authors(authors), idf, vocab, _sublinear_rows(counts, idf),
                           table.num_rows, "text")


# ------------------------------------------------------------------------------------------ profiling

def author_codes(col: pa.Array, index: dict[Any, int], grow: bool) -> np.ndarray:
    """Global author code per row (-1 for null or, when not ``grow``, unknown authors)."""
    enc = pc.dictionary_encode(col)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    names = enc.dictionary.to_pylist()
    if grow:
        for name in names:
            index.setdefault(name, len(index))
    lut = np.array([index.get(name, -1) for name in names] + [-1], np.int64)
    idx = enc.indices.fill_null(len(names)).to_numpy(zero_copy_only=False).astype(np.int64)
    return lut[idx]


def author_batches(histories: HistorySource, chunk_rows: int,
                   held_out: frozenset[str] | None) -> Iterator[pa.RecordBatch]:
    """(author_id, text) batches of the histories without held-out documents and posts of no author."""
    for batch in text_batches(histories, chunk_rows, held_out):
        keep = pc.is_valid(batch.column("author_id"))
        yield batch.filter(keep) if batch.column("author_id").null_count else batch


def history_text_bytes(histories: HistorySource) -> int:
    """Bytes of text in a history source before any filtering: the text column's uncompressed size in a
    parquet file's metadata (nothing is read), the UTF-8 length of a DataFrame's texts; 0 when the file is
    missing (reading it says so)."""
    if isinstance(histories, pd.DataFrame):
        if "text" not in histories.columns or histories.empty:
            return 0
        return int(pa.array(histories["text"].astype(object).where(histories["text"].notna(), None),
                            pa.large_string()).nbytes)
    path = os.fspath(histories)
    if not os.path.exists(path):
        return 0
    meta = pq.ParquetFile(path).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if "text" not in names:
        return 0
    col = names.index("text")
    return sum(meta.row_group(g).column(col).total_uncompressed_size for g in range(meta.num_row_groups))


def df_stride(rows: int, params: StyloParams) -> int:
    """One doc in ``stride`` (by hash) goes into the document-frequency sample: about ``df_sample`` docs."""
    return max(1, -(-rows // params.df_sample))


def _sketch_df(histories: HistorySource, params: StyloParams, chunk_rows: int, held_out: frozenset[str] | None,
               stride: int, parallel: bool = True) -> tuple[np.ndarray, int, int, dict[Any, int]]:
    """Pass 1 over one history source: bucket document frequencies of the sampled posts, post count,
    sampled post count, author index."""
    df = np.zeros(1 << params.hash_bits, np.int64)
    authors: dict[Any, int] = {}
    n_posts = n_sampled = 0
    for batch in author_batches(histories, chunk_rows, held_out):
        author_codes(batch.column("author_id"), authors, grow=True)
        texts = _sample(batch.column("text"), stride)
        offsets, data, valid = _views(normalize_texts(texts, params.lowercase))
        if len(texts):
            part, sampled = _bucket_df(offsets, data, valid, params, parallel)
            df += part
            n_sampled += sampled
        n_posts += batch.num_rows
    return df, n_posts, n_sampled, authors


def estimated_idf(df: np.ndarray, n_sampled: int, n_posts: int) -> np.ndarray:
    """Smooth IDF per bucket (float32, as the sketch kernel reads it) from the sample's document frequencies.
    With every post sampled it is :func:`_smooth_idf` exactly; otherwise df is scaled by n_posts / n_sampled
    and a bucket the sample never saw gets df = half of that scale (its true df is below it)."""
    if n_sampled >= n_posts:
        return _smooth_idf(df, n_posts).astype(np.float32)
    scale = n_posts / max(n_sampled, 1)
    estimate = np.where(df > 0, df * scale, 0.5 * scale)
    return (np.log((1.0 + n_posts) / (1.0 + estimate)) + 1.0).astype(np.float32)


def _sketch_rows(histories: HistorySource, params: StyloParams, idf: np.ndarray, authors: dict[Any, int],
                 chunk_rows: int, held_out: frozenset[str] | None,
                 parallel: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Pass 2 over one history source: (author codes present, their summed sketch rows)."""
    sketch = np.zeros((len(authors), params.width), np.float32)
    posts = np.zeros(len(authors), np.int64)
    table = _bucket_table(idf, params.width, params.seed)
    for batch in author_batches(histories, chunk_rows, held_out):
        owner = author_codes(batch.column("author_id"), authors, grow=False)
        offsets, data, valid = _views(normalize_texts(batch.column("text"), params.lowercase))
        if len(batch):
            _sketch_add(offsets, data, valid, owner, params, table, sketch, parallel)
        posts += np.bincount(owner[owner >= 0], minlength=len(authors))
    present = np.flatnonzero(posts)
    return present, sketch if len(present) == len(authors) else sketch[present]


def ordered_authors(authors: dict[Any, int]) -> np.ndarray:
    """The author ids of an :func:`author_codes` index, in code order."""
    out = np.empty(len(authors), dtype=object)
    for name, code in authors.items():
        out[code] = name
    return out


def profile_histories(histories: HistorySource, params: StyloParams = StyloParams(), *, chunk_rows: int = 1_000_000,
                      held_out: frozenset[str] | None = None) -> HistoryProfiles:
    """Profile every history author once (parquet path or DataFrame with author_id, text; doc_id when
    ``held_out`` names documents the adversary lacks). ``auto`` mode is resolved on the rows of the
    histories before any is held out, so both settings of a run profile in the same mode."""
    mode = params.resolved_mode(history_text_bytes(histories)) if params.mode == "auto" else params.mode
    if mode in ("text", "exact"):
        batches = list(author_batches(histories, chunk_rows, held_out))
        table = pa.Table.from_batches(batches) if batches else None
        if table is None or table.num_rows == 0:
            return HistoryProfiles(params, np.empty(0, object), np.zeros(0), np.zeros(0, np.uint64),
                                   sp.csr_matrix((0, 0)), 0, mode)
        if mode == "text":
            return _profile_text(table, params)
        authors: dict[Any, int] = {}
        owner = author_codes(table.column("author_id"), authors, grow=True)
        rows, vocab, idf = _exact_tfidf(normalize_texts(table.column("text"), params.lowercase), params, None, None)
        profiles = _l2_rows(_mean_rows(rows, owner, len(authors))).tocsr()
        return HistoryProfiles(params, ordered_authors(authors), idf, vocab, profiles, table.num_rows, mode)
    df, n_posts, n_sampled, authors = _sketch_df(histories, params, chunk_rows, held_out,
                                                 df_stride(history_rows(histories), params))
    idf = estimated_idf(df, n_sampled, n_posts)
    present, rows = _sketch_rows(histories, params, idf, authors, chunk_rows, held_out)
    if len(present) == len(authors):
        sketch = rows
    else:
        sketch = np.zeros((len(authors), params.width), np.float32)
        sketch[present] = rows
    return HistoryProfiles(params, ordered_authors(authors), idf, None, _l2_rows_in_place(sketch), n_posts, mode)


def profile_histories_dask(client: Any, shards: Sequence[HistorySource], params: StyloParams = StyloParams(), *,
                           chunk_rows: int = 1_000_000, held_out: frozenset[str] | None = None) -> HistoryProfiles:
    """:func:`profile_histories` (sketch mode) with the history shards on Dask workers: per-shard
    document frequencies and author sets are summed, then per-shard author sketches are summed by
    author; equal to the single-process result up to float32 summation order."""
    if params.mode not in ("sketch", "auto"):
        raise ValueError("the Dask path profiles in sketch mode (auto: sharded histories are large)")
    stride = df_stride(sum(history_rows(shard) for shard in shards), params)  # one sample across shards
    parts = map_shards(client, _sketch_df, list(shards), params=params, chunk_rows=chunk_rows, held_out=held_out,
                       stride=stride, parallel=False)
    df = np.sum([p[0] for p in parts], axis=0) if parts else np.zeros(1 << params.hash_bits, np.int64)
    n_posts, n_sampled = sum(p[1] for p in parts), sum(p[2] for p in parts)
    names = sorted({name for p in parts for name in p[3]}, key=str)
    authors = {name: i for i, name in enumerate(names)}
    idf = estimated_idf(df, n_sampled, n_posts)
    sketch = np.zeros((len(authors), params.width), np.float32)
    idf_future, authors_future = client.scatter([idf, authors], broadcast=True)
    for present, rows in map_shards(client, _sketch_rows, list(shards), params=params, idf=idf_future,
                                    authors=authors_future, chunk_rows=chunk_rows, held_out=held_out, parallel=False):
        sketch[present] += rows
    return HistoryProfiles(params, ordered_authors(authors), idf, None, _l2_rows_in_place(sketch), n_posts, "sketch")


# ------------------------------------------------------------------------------------------- the attack

def timeline_profiles(profiles: HistoryProfiles, synthetic: pd.DataFrame) -> tuple[Any, np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
    """(L2-normalised timeline profiles, timeline ids, true authors, posts per timeline) of the synthetic
    side under the histories' vocabulary and IDF."""
    check_timelines(synthetic)
    codes, groups, true_author, n_posts = timeline_codes(synthetic)
    texts = normalize_texts(pa.array(synthetic["text"].astype(object).where(synthetic["text"].notna(), None).tolist(),
                                     pa.large_string()), profiles.params.lowercase)
    params = profiles.params
    if profiles.mode in ("text", "exact"):
        if profiles.vocab is None or len(profiles.vocab) == 0:
            return sp.csr_matrix((len(groups), 0)), groups, true_author, n_posts
        if profiles.mode == "text":  # the timeline's posts as one text
            counts, _ = _exact_counts(texts, params, profiles.vocab)
            summed = sp.csr_matrix((np.ones(len(codes)), (codes, np.arange(len(codes)))),
                                   shape=(len(groups), len(codes))) @ counts
            return _sublinear_rows(summed.tocsr(), profiles.idf), groups, true_author, n_posts
        rows, _, _ = _exact_tfidf(texts, params, profiles.vocab, profiles.idf)
        return _l2_rows(_mean_rows(rows, codes, len(groups))).tocsr(), groups, true_author, n_posts
    sketch = np.zeros((len(groups), params.width), np.float32)
    offsets, data, valid = _views(texts)
    if len(texts):
        _sketch_add(offsets, data, valid, codes, params, _bucket_table(profiles.idf, params.width, params.seed),
                    sketch, True)
    counts = np.maximum(n_posts, 1).astype(np.float32)
    return _l2_rows(sketch / counts[:, None]), groups, true_author, n_posts


def similarity(timelines: Any, profiles: HistoryProfiles) -> np.ndarray:
    """Dense (timelines x authors) cosine of unit-norm profiles."""
    if profiles.profiles.shape[0] == 0:
        return np.zeros((timelines.shape[0], 0))
    out = timelines @ profiles.profiles.T
    return np.asarray(out.toarray() if sp.issparse(out) else out, dtype=np.float64)


def stylometric_attack(profiles: HistoryProfiles, synthetic: pd.DataFrame, setting: Setting = "full") -> ReidResult:
    """Attribute each synthetic timeline (group_id, true author_id, text) to the history author with the
    most similar profile; ``setting`` is recorded (the profiles were built for it)."""
    timelines, groups, true_author, n_posts = timeline_profiles(profiles, synthetic)
    per, summary = attribute_scores(similarity(timelines, profiles), profiles.authors, groups, true_author, n_posts)
    return ReidResult(per_timeline=per, summary={**attack_summary(
        "stylometric", setting, summary, profiles.params, n_history_posts=profiles.n_posts,
        n_history_users=len(profiles.authors), n_synthetic_posts=len(synthetic)), "mode_used": profiles.mode})


def reidentify_stylometric(histories: HistorySource, synthetic: pd.DataFrame, params: StyloParams = StyloParams(), *,
                           setting: Setting = "full", chunk_rows: int = 1_000_000) -> ReidResult:
    """Profile the histories (without the synthetic posts' sources in ``disjoint``) and attack."""
    profiles = profile_histories(histories, params, chunk_rows=chunk_rows,
                                 held_out=held_out_doc_ids(synthetic, setting))
    return stylometric_attack(profiles, synthetic, setting)


# ------------------------------------------------------------------------------------------- evidence

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
