"""What every metric returns: scores and a sacrebleu-style signature string.

A signature names everything a number depends on (metric, model, layer, n, tokenizer, package
version and any option), so two numbers are comparable exactly when their signatures are equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

SIGNATURE_VERSION = "synthugc-0.1"


def make_signature(metric: str, **fields: object) -> str:
    """``metric:NAME|key:value|...|version:...`` with keys in the given order, None values left out,
    booleans as yes/no (sacrebleu's style)."""
    parts = [f"metric:{metric}"]
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "yes" if value else "no"
        parts.append(f"{key}:{value}")
    if "version" not in fields:
        parts.append(f"version:{SIGNATURE_VERSION}")
    return "|".join(parts)


@dataclass
class MetricResult:
    """Sample-level scores (one row per input pair, one column per metric output name) and the
    signature of each output column."""

    scores: pd.DataFrame
    signatures: dict[str, str] = field(default_factory=dict)


@dataclass
class DistributionScore:
    """One distribution-level (or bag-level) number with its signature.

    ``value`` is NaN when the inputs cannot define it (one-item bag, empty text set, ...), and
    ``reason`` then says why; ``distributions`` keeps arrays worth plotting (e.g. FCSD's cosine
    scores of the real and synthetic sets)."""

    metric: str
    value: float
    signature: str
    reason: str | None = None
    distributions: dict[str, list[float]] = field(default_factory=dict)


def reason_column(metric: str) -> str:
    """Name of the column that says why a sample-level score is NaN (null when the score is defined)."""
    return f"{metric}_reason"
