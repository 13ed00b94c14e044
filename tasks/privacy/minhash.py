"""MinHash signatures over character n-grams, with datasketch's permutation family.

Shingling (both paths):

- Text is normalised first: every run of ASCII whitespace (space, \\t, \\n, \\r, \\v, \\f) becomes one
  space and leading/trailing whitespace is dropped. Case is kept by default (capitalisation is a
  stylistic cue for authorship); ``lower=True`` lowercases ASCII letters only. No Unicode normalisation.
- Shingles are the *sets* of n consecutive Unicode code points (n=3 by default, as in the article).
- A non-empty text shorter than n code points is one shingle (the whole text), so "ok" still matches "ok".
- An empty text (after normalisation, or null) has no shingles: its signature is all ``EMPTY`` (the
  32-bit max, what an untouched datasketch MinHash holds) and it never becomes an LSH candidate.

Permutations are exactly datasketch's for ``MinHash(num_perm=k, seed=seed, scheme=...)``:

- ``"affine32"`` (datasketch >= 2.0 default): ``h' = fmix32(h)``, ``a*h' + b mod 2^32`` with odd ``a``
  (a bijection, so no collision bias on large sets); this is the default here too, and it vectorises.
- ``"legacy"`` (datasketch < 2.0): ``((a*h + b) mod 2^64) mod (2^61-1) & 0xffffffff``; the ``mod 2^64`` is
  numpy's uint64 wrap-around, which datasketch's own arithmetic performs.

Two hash functions for the n-gram itself:

- :func:`signatures_datasketch_compatible`: sha1 of the n-gram's UTF-8 bytes, first 4 bytes little-endian
  (datasketch's ``sha1_hash32``); equal, value for value, to datasketch ``MinHash.update`` over the same
  shingles. Python-speed hashing (~20-50k posts/s); the reference.
- :func:`signatures`: a numba kernel over Arrow's UTF-8 buffers (zero-copy) hashing each n-gram's code
  points with FNV-1a-64 folded through the murmur3 fmix64 finaliser to 32 bits. A different, equally valid
  hash family: the estimates are unbiased for Jaccard of the same shingle sets, but signatures are not
  comparable with sha1-based ones. Compare only signatures made with the same :class:`MinHashParams`.

Both estimate Jaccard as the share of equal signature positions (:func:`estimate_jaccard`), with
standard error ``sqrt(J(1-J)/k)``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numba as nb
import numpy as np
import pyarrow as pa

from tasks.parallel import kernel_threads, run_stripes

Scheme = Literal["affine32", "legacy"]
EMPTY = np.uint32(0xFFFFFFFF)
_MERSENNE = np.uint64((1 << 61) - 1)
_WS = re.compile(r"[ \t\n\r\v\f]+")
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_BLOCK = 2048  # documents per work item of a thread


@dataclass(frozen=True)
class MinHashParams:
    """Everything that makes two signatures comparable: n-gram size, permutations, normalisation."""

    n: int = 3
    k: int = 128
    seed: int = 1
    scheme: Scheme = "affine32"
    lower: bool = False

    def __post_init__(self) -> None:
        if self.n < 1 or self.k < 1:
            raise ValueError(f"n and k must be positive, got n={self.n}, k={self.k}")
        if self.scheme not in ("affine32", "legacy"):
            raise ValueError(f"scheme must be 'affine32' or 'legacy', got {self.scheme!r}")

    def permutations(self) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) as datasketch draws them for this seed, k and scheme."""
        return datasketch_permutations(self.k, self.seed, self.scheme)


def datasketch_permutations(k: int, seed: int, scheme: Scheme = "affine32") -> tuple[np.ndarray, np.ndarray]:
    """datasketch's ``MinHash._init_permutations``: uint32 (a, b) for affine32, uint64 for legacy."""
    gen = np.random.RandomState(seed)
    if scheme == "legacy":
        ab = np.array([(gen.randint(1, _MERSENNE, dtype=np.uint64), gen.randint(0, _MERSENNE, dtype=np.uint64))
                       for _ in range(k)], dtype=np.uint64).T
        return np.ascontiguousarray(ab[0]), np.ascontiguousarray(ab[1])
    a = gen.randint(0, 1 << 31, k, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, k, dtype=np.uint32)
    return a, b


def normalize(text: str | None, lower: bool = False) -> str:
    """The text the shingles are cut from (see the module docstring)."""
    if not text:
        return ""
    text = _WS.sub(" ", text).strip(" ")
    return text.translate(_ASCII_LOWER) if lower else text


def shingles(text: str | None, n: int = 3, lower: bool = False) -> set[str]:
    """The set of character n-grams of the normalised text (whole text if shorter than n; none if empty)."""
    t = normalize(text, lower)
    if not t:
        return set()
    if len(t) < n:
        return {t}
    return {t[i:i + n] for i in range(len(t) - n + 1)}


def _fmix32_np(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def signatures_datasketch_compatible(texts: Iterable[str | None], k: int = 128, seed: int = 1, *, n: int = 3,
                                     scheme: Scheme = "affine32", lower: bool = False) -> np.ndarray:
    """(N, k) uint32 signatures equal to datasketch ``MinHash(num_perm=k, seed=seed, scheme=scheme)``
    updated with every shingle's UTF-8 bytes (sha1_hash32). The reference path."""
    a, b = datasketch_permutations(k, seed, scheme)
    texts = list(texts)
    out = np.full((len(texts), k), EMPTY, dtype=np.uint32)
    for i, text in enumerate(texts):
        sh = shingles(text, n, lower)
        if not sh:
            continue
        hv = np.array([int.from_bytes(hashlib.sha1(s.encode("utf-8")).digest()[:4], "little") for s in sh],
                      dtype=np.uint32)
        with np.errstate(over="ignore"):
            if scheme == "legacy":
                phv = ((a[None, :] * hv.astype(np.uint64)[:, None] + b[None, :]) % _MERSENNE) & np.uint64(0xFFFFFFFF)
            else:
                phv = a[None, :] * _fmix32_np(hv)[:, None] + b[None, :]
        out[i] = phv.min(axis=0)
    return out


# ----------------------------------------------------------------------------------------------- kernel

@nb.njit
def fmix64(h: np.uint64) -> np.uint64:
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@nb.njit
def utf8_at(data: np.ndarray, i: int) -> tuple[np.uint32, int]:
    """The code point starting at byte ``i`` of valid UTF-8 ``data`` and its width in bytes."""
    c = np.uint32(data[i])
    if c < 0x80:
        return c, 1
    if c >= 0xF0:
        return ((c & np.uint32(0x07)) << np.uint32(18)) | ((np.uint32(data[i + 1]) & np.uint32(0x3F)) << np.uint32(12)) \
            | ((np.uint32(data[i + 2]) & np.uint32(0x3F)) << np.uint32(6)) | (np.uint32(data[i + 3]) & np.uint32(0x3F)), 4
    if c >= 0xE0:
        return ((c & np.uint32(0x0F)) << np.uint32(12)) | ((np.uint32(data[i + 1]) & np.uint32(0x3F)) << np.uint32(6)) \
            | (np.uint32(data[i + 2]) & np.uint32(0x3F)), 3
    return ((c & np.uint32(0x1F)) << np.uint32(6)) | (np.uint32(data[i + 1]) & np.uint32(0x3F)), 2


@nb.njit
def _decode(data: np.ndarray, start: int, end: int, lower: bool, cps: np.ndarray) -> int:
    """UTF-8 bytes -> normalised code points in ``cps``; returns their count."""
    m = 0
    pending_space = False
    i = start
    while i < end:
        c, w = utf8_at(data, i)
        i += w
        if c == 32 or (9 <= c <= 13):
            pending_space = m > 0
            continue
        if pending_space:
            cps[m] = 32
            m += 1
            pending_space = False
        if lower and 65 <= c <= 90:
            c += np.uint32(32)
        cps[m] = c
        m += 1
    return m


@nb.njit
def _ngram_hashes(cps: np.ndarray, m: int, n: int, legacy: bool, hv: np.ndarray) -> int:
    """32-bit hash of each n-gram (FNV-1a-64 over code points, fmix64, low 32 bits); affine32 gets
    datasketch's fmix32 pre-mix on top, as datasketch applies it to every input hash."""
    g = m - n + 1 if m >= n else (1 if m > 0 else 0)
    w = n if m >= n else m
    for i in range(g):
        h = np.uint64(0xCBF29CE484222325)
        for t in range(w):
            h = (h ^ np.uint64(cps[i + t])) * np.uint64(0x100000001B3)
        x = np.uint32(fmix64(h) & np.uint64(0xFFFFFFFF))
        if not legacy:
            x ^= x >> np.uint32(16)
            x *= np.uint32(0x85EBCA6B)
            x ^= x >> np.uint32(13)
            x *= np.uint32(0xC2B2AE35)
            x ^= x >> np.uint32(16)
        hv[i] = x
    return g


@nb.njit
def _min_affine32(hv: np.ndarray, g: int, a: np.ndarray, b: np.ndarray, sig: np.ndarray) -> None:
    k = a.shape[0]
    for j in range(k):
        sig[j] = np.uint32(0xFFFFFFFF)
    for i in range(g):
        h = hv[i]
        for j in range(k):
            v = np.uint32(a[j] * h + b[j])  # mod 2^32; written this way LLVM vectorises it
            sig[j] = min(sig[j], v)


@nb.njit
def _min_legacy(hv: np.ndarray, g: int, a: np.ndarray, b: np.ndarray, sig: np.ndarray) -> None:
    k = a.shape[0]
    p = np.uint64(0x1FFFFFFFFFFFFFFF)
    for j in range(k):
        sig[j] = np.uint32(0xFFFFFFFF)
    for i in range(g):
        h = np.uint64(hv[i])
        for j in range(k):
            x = a[j] * h + b[j]  # wraps mod 2^64, as numpy does in datasketch
            r = (x & p) + (x >> np.uint64(61))  # x mod (2^61 - 1), exactly
            r = r - p if r >= p else r
            v = np.uint32(r & np.uint64(0xFFFFFFFF))
            sig[j] = min(sig[j], v)


@nb.njit
def _band_keys_row(sig: np.ndarray, bands: int, rows: int, out: np.ndarray) -> None:
    """One uint64 key per band: a 64-bit mix of the band index and its r values; 0 means 'no key'
    (empty text), so a real key of 0 is moved to 1."""
    if sig[0] == np.uint32(0xFFFFFFFF) and sig[sig.shape[0] - 1] == np.uint32(0xFFFFFFFF):
        empty = True
        for j in range(sig.shape[0]):
            if sig[j] != np.uint32(0xFFFFFFFF):
                empty = False
                break
        if empty:
            for t in range(bands):
                out[t] = 0
            return
    for t in range(bands):
        h = np.uint64(t + 1) * np.uint64(0x9E3779B97F4A7C15)
        base = t * rows
        u = 0
        while u < rows:  # two 32-bit values packed per 64-bit step (injective), halves the mixing chain
            y = np.uint64(sig[base + u])
            if u + 1 < rows:
                y |= np.uint64(sig[base + u + 1]) << np.uint64(32)
            h = (h ^ y) * np.uint64(0xBF58476D1CE4E5B9)
            h ^= h >> np.uint64(31)
            u += 2
        h = fmix64(h)
        out[t] = h if h != 0 else np.uint64(1)


@nb.njit(nogil=True, cache=True)
def _sign_block(blk, offsets, data, valid, n, lower, legacy, a, b, bands, rows, want_sig, sig_out, key_out):
    """Sign documents [blk*_BLOCK, (blk+1)*_BLOCK) with buffers sized for the block's longest text."""
    n_docs = offsets.shape[0] - 1
    lo = blk * _BLOCK
    hi = min(n_docs, lo + _BLOCK)
    maxlen = 1
    for d in range(lo, hi):
        maxlen = max(maxlen, offsets[d + 1] - offsets[d])
    cps = np.empty(maxlen, dtype=np.uint32)
    hv = np.empty(maxlen, dtype=np.uint32)
    sig = np.empty(a.shape[0], dtype=np.uint32)
    for d in range(lo, hi):
        m = _decode(data, offsets[d], offsets[d + 1], lower, cps) if valid[d] else 0
        g = _ngram_hashes(cps, m, n, legacy, hv)
        if legacy:
            _min_legacy(hv, g, a, b, sig)
        else:
            _min_affine32(hv, g, a, b, sig)
        if want_sig:
            sig_out[d, :] = sig
        if bands > 0:
            _band_keys_row(sig, bands, rows, key_out[d])


@nb.njit(nogil=True, cache=True)
def _sign_stripe(offsets, data, valid, n, lower, legacy, a, b, bands, rows, want_sig, sig_out, key_out, t, n_threads):
    """Sign the documents of blocks t, t + n_threads, ... (:func:`_sign_block`)."""
    for blk in range(t, (offsets.shape[0] - 1 + _BLOCK - 1) // _BLOCK, n_threads):
        _sign_block(blk, offsets, data, valid, n, lower, legacy, a, b, bands, rows, want_sig, sig_out, key_out)


def _arrow_views(texts: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets int64, data uint8, valid uint8) views of a UTF-8 Arrow array (one copy of the offsets
    at most; the data buffer is shared)."""
    if not isinstance(texts, pa.Array | pa.ChunkedArray):
        texts = pa.array(list(texts) if not isinstance(texts, np.ndarray) else texts, pa.large_string())
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    if pa.types.is_dictionary(texts.type):
        texts = texts.dictionary_decode()
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
        raise TypeError(f"texts must be a UTF-8 string array, got {texts.type}")
    n = len(texts)
    _, off_buf, data_buf = texts.buffers()
    off_dtype = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    offsets = np.frombuffer(off_buf, dtype=off_dtype)[texts.offset:texts.offset + n + 1] if n else np.zeros(1, off_dtype)
    offsets = offsets.astype(np.int64, copy=False)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None and data_buf.size else np.zeros(1, np.uint8)
    valid = np.asarray(texts.is_valid()).astype(np.uint8) if texts.null_count else np.ones(n, dtype=np.uint8)
    return offsets, data, valid


def sign(texts: pa.Array | pa.ChunkedArray | Sequence[str | None], params: MinHashParams = MinHashParams(), *,
         bands: int = 0, rows: int = 0, want_signatures: bool = True,
         parallel: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Fast path: (signatures (N, k) uint32 or None, band keys (N, bands) uint64 or None).

    ``parallel=False`` runs single-threaded without the GIL (for Dask worker threads)."""
    if bands and bands * rows > params.k:
        raise ValueError(f"bands*rows = {bands * rows} exceeds k = {params.k}")
    offsets, data, valid = _arrow_views(texts)
    n_docs = offsets.shape[0] - 1
    a, b = params.permutations()
    sig = np.empty((n_docs if want_signatures else 0, params.k), dtype=np.uint32)
    keys = np.empty((n_docs if bands else 0, max(bands, 1)), dtype=np.uint64)
    if n_docs:
        args = (offsets, data, valid, params.n, params.lower, params.scheme == "legacy", a, b, bands, rows,
                want_signatures, sig if want_signatures else np.empty((1, params.k), np.uint32),
                keys if bands else np.empty((1, 1), np.uint64))
        n_threads = min(kernel_threads(), -(-n_docs // _BLOCK)) if parallel else 1
        run_stripes(lambda t: _sign_stripe(*args, t, n_threads), n_threads)
    return (sig if want_signatures else None), (keys[:, :bands] if bands else None)


def signatures(texts: pa.Array | pa.ChunkedArray | Sequence[str | None], k: int = 128, seed: int = 1, *, n: int = 3,
               scheme: Scheme = "affine32", lower: bool = False, parallel: bool = True) -> np.ndarray:
    """Fast-path (N, k) uint32 MinHash signatures (FNV-1a/fmix n-gram hash, datasketch permutations)."""
    sig, _ = sign(texts, MinHashParams(n=n, k=k, seed=seed, scheme=scheme, lower=lower), parallel=parallel)
    assert sig is not None
    return sig


def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(N, bands) uint64 LSH band keys of given signatures (0 for empty signatures)."""
    if bands * rows > sig.shape[1]:
        raise ValueError(f"bands*rows = {bands * rows} exceeds k = {sig.shape[1]}")
    return _band_keys(np.ascontiguousarray(sig, dtype=np.uint32), bands, rows)


@nb.njit(cache=True)
def _band_keys(sig, bands, rows):
    out = np.empty((sig.shape[0], bands), dtype=np.uint64)
    for d in range(sig.shape[0]):
        _band_keys_row(sig[d], bands, rows, out[d])
    return out


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Share of equal positions per row (0 where either side is empty, so empty never matches)."""
    sig_a, sig_b = np.atleast_2d(sig_a), np.atleast_2d(sig_b)
    est = (sig_a == sig_b).mean(axis=1)
    empty = (sig_a == EMPTY).all(axis=1) | (sig_b == EMPTY).all(axis=1)
    est[empty] = 0.0
    return est


def jaccard(a: set[str], b: set[str]) -> float:
    """Exact Jaccard of two shingle sets (0 when both are empty)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0
