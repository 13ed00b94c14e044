"""The stylometric attack's numba kernels: UTF-8 text to code points, character and word n-gram keys
(64-bit hashes), the per-doc distinct-bucket count, the sketch mode's two passes (bucket document
frequencies, count-sketch rows) and their Python drivers, and the per-code-point character classes. Kept
apart from the profiles and scores they feed: the same kernels serve the exact, text and sketch modes, the
evidence and the classifier attack's re-ranker."""

from __future__ import annotations

import functools
import math

import llvmlite.ir as llvm_ir
import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba.core import cgutils
from numba.extending import intrinsic

from tasks.parallel import kernel_threads, run_stripes
from tasks.privacy.minhash import _arrow_views, fmix64, utf8_at
from tasks.privacy.stylometric.params import StyloParams

_WORD, _SPACE = 1, 2  # character_classes() flags
#: The hot loops index with unsigned integers: numba checks a signed index for wrap-around (a negative one
#: counts from the end) on every access, about a tenth of the sketch kernel's time (benchmarks/reidentify.py).
U = np.uint64


@nb.njit
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


@nb.njit
def _doc_ngrams(data, start, end, lo, hi, wlo, whi, classes, cps, tok, out) -> int:
    """64-bit keys of the doc's character n-grams (lo <= n <= hi) and, when ``whi`` > 0, word n-grams
    (wlo <= n <= whi) into ``out``; returns their count. Words are scikit-learn's tokens (maximal runs of
    two or more ``\\w`` characters, :func:`character_classes`), joined by one space; word keys are in a
    domain of their own, so a word never shares a key with a character n-gram. Positions are unsigned, so
    numba checks no index for wrap-around (:data:`U`)."""
    m = U(_code_points(data, start, end, classes, cps))
    g = U(0)
    if hi >= lo and m >= U(lo):
        for i in range(m - U(lo) + U(1)):
            h = U(0xCBF29CE484222325)
            for t in range(U(hi)):
                if i + t >= m:
                    break
                h = (h ^ U(cps[i + t])) * U(0x100000001B3)
                if t + U(1) >= U(lo):
                    out[g] = fmix64(h ^ (t + U(1)))
                    g += U(1)
    if whi == 0:
        return np.int64(g)
    n_tok = U(0)
    i = U(0)
    while i < m:
        if not classes[cps[i]] & _WORD:
            i += U(1)
            continue
        j = i
        while j < m and classes[cps[j]] & _WORD:
            j += U(1)
        if j - i >= U(2):
            tok[U(2) * n_tok] = i
            tok[U(2) * n_tok + U(1)] = j
            n_tok += U(1)
            for n in range(wlo, whi + 1):
                if n_tok < U(n):
                    break
                h = U(0xCBF29CE484222325)
                for q in range(n_tok - U(n), n_tok):
                    if q > n_tok - U(n):
                        h = (h ^ U(0x20)) * U(0x100000001B3)
                    for c in range(U(tok[U(2) * q]), U(tok[U(2) * q + U(1)])):
                        h = (h ^ U(cps[c])) * U(0x100000001B3)
                out[g] = fmix64(h ^ U(0x100 + n))
                g += U(1)
        i = j
    return np.int64(g)


@nb.njit
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


@nb.njit
def _maxlen(offsets) -> int:
    m = 1
    for d in range(offsets.shape[0] - 1):
        m = max(m, offsets[d + 1] - offsets[d])
    return m


@nb.njit
def _distinct_buckets(buf, g, shift, table, slots, buckets, counts) -> int:
    """The doc's n-gram count per bucket: ``buckets`` and ``counts`` get them in first-seen order; returns
    how many. ``table`` is a scratch open-addressing table of ``bucket << 32 | count`` words (-1 = free,
    sized to the doc so it stays in L1: one load per n-gram), left free again; ``slots`` (uint64) its used
    slots. Indices are unsigned (:data:`U`)."""
    size = U(64)
    while size < U(2 * g):
        size <<= U(1)
    mask = size - U(1)
    k = U(0)
    for j in range(U(g)):
        b = buf[j] >> shift
        slot = b & mask
        while True:
            v = table[slot]
            if U(v >> 32) == b:
                table[slot] = v + 1
                break
            if v == -1:
                table[slot] = np.int64(b << U(32)) | 1
                slots[k] = slot
                k += U(1)
                break
            slot = (slot + U(1)) & mask
    for j in range(k):
        v = table[slots[j]]
        buckets[j] = np.int32(v >> 32)
        counts[j] = np.int32(v & 0xFFFFFFFF)
        table[slots[j]] = -1
    return np.int64(k)


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


@nb.njit
def _scratch(offsets, lo, hi, wlo, whi):
    """Per-thread buffers sized for the batch's longest doc: code points, word bounds, n-gram keys, the
    distinct-bucket table, its used slots, the doc's buckets and counts, weights."""
    maxlen = _maxlen(offsets)
    n_grams = maxlen * ((hi - lo + 1) + (whi - wlo + 1 if whi > 0 else 0)) + 1
    size = 64
    while size < 2 * n_grams:
        size <<= 1
    return (np.empty(maxlen, np.uint32), np.empty(maxlen + 2, np.int64), np.empty(n_grams, np.uint64),
            np.full(size, -1, np.int64), np.empty(n_grams, np.uint64), np.empty(n_grams, np.int32),
            np.empty(n_grams, np.int32), np.empty(n_grams, np.float64))


@nb.njit(nogil=True, cache=True)
def _in_sample_stripe(offsets, data, stride, t, n_threads, out):
    """Whether docs t, t + n_threads, ... are in the document-frequency sample: their hash is 0 modulo ``stride``."""
    for d in range(t, offsets.shape[0] - 1, n_threads):
        out[d] = _doc_hash(data, offsets[d], offsets[d + 1]) % np.uint64(stride) == 0


@nb.njit(nogil=True, cache=True)
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


@nb.njit(nogil=True, cache=True)
def _sketch_stripe(offsets, data, valid, owner, order, lo, hi, wlo, whi, classes, shift, table, t, n_threads,
                   sketch):
    """Add each valid doc's L2-normalised sublinear TF-IDF vector (over hash buckets) to its owner's count
    sketch row (sketch pass 2), for the owners with owner % n_threads == t: no two stripes write one row.
    Docs go in ``order`` (by owner); an owner's docs are summed in a row of the stripe's own and added to
    its sketch row once: scattered adds into a small row of the stripe's own cost less than into the large
    sketch (benchmarks/reidentify.py). ``table`` is :func:`_bucket_table`."""
    n = offsets.shape[0] - 1
    flat = table.reshape(-1)
    cps, tok, buf, scratch, slots, buckets, counts, weight = _scratch(offsets, lo, hi, wlo, whi)
    row = np.zeros(sketch.shape[1], np.float32)
    current = -1
    for i in range(n):
        d = order[i]
        a = owner[d]
        if a < 0 or a % n_threads != t or not valid[d]:
            continue
        if a != current:
            if current >= 0:
                _flush_row(row, sketch, current)
            current = a
        g = _doc_ngrams(data, offsets[d], offsets[d + 1], lo, hi, wlo, whi, classes, cps, tok, buf)
        for j in range(U(g)):
            _prefetch(flat, (buf[j] >> shift) * U(2))
        k = U(_distinct_buckets(buf, g, shift, scratch, slots, buckets, counts))
        norm2 = 0.0  # flat[2b] is bucket b's signed IDF, flat[2b + 1] its sketch column (_bucket_table's row b)
        for j in range(k):
            c = counts[j]
            w = flat[U(buckets[j]) * U(2)] * (1.0 + math.log(c) if c > 1 else 1.0)
            weight[j] = w
            norm2 += w * w
        if norm2 > 0.0:
            inv = 1.0 / math.sqrt(norm2)
            for j in range(k):
                row[U(flat[U(buckets[j]) * U(2) + U(1)])] += np.float32(weight[j] * inv)
    if current >= 0:
        _flush_row(row, sketch, current)


@nb.njit
def _flush_row(row, sketch, a):
    """Add ``row`` to sketch row ``a`` and clear it."""
    for c in range(row.shape[0]):
        sketch[a, c] += row[c]
        row[c] = 0


def _bucket_df(offsets, data, valid, params: StyloParams, parallel: bool) -> tuple[np.ndarray, int]:
    """(document frequency per bucket, docs counted) of one batch."""
    n_threads = kernel_threads() if parallel else 1
    df = np.zeros((n_threads, 1 << params.hash_bits), np.int32)
    args = (offsets, data, valid, *params.ngram_args(), character_classes(), np.uint64(64 - params.hash_bits))
    counted = run_stripes(lambda t: _df_stripe(*args, t, n_threads, df[t]), n_threads)
    return df.sum(axis=0, dtype=np.int64), int(sum(counted))


def _sample(texts: pa.Array | pa.ChunkedArray, stride: int) -> pa.Array | pa.ChunkedArray:
    """The texts in the document-frequency sample (by a hash of their raw bytes, so the same texts in any
    shard); all of them when ``stride`` is 1. Only the sample is normalised and counted."""
    if stride <= 1:
        return texts
    raw = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    if not (pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type)):
        raw = pc.fill_null(raw.cast(pa.large_string()), "")
    offsets, data, _ = _views(raw)
    n_threads = kernel_threads()
    keep = np.zeros(len(offsets) - 1, np.bool_)
    run_stripes(lambda t: _in_sample_stripe(offsets, data, stride, t, n_threads, keep), n_threads)
    return raw.filter(pa.array(keep))


def _sketch_add(offsets, data, valid, owner, params: StyloParams, table, sketch, parallel: bool) -> None:
    """Add one batch's docs to their owners' sketch rows; ``table`` is :func:`_bucket_table` of the IDF."""
    n_threads = kernel_threads() if parallel else 1
    order = np.argsort(owner, kind="stable")
    args = (offsets, data, valid, owner, order, *params.ngram_args(), character_classes(),
            np.uint64(64 - params.hash_bits), table)
    run_stripes(lambda t: _sketch_stripe(*args, t, n_threads, sketch), n_threads)


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


def _views(texts: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _arrow_views(texts)

