"""Bag-level similarity between a reference bag R and a generated bag G (Filice et al., synthetic traffic
generation, §3): Pair*, Align*, CosTF, CosTF-IDF, Clus*, InvKL, InvPP.

A bag is a list of texts with repetitions. Every metric is a similarity (higher = G closer to R) and
every function takes ``(reference, generated)``. Choices the article leaves open are parameters of
:class:`BagConfig` and appear in each metric's signature:

- BLEU-3: sacrebleu sentence BLEU with ``max_ngram_order=3`` (13a tokeniser, exp smoothing, effective
  order, mixed case), hypothesis = generated text, reference = reference text, scaled to 0-1. Computed
  vectorised from cached n-gram counts (:func:`bleu3_matrix`, equal to sacrebleu within 1e-9).
- CIDEr: CIDEr-D (Vedantam et al. 2015, pycocoevalcap's ``CiderScorer``: n <= 4, sigma 6, x10) of the
  generated text against one reference text, IDF from the reference bag (:func:`cider_d_matrix`; equal
  to pycocoevalcap on the same tokens); tokens ``word-punct-lc`` instead of the Java PTB tokeniser.
- ROUGE-L: F-measure, rouge-score's default tokeniser (lowercase alphanumeric tokens), no stemmer; the LCS
  is bit-parallel (equal to ``rouge_score.rouge_scorer``).
- SBERT: cosine of the role ``sentence_encoder``'s vectors, each distinct text embedded once.
- Align: maximum-weight 1-to-1 matching (``scipy.optimize.linear_sum_assignment``); unequal bag sizes
  are equalised as the article's footnote allows (see :func:`align_score`).
- Word tokens for CosTF, CosTF-IDF, ClusTF, InvKL and InvPP: lowercased ``\\w+`` runs and single
  punctuation marks (``word-punct-lc``).
- Inverse metrics (Clus, InvKL) follow the article's ``1 / divergence`` literally, so they are ``inf``
  when the divergence is 0 (e.g. identical bags); InvPP lies in (0, 1]. Aggregated over bags
  (:func:`aggregate_bags`), one such bag cannot break a strategy's number: the mean is over the finite
  bags, the infinite ones are counted, and the median is over every defined bag (inf included).

Undefined cases (an empty bag, a bag with no token) raise :class:`DegenerateBag`; :func:`bag_scores`
turns them into NaN with the reason.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version
from typing import Literal

import numpy as np
import pandas as pd
from scipy import sparse

from tasks.metrics.base import DistributionScore
from tasks.models.registry import model_id, resolve_model
from tasks.signatures import make_signature

Embed = Callable[[Sequence[str]], np.ndarray]

PAIR_METRICS = ("pair_bleu3", "pair_rougeL", "pair_cider", "pair_sbert")
ALIGN_METRICS = ("align_bleu3", "align_rougeL", "align_cider", "align_sbert")
DOC_METRICS = ("cos_tf", "cos_tfidf")
CLUSTER_METRICS = ("clus_tf", "clus_sbert")
LM_METRICS = ("inv_kl", "inv_pp")
ALL_METRICS = PAIR_METRICS + ALIGN_METRICS + DOC_METRICS + CLUSTER_METRICS + LM_METRICS
DEFAULT_METRICS = ALL_METRICS

BOS, EOS = "<s>", "</s>"
_WORD = re.compile(r"\w+|[^\w\s]")


class DegenerateBag(ValueError):
    """A bag-level metric is undefined for these bags; the message is the reason."""


@dataclass(frozen=True)
class BagConfig:
    """Every open choice of the bag metrics (all of them go into the signatures).

    resample, draws: how Align equalises bag sizes (``up``: the smaller bag is stratified-upsampled to
        the larger size, each item kept floor(L/S) times plus a random L mod S items once more, averaged
        over ``draws`` seeded draws; ``down``: the larger bag is subsampled without replacement to the
        smaller size; ``none``: rectangular matching, normalised by the number of matched pairs).
    idf_source: where CosTF-IDF's IDF comes from in :func:`bag_scores` (``corpus``: every text of both
        frames, all groups, one text = one document, as the article's remark that IDF down-weights carrier
        phrases shared across contexts implies; ``bags``: the two bags of the group only).
    eps, min_samples, noise: DBSCAN on cosine distances (1 - cos) of the encodings; with min_samples=1
        every point is a core point (no noise); noise points, if any, count as singleton clusters.
    kl_alpha: additive (Lidstone) smoothing of both unigram distributions over the union vocabulary;
        KL(G || R) in nats.
    lm_order, lm_discount, lm_variant: interpolated Kneser-Ney trained on G (see :class:`KneserNeyLM`).
    """

    resample: Literal["up", "down", "none"] = "up"
    draws: int = 10
    idf_source: Literal["corpus", "bags"] = "corpus"
    eps: float = 0.5
    min_samples: int = 1
    noise: Literal["singleton"] = "singleton"
    kl_alpha: float = 1.0
    lm_order: int = 4
    lm_discount: float = 0.1
    lm_variant: Literal["kn-unk", "nltk"] = "kn-unk"


# --- tokenisers ----------------------------------------------------------------------------------------


def word_tokens(text: str) -> list[str]:
    """``word-punct-lc``: lowercased runs of word characters and single punctuation marks."""
    return _WORD.findall(text.lower())


@lru_cache(maxsize=1)
def _tok13a() -> Callable[[str], str]:
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()


@lru_cache(maxsize=1)
def _rouge_tokenizer() -> object:
    from rouge_score import tokenizers

    return tokenizers.DefaultTokenizer(use_stemmer=False)


# --- sentence-level similarity matrices (|G| x |R|) ----------------------------------------------------


def _ngram_matrices(token_lists: list[list[str]], other: list[list[str]], n: int
                    ) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
    """Count matrices of the order-n n-grams of two text lists over their shared n-gram index."""
    index: dict[tuple[str, ...], int] = {}

    def build(lists: list[list[str]]) -> sparse.csr_matrix:
        rows, cols, vals = [], [], []
        for i, toks in enumerate(lists):
            counts = Counter(tuple(toks[k:k + n]) for k in range(len(toks) - n + 1))
            for gram, c in counts.items():
                rows.append(i)
                cols.append(index.setdefault(gram, len(index)))
                vals.append(c)
        return rows, cols, vals

    a, b = build(token_lists), build(other)
    shape_cols = max(len(index), 1)
    ma = sparse.csr_matrix((a[2], (a[0], a[1])), shape=(len(token_lists), shape_cols), dtype=np.int64)
    mb = sparse.csr_matrix((b[2], (b[0], b[1])), shape=(len(other), shape_cols), dtype=np.int64)
    return ma, mb


def _clipped_matches(ma: sparse.csr_matrix, mb: sparse.csr_matrix) -> np.ndarray:
    """``sum_v min(a[i, v], b[j, v])`` for all (i, j): min(a, b) = sum_k [a >= k][b >= k]."""
    out = np.zeros((ma.shape[0], mb.shape[0]), dtype=np.int64)
    top = int(min(ma.max() if ma.nnz else 0, mb.max() if mb.nnz else 0))
    for k in range(1, top + 1):
        out += ((ma >= k).astype(np.int64) @ (mb >= k).astype(np.int64).T).toarray()
    return out


def bleu3_matrix(generated: Sequence[str], reference: Sequence[str], max_order: int = 3) -> np.ndarray:
    """``S[i, j] = sacrebleu sentence BLEU(generated[i], [reference[j]], max_ngram_order) / 100``.

    Reproduces sacrebleu's ``compute_bleu`` (13a, exp smoothing, effective order, brevity penalty, 0 when
    no n-gram matches) on clipped n-gram matches from sparse count matrices, all pairs at once."""
    tok = _tok13a()
    gen = [tok(t.rstrip()).split() for t in generated]
    ref = [tok(t.rstrip()).split() for t in reference]
    hyp_len = np.array([len(t) for t in gen], dtype=np.float64)
    ref_len = np.array([len(t) for t in ref], dtype=np.float64)
    n_g, n_r = len(gen), len(ref)
    correct = np.zeros((n_g, n_r, max_order), dtype=np.float64)
    for n in range(1, max_order + 1):
        ma, mb = _ngram_matrices(gen, ref, n)
        correct[:, :, n - 1] = _clipped_matches(ma, mb)
    orders = np.arange(1, max_order + 1, dtype=np.float64)
    total = np.maximum(hyp_len[:, None] - orders[None, :] + 1, 0)  # (n_g, N)
    eff = np.minimum(hyp_len, max_order)  # orders with total > 0
    in_eff = orders[None, :] <= eff[:, None]  # (n_g, N)
    zero = (correct == 0) & in_eff[:, None, :]
    halvings = np.cumsum(zero, axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        prec = np.where(correct > 0, 100.0 * correct / total[:, None, :],
                        100.0 / (np.power(2.0, halvings) * total[:, None, :]))
        logs = np.where(in_eff[:, None, :], np.log(np.where(in_eff[:, None, :], prec, 1.0)), 0.0)
        mean_log = logs.sum(axis=2) / np.maximum(eff, 1)[:, None]
        sys_len, r_len = hyp_len[:, None], ref_len[None, :]
        bp = np.where(sys_len < r_len, np.where(sys_len > 0, np.exp(1 - r_len / sys_len), 0.0), 1.0)
    score = bp * np.exp(mean_log)
    score[correct.sum(axis=2) == 0] = 0.0
    return score / 100.0


def cider_d_matrix(generated: Sequence[str], reference: Sequence[str], *, max_order: int = 4,
                   sigma: float = 6.0) -> np.ndarray:
    """``S[i, j]`` = CIDEr-D of ``generated[i]`` against the single reference ``reference[j]``, with the
    document frequencies of the reference bag (each reference text one document, N = |R|).

    Reproduces pycocoevalcap's ``CiderScorer`` run on the pairs ``(g, [r_j]) for r_j in R`` (one row per
    g): n-grams 1-4 of whitespace tokens (here the ``word-punct-lc`` tokens joined), weights
    ``tf * (log N - log max(1, df))``, per order the clipped cosine ``sum min(v_g, v_r) v_r / (|v_g| |v_r|)``
    times the length penalty ``exp(-(l_g - l_r)^2 / (2 sigma^2))`` (pycocoevalcap's length is the number of
    bigrams), the mean over orders, times 10. One reference text gives 0 everywhere (log 1 = 0)."""
    gen = [word_tokens(t) for t in generated]
    ref = [word_tokens(t) for t in reference]
    n_g, n_r = len(gen), len(ref)
    log_n = math.log(float(n_r)) if n_r else 0.0
    total = np.zeros((n_g, n_r), dtype=np.float64)
    length_g = length_r = None
    for n in range(1, max_order + 1):
        cg, cr = _ngram_matrices(gen, ref, n)
        df = np.asarray((cr > 0).sum(axis=0)).ravel().astype(np.float64)
        w = log_n - np.log(np.maximum(1.0, df))
        w2 = sparse.diags(w * w)
        num = np.zeros((n_g, n_r), dtype=np.float64)
        top = int(min(cg.max() if cg.nnz else 0, cr.max() if cr.nnz else 0))
        for t in range(1, top + 1):  # min(a, b) * b = sum_t [a >= t] [b >= t] b
            num += ((cg >= t).astype(np.float64) @ w2 @ (cr.multiply(cr >= t)).astype(np.float64).T).toarray()
        norm_g = np.sqrt(np.asarray(cg.astype(np.float64).power(2) @ (w * w)).ravel())
        norm_r = np.sqrt(np.asarray(cr.astype(np.float64).power(2) @ (w * w)).ravel())
        denom = norm_g[:, None] * norm_r[None, :]
        val = np.where(denom != 0, num / np.where(denom != 0, denom, 1.0), num)
        if n == 2:
            length_g = np.asarray(cg.sum(axis=1)).ravel().astype(np.float64)
            length_r = np.asarray(cr.sum(axis=1)).ravel().astype(np.float64)
        total += val  # the length penalty is the same for every order: applied once below
    if length_g is None:
        length_g, length_r = np.zeros(n_g), np.zeros(n_r)
    penalty = np.exp(-((length_g[:, None] - length_r[None, :]) ** 2) / (2 * sigma ** 2))
    return total * penalty / max_order * 10.0


def _lcs_masks(a: Sequence[str]) -> tuple[dict[str, int], int]:
    """(token -> bit mask of its positions in ``a``, the all-ones mask): what :func:`_lcs_length` reads of ``a``."""
    masks: dict[str, int] = {}
    for i, tok in enumerate(a):
        masks[tok] = masks.get(tok, 0) | (1 << i)
    return masks, (1 << len(a)) - 1


def _lcs_length(a_masks: tuple[dict[str, int], int], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of ``a`` (given as :func:`_lcs_masks`) and ``b``,
    bit-parallel (Allison-Dix/Hyyro) over Python ints."""
    masks, full = a_masks
    v = full
    for tok in b:
        u = v & masks.get(tok, 0)
        v = ((v + u) | (v - u)) & full
    return full.bit_length() - v.bit_count()


def rouge_l_matrix(generated: Sequence[str], reference: Sequence[str]) -> np.ndarray:
    """``S[i, j]`` = ROUGE-L F-measure of (prediction=generated[i], target=reference[j]), tokenised by
    rouge-score's default tokeniser without stemming; 0 when either side has no token."""
    tokenizer = _rouge_tokenizer()
    gen = [tokenizer.tokenize(t) for t in generated]
    ref = [tokenizer.tokenize(t) for t in reference]
    ref_masks = [_lcs_masks(r) for r in ref]  # built once per reference, not once per pair
    out = np.zeros((len(gen), len(ref)), dtype=np.float64)
    for i, g in enumerate(gen):
        if not g:
            continue
        for j, r in enumerate(ref):
            if not r:
                continue
            lcs = _lcs_length(ref_masks[j], g)
            if lcs:
                p, rc = lcs / len(g), lcs / len(r)
                out[i, j] = 2 * p * rc / (p + rc)
    return out


def _unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def sbert_matrix(generated: Sequence[str], reference: Sequence[str], embed: Embed) -> np.ndarray:
    """``S[i, j]`` = cosine of the sentence vectors (each distinct text embedded once)."""
    unique = list(dict.fromkeys([*generated, *reference]))
    vectors = _unit_rows(embed(unique))
    pos = {t: i for i, t in enumerate(unique)}
    g = vectors[[pos[t] for t in generated]]
    r = vectors[[pos[t] for t in reference]]
    return np.clip(g @ r.T, -1.0, 1.0)


# --- Pair and Align ------------------------------------------------------------------------------------


def _check_bags(reference: Sequence[str], generated: Sequence[str]) -> None:
    if len(reference) == 0:
        raise DegenerateBag("empty reference bag")
    if len(generated) == 0:
        raise DegenerateBag("empty generated bag")


def pair_score(sim: np.ndarray) -> float:
    """``Pair_sim(G, R) = sum_{g, r} sim(g, r) / (|G| |R|)``."""
    if sim.size == 0:
        raise DegenerateBag("empty bag")
    return float(sim.mean())


def align_score(sim: np.ndarray, *, resample: Literal["up", "down", "none"] = "up", draws: int = 10,
                seed: int = 0) -> float:
    """``Align_sim(G, R) = sum_{(g, r) in A} sim(g, r) / |G|`` with A the maximum-weight 1-to-1 matching of
    ``sim`` (rows G, columns R).

    Equal sizes: one exact matching. Otherwise (the article: "made equal by using upsampling or
    downsampling"): ``up`` repeats every item of the smaller bag floor(L/S) times and draws L mod S of its
    items (without replacement) once more, so the bag's frequencies are kept as closely as possible
    (plain resampling with replacement could drop items); ``down`` draws the smaller size from the larger
    bag without replacement. Random parts are averaged over ``draws`` draws of ``np.random.default_rng
    (seed)``; ``up`` with L divisible by S is deterministic. ``none`` matches the rectangle directly and
    divides by min(|G|, |R|)."""
    if sim.size == 0:
        raise DegenerateBag("empty bag")
    n_g, n_r = sim.shape

    def matched(m: np.ndarray) -> float:
        from scipy.optimize import linear_sum_assignment  # heavy (0.4 s): deferred, every run imports bags

        rows, cols = linear_sum_assignment(m, maximize=True)
        return float(m[rows, cols].sum() / len(rows))

    if n_g == n_r or resample == "none":
        return matched(sim)
    rng = np.random.default_rng(seed)
    small_axis = 0 if n_g < n_r else 1
    small, large = min(n_g, n_r), max(n_g, n_r)
    results = []
    if resample == "up":
        reps, extra = divmod(large, small)
        base = np.repeat(np.arange(small), reps)
        for _ in range(1 if extra == 0 else draws):
            idx = np.concatenate([base, rng.choice(small, extra, replace=False)])
            m = sim[idx, :] if small_axis == 0 else sim[:, idx]
            results.append(matched(m))
    elif resample == "down":
        for _ in range(draws):
            idx = np.sort(rng.choice(large, small, replace=False))
            m = sim[:, idx] if small_axis == 0 else sim[idx, :]
            results.append(matched(m))
    else:
        raise ValueError(f"align_score: resample must be 'up', 'down' or 'none', not {resample!r}")
    return float(np.mean(results))


def _sim_matrix(kind: str, generated: Sequence[str], reference: Sequence[str], embed: Embed | None) -> np.ndarray:
    if kind == "bleu3":
        return bleu3_matrix(generated, reference)
    if kind == "rougeL":
        return rouge_l_matrix(generated, reference)
    if kind == "cider":
        return cider_d_matrix(generated, reference)
    if kind == "sbert":
        return sbert_matrix(generated, reference, embed or default_embed())
    raise ValueError(f"unknown sentence similarity {kind!r}: expected bleu3, rougeL, cider or sbert")


def pair_metric(reference: Sequence[str], generated: Sequence[str], sim: str = "bleu3", *,
                embed: Embed | None = None) -> float:
    """Pair_{sim}(G, R) with sim one of ``bleu3``, ``rougeL``, ``cider``, ``sbert``."""
    _check_bags(reference, generated)
    return pair_score(_sim_matrix(sim, generated, reference, embed))


def align_metric(reference: Sequence[str], generated: Sequence[str], sim: str = "bleu3", *,
                 embed: Embed | None = None, resample: Literal["up", "down", "none"] = "up",
                 draws: int = 10, seed: int = 0) -> float:
    """Align_{sim}(G, R) with sim one of ``bleu3``, ``rougeL``, ``cider``, ``sbert`` (see :func:`align_score`)."""
    _check_bags(reference, generated)
    return align_score(_sim_matrix(sim, generated, reference, embed), resample=resample, draws=draws,
                       seed=seed)


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


# --- clustering (Algorithm 1) ---------------------------------------------------------------------------


def _cosine_distances(x: np.ndarray) -> np.ndarray:
    """1 - cos between rows; two all-zero rows (empty texts) are at distance 0, zero vs non-zero at 1."""
    unit = _unit_rows(x)
    dist = np.clip(1.0 - unit @ unit.T, 0.0, 2.0)
    zero = np.linalg.norm(x, axis=1) == 0
    dist[np.ix_(zero, ~zero)] = 1.0
    dist[np.ix_(~zero, zero)] = 1.0
    dist[np.ix_(zero, zero)] = 0.0
    np.fill_diagonal(dist, 0.0)
    return dist


def tf_encode(texts: Sequence[str]) -> np.ndarray:
    """Dense TF vectors (``word_tokens`` counts) of the texts over their own vocabulary."""
    counts = [Counter(word_tokens(t)) for t in texts]
    vocab = {w: i for i, w in enumerate(sorted(set().union(*counts)))} if counts else {}
    out = np.zeros((len(texts), max(len(vocab), 1)), dtype=np.float64)
    for i, c in enumerate(counts):
        for w, k in c.items():
            out[i, vocab[w]] = k
    return out


def cluster_score(reference: Sequence[str], generated: Sequence[str], *,
                  encoder: Literal["tf", "sbert"] = "tf", embed: Embed | None = None, eps: float = 0.5,
                  min_samples: int = 1) -> float:
    """Algorithm 1 (bag similarity by clustering): B = G + R (duplicates kept), p(B) = |R|/|B|; DBSCAN over
    the encodings of B (cosine distance, ``eps``, ``min_samples``; noise points are singleton clusters);
    per cluster d(C) = |p(B) - p(C)| weighted by |C|/|B|; returns ``1 / sum_C dbar(C)`` (``inf`` when
    every cluster has exactly the expected share of R; sums below 1e-12 count as 0).
    ``encoder='tf'`` is the article's ClusTF; ``'sbert'`` uses the sentence encoder."""
    from sklearn.cluster import DBSCAN

    _check_bags(reference, generated)
    texts = [*reference, *generated]
    is_ref = np.array([True] * len(reference) + [False] * len(generated))
    if encoder == "tf":
        x = tf_encode(texts)
    elif encoder == "sbert":
        unique = list(dict.fromkeys(texts))
        vectors = np.asarray((embed or default_embed())(unique), dtype=np.float64)
        pos = {t: i for i, t in enumerate(unique)}
        x = vectors[[pos[t] for t in texts]]
    else:
        raise ValueError(f"cluster_score: encoder must be 'tf' or 'sbert', not {encoder!r}")
    labels = DBSCAN(eps=eps, min_samples=min_samples, metric="precomputed").fit(_cosine_distances(x)).labels_
    labels = labels.copy()
    noise = labels == -1
    labels[noise] = labels.max(initial=-1) + 1 + np.arange(int(noise.sum()))  # singleton clusters
    size_b = len(texts)
    p_b = len(reference) / size_b
    total = 0.0
    for c in np.unique(labels):
        members = labels == c
        p_c = is_ref[members].mean()
        total += abs(p_b - p_c) * members.sum() / size_b
    return math.inf if total < 1e-12 else 1.0 / total


# --- unigram KL -----------------------------------------------------------------------------------------


def unigram_kl(reference: Sequence[str], generated: Sequence[str], *, alpha: float = 1.0) -> float:
    """D_KL(G || R) in nats between Lidstone-smoothed unigram distributions over the union vocabulary:
    p_X(w) = (c_X(w) + alpha) / (N_X + alpha |V|)."""
    _check_bags(reference, generated)
    _, r, g = _bag_tf(reference, generated)
    if r.size == 0:
        raise DegenerateBag("neither bag has a word token")
    if alpha <= 0 and (r.sum() == 0 or g.sum() == 0):
        raise DegenerateBag("a bag has no word token")
    p = (g + alpha) / (g.sum() + alpha * g.size)
    q = (r + alpha) / (r.sum() + alpha * r.size)
    mask = p > 0
    with np.errstate(divide="ignore"):
        return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def inv_kl(reference: Sequence[str], generated: Sequence[str], *, alpha: float = 1.0) -> float:
    """InvKL(G, R) = D_KL(G || R)^-1 (``inf`` for equal distributions)."""
    kl = unigram_kl(reference, generated, alpha=alpha)
    return math.inf if kl <= 0 else 1.0 / kl


# --- Kneser-Ney language model --------------------------------------------------------------------------


class KneserNeyLM:
    """Interpolated Kneser-Ney n-gram LM (4-gram in the article, after Hsu & Glass 2008).

    Training pads each sentence with order-1 ``<s>`` and order-1 ``</s>`` and counts every n-gram of
    length 1..order (nltk's ``padded_everygram_pipeline``). The highest order discounts raw counts by
    ``discount``; lower orders discount continuation counts N1+(. ctx w). ``variant``:

    - ``nltk``: exactly ``nltk.lm.KneserNeyInterpolated`` (tested equal): gamma = discount x (distinct raw
      followers of ctx) / total, the unigram level N1+(. w) / N1+(. .) undiscounted; an unknown word gets
      probability 0 (log -inf, so one unseen reference word makes perplexity infinite), and contexts made
      of ``<s>`` sum to slightly more than 1 (raw followers include ``<s>`` itself).
    - ``kn-unk`` (default, deliberate difference): gamma counts the continuation types of ctx, so every
      level sums to 1, and the unigram level is discounted too and interpolated with a uniform
      distribution over the training vocabulary plus one unknown word (Chen & Goodman's interpolated
      KN): a proper distribution over vocabulary + unknown, and unseen words keep a small probability.
    """

    def __init__(self, order: int = 4, discount: float = 0.1,
                 variant: Literal["kn-unk", "nltk"] = "kn-unk") -> None:
        if order < 1:
            raise ValueError("order must be >= 1")
        if not 0 < discount < 1:
            raise ValueError("discount must be in (0, 1)")
        if variant not in ("kn-unk", "nltk"):
            raise ValueError(f"variant must be 'kn-unk' or 'nltk', not {variant!r}")
        self.order, self.discount, self.variant = order, discount, variant
        self._memo: dict[tuple[str, tuple[str, ...]], float] = {}

    def fit(self, sentences: Iterable[Sequence[str]]) -> KneserNeyLM:
        n = self.order
        counts: list[dict[tuple[str, ...], Counter[str]]] = [defaultdict(Counter) for _ in range(n + 1)]
        for sent in sentences:
            padded = [BOS] * (n - 1) + list(sent) + [EOS] * (n - 1)
            for k in range(1, n + 1):
                for i in range(len(padded) - k + 1):
                    counts[k][tuple(padded[i:i + k - 1])][padded[i + k - 1]] += 1
        self.vocab = set(counts[1][()])
        self._raw = counts
        self._raw_n = {ctx: sum(c.values()) for ctx, c in counts[n].items()}
        # continuation counts for orders 1..n-1: cc[k][ctx][w] = #distinct x with c(x, ctx, w) > 0
        self._cc: list[dict[tuple[str, ...], Counter[str]]] = [defaultdict(Counter) for _ in range(n)]
        self._cc_total: list[dict[tuple[str, ...], int]] = [{} for _ in range(n)]
        for k in range(1, n):
            for full_ctx, followers in counts[k + 1].items():
                sub = full_ctx[1:]
                for w in followers:
                    self._cc[k][sub][w] += 1
            self._cc_total[k] = {ctx: sum(c.values()) for ctx, c in self._cc[k].items()}
        self._memo = {}
        return self

    def _unigram(self, word: str) -> float:
        if self.order == 1:
            total = sum(self._raw[1][()].values())
            return self._raw[1][()].get(word, 0) / total if total else 0.0
        cc, total = self._cc[1][()], self._cc_total[1].get((), 0)
        if total == 0:
            return 0.0 if self.variant == "nltk" else 1.0 / (len(self.vocab) + 1)
        if self.variant == "nltk":
            return cc.get(word, 0) / total
        alpha = max(cc.get(word, 0) - self.discount, 0.0) / total
        gamma = self.discount * len(cc) / total
        return alpha + gamma / (len(self.vocab) + 1)

    def _score(self, word: str, ctx: tuple[str, ...]) -> float:
        if not ctx:
            return self._unigram(word)
        key = (word, ctx)
        if key in self._memo:
            return self._memo[key]
        k = len(ctx) + 1
        raw = self._raw[k].get(ctx)
        if not raw:
            value = self._score(word, ctx[1:])
        else:
            if k == self.order:
                count, total = raw.get(word, 0), self._raw_n[ctx]
            else:
                count, total = self._cc[k][ctx].get(word, 0) if ctx in self._cc[k] else 0, \
                    self._cc_total[k].get(ctx, 0)
            if total == 0:
                value = self._score(word, ctx[1:])
            else:
                alpha = max(count - self.discount, 0.0) / total
                types = len(raw) if k == self.order or self.variant == "nltk" else len(self._cc[k][ctx])
                gamma = self.discount * types / total
                value = alpha + gamma * self._score(word, ctx[1:])
        self._memo[key] = value
        return value

    def score(self, word: str, context: Sequence[str] = ()) -> float:
        """P(word | last order-1 words of context)."""
        ctx = tuple(context)[-(self.order - 1):] if self.order > 1 else ()
        return self._score(word, ctx)

    def logscore(self, word: str, context: Sequence[str] = ()) -> float:
        """log2 P(word | context); -inf for probability 0."""
        p = self.score(word, context)
        return math.log2(p) if p > 0 else -math.inf

    def eval_ngrams(self, sentence: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
        """(word, context) scored for a sentence: each token and one ``</s>``, left-padded with order-1
        ``<s>`` (the extra right padding used in training is not scored)."""
        n = self.order
        seq = [BOS] * (n - 1) + list(sentence) + [EOS]
        return [(seq[i], tuple(seq[max(0, i - n + 1):i])) for i in range(n - 1, len(seq))]

    def perplexity(self, sentences: Iterable[Sequence[str]]) -> float:
        """2 ** (-mean log2 P) over all scored tokens of all sentences (token-weighted corpus perplexity)."""
        logs = [self.logscore(w, c) for s in sentences for w, c in self.eval_ngrams(s)]
        if not logs:
            raise DegenerateBag("nothing to score")
        mean = float(np.mean(logs))
        return math.inf if mean == -math.inf else 2.0 ** (-mean)


def inv_pp(reference: Sequence[str], generated: Sequence[str], *, order: int = 4, discount: float = 0.1,
           variant: Literal["kn-unk", "nltk"] = "kn-unk") -> float:
    """InvPP(G, R) = PP_G(R)^-1: a KN LM (:class:`KneserNeyLM`) trained on the generated bag's
    ``word_tokens``, perplexity of the reference bag; in (0, 1] (0 when a reference word has probability
    0, which only the ``nltk`` variant allows)."""
    _check_bags(reference, generated)
    lm = KneserNeyLM(order, discount, variant).fit(word_tokens(t) for t in generated)
    pp = lm.perplexity(word_tokens(t) for t in reference)
    return 0.0 if math.isinf(pp) else 1.0 / pp


# --- signatures -----------------------------------------------------------------------------------------


def default_embed(spec: object | None = None, cache: object | None = None) -> Embed:
    """Sentence vectors of the registry's ``sentence_encoder`` (or ``spec``) through the embedding cache."""
    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
    from tasks.models.embeddings import sentence_embeddings

    resolved = spec or resolve_model("sentence_encoder")
    return lambda texts: sentence_embeddings(texts, resolved, cache)  # type: ignore[arg-type]


def bag_signature(metric: str, config: BagConfig = BagConfig(), *, model: str | None = None, seed: int = 0,
                  agg: str | None = None) -> str:
    """Signature of one bag metric under ``config`` (``model`` names the sentence encoder for *_sbert)."""
    if metric not in ALL_METRICS:
        raise ValueError(f"unknown bag metric {metric!r}; known: {', '.join(ALL_METRICS)}")
    fields: dict[str, object] = {"bags": "R=reference,G=generated"}
    family, _, sim = metric.partition("_")
    if family in ("pair", "align"):
        if sim == "bleu3":
            fields.update(sim="sentbleu", order=3, tok="13a", smooth="exp", eff=True, case="mixed",
                          hyp="generated", scale="0-1", sacrebleu=version("sacrebleu"))
        elif sim == "rougeL":
            fields.update(sim="rougeL-f", tok="rouge_score-default", stem=False, lcs="bitparallel",
                          rouge_score=version("rouge-score"))
        elif sim == "cider":
            fields.update(sim="cider-d", order=4, sigma=6.0, tok="word-punct-lc", idf="reference-bag",
                          length="bigrams", scale="x10", ref="pycocoevalcap-CiderScorer")
        else:
            fields.update(sim="cosine", model=model)
        if family == "align":
            fields.update(match="scipy-lsa-max", resample=config.resample,
                          draws=config.draws if config.resample != "none" else None,
                          seed=seed if config.resample != "none" else None)
    elif metric in DOC_METRICS:
        fields.update(tok="word-punct-lc", tf="raw-sum")
        if metric == "cos_tfidf":
            fields.update(idf=f"smooth-{config.idf_source}", sent_norm="none")
    elif metric in CLUSTER_METRICS:
        fields.update(enc="tf" if sim == "tf" else "sbert", model=model if sim == "sbert" else None,
                      tok="word-punct-lc" if sim == "tf" else None, algo="dbscan", dist="cosine",
                      eps=config.eps, min_samples=config.min_samples, noise=config.noise, inv="1/sum",
                      sklearn=version("scikit-learn"))
    elif metric == "inv_kl":
        fields.update(tok="word-punct-lc", div="KL(G||R)", log="e", smooth=f"lidstone-{config.kl_alpha}",
                      vocab="union", inv="1/x")
    else:
        fields.update(tok="word-punct-lc", lm="kn-interp", order=config.lm_order,
                      discount=config.lm_discount, variant=config.lm_variant, train="G", eval="R",
                      pad="nltk", eos=1, pp="token-weighted", inv="1/x")
    fields["agg"] = agg
    return make_signature(metric, **fields)


# --- DataFrame wrappers ---------------------------------------------------------------------------------


def _texts(frame: pd.DataFrame, group_col: str, text_col: str) -> dict[object, list[str]]:
    for col in (group_col, text_col):
        if col not in frame.columns:
            raise ValueError(f"bag_scores: column {col!r} is missing (columns: {', '.join(map(str, frame.columns))})")
    texts = frame[text_col].fillna("").astype(str)
    return {g: list(part) for g, part in texts.groupby(frame[group_col], sort=False)}


def bag_scores(reference: pd.DataFrame, generated: pd.DataFrame, *, group_col: str = "group_id",
               text_col: str = "text", metrics: Sequence[str] = DEFAULT_METRICS, sentence_spec: object = None,
               cache: object = None, seed: int = 0, config: BagConfig = BagConfig(),
               embed: Embed | None = None) -> pd.DataFrame:
    """One row per (group, metric): ``group_col, metric, value, signature, reason, n_reference,
    n_generated``. Bags are the texts of each value of ``group_col`` (context, conversation or user); a
    missing text counts as empty. Sentence vectors are computed once for all distinct texts of both frames
    (``sentence_spec``/``cache``, or ``embed`` to supply them), IDF comes from ``config.idf_source``.
    Undefined values are NaN with the reason."""
    unknown = [m for m in metrics if m not in ALL_METRICS]
    if unknown:
        raise ValueError(f"bag_scores: unknown metric(s) {unknown}; known: {', '.join(ALL_METRICS)}")
    ref_bags, gen_bags = _texts(reference, group_col, text_col), _texts(generated, group_col, text_col)
    groups = list(dict.fromkeys([*ref_bags, *gen_bags]))
    needs_vectors = any(m.endswith("_sbert") for m in metrics)
    model = None
    vector_of: dict[str, np.ndarray] = {}
    if needs_vectors:
        if embed is None:
            spec = sentence_spec or resolve_model("sentence_encoder")
            model = model_id(spec)
            embed = default_embed(spec, cache)
        else:
            model = getattr(embed, "model_id", "custom")
        every = list(dict.fromkeys(t for bags in (ref_bags, gen_bags) for bag in bags.values() for t in bag))
        vectors = np.asarray(embed(every), dtype=np.float64) if every else np.zeros((0, 1))
        vector_of = dict(zip(every, vectors, strict=True))

    def lookup(texts: Sequence[str]) -> np.ndarray:
        return np.stack([vector_of[t] for t in texts])

    corpus_idf = None
    if "cos_tfidf" in metrics and config.idf_source == "corpus":
        corpus_idf = IdfTable.fit(t for bags in (ref_bags, gen_bags) for bag in bags.values() for t in bag)
    signatures = {m: bag_signature(m, config, model=model, seed=seed) for m in metrics}

    rows = []
    for group in groups:
        ref, gen = ref_bags.get(group, []), gen_bags.get(group, [])
        sims: dict[str, np.ndarray] = {}
        for metric in metrics:
            value, reason = math.nan, None
            try:
                _check_bags(ref, gen)
                family, _, sim = metric.partition("_")
                if family in ("pair", "align"):
                    if sim not in sims:
                        sims[sim] = _sim_matrix(sim, gen, ref, lookup)
                    value = pair_score(sims[sim]) if family == "pair" else align_score(
                        sims[sim], resample=config.resample, draws=config.draws, seed=seed)
                elif metric == "cos_tf":
                    value = cos_tf(ref, gen)
                elif metric == "cos_tfidf":
                    value = cos_tfidf(ref, gen, idf=corpus_idf)
                elif family == "clus":
                    value = cluster_score(ref, gen, encoder=sim, embed=lookup, eps=config.eps,
                                          min_samples=config.min_samples)
                elif metric == "inv_kl":
                    value = inv_kl(ref, gen, alpha=config.kl_alpha)
                else:
                    value = inv_pp(ref, gen, order=config.lm_order, discount=config.lm_discount,
                                   variant=config.lm_variant)
            except DegenerateBag as exc:
                value, reason = math.nan, str(exc)
            rows.append({group_col: group, "metric": metric, "value": float(value),
                         "signature": signatures[metric], "reason": reason,
                         "n_reference": len(ref), "n_generated": len(gen)})
    columns = [group_col, "metric", "value", "signature", "reason", "n_reference", "n_generated"]
    return pd.DataFrame(rows, columns=columns)


@dataclass(frozen=True)
class BagAggregate:
    """A metric over a strategy's bags: ``mean``/``std`` over the finite bags (``n``), ``median`` over every
    defined bag (an ``inf`` bag counts, so the median is robust, not biased, by it), ``n_inf`` bags that
    scored inf (zero divergence) and ``n_undefined`` that scored NaN (a degenerate bag)."""

    mean: float
    std: float
    median: float
    n: int
    n_inf: int
    n_undefined: int

    def reason(self) -> str | None:
        """What the mean leaves out, in words (None when it covers every bag)."""
        total = self.n + self.n_inf + self.n_undefined
        parts = []
        if self.n_undefined:
            parts.append(f"{self.n_undefined} of {total} groups undefined (NaN), left out")
        if self.n_inf:
            parts.append(f"{self.n_inf} of {total} groups scored inf (zero divergence), left out of the mean; "
                         f"median over the defined groups {self.median:.6g}")
        if not self.n and not self.n_inf:
            parts = ["no group defines this metric"]
        return "; ".join(parts) or None


def aggregate_bags(values: Sequence[float] | np.ndarray) -> BagAggregate:
    """Mean (finite bags), std, median (defined bags, inf included) and counts of one metric's per-bag values."""
    v = np.asarray(values, dtype=np.float64)
    defined = v[~np.isnan(v)]
    finite = defined[np.isfinite(defined)]
    return BagAggregate(mean=float(finite.mean()) if len(finite) else math.nan,
                        std=float(finite.std(ddof=1)) if len(finite) > 1 else math.nan,
                        median=float(np.median(defined)) if len(defined) else math.nan,
                        n=len(finite), n_inf=int(np.isinf(defined).sum()), n_undefined=int(len(v) - len(defined)))


def summarise_bags(scores: pd.DataFrame, *, group_col: str = "group_id") -> list[DistributionScore]:
    """Per metric, the mean over the groups with a finite value (:func:`aggregate_bags`: NaN and ``inf``
    groups left out of the mean and counted in ``reason``, so one identical bag does not make a strategy's
    InvKL/ClusTF ``inf``). ``distributions['per_group']`` keeps every group's value; the signature gains
    ``agg:mean-over-finite-groups``."""
    out = []
    for metric, part in scores.groupby("metric", sort=False):
        values = part["value"].to_numpy(dtype=np.float64)
        signature = str(part["signature"].iloc[0])
        head, sep, tail = signature.rpartition("|version:")
        agg = "agg:mean-over-finite-groups"
        signature = f"{head}|{agg}{sep}{tail}" if sep else f"{signature}|{agg}"
        summary = aggregate_bags(values)
        out.append(DistributionScore(str(metric), summary.mean, signature, reason=summary.reason(),
                                     distributions={"per_group": values.tolist()}))
    return out
