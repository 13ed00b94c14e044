"""The interval functions against their reference implementations: scipy's Wilson interval and percentile
bootstrap, and Anonymeter's residual success."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tasks.intervals import _z, bootstrap, n_to_decide, residual_risk, wilson


@pytest.mark.parametrize("n", [1, 2, 7, 10, 60, 333])
def test_wilson_equals_scipy_binomtest(n: int) -> None:
    for k in range(n + 1):
        ref = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
        low, high = wilson(k, n)
        assert low == pytest.approx(ref.low, abs=1e-9) and high == pytest.approx(ref.high, abs=1e-9), (k, n)


def test_wilson_bounds_are_exact_at_zero_and_all_successes() -> None:
    """No success gives a lower bound of exactly 0 and all successes an upper bound of exactly 1 (a card prints them;
    the subtraction alone leaves residues such as 1.7e-18)."""
    for n in range(1, 400):
        assert wilson(0, n)[0] == 0.0 and wilson(n, n)[1] == 1.0, n


def test_wilson_other_level_and_no_trials() -> None:
    ref = stats.binomtest(3, 20).proportion_ci(0.9, method="wilson")
    assert wilson(3, 20, 0.9) == pytest.approx((ref.low, ref.high), abs=1e-9)
    assert all(math.isnan(x) for x in wilson(0, 0))
    with pytest.raises(ValueError):
        wilson(11, 10)


def test_the_normal_quantile_is_scipys_bit_for_bit_without_importing_scipy_stats() -> None:
    """The Wilson intervals' z is ``scipy.stats.norm.ppf``'s own value; computing it leaves ``scipy.stats`` (about a
    second of a command's start) unimported."""
    for confidence in [*np.linspace(0.01, 0.99, 99), 0.95, 0.975, 0.999]:
        assert _z(float(confidence)) == float(stats.norm.ppf(0.5 * (1 + confidence)))
    probe = "import sys; from tasks.intervals import wilson; wilson(3, 10); print('scipy.stats' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent).stdout.strip() == "False"


def test_bootstrap_mean_equals_scipy_percentile() -> None:
    values = np.random.default_rng(5).random(40)
    ref = stats.bootstrap((values,), np.mean, n_resamples=1000, method="percentile", rng=7, vectorized=True)
    assert bootstrap(values, seed=7) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)
    assert bootstrap(values, seed=7, n_resamples=200) != bootstrap(values, seed=7)


def test_bootstrap_paired_statistic_equals_scipy() -> None:
    """A paired statistic (macro-F1 of truth and prediction) resamples rows together, as scipy's paired=True."""
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(1)
    truth = rng.integers(0, 3, 50)
    pred = np.where(rng.random(50) < 0.6, truth, rng.integers(0, 3, 50))

    def macro_f1(y: np.ndarray, p: np.ndarray) -> float:
        return float(f1_score(y, p, average="macro", zero_division=0))

    ref = stats.bootstrap((truth, pred), macro_f1, paired=True, vectorized=False, n_resamples=300,
                          method="percentile", rng=3)
    ours = bootstrap(np.column_stack([truth, pred]), lambda rows: macro_f1(rows[:, 0], rows[:, 1]),
                     n_resamples=300, seed=3)
    assert ours == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)


def test_residual_risk_equals_anonymeter() -> None:
    from anonymeter.stats.confidence import EvaluationResults, SuccessRate, residual_success, success_rate

    for attack_k, control_k, n_attack, n_control in [(9, 2, 10, 10), (40, 5, 60, 30), (3, 3, 50, 50), (0, 1, 12, 9)]:
        ours = residual_risk(attack_k, n_attack, control_k, n_control)
        ref = residual_success(success_rate(n_attack, attack_k, 0.95), success_rate(n_control, control_k, 0.95))
        # the point: anonymeter's formula on the observed rates; the interval: anonymeter's, as it reports it
        observed = residual_success(SuccessRate(attack_k / n_attack, 0.0), SuccessRate(control_k / n_control, 0.0))
        assert ours.value == pytest.approx(observed.value, abs=1e-12)
        with warnings.catch_warnings():  # anonymeter warns when its random baseline matches the attack
            warnings.simplefilter("ignore")
            risk = EvaluationResults((n_attack, n_attack, n_control), attack_k, 0, control_k).risk()
        assert (ours.ci_low, ours.ci_high) == pytest.approx(risk.ci, abs=1e-12)
        assert ours.measurable == (attack_k / n_attack > control_k / n_control)
    # a known control rate (chance 1/N) carries no error of its own
    ours = residual_risk(8, 10, control_rate=0.1)
    ref = residual_success(success_rate(10, 8, 0.95), SuccessRate(0.1, 0.0))
    assert ours.value == pytest.approx((0.8 - 0.1) / 0.9, abs=1e-12)
    assert (ours.ci_low, ours.ci_high) == pytest.approx((max(0.0, ref.value - ref.error),
                                                         min(1.0, ref.value + ref.error)), abs=1e-12)


def test_residual_not_above_control_is_not_measurable() -> None:
    risk = residual_risk(1, 10, 2, 10)
    assert not risk.measurable and risk.ci_low == 0.0
    # 0 of 10 against chance 0.1: Anonymeter's Wilson centre (0.14) would call it a risk; nothing was found
    assert not residual_risk(0, 10, control_rate=0.1).measurable
    assert math.isnan(residual_risk(1, 0, control_rate=0.1).value)


@pytest.mark.parametrize(("rate", "limit"), [(0.0, 0.1), (0.05, 0.1), (0.4, 0.1), (0.95, 0.9)])
def test_n_to_decide_is_the_first_n_that_clears(rate: float, limit: float) -> None:
    n = n_to_decide(rate, limit)
    assert n is not None and n > 1

    def excludes(m: int) -> bool:
        low, high = wilson(rate * m, m)
        return high < limit or low > limit

    assert excludes(n) and not excludes(n - 1)
    assert n_to_decide(0.1, 0.1) is None

