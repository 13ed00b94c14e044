"""Surface divergence: how far a synthetic text moved from its source in n-grams.

``bleu_divergence = 1 - BLEU(hypothesis=synthetic, references=[source]) / 100`` with sacrebleu's
``sentence_bleu`` defaults (13a tokeniser, exp smoothing, effective order, mixed case): 0 for a copy,
1 for no shared n-gram.

Also here: :func:`self_bleu` (diversity among several outputs for the same input) and :func:`char_jsd`
(the distribution-level divergence: JSD between character trigram distributions of real and synthetic
sets).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

from tasks.metrics.base import DistributionScore, MetricResult, reason_column
from tasks.signatures import make_signature


@lru_cache(maxsize=1)
def _bleu() -> object:
    """One sacrebleu BLEU object, set up as ``sacrebleu.sentence_bleu`` sets up its own."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(effective_order=True)
    bleu.sentence_score("a", ["a"])  # fixes nrefs=1 so the signature is available before any real score
    return bleu


def bleu_signature() -> str:
    """Our prefix plus every field of sacrebleu's own BLEU signature (its version as ``sacrebleu``)."""
    info = dict(_bleu().get_signature().info)
    sacrebleu_version = info.pop("version", None)
    fields = {k: v for k, v in info.items() if v is not None}
    return make_signature("bleu_divergence", **fields, sacrebleu=sacrebleu_version)


def bleu_divergence(sources: Sequence[str], synthetic: Sequence[str]) -> MetricResult:
    """Per pair ``1 - sentence BLEU(synthetic, [source]) / 100`` (column ``bleu_divergence``)."""
    sources, synthetic = list(sources), list(synthetic)
    if len(sources) != len(synthetic):
        raise ValueError(f"bleu_divergence: {len(sources)} sources but {len(synthetic)} synthetic texts")
    bleu = _bleu()
    values = np.array([1.0 - bleu.sentence_score(hyp, [src]).score / 100.0
                       for src, hyp in zip(sources, synthetic, strict=True)], dtype=np.float64)
    return MetricResult(scores=pd.DataFrame({"bleu_divergence": values}),
                        signatures={"bleu_divergence": bleu_signature()})


# --- self-BLEU (diversity among several outputs for one input) ------------------------------------


@lru_cache(maxsize=1)
def _self_bleu_object() -> object:
    """A separate sacrebleu BLEU (sentence defaults: 13a, exp smoothing, effective order) for self-BLEU,
    whose reference count varies per input."""
    from sacrebleu.metrics import BLEU

    return BLEU(effective_order=True)


def self_bleu_signature(metric: str = "self_bleu") -> str:
    """Signature of a self-BLEU column: sacrebleu's BLEU fields with ``nrefs:k-1`` (the other outputs)."""
    info = dict(_bleu().get_signature().info)
    sacrebleu_version = info.pop("version", None)
    info["nrefs"] = "k-1"
    fields = {k: v for k, v in info.items() if v is not None}
    return make_signature(metric, **fields, avg="mean-over-outputs", sacrebleu=sacrebleu_version)


def self_bleu(outputs_by_input: Sequence[Sequence[str]]) -> MetricResult:
    """Self-BLEU among the k outputs produced for the same input, one row per input.

    For input i with outputs o_1..o_k: ``self_bleu = mean_j BLEU(o_j, refs = [o_l for l != j])`` (sacrebleu
    ``sentence_score``, multi-reference, sentence defaults), on sacrebleu's 0-100 scale, and
    ``self_bleu_diversity = 1 - self_bleu / 100`` (higher = more diverse, the direction of the article's
    "1 - self-BLEU" columns). Note: the article's own Table 2 "self-BLEU" is BLEU between *source* and
    synthetic text (Niu et al. 2021), which is :func:`bleu_divergence`; this function is the
    among-outputs variant. Inputs with fewer than two outputs get NaN and ``self_bleu_reason``.
    """
    bleu = _self_bleu_object()
    values, reasons, counts = [], [], []
    for outputs in outputs_by_input:
        outputs = list(outputs)
        counts.append(len(outputs))
        if len(outputs) < 2:
            values.append(np.nan)
            reasons.append(f"{len(outputs)} output(s): self-BLEU needs at least 2 outputs per input")
            continue
        scores = [bleu.sentence_score(hyp, outputs[:j] + outputs[j + 1:]).score
                  for j, hyp in enumerate(outputs)]
        values.append(float(np.mean(scores)))
        reasons.append(None)
    arr = np.array(values, dtype=np.float64)
    scores_df = pd.DataFrame({"self_bleu": arr, "self_bleu_diversity": 1.0 - arr / 100.0,
                              "n_outputs": np.array(counts, dtype=np.int64),
                              reason_column("self_bleu"): pd.Series(reasons, dtype=object)})
    return MetricResult(scores=scores_df,
                        signatures={"self_bleu": self_bleu_signature("self_bleu"),
                                    "self_bleu_diversity": self_bleu_signature("self_bleu_diversity")})


# --- character n-gram JSD (distribution level) -------------------------------------------------------

_WS = re.compile(r"\s+")


def char_ngram_counts(texts: Iterable[str], n: int = 3, *, lowercase: bool = False,
                      collapse_whitespace: bool = True) -> Counter[str]:
    """Counts of character n-grams over all texts, taken inside each text (no padding, no n-gram crosses
    two texts; a text shorter than n adds nothing). ``collapse_whitespace`` strips the text and turns every
    whitespace run (spaces, tabs, newlines) into one space; case is kept unless ``lowercase``."""
    counts: Counter[str] = Counter()
    for text in texts:
        if collapse_whitespace:
            text = _WS.sub(" ", text).strip()
        if lowercase:
            text = text.lower()
        counts.update(text[i:i + n] for i in range(len(text) - n + 1))
    return counts


def char_jsd(real_texts: Sequence[str], synthetic_texts: Sequence[str], n: int = 3, *,
             lowercase: bool = False, collapse_whitespace: bool = True) -> DistributionScore:
    """Jensen-Shannon divergence (base 2, in [0, 1]) between the character n-gram distributions of the real
    and the synthetic set (the article's distribution-level divergence; higher = more divergent).

    Equals ``scipy.spatial.distance.jensenshannon(p, q, base=2) ** 2`` on the count vectors aligned over
    the union of n-grams. Case is kept and whitespace runs collapse to one space by default (see
    :func:`char_ngram_counts`); both choices are in the signature. NaN with a reason when a set has no
    n-gram."""
    signature = make_signature("char_jsd", n=n, case="lc" if lowercase else "mixed",
                               ws="collapse" if collapse_whitespace else "keep", pad="none", base=2,
                               scipy=_version("scipy"))
    p_counts = char_ngram_counts(real_texts, n, lowercase=lowercase, collapse_whitespace=collapse_whitespace)
    q_counts = char_ngram_counts(synthetic_texts, n, lowercase=lowercase,
                                 collapse_whitespace=collapse_whitespace)
    for name, counts in (("real", p_counts), ("synthetic", q_counts)):
        if not counts:
            return DistributionScore("char_jsd", float("nan"), signature,
                                     reason=f"the {name} set has no character {n}-gram")
    vocab = list(p_counts.keys() | q_counts.keys())
    p = np.array([p_counts.get(g, 0) for g in vocab], dtype=np.float64)
    q = np.array([q_counts.get(g, 0) for g in vocab], dtype=np.float64)
    return DistributionScore("char_jsd", _jsd_base2(p / p.sum(), q / q.sum()), signature)


def _jsd_base2(p: np.ndarray, q: np.ndarray) -> float:
    """JSD in bits of two probability vectors: mean of the two KLs to their midpoint."""
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> float:
        mask = a > 0
        return float(np.sum(a[mask] * np.log2(a[mask] / m[mask])))

    return max(0.0, 0.5 * kl(p) + 0.5 * kl(q))


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)
