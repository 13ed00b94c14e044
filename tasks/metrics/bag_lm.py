"""The language-model bag metrics InvKL and InvPP (Filice et al. §3; choices in
:mod:`tasks.metrics.bags`): the inverse KL divergence of the bags' unigram distributions, and the
inverse perplexity of the reference bag under an interpolated Kneser-Ney LM trained on the generated one
(:class:`KneserNeyLM`)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np

from tasks.metrics.bag_common import DegenerateBag, _check_bags, word_tokens
from tasks.metrics.bag_documents import _bag_tf

BOS, EOS = "<s>", "</s>"


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

