"""The Pair* and Align* bag metrics (Filice et al. §3; choices in :mod:`tasks.metrics.bags`): the
sentence-level similarity matrices (BLEU-3, CIDEr-D, ROUGE-L, SBERT cosine, all |G| x |R| at once) and
the two ways of turning one into a bag score (mean over all pairs, maximum-weight 1-to-1 matching)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import sparse

from tasks.metrics.bag_common import DegenerateBag, Embed, _check_bags, _unit_rows, default_embed, word_tokens

# --- tokenisers ----------------------------------------------------------------------------------------


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


def sbert_matrix(generated: Sequence[str], reference: Sequence[str], embed: Embed) -> np.ndarray:
    """``S[i, j]`` = cosine of the sentence vectors (each distinct text embedded once)."""
    unique = list(dict.fromkeys([*generated, *reference]))
    vectors = _unit_rows(embed(unique))
    pos = {t: i for i, t in enumerate(unique)}
    g = vectors[[pos[t] for t in generated]]
    r = vectors[[pos[t] for t in reference]]
    return np.clip(g @ r.T, -1.0, 1.0)


# --- Pair and Align ------------------------------------------------------------------------------------



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

