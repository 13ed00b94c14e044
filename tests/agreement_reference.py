"""The hand-written Krippendorff's alpha and Cohen's kappa the human evaluation used before it called the
``krippendorff`` package and scikit-learn: the reference its figures must still equal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np


def old_krippendorff_alpha(ratings: np.ndarray, level: Literal["nominal", "ordinal"] = "nominal") -> float:
    """Krippendorff's alpha of an (annotators x items) matrix of numeric codes, NaN = not rated.

    Built on the coincidence matrix: o[c, k] = sum over items of (pairs of values c, k within the item) /
    (ratings of the item - 1); items with one rating do not count. ``ordinal`` codes must be ordered (the
    distance between c and k is (sum of n_g for g from c to k - (n_c + n_k) / 2)^2, n_g the pairable
    count of value g); ``nominal`` distance is 0 for equal codes, else 1. NaN when no item has two ratings
    or when the pairable values do not vary (alpha is undefined then).
    """
    data = np.asarray(ratings, dtype=float)
    if data.ndim != 2:
        raise ValueError(f"ratings must be annotators x items, got shape {data.shape}")
    values = np.unique(data[~np.isnan(data)])
    if values.size == 0:
        return float("nan")
    counts = (data.T[:, :, None] == values[None, None, :]).sum(axis=1).astype(float)  # items x values
    per_item = counts.sum(axis=1)
    pairable = per_item >= 2
    if not pairable.any():
        return float("nan")
    counts, per_item = counts[pairable], per_item[pairable]
    pairs = counts[:, :, None] * counts[:, None, :]
    pairs -= counts[:, :, None] * np.eye(values.size)[None, :, :]
    coincidence = (pairs / (per_item - 1)[:, None, None]).sum(axis=0)
    n_v = coincidence.sum(axis=0)
    n = n_v.sum()
    if level == "nominal":
        delta = 1.0 - np.eye(values.size)
    elif level == "ordinal":
        cumulative = np.cumsum(n_v)
        low = np.minimum.outer(np.arange(values.size), np.arange(values.size))
        high = np.maximum.outer(np.arange(values.size), np.arange(values.size))
        between = cumulative[high] - cumulative[low] + n_v[low]
        delta = (between - (n_v[:, None] + n_v[None, :]) / 2.0) ** 2
    else:
        raise ValueError(f"level must be 'nominal' or 'ordinal', got {level!r}")
    expected = (np.outer(n_v, n_v) * delta).sum() / (n - 1)
    if expected == 0:
        return float("nan")
    return float(1.0 - (coincidence * delta).sum() / expected)


def old_cohen_kappa(a: Sequence, b: Sequence, labels: Sequence,
                weights: Literal["quadratic"] | None = None) -> float:
    """Cohen's kappa of two annotators' ratings of the same items, over the given label order (quadratic
    weights use the labels' positions, so 1-5 scores weigh (i - j)^2). NaN when chance agreement is total
    (both gave one and the same label to every item)."""
    index = {label: i for i, label in enumerate(labels)}
    k = len(labels)
    confusion = np.zeros((k, k))
    for x, y in zip(a, b, strict=True):
        confusion[index[x], index[y]] += 1
    total = confusion.sum()
    if total == 0:
        return float("nan")
    expected = np.outer(confusion.sum(axis=1), confusion.sum(axis=0)) / total
    positions = np.arange(k)
    weight = (positions[:, None] - positions[None, :]) ** 2.0 if weights == "quadratic" else 1.0 - np.eye(k)
    denominator = (weight * expected).sum()
    if denominator == 0:
        return float("nan")
    return float(1.0 - (weight * confusion).sum() / denominator)
