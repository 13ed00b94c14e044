"""The two-stage mode's numba re-ranker: each text's row over the hashed n-gram buckets
(:func:`_post_rows`) and, per timeline, a one-vs-rest L2-loss linear SVM among its candidates trained by dual
coordinate descent (:func:`_rerank_one`, :func:`_rerank_all`). Kept apart from the side and the scores
that drive it."""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from tasks.parallel import run_stripes
from tasks.privacy.stylometric.kernels import _distinct_buckets, _doc_ngrams, _scratch

#: The re-ranker's class loops run over rows of this many classes or a multiple (a vector register's float32 lanes on
#: AVX2): 20 candidates padded to 24 took 7.1-7.8 s for 500 timelines at the article's scale, against 9.4-9.9 s with
#: a scalar remainder of 4 (benchmarks/reidentify.py --full --attacks classifier).
_LANES = 8
#: The count pass of :func:`_post_stripe` writes no bucket or weight.
_NO_INDEX = np.empty(0, np.int32)
_NO_VALUE = np.empty(0, np.float32)


@nb.njit
def _xorshift(state):
    state ^= state << np.uint64(13)
    state ^= state >> np.uint64(7)
    state ^= state << np.uint64(17)
    return state


@nb.njit(nogil=True, cache=True)
def _post_stripe(offsets, data, lo, hi, wlo, whi, classes, shift, idf, t, n_threads, indptr, idx, val, fill):
    """Texts t, t + n_threads, ...: their distinct buckets' count into ``indptr[d + 1]`` (``fill`` False), or
    their buckets and L2-normalised ``(1 + ln(count)) * idf`` weights into ``idx``, ``val`` at ``indptr[d]``."""
    cps, tok, buf, table, slots, buckets, counts, _ = _scratch(offsets, lo, hi, wlo, whi)
    for d in range(t, offsets.shape[0] - 1, n_threads):
        g = _doc_ngrams(data, offsets[d], offsets[d + 1], lo, hi, wlo, whi, classes, cps, tok, buf)
        k = _distinct_buckets(buf, g, shift, table, slots, buckets, counts)
        if not fill:
            indptr[d + 1] = k
            continue
        at = indptr[d]
        norm2 = 0.0
        for j in range(k):
            w = idf[buckets[j]] * (1.0 + math.log(counts[j]))
            idx[at + j] = buckets[j]
            val[at + j] = w
            norm2 += w * w
        if norm2 > 0.0:
            inv = 1.0 / math.sqrt(norm2)
            for j in range(k):
                val[at + j] *= inv


def _post_rows(offsets, data, lo, hi, wlo, whi, classes, shift, idf, n_threads):
    """Each text's row over the ``2**hash_bits`` buckets: (indptr, bucket, weight), sublinear TF x IDF, L2."""
    n = offsets.shape[0] - 1
    indptr = np.zeros(n + 1, np.int64)
    args = (offsets, data, lo, hi, wlo, whi, classes, shift, idf)
    run_stripes(lambda t: _post_stripe(*args, t, n_threads, indptr, _NO_INDEX, _NO_VALUE, False), n_threads)
    np.cumsum(indptr, out=indptr)
    idx = np.empty(indptr[n], np.int32)
    val = np.empty(indptr[n], np.float32)
    run_stripes(lambda t: _post_stripe(*args, t, n_threads, indptr, idx, val, True), n_threads)
    return indptr, idx, val


@nb.njit(nogil=True, fastmath=True)
def _rerank_one(t, cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, lo, hi, wlo, whi, classes, shift,
                idf, c, tol, max_iter, seed, remap, used, cps, tok, buf, table, slots, buckets, counts, out):
    """The one-vs-rest L2-loss SVM among timeline ``t``'s candidates (``cand[t]``; candidate ``a``'s posts are
    rows ``cand_ptr[a]:cand_ptr[a + 1]`` of (``indptr``, ``idx``, ``val``): :func:`_post_rows`) trained on
    their posts, and its decision values on the timeline's posts joined (``out[t]``). Features are local ids
    of the buckets the timeline and the posts hold (``remap``, left at -1 again), plus a bias feature of 1
    (liblinear's ``intercept_scaling=1``). Dual coordinate descent (Hsieh et al. 2008; liblinear's
    ``solve_l2r_l1l2_svc`` without shrinking), the candidates' binary problems in lockstep: each epoch visits
    the examples in one seeded shuffle and updates every class still running, whose weights sit side by side
    (a feature's row of the weight matrix is one read for all classes, padded with zeros to a multiple of
    :data:`_LANES` classes, so the class loops have no scalar remainder); a class stops when its projected
    gradient's spread over an epoch is at most ``tol``, all after ``max_iter`` epochs."""
    n_loc = 0
    # the timeline: its posts' counts summed per bucket, sublinear TF x IDF, L2
    cap = 1
    for d in range(tl_ptr[t], tl_ptr[t + 1]):
        cap += tl_offsets[d + 1] - tl_offsets[d]
    per = (hi - lo + 1) + (whi - wlo + 1 if whi > 0 else 0)
    tl_count = np.zeros(cap * per, np.float64)
    for d in range(tl_ptr[t], tl_ptr[t + 1]):
        g = _doc_ngrams(tl_data, tl_offsets[d], tl_offsets[d + 1], lo, hi, wlo, whi, classes, cps, tok, buf)
        k = _distinct_buckets(buf, g, shift, table, slots, buckets, counts)
        for j in range(k):
            b = buckets[j]
            if remap[b] < 0:
                remap[b] = n_loc
                used[n_loc] = b
                n_loc += 1
            tl_count[remap[b]] += counts[j]
    n_tl = n_loc
    tl_val = np.zeros(n_tl, np.float64)
    norm2 = 0.0
    for q in range(n_tl):
        w = idf[used[q]] * (1.0 + math.log(tl_count[q]))
        tl_val[q] = w
        norm2 += w * w
    if norm2 > 0.0:
        inv = 1.0 / math.sqrt(norm2)
        for q in range(n_tl):
            tl_val[q] *= inv
    # the examples: the candidates' post rows over local ids
    n_cand = cand.shape[1]
    stride = (n_cand + _LANES - 1) // _LANES * _LANES  # a weight row: the classes, then zeros
    n_ex = 0
    size = 0
    for j in range(n_cand):
        a = cand[t, j]
        n_ex += cand_ptr[a + 1] - cand_ptr[a]
        size += indptr[cand_ptr[a + 1]] - indptr[cand_ptr[a]]
    ex_ptr = np.zeros(n_ex + 1, np.int64)
    ex_idx = np.empty(size, np.uint64)  # unsigned: see the epoch's class loops
    ex_val = np.empty(size, np.float32)
    label = np.empty(n_ex, np.int64)
    e = 0
    p = 0
    for j in range(n_cand):
        a = cand[t, j]
        for d in range(cand_ptr[a], cand_ptr[a + 1]):
            for q in range(indptr[d], indptr[d + 1]):
                b = idx[q]
                if remap[b] < 0:
                    remap[b] = n_loc
                    used[n_loc] = b
                    n_loc += 1
                ex_idx[p] = np.uint64(remap[b] * stride)
                ex_val[p] = val[q]
                p += 1
            label[e] = j
            e += 1
            ex_ptr[e] = p
    for q in range(n_loc):
        remap[used[q]] = -1
    # the candidates' one-vs-rest problems, in lockstep
    diag = 0.5 / c
    qd = np.empty(n_ex, np.float64)
    for i in range(n_ex):
        s = 1.0 + diag  # the bias feature
        for q in range(ex_ptr[i], ex_ptr[i + 1]):
            s += np.float64(ex_val[q]) * ex_val[q]
        qd[i] = s
    w = np.zeros((n_loc + 1) * stride, np.float32)  # feature-major: w[f * stride + class]
    bias = n_loc * stride
    alpha = np.zeros(n_ex * n_cand, np.float64)
    running = np.ones(n_cand, np.bool_)
    grad = np.zeros(stride, np.float32)
    step = np.zeros(stride, np.float32)  # 0 past the classes: their weights stay 0
    pg_max = np.empty(n_cand, np.float64)
    pg_min = np.empty(n_cand, np.float64)
    order = np.arange(n_ex)
    state = _xorshift(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(t + 1))
    n_running = n_cand
    stride_u = np.uint64(stride)
    it = 0
    while it < max_iter and n_running > 0:
        for i in range(n_ex - 1, 0, -1):
            state = _xorshift(state)
            r = np.int64(state % np.uint64(i + 1))
            order[i], order[r] = order[r], order[i]
        pg_max[:] = -np.inf
        pg_min[:] = np.inf
        for s_ in range(n_ex):
            i = order[s_]
            for k in range(stride):
                grad[k] = w[bias + k]
            # unsigned indices: numba checks a signed index for wrap-around, and that branch kept LLVM from
            # vectorising the class loops (the same sums, so the same results, 2.3x faster at full scale)
            for q in range(ex_ptr[i], ex_ptr[i + 1]):
                f = ex_idx[q]
                v = ex_val[q]
                for ku in range(stride_u):
                    grad[ku] += w[f + ku] * v
            moved = False
            for k in range(n_cand):
                step[k] = 0.0
                if not running[k]:
                    continue
                y = 1.0 if label[i] == k else -1.0
                a_old = alpha[i * n_cand + k]
                g = y * grad[k] - 1.0 + a_old * diag
                pg = g if a_old > 0.0 else min(g, 0.0)
                pg_max[k] = max(pg_max[k], pg)
                pg_min[k] = min(pg_min[k], pg)
                if abs(pg) > 1e-12:
                    a_new = max(a_old - g / qd[i], 0.0)
                    alpha[i * n_cand + k] = a_new
                    step[k] = np.float32((a_new - a_old) * y)
                    moved = True
            if moved:
                for q in range(ex_ptr[i], ex_ptr[i + 1]):
                    f = ex_idx[q]
                    v = ex_val[q]
                    for ku in range(stride_u):
                        w[f + ku] += step[ku] * v
                for k in range(stride):
                    w[bias + k] += step[k]
        it += 1
        for k in range(n_cand):
            if running[k] and pg_max[k] - pg_min[k] <= tol:
                running[k] = False
                n_running -= 1
    for k in range(n_cand):
        score = w[bias + k]
        for q in range(n_tl):
            score += w[q * stride + k] * tl_val[q]
        out[t, k] = score


@nb.njit(nogil=True, cache=True)
def _rerank_stripe(cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, lo, hi, wlo, whi, classes, shift,
                   idf, c, tol, max_iter, seed, th, n_threads, out):
    """:func:`_rerank_one` for timelines th, th + n_threads, ... into ``out``."""
    remap = np.full(idf.shape[0], -1, np.int64)
    used = np.empty(idf.shape[0], np.int64)
    cps, tok, buf, table, slots, buckets, counts, _ = _scratch(tl_offsets, lo, hi, wlo, whi)
    for t in range(th, tl_ptr.shape[0] - 1, n_threads):
        _rerank_one(t, cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, lo, hi, wlo, whi, classes,
                    shift, idf, c, tol, max_iter, seed, remap, used, cps, tok, buf, table, slots, buckets, counts, out)


def _rerank_all(cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, lo, hi, wlo, whi, classes, shift, idf,
                c, tol, max_iter, seed, n_threads):
    """(timelines x candidates) decision values of :func:`_rerank_one`, timelines striped over threads."""
    out = np.zeros((tl_ptr.shape[0] - 1, cand.shape[1]), np.float64)
    args = (cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, lo, hi, wlo, whi, classes, shift, idf, c,
            tol, max_iter, seed)
    run_stripes(lambda th: _rerank_stripe(*args, th, n_threads, out), n_threads)
    return out
