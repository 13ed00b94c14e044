"""95% intervals for every privacy figure, and the residual risk over a control, defined once.

- Proportions (accuracy@1, accuracy@10, profiling accuracy, leakage rates): the Wilson score interval
  (Wilson 1927), equal to ``scipy.stats.binomtest(k, n).proportion_ci(0.95, method="wilson")``.
- Figures that are not proportions (AUC, macro-F1, MRR, mean meaning scores): a seeded percentile
  bootstrap over the units (timelines or documents), :data:`N_RESAMPLES` resamples by default; the
  resamples are drawn as ``scipy.stats.bootstrap`` draws them, so both give the same interval.
- Residual risk as Anonymeter defines it (Giomi et al., PoPETs 2023, ``anonymeter.stats.confidence``):
  ``risk = (attack - control) / (1 - control)``. The point uses the observed rates (k/n); the interval is
  Anonymeter's: each rate taken as its Wilson centre with the Wilson half-width as its error, the error
  propagated to first order, clipped to [0, 1]. (Anonymeter's own point is the residual of the Wilson
  centres, which credits an attack that never succeeded (0 of 10 centres on 0.14) with a risk over a
  control of 0.10; the observed rates do not.) An attack whose observed rate is not above its control's
  found nothing measurable: the risk is reported as such, never as 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 1000
#: Named once in the report's methods section.
METHOD = (f"{CONFIDENCE:.0%} intervals: Wilson score intervals for proportions (accuracy@1, accuracy@10, "
          f"profiling accuracy, leakage rates); a seeded percentile bootstrap over timelines or documents "
          f"({N_RESAMPLES:,} resamples unless configured) for AUC, macro-F1 (utility: over the real test "
          f"documents, averaged over seeds), MRR and mean scores (meaning, divergence, style). Residual risk "
          f"= (attack - control) / (1 - control) with its interval, as Anonymeter defines it.")


@functools.cache
def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    # scipy.stats.norm.ppf's own kernel, bit for bit; scipy.stats itself costs a second of every CLI command's start
    from scipy.special import ndtri

    return float(ndtri(0.5 * (1.0 + confidence)))


def wilson_centre(k: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(centre, half-width) of the Wilson score interval of ``k`` successes in ``n`` trials."""
    z = _z(confidence)
    z2 = z * z
    denominator = n + z2
    centre = (k + 0.5 * z2) / denominator
    half = (z / denominator) * math.sqrt(k * (n - k) / n + 0.25 * z2)
    return centre, half


def wilson(k: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials; (nan, nan) when n is 0."""
    if not n or n <= 0 or not math.isfinite(k):
        return math.nan, math.nan
    if k < 0 or k > n:
        raise ValueError(f"successes must lie in [0, n]; got {k} of {n}")
    centre, half = wilson_centre(k, n, confidence)
    # at k = 0 (k = n) the bound is 0 (1) exactly; the subtraction leaves a rounding residue such as 1.7e-18
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


def bootstrap(values: np.ndarray, statistic: Callable[[np.ndarray], float] | None = None, *,
              n_resamples: int = N_RESAMPLES, seed: int = 0,
              confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` (default: the mean) over the rows of ``values``
    (one row per unit; several columns for a paired statistic such as macro-F1 of (truth, prediction)).
    Resamples are drawn as ``scipy.stats.bootstrap`` draws them (``default_rng(seed).integers(0, n,
    (n_resamples, n))``); quantiles are linear. (nan, nan) with no units."""
    if not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    data = np.asarray(values)
    n = len(data)
    if n == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    index = rng.integers(0, n, (n_resamples, n))
    if statistic is None:
        theta = np.asarray(data, dtype=float)[index].mean(axis=-1)
    else:
        theta = np.array([statistic(data[row]) for row in index], dtype=float)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(theta, [alpha, 1 - alpha])
    return float(low), float(high)


@dataclass(frozen=True)
class Residual:
    """Residual risk over a control: value (of the observed rates, unclipped: negative when the attack
    is below its control), Anonymeter's interval clipped to [0, 1], and whether the attack did better than
    the control at all."""

    value: float
    ci_low: float
    ci_high: float

    @property
    def measurable(self) -> bool:
        """False when the attack is not above its control: it found nothing measurable."""
        return bool(math.isfinite(self.value) and self.value > 0)


def residual_risk(attack_k: float, attack_n: float, control_k: float | None = None, control_n: float | None = None,
                  *, control_rate: float | None = None, confidence: float = CONFIDENCE) -> Residual:
    """Anonymeter's residual success of an attack (``attack_k`` of ``attack_n``) over a control: a measured
    control attack (``control_k`` of ``control_n``) or an exactly known rate (``control_rate``, e.g. chance
    1/N, without error). All nan when either side has no trials or the control always succeeds."""
    nan = Residual(math.nan, math.nan, math.nan)
    if not attack_n:
        return nan
    attack, attack_err = wilson_centre(attack_k, attack_n, confidence)
    if control_rate is not None:
        observed, control, control_err = float(control_rate), float(control_rate), 0.0
    elif control_n:
        observed = float(control_k or 0) / control_n
        control, control_err = wilson_centre(float(control_k or 0), control_n, confidence)
    else:
        return nan
    if not math.isfinite(control) or control >= 1 or observed >= 1:
        return nan
    centre = (attack - control) / (1.0 - control)
    error = math.hypot(attack_err / abs(1 - control), control_err * (attack - 1) / (1 - control) ** 2)
    value = (attack_k / attack_n - observed) / (1.0 - observed)
    return Residual(value, min(max(centre - error, 0.0), 1.0), min(max(centre + error, 0.0), 1.0))


def n_to_decide(rate: float, limit: float, *, confidence: float = CONFIDENCE, n_max: int = 10_000_000) -> int | None:
    """The fewest trials at which the Wilson interval around an observed proportion ``rate`` excludes
    ``limit`` (so a budget on it is decided either way); None when no n up to ``n_max`` does (the rate
    sits on the limit)."""
    if not (math.isfinite(rate) and math.isfinite(limit)) or rate == limit:
        return None

    def clears(n: int) -> bool:
        low, high = wilson(rate * n, n, confidence)
        return high < limit if rate < limit else low > limit

    if not clears(n_max):
        return None
    low, high = 1, n_max
    while low < high:  # the interval narrows around the rate as n grows
        mid = (low + high) // 2
        if clears(mid):
            high = mid
        else:
            low = mid + 1
    return low
