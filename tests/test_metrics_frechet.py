"""Fréchet distances against a plain scipy reference, and FBD / FBD-SBERT / FCSD with the real MiniLM."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import linalg

from tasks.metrics.frechet import (
    cosine_to_real_mean,
    fbd,
    fbd_sbert,
    fcsd,
    frechet_between,
    frechet_distance,
    gaussian_fit,
    pooled_token_embeddings,
)
from tasks.models.embeddings import EmbeddingCache, sentence_embeddings, token_embeddings
from tasks.models.registry import resolve_model


def reference_fd(mu1, s1, mu2, s2) -> float:
    """The textbook formula: ||mu1-mu2||^2 + Tr(S1 + S2 - 2 sqrtm(S1 S2)), real part."""
    covmean = linalg.sqrtm(s1 @ s2)
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean).real)


def sample(rng, n, d, shift=0.0, scale=1.0):
    a = rng.normal(size=(d, d)) * scale
    return rng.normal(size=(n, d)) @ a + shift


@pytest.mark.parametrize("n,d", [(300, 6), (500, 20)])
def test_matches_scipy_reference_full_rank(n, d) -> None:
    rng = np.random.default_rng(n + d)
    x, y = sample(rng, n, d), sample(rng, n, d, shift=0.5)
    mu1, s1 = x.mean(0), np.cov(x, rowvar=False)
    mu2, s2 = y.mean(0), np.cov(y, rowvar=False)
    expected = reference_fd(mu1, s1, mu2, s2)
    assert expected > 1.0
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expected, rel=1e-8)
    assert frechet_distance(mu1, s1, mu2, s2, method="sqrtm") == pytest.approx(expected, rel=1e-8)


def test_matches_reference_when_n_smaller_than_d() -> None:
    rng = np.random.default_rng(1)
    d = 30
    x, y = rng.normal(size=(8, d)), rng.normal(size=(12, d)) + 0.3
    mu1, s1 = gaussian_fit(x)
    mu2, s2 = gaussian_fit(y)
    assert np.linalg.matrix_rank(s1) == 7  # singular: n - 1
    got = frechet_distance(mu1, s1, mu2, s2)
    assert got == pytest.approx(reference_fd(mu1, s1, mu2, s2), rel=1e-5)
    # the eigh trace is exact: compare with the trace from the nonzero spectrum computed another way
    w = np.linalg.eigvals(s1 @ s2)
    tr = np.sqrt(np.clip(w.real, 0, None)).sum()
    manual = np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2) - 2 * tr
    assert got == pytest.approx(manual, rel=1e-8)


def test_rank_deficient_covariances() -> None:
    rng = np.random.default_rng(2)
    d = 6
    basis = rng.normal(size=(2, d))  # both sets live in a 2-d subspace of R^6
    x = rng.normal(size=(200, 2)) @ basis
    y = rng.normal(size=(200, 2)) @ basis * 1.5 + 1.0
    mu1, s1 = gaussian_fit(x)
    mu2, s2 = gaussian_fit(y)
    assert np.linalg.matrix_rank(s1) == 2
    expected = reference_fd(mu1, s1, mu2, s2)
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expected, rel=1e-6)
    assert frechet_distance(mu1, s1, mu1, s1) == pytest.approx(0.0, abs=1e-9)


def test_identical_sets_give_zero_and_never_negative() -> None:
    rng = np.random.default_rng(3)
    x = sample(rng, 50, 16)
    assert frechet_between(x, x) == pytest.approx(0.0, abs=1e-9)
    assert frechet_between(x, x) >= 0.0
    assert frechet_between(x, x, method="sqrtm") >= 0.0


def test_one_dimensional_closed_form() -> None:
    # 1-D: (m1 - m2)^2 + (sd1 - sd2)^2
    assert frechet_distance(1.0, 4.0, 3.0, 9.0) == pytest.approx(4.0 + 1.0)
    assert frechet_distance(np.array([0.5]), np.array([[0.25]]), np.array([0.5]), np.array([[0.25]])) == 0.0


def test_grows_with_shift() -> None:
    rng = np.random.default_rng(4)
    d = 8
    x, y = sample(rng, 400, d), sample(rng, 400, d)
    values = [frechet_between(x, y + s) for s in (0.0, 0.5, 1.0, 2.0)]
    assert values == sorted(values) and values[0] < values[-1]
    # the mean term grows exactly by ||shift||^2 (covariances unchanged by a shift)
    assert values[3] - values[0] == pytest.approx(np.sum((x.mean(0) - y.mean(0) - 2.0) ** 2)
                                                  - np.sum((x.mean(0) - y.mean(0)) ** 2), rel=1e-8)


def test_gaussian_fit_shrinkage() -> None:
    from sklearn.covariance import LedoitWolf

    rng = np.random.default_rng(5)
    x = rng.normal(size=(5, 12))
    _, raw = gaussian_fit(x)
    np.testing.assert_allclose(raw, np.cov(x, rowvar=False))
    _, shrunk = gaussian_fit(x, shrinkage=0.2)
    assert np.linalg.matrix_rank(shrunk) == 12
    np.testing.assert_allclose(np.trace(shrunk), np.trace(raw))
    _, lw = gaussian_fit(x, shrinkage="ledoit-wolf")
    np.testing.assert_allclose(lw, LedoitWolf().fit(x).covariance_)
    with pytest.raises(ValueError):
        gaussian_fit(x[:1])
    with pytest.raises(ValueError):
        gaussian_fit(x, shrinkage=1.5)


# ---------------------------------------------------------------- with the real MiniLM

REAL = [
    "the cat sat on the mat",
    "My doctor said I should rest more and drink water.",
    "We went to the beach and it rained the whole time, typical.",
    "Can u send me the link pls",
    "The meeting has been moved to Thursday afternoon.",
    "I LOVE this place!!! best pizza in town :)",
]
PARAPHRASE = [
    "a cat was sitting on the mat",
    "The doctor told me to rest and stay hydrated.",
    "Our beach trip was ruined by rain, as usual.",
    "Could you send me the link please?",
    "The meeting was rescheduled to Thursday afternoon.",
    "Great pizza place, I love it!",
]
UNRELATED = [
    "Quantum computers use qubits.",
    "Stock markets fell sharply on Monday.",
    "The mitochondria is the powerhouse of the cell.",
    "Parliament passed the budget bill late last night.",
    "Photosynthesis converts light into chemical energy.",
    "The compiler rejected the template instantiation.",
]


@pytest.fixture(scope="module")
def token_spec():
    return resolve_model("token_encoder")


@pytest.fixture(scope="module")
def sentence_spec():
    return resolve_model("sentence_encoder")


def test_fbd_real_text(token_spec, tmp_path) -> None:
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    same = fbd(REAL, list(REAL), spec=token_spec, cache=cache)
    near = fbd(REAL, PARAPHRASE, spec=token_spec, cache=cache)
    far = fbd(REAL, UNRELATED, spec=token_spec, cache=cache)
    assert same.value == pytest.approx(0.0, abs=1e-6)
    assert 0 < near.value < far.value
    assert same.signature.startswith("metric:fbd|model:sentence-transformers/all-MiniLM-L6-v2@")
    assert "|layer:6|pool:cls|cov:sample-ddof1|fd:squared-eigh|" in same.signature


def test_fbd_reuses_bertscore_token_cache_and_pools_content_tokens(token_spec, tmp_path) -> None:
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    mats = token_embeddings(REAL + PARAPHRASE, token_spec, token_spec.layer, cache=cache)  # the BERTScore pass
    misses = cache.misses
    value = fbd(REAL, PARAPHRASE, spec=token_spec, pooling="mean", cache=cache).value
    assert cache.misses == misses  # nothing recomputed
    pooled = np.stack([m[1:-1].mean(0) for m in mats]).astype(np.float64)  # [CLS] ... [SEP] dropped
    expected = reference_fd(*gaussian_fit(pooled[:6]), *gaussian_fit(pooled[6:]))
    assert value == pytest.approx(expected, rel=1e-5)
    all_tokens = pooled_token_embeddings(REAL, token_spec, token_spec.layer, pooling="mean-all", cache=cache)
    np.testing.assert_allclose(all_tokens[0], mats[0].mean(0), rtol=1e-6)


def test_fbd_empty_text_and_degenerate(token_spec) -> None:
    empty_ok = pooled_token_embeddings(["", "hi"], token_spec, token_spec.layer)
    assert np.isfinite(empty_ok).all()
    one = fbd(["only one"], REAL, spec=token_spec)
    assert math.isnan(one.value) and "at least 2" in one.reason
    none = fbd_sbert([], REAL)
    assert math.isnan(none.value) and none.reason


def test_fbd_sbert_and_fcsd(sentence_spec, tmp_path) -> None:
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    same = fbd_sbert(REAL, REAL, spec=sentence_spec, cache=cache)
    near = fbd_sbert(REAL, PARAPHRASE, spec=sentence_spec, cache=cache)
    far = fbd_sbert(REAL, UNRELATED, spec=sentence_spec, cache=cache)
    assert same.value == pytest.approx(0.0, abs=1e-6) and 0 < near.value < far.value

    score = fcsd(REAL, UNRELATED, spec=sentence_spec, cache=cache)
    emb_r = sentence_embeddings(REAL, sentence_spec, cache=cache).astype(np.float64)
    emb_s = sentence_embeddings(UNRELATED, sentence_spec, cache=cache).astype(np.float64)
    anchor = emb_r.mean(0)
    cos_r = emb_r @ anchor / (np.linalg.norm(emb_r, axis=1) * np.linalg.norm(anchor))
    cos_s = emb_s @ anchor / (np.linalg.norm(emb_s, axis=1) * np.linalg.norm(anchor))
    # seed 001's calc_FCSD on np.cov variances
    vr, vs = np.cov(cos_r), np.cov(cos_s)
    expected = (cos_r.mean() - cos_s.mean()) ** 2 + vr + vs - 2 * math.sqrt(vr * vs)
    assert score.value == pytest.approx(expected, rel=1e-6)
    np.testing.assert_allclose(score.distributions["real"], cos_r, rtol=1e-6)
    np.testing.assert_allclose(score.distributions["synthetic"], cos_s, rtol=1e-6)
    assert np.mean(score.distributions["real"]) > np.mean(score.distributions["synthetic"])
    assert fcsd(REAL, REAL, spec=sentence_spec, cache=cache).value == pytest.approx(0.0, abs=1e-9)
    assert score.signature.startswith("metric:fcsd|model:")


def test_cosine_to_real_mean_zero_vector() -> None:
    real = np.array([[1.0, 0.0], [0.0, 1.0]])
    r, s = cosine_to_real_mean(real, np.array([[0.0, 0.0], [1.0, 1.0]]))
    np.testing.assert_allclose(r, [math.sqrt(0.5)] * 2)
    np.testing.assert_allclose(s, [0.0, 1.0])


def test_fbd_default_is_xiang_cls_of_the_last_layer(token_spec, tmp_path) -> None:
    """Reference: Xiang et al.'s FBD procedure written out with transformers and scipy (their code feeds
    the texts through the encoder, takes ``last_hidden_state[:, 0]`` and applies the FID formula with
    ``scipy.linalg.sqrtm``); our default must give the same number."""
    import torch
    from scipy import linalg
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(token_spec.path)
    model = AutoModel.from_pretrained(token_spec.path).eval()

    def cls_vectors(texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            enc = tok(texts, padding=True, truncation=True, return_tensors="pt")
            return model(**enc).last_hidden_state[:, 0].double().numpy()

    def fid(a: np.ndarray, b: np.ndarray) -> float:
        mu1, mu2, s1, s2 = a.mean(0), b.mean(0), np.cov(a, rowvar=False), np.cov(b, rowvar=False)
        covmean = linalg.sqrtm(s1 @ s2).real
        return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))

    expected = fid(cls_vectors(REAL), cls_vectors(UNRELATED))
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    got = fbd(REAL, UNRELATED, spec=token_spec, cache=cache)
    assert got.value == pytest.approx(expected, rel=1e-3)
    assert f"|layer:{model.config.num_hidden_layers}|pool:cls|" in got.signature
    mean = fbd(REAL, UNRELATED, spec=token_spec, pooling="mean", cache=cache)  # the option, in the signature
    assert "|pool:mean|" in mean.signature and mean.value != pytest.approx(got.value, rel=1e-3)
