"""MinHash signatures: datasketch equality (reference path), estimator accuracy (both paths), edge cases."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from datasketch import MinHash

from tasks.privacy.minhash import (
    EMPTY,
    MinHashParams,
    datasketch_permutations,
    estimate_jaccard,
    jaccard,
    shingles,
    sign,
    signatures,
    signatures_datasketch_compatible,
)

TEXTS = ["Hello  world, this is a test!", "", "ab", "héllo wörld \U0001F600 emoji ☕", None,
         "The quick brown fox\n\tjumps over the lazy dog", "   ", "x"]


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
def test_permutations_are_datasketch(scheme: str) -> None:
    a, b = datasketch_permutations(64, 7, scheme)
    m = MinHash(num_perm=64, seed=7, scheme=scheme)
    assert np.array_equal(m.permutations[0], a) and np.array_equal(m.permutations[1], b)


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
def test_compatible_path_equals_datasketch_update(scheme: str) -> None:
    sigs = signatures_datasketch_compatible(TEXTS, 64, 7, scheme=scheme)
    for text, row in zip(TEXTS, sigs, strict=True):
        m = MinHash(num_perm=64, seed=7, scheme=scheme)
        for s in shingles(text):
            m.update(s.encode("utf-8"))
        assert np.array_equal(m.hashvalues, row), text


def test_shingling_rules() -> None:
    assert shingles("a  b\n c") == shingles("a b c") == {"a b", " b ", "b c"}
    assert shingles("  ab ") == {"ab"}  # shorter than n: one shingle
    assert shingles("") == shingles(None) == shingles(" \n") == set()
    assert shingles("ABC") != shingles("abc") and shingles("ABC", lower=True) == shingles("abc")


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
def test_fast_path_edge_cases(scheme: str) -> None:
    sig = signatures([*TEXTS, "ab", "Hello world,\nthis is a test!"], 64, 3, scheme=scheme)
    empty = (sig == EMPTY).all(axis=1)
    assert empty.tolist() == [False, True, False, False, True, False, True, False, False, False]
    assert np.array_equal(sig[2], sig[8])  # sub-n texts are one shingle and match themselves
    assert np.array_equal(sig[0], sig[9])  # whitespace runs collapse
    assert estimate_jaccard(sig[1], sig[4])[0] == 0.0  # empty never matches, not even empty
    assert signatures([], 16).shape == (0, 16)


def test_fast_path_arrow_layouts_and_threads_agree() -> None:
    texts = [f"post number {i} with some words {'x' * (i % 7)}" for i in range(5000)] + [None, ""]
    ref = signatures(texts, 32, parallel=True)
    assert np.array_equal(ref, signatures(texts, 32, parallel=False))
    assert np.array_equal(ref, signatures(pa.array(texts, pa.string()), 32))  # int32 offsets
    sliced = pa.array(["pad", *texts], pa.large_string())[1:]  # non-zero array offset
    assert np.array_equal(ref, signatures(sliced, 32))
    chunked = pa.chunked_array([pa.array(texts[:100]), pa.array(texts[100:])])
    assert np.array_equal(ref, signatures(chunked, 32))
    _, keys = sign(texts, MinHashParams(k=32), bands=4, rows=8, want_signatures=False)
    assert keys.shape == (len(texts), 4) and (keys[-2:] == 0).all() and (keys[:-2] != 0).all()


def _pairs(n_pairs: int, seed: int = 0) -> tuple[list[str], list[str], np.ndarray]:
    """Random 150-char texts and controlled edits (a share of positions replaced) spanning J 0.02-0.9."""
    rng = np.random.default_rng(seed)
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz ,.!"))
    left, right, js = [], [], []
    while len(js) < n_pairs:
        base = rng.choice(alphabet, 150)
        edited = base.copy()
        rate = rng.uniform(0.01, 0.7)
        pos = rng.random(150) < rate
        edited[pos] = rng.choice(alphabet, int(pos.sum()))
        a, b = "".join(base), "".join(edited)
        j = jaccard(shingles(a), shingles(b))
        if 0.02 <= j <= 0.9:
            left.append(a)
            right.append(b)
            js.append(j)
    return left, right, np.array(js)


@pytest.mark.parametrize("path", ["fast", "datasketch"])
def test_jaccard_estimate_error_matches_theory(path: str) -> None:
    """RMSE over 1,000 pairs vs the theory: per pair the estimate is Binomial(k, J)/k with standard
    error sqrt(J(1-J)/k). Aggregated as the RMS of these standard errors, sqrt(mean(J(1-J)/k)) (the
    expected RMSE), and as their plain mean (the brief's figure); both within 10%."""
    k = 128
    left, right, j = _pairs(1000)
    assert j.min() < 0.1 and j.max() > 0.8
    fn = signatures if path == "fast" else signatures_datasketch_compatible
    est = estimate_jaccard(fn(left, k, 11), fn(right, k, 11))
    rmse = float(np.sqrt(np.mean((est - j) ** 2)))
    rms_se = float(np.sqrt(np.mean(j * (1 - j) / k)))
    mean_se = float(np.mean(np.sqrt(j * (1 - j) / k)))
    assert abs(rmse - rms_se) <= 0.1 * rms_se, (rmse, rms_se)
    assert abs(rmse - mean_se) <= 0.1 * mean_se, (rmse, mean_se)
    assert abs(float(np.mean(est - j))) < 3 * rms_se / np.sqrt(len(j))  # unbiased
