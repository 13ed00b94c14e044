"""Runs the configured sample-level metrics on (source, synthetic) pairs and summarises them per
strategy: the one entry point the metrics stage calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tasks.corpus.schema import STATUS_OK
from tasks.metrics.base import MetricResult
from tasks.metrics.divergence import bleu_divergence
from tasks.metrics.meaning import bertscore
from tasks.models.embeddings import EmbeddingCache
from tasks.models.registry import ModelSpec

BERTSCORE_OUTPUTS = ("bertscore_p", "bertscore_r", "bertscore_f1")
SAMPLE_METRICS = (*BERTSCORE_OUTPUTS, "bleu_divergence")


@dataclass(frozen=True)
class BertScoreOptions:
    """How BERTScore is computed (see tasks.metrics.meaning.bertscore)."""

    spec: ModelSpec | None = None
    layer: int | None = None
    idf: bool = False
    baseline_path: str | None = None


def sample_scores(pairs: pd.DataFrame, names: Sequence[str], *, bertscore_options: BertScoreOptions,
                  cache: EmbeddingCache | None = None) -> MetricResult:
    """Score every row of ``pairs`` (columns doc_id, strategy, variant, source, text, status).

    Rows whose generation failed get NaN scores (they stay in the table, so counts add up).
    """
    unknown = sorted(set(names) - set(SAMPLE_METRICS))
    if unknown:
        raise ValueError(f"unknown sample metric {unknown[0]!r}; known: {', '.join(SAMPLE_METRICS)}")
    out = pairs[["doc_id", "strategy", "variant", "status"]].reset_index(drop=True).copy()
    ok = (pairs["status"] == STATUS_OK).to_numpy()
    sources = pairs["source"].astype(str).to_numpy()[ok].tolist()
    synthetic = pairs["text"].astype(str).to_numpy()[ok].tolist()
    signatures: dict[str, str] = {}

    def put(result: MetricResult, columns: Sequence[str]) -> None:
        for col in columns:
            values = np.full(len(out), np.nan)
            values[ok] = result.scores[col].to_numpy(dtype=float)
            out[col] = values
            signatures[col] = result.signatures[col]

    wanted_bertscore = [c for c in BERTSCORE_OUTPUTS if c in names]
    if wanted_bertscore:
        put(bertscore(synthetic, sources, spec=bertscore_options.spec, layer=bertscore_options.layer,
                      idf=bertscore_options.idf, baseline_path=bertscore_options.baseline_path, cache=cache),
            wanted_bertscore)
    if "bleu_divergence" in names:
        put(bleu_divergence(sources, synthetic), ["bleu_divergence"])
    return MetricResult(scores=out, signatures=signatures)


def summarise_scores(scores: pd.DataFrame, signatures: dict[str, str]) -> pd.DataFrame:
    """Distribution-level summary per (strategy, variant, metric): mean, std, median, n ok, n failed."""
    rows = []
    for (strategy, variant), group in scores.groupby(["strategy", "variant"], sort=True):
        n_failed = int((group["status"] != STATUS_OK).sum())
        for metric, signature in signatures.items():
            values = group[metric].dropna().to_numpy(dtype=float)
            rows.append({
                "strategy": strategy, "variant": variant, "metric": metric,
                "value": float(values.mean()) if len(values) else np.nan,
                "std": float(values.std(ddof=1)) if len(values) > 1 else np.nan,
                "median": float(np.median(values)) if len(values) else np.nan,
                "n": len(values), "n_failed": n_failed, "signature": signature,
            })
    return pd.DataFrame(rows, columns=["strategy", "variant", "metric", "value", "std", "median", "n",
                                       "n_failed", "signature"])
