"""Fréchet distances between embedded text sets: FBD (token encoder), FBD on sentence embeddings, FCSD.

Definitions (seed 000 §4.2, Xiang et al. 2021; seed 001, Gretel's FBD with SBERT and FCSD):

- every set is fitted as a Gaussian N(mu, Sigma) with the sample mean and the unbiased sample covariance
  (``np.cov``, ddof=1), as the reference implementations do, and
  ``FD = ||mu1 - mu2||^2 + Tr(S1 + S2 - 2 (S1 S2)^{1/2})`` (the *squared* Fréchet / 2-Wasserstein distance
  between the two Gaussians, as FID and the FBD/FCSD code report it; Xiang's older repository also printed
  its square root; we do not);
- FCSD: cosine similarity of every real and every synthetic sentence embedding to the mean of the real
  embeddings (not normalised, as seed 001's ``create_scores``), then the 1-D Fréchet distance
  ``(m_r - m_s)^2 + v_r + v_s - 2 sqrt(v_r v_s)`` between the two score lists (variances with ddof=1).

Numerics (:func:`frechet_distance`): ``Tr((S1 S2)^{1/2})`` is computed by default as the sum of the square
roots of the eigenvalues of the symmetric PSD matrix ``S1^{1/2} S2 S1^{1/2}`` (``method="eigh"``), which
is real by construction, exact for singular covariances (n < d) and needs no regulariser; negative
eigenvalues from rounding are clipped to 0. ``method="sqrtm"`` is the FID reference (scipy.linalg.sqrtm of
``S1 S2``; on a non-finite result ``eps*I`` is added to both covariances; an imaginary part larger than
``imag_tol`` relative to the trace raises). The result is clamped at 0 (rounding can make identical sets
give -1e-13).

Sample sizes are not part of the signatures (the FD of finite samples is biased upwards by ~Tr(S)/n, so
compare numbers computed on sets of similar size).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tasks.metrics.base import DistributionScore
from tasks.models.embeddings import EmbeddingCache, bert_score_encode, sentence_embeddings, token_embeddings
from tasks.models.loaders import load_model_config, load_tokenizer
from tasks.models.registry import ModelSpec, model_id, resolve_model
from tasks.signatures import make_signature

FD_METHODS = ("eigh", "sqrtm")
POOLINGS = ("mean", "mean-all", "cls")


def _psd_sqrt(sigma: np.ndarray) -> np.ndarray:
    """Symmetric square root of a symmetric PSD matrix (negative eigenvalues from rounding clipped to 0)."""
    w, v = np.linalg.eigh((sigma + sigma.T) / 2)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray, *,
                     method: str = "eigh", eps: float = 1e-6, imag_tol: float = 1e-3) -> float:
    """Squared Fréchet distance between N(mu1, sigma1) and N(mu2, sigma2), clamped at 0.

    ``method="eigh"`` (default): ``Tr((S1 S2)^{1/2}) = sum sqrt(eig(S1^{1/2} S2 S1^{1/2}))``, real and exact
    for singular (rank-deficient) covariances; ``eps`` and ``imag_tol`` are unused. ``method="sqrtm"``:
    scipy.linalg.sqrtm(S1 S2) as in FID; a non-finite result is retried with ``eps*I`` added to both
    covariances; imaginary parts are dropped when at most ``imag_tol * max(1, |Tr|)``, else ValueError.
    1-D inputs (scalars) are accepted."""
    mu1, mu2 = np.atleast_1d(np.asarray(mu1, dtype=np.float64)), np.atleast_1d(np.asarray(mu2, dtype=np.float64))
    s1, s2 = np.atleast_2d(np.asarray(sigma1, dtype=np.float64)), np.atleast_2d(np.asarray(sigma2, dtype=np.float64))
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (mu1.size, mu1.size):
        raise ValueError(f"frechet_distance: shapes do not match: mu {mu1.shape} vs {mu2.shape}, "
                         f"sigma {s1.shape} vs {s2.shape}")
    if method not in FD_METHODS:
        raise ValueError(f"frechet_distance: method must be one of {FD_METHODS}, not {method!r}")
    diff = mu1 - mu2
    if method == "eigh":
        root1 = _psd_sqrt(s1)
        middle = root1 @ s2 @ root1
        eig = np.linalg.eigvalsh((middle + middle.T) / 2)
        tr_covmean = float(np.sqrt(np.clip(eig, 0.0, None)).sum())
    else:
        from scipy import linalg

        covmean = linalg.sqrtm(s1 @ s2)
        if not np.isfinite(covmean).all():
            offset = np.eye(s1.shape[0]) * eps
            covmean = linalg.sqrtm((s1 + offset) @ (s2 + offset))
        tr = np.trace(covmean)
        if np.iscomplexobj(covmean):
            if abs(tr.imag) > imag_tol * max(1.0, abs(tr.real)):
                raise ValueError(f"frechet_distance: sqrtm has an imaginary trace part {tr.imag:.3g}; "
                                 f"use method='eigh' or regularise the covariances")
            tr = tr.real
        tr_covmean = float(tr)
    value = float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * tr_covmean)
    return max(value, 0.0)


def gaussian_fit(x: np.ndarray, *, shrinkage: float | str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(mean, covariance) of the rows of ``x`` (n, d) in float64.

    ``shrinkage=None`` (default, as FID/FBD/FCSD): the unbiased sample covariance (ddof=1), singular when
    n <= d, which :func:`frechet_distance` handles exactly; a float ``a`` in [0, 1]:
    ``(1-a) S + a (Tr(S)/d) I`` (shrinks towards the scaled identity, full rank for a > 0);
    ``"ledoit-wolf"``: sklearn's LedoitWolf estimate (its own ``a``, on the ddof=0 covariance).
    Needs n >= 2."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.shape[0] < 2:
        raise ValueError(f"gaussian_fit: needs at least 2 rows, got {x.shape[0]}")
    mu = x.mean(axis=0)
    if shrinkage == "ledoit-wolf":
        from sklearn.covariance import LedoitWolf

        return mu, LedoitWolf(assume_centered=False).fit(x).covariance_
    sigma = np.atleast_2d(np.cov(x, rowvar=False, ddof=1))
    if shrinkage is None:
        return mu, sigma
    if isinstance(shrinkage, str) or not 0.0 <= float(shrinkage) <= 1.0:
        raise ValueError(f"gaussian_fit: shrinkage must be None, 'ledoit-wolf' or a float in [0, 1], "
                         f"not {shrinkage!r}")
    a = float(shrinkage)
    d = sigma.shape[0]
    return mu, (1 - a) * sigma + a * (np.trace(sigma) / d) * np.eye(d)


def cov_tag(shrinkage: float | str | None) -> str:
    """Signature value of a covariance estimator: ``sample-ddof1``, ``ledoit-wolf`` or ``shrink-0.1``."""
    if shrinkage is None:
        return "sample-ddof1"
    return "ledoit-wolf" if shrinkage == "ledoit-wolf" else f"shrink-{float(shrinkage):g}"


def frechet_between(x_real: np.ndarray, x_synth: np.ndarray, *, shrinkage: float | str | None = None,
                    method: str = "eigh") -> float:
    """Fréchet distance between Gaussian fits of two (n, d) arrays (see :func:`gaussian_fit`)."""
    mu1, s1 = gaussian_fit(x_real, shrinkage=shrinkage)
    mu2, s2 = gaussian_fit(x_synth, shrinkage=shrinkage)
    return frechet_distance(mu1, s1, mu2, s2, method=method)


def _too_few(metric: str, signature: str, n_real: int, n_synth: int) -> DistributionScore | None:
    if n_real < 2 or n_synth < 2:
        return DistributionScore(metric, float("nan"), signature,
                                 reason=f"needs at least 2 texts on each side (real {n_real}, synthetic {n_synth})")
    return None


def pooled_token_embeddings(texts: Sequence[str], spec: ModelSpec, layer: int, *, pooling: str = "mean",
                            cache: EmbeddingCache | None = None) -> np.ndarray:
    """(n, d) float64 text vectors pooled from :func:`token_embeddings` (the BERTScore cache entries).

    ``pooling``: ``mean`` = mean over the non-special tokens (an empty text, special tokens only, falls back
    to the mean over its special tokens); ``mean-all`` = mean over all tokens incl. [CLS]/[SEP];
    ``cls`` = the first token (Xiang et al.'s reference code takes ``last_hidden_state[:, 0]``)."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
    texts = list(texts)
    mats = token_embeddings(texts, spec, layer, cache=cache)
    if pooling == "cls":
        return np.stack([m[0] for m in mats]).astype(np.float64)
    if pooling == "mean-all":
        return np.stack([m.mean(axis=0) for m in mats]).astype(np.float64)

    tokenizer = load_tokenizer(spec)
    out = np.empty((len(texts), mats[0].shape[1] if mats else 0), dtype=np.float64)
    for i, (ids, mat) in enumerate(zip(bert_score_encode(tokenizer, texts), mats, strict=True)):
        special = np.asarray(tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True), dtype=bool)
        keep = ~special[:len(mat)]
        out[i] = mat[keep].mean(axis=0) if keep.any() else mat.mean(axis=0)
    return out


def last_layer(spec: ModelSpec) -> int:
    """Index of the token encoder's last hidden layer in ``hidden_states`` (= ``num_hidden_layers``), read
    from its config alone (the weights are not loaded when every text is cached)."""
    return int(load_model_config(spec).num_hidden_layers)


def fbd(real_texts: Sequence[str], synthetic_texts: Sequence[str], *, spec: ModelSpec | None = None,
        layer: int | None = None, pooling: str = "cls", shrinkage: float | str | None = None,
        method: str = "eigh", cache: EmbeddingCache | None = None) -> DistributionScore:
    """Fréchet BERT Distance (seed 000 §4.2, Xiang et al. 2021): the Fréchet distance between Gaussian fits
    of the real and synthetic text vectors, each the pooled ``hidden_states[layer]`` of the token encoder.

    Defaults as Xiang et al.: ``layer`` = the last layer and ``pooling="cls"`` (the first token's vector,
    their ``last_hidden_state[:, 0]``); ``mean`` / ``mean-all`` pooling and another layer are options, and
    both are in the signature. ``spec`` = the token_encoder role (MiniLM offline). The token matrices come
    from the shared embedding cache (:func:`token_embeddings`, the same entries BERTScore uses when its
    layer is the last). Sample covariance; eigh trace. Lower is better; NaN with a reason when a side has
    fewer than 2 texts."""
    real, synth = list(real_texts), list(synthetic_texts)
    spec = spec or resolve_model("token_encoder")
    if layer is None:
        layer = last_layer(spec)

    tokenizer = load_tokenizer(spec)
    signature = make_signature("fbd", model=model_id(spec), layer=layer, pool=pooling, cov=cov_tag(shrinkage),
                               fd=f"squared-{method}", tokenizer=f"{type(tokenizer).__name__}+bert_score-encode")
    if (bad := _too_few("fbd", signature, len(real), len(synth))) is not None:
        return bad
    vectors = pooled_token_embeddings(real + synth, spec, layer, pooling=pooling, cache=cache)
    value = frechet_between(vectors[:len(real)], vectors[len(real):], shrinkage=shrinkage, method=method)
    return DistributionScore("fbd", value, signature)


def fbd_sbert(real_texts: Sequence[str], synthetic_texts: Sequence[str], *, spec: ModelSpec | None = None,
              shrinkage: float | str | None = None, method: str = "eigh", cache: EmbeddingCache | None = None,
              batch_size: int = 64) -> DistributionScore:
    """FBD on sentence-transformer embeddings (seed 001): Fréchet distance between Gaussian fits of the
    real and synthetic sentence vectors (the encoder's own pooling/normalisation). ``spec`` defaults to the
    sentence_encoder role. NaN with a reason when a side has fewer than 2 texts."""
    real, synth = list(real_texts), list(synthetic_texts)
    spec = spec or resolve_model("sentence_encoder")
    signature = make_signature("fbd_sbert", model=model_id(spec), pool="sentence-transformers",
                               cov=cov_tag(shrinkage), fd=f"squared-{method}")
    if (bad := _too_few("fbd_sbert", signature, len(real), len(synth))) is not None:
        return bad
    vectors = sentence_embeddings(real + synth, spec, cache=cache, batch_size=batch_size).astype(np.float64)
    value = frechet_between(vectors[:len(real)], vectors[len(real):], shrinkage=shrinkage, method=method)
    return DistributionScore("fbd_sbert", value, signature)


def cosine_to_real_mean(real: np.ndarray, synthetic: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seed 001's ``create_scores``: cosine of each real and each synthetic vector to the (unnormalised)
    mean real vector; a zero vector gets cosine 0."""
    anchor = real.mean(axis=0)

    def cos(x: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(x, axis=1) * np.linalg.norm(anchor)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(norms > 0, (x @ anchor) / np.where(norms > 0, norms, 1.0), 0.0)

    return cos(real), cos(synthetic)


def fcsd(real_texts: Sequence[str], synthetic_texts: Sequence[str], *, spec: ModelSpec | None = None,
         cache: EmbeddingCache | None = None, batch_size: int = 64) -> DistributionScore:
    """Fréchet Cosine Similarity Distance (seed 001): 1-D Fréchet distance between the distributions of
    cosine similarity to the mean real sentence embedding, ``(m_r - m_s)^2 + v_r + v_s - 2 sqrt(v_r v_s)``
    with ddof=1 variances. ``distributions`` keeps both score lists (keys ``real``, ``synthetic``) for
    plots. ``spec`` defaults to the sentence_encoder role. NaN with a reason below 2 texts a side."""
    real, synth = list(real_texts), list(synthetic_texts)
    spec = spec or resolve_model("sentence_encoder")
    signature = make_signature("fcsd", model=model_id(spec), anchor="real-mean", sim="cosine", var="ddof1",
                               fd="squared-1d")
    if (bad := _too_few("fcsd", signature, len(real), len(synth))) is not None:
        return bad
    vectors = sentence_embeddings(real + synth, spec, cache=cache, batch_size=batch_size).astype(np.float64)
    real_scores, synth_scores = cosine_to_real_mean(vectors[:len(real)], vectors[len(real):])
    value = frechet_distance(real_scores.mean(), real_scores.var(ddof=1), synth_scores.mean(),
                             synth_scores.var(ddof=1))
    return DistributionScore("fcsd", value, signature,
                             distributions={"real": real_scores.tolist(), "synthetic": synth_scores.tolist()})
