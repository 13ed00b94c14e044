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

This module holds the metric names, :class:`BagConfig`, the signatures, the DataFrame entry point
:func:`bag_scores` and the aggregation over bags; each family lives in a sibling module:
:mod:`tasks.metrics.bag_pairs` (Pair*, Align* and their sentence-level similarity matrices),
:mod:`tasks.metrics.bag_documents` (CosTF, CosTF-IDF), :mod:`tasks.metrics.bag_clusters` (Clus*) and
:mod:`tasks.metrics.bag_lm` (InvKL, InvPP), with what they share in :mod:`tasks.metrics.bag_common`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from typing import Literal

import numpy as np
import pandas as pd

from tasks.metrics.bag_clusters import cluster_score
from tasks.metrics.bag_common import DegenerateBag, Embed, _check_bags, default_embed
from tasks.metrics.bag_documents import IdfTable, cos_tf, cos_tfidf
from tasks.metrics.bag_lm import inv_kl, inv_pp
from tasks.metrics.bag_pairs import _sim_matrix, align_score, pair_score
from tasks.metrics.base import DistributionScore
from tasks.models.registry import model_id, resolve_model
from tasks.signatures import make_signature

PAIR_METRICS = ("pair_bleu3", "pair_rougeL", "pair_cider", "pair_sbert")
ALIGN_METRICS = ("align_bleu3", "align_rougeL", "align_cider", "align_sbert")
DOC_METRICS = ("cos_tf", "cos_tfidf")
CLUSTER_METRICS = ("clus_tf", "clus_sbert")
LM_METRICS = ("inv_kl", "inv_pp")
ALL_METRICS = PAIR_METRICS + ALIGN_METRICS + DOC_METRICS + CLUSTER_METRICS + LM_METRICS
DEFAULT_METRICS = ALL_METRICS


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


# --- signatures -----------------------------------------------------------------------------------------


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
