"""Budgets, written once: the figures a budget can bound, how a budget string is read, which measurement is the
worst case, and whether a figure meets a bound. The report (a run's strategies), protect (its judge and its
certificate) and release (the card and the refusal) all call this module; none of them reads a budget or decides
one otherwise.

A budget is a comma-separated list of bounds, ``"reidentification<=0.10,utility>=0.90"``. A risk must stay at or
below its limit, utility and meaning at or above it. By default a bound is decided on the side of the 95%
interval a reviewer would check (:data:`DECIDE_ON`): a risk on its upper bound, utility on its lower bound, so
with 10 timelines no re-identification budget of 0.10 can be shown met (0 of 10 has an upper bound of 0.28): such
a verdict is "undecided with n=10", with the number of trials that would decide it at the observed rate.

The worst case of several measurements (attacks, adversary settings, attributes) is the one whose interval
reaches highest (its value where it has none), so a figure passes only when it passes against the strongest
attack.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tasks.errors import ConfigError, shown
from tasks.intervals import n_to_decide


@dataclass(frozen=True)
class BudgetFigure:
    """A figure a budget can bound: its name, the operator that bounds it (``<=`` for a risk), the run's score
    metric behind it (None: computed by the report), what one trial of it is (for "how many would decide it"),
    whether it is a residual risk over a control (not above the control: 0, with its interval), and whether a
    protect run can bound it."""

    name: str
    op: str
    description: str
    metric: str | None = None
    trials: str | None = None
    residual: bool = False
    protect: bool = False


FIGURES: dict[str, BudgetFigure] = {f.name: f for f in (
    BudgetFigure("reidentification", "<=", "the worst re-identification attack's accuracy@1", "reid_accuracy",
                 "timelines", protect=True),
    BudgetFigure("reidentification_risk", "<=", "the worst re-identification attack's residual risk over chance 1/N",
                 "reid_residual_risk", residual=True, protect=True),
    BudgetFigure("pii_leakage", "<=", "the share of the sources' PII spans still in the texts", "pii_leakage",
                 "PII spans", protect=True),
    BudgetFigure("membership_auc", "<=", "the membership attack's AUC", "membership_auc"),
    BudgetFigure("profiling", "<=", "the worst attribute classifier's advantage over the majority class",
                 "profiling_advantage", residual=True, protect=True),
    BudgetFigure("verbatim", "<=", "the share of documents holding a run of their source's characters", "verbatim",
                 "documents", protect=True),
    BudgetFigure("utility", ">=", "the synthetic-data model's task score as a share of the real-data model's"),
    BudgetFigure("meaning", ">=", "the headline meaning metric's mean over documents"),
)}
#: What a run's budget can bound (the columns of :func:`tasks.report.budgets.budget_table`).
BUDGET_COLUMNS: tuple[str, ...] = tuple(FIGURES)
#: What a protect budget can bound.
PROTECT_FIGURES: tuple[str, ...] = tuple(name for name, f in FIGURES.items() if f.protect)
#: The run's score metric behind each privacy figure (its worst row counts).
BUDGET_METRICS: dict[str, str] = {name: f.metric for name, f in FIGURES.items() if f.metric}
#: Score metrics that are residual risks over a control.
RESIDUAL_METRICS: tuple[str, ...] = tuple(f.metric for f in FIGURES.values() if f.residual and f.metric)
OPERATORS: tuple[str, ...] = ("<=", ">=")
#: How a budget is decided: on the side of the 95% interval that a reviewer would check (``bound``), or on the
#: point estimate alone (``point``).
DECIDE_ON: tuple[str, ...] = ("bound", "point")
RUN_EXAMPLE = "reidentification<=0.10,utility>=0.90"
PROTECT_EXAMPLE = "reidentification<=0.10,pii_leakage<=0"

_BOUND = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*([<>=!]+)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Bound:
    """One bound: ``column op limit``."""

    column: str
    op: str
    limit: float

    def miss(self, value: float | None) -> float:
        """How far ``value`` is from meeting the bound (0 when met, nan when the value is unknown)."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return math.nan
        return max(0.0, value - self.limit) if self.op == "<=" else max(0.0, self.limit - value)

    def __str__(self) -> str:
        return f"{self.column}{self.op}{self.limit:g}"


def parse_budget(text: str, where: str = "--budget", *, protect: bool = False) -> list[Bound]:
    """``"a<=0.1,b>=0.9"`` -> bounds on a run's figures (``protect``: a protect run's, ``<=`` only); ConfigError
    naming ``where`` (the flag or key, empty where the caller adds it), the bad part and what is known."""
    at = f"{where}: " if where else ""
    columns = PROTECT_FIGURES if protect else BUDGET_COLUMNS
    operators = ("<=",) if protect else OPERATORS
    example = f"write e.g. {PROTECT_EXAMPLE if protect else RUN_EXAMPLE}"
    bounds = []
    for part in [p for p in str(text).split(",") if p.strip()]:
        m = _BOUND.match(part)
        if not m:
            raise ConfigError(f"{at}cannot read {shown(part.strip())}; {example}")
        if m.group(1) not in columns:
            raise ConfigError(f"{at}unknown budget figure {shown(m.group(1))}; known: {', '.join(columns)}")
        if m.group(2) not in operators:
            raise ConfigError(f"{at}unknown operator {shown(m.group(2))} in {shown(part.strip())}; known: "
                              f"{', '.join(operators)}")
        if not math.isfinite(limit := float(m.group(3))):
            raise ConfigError(f"{at}{shown(part.strip())}: the limit must be a finite number")
        bounds.append(Bound(m.group(1), m.group(2), limit))
    if not bounds:
        raise ConfigError(f"{at}no bound given; {example}")
    return bounds


def check_decide_on(value: str, where: str = "--decide-on") -> str:
    """``value`` when it is one of :data:`DECIDE_ON`; ConfigError otherwise."""
    if value not in DECIDE_ON:
        raise ConfigError(f"{where} must be one of {', '.join(DECIDE_ON)}; got {shown(value)}")
    return value


def number(value: object) -> float:
    """A figure's number: nan for None, NA or anything that is not a number."""
    try:
        return math.nan if value is None or type(value).__name__ == "NAType" else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _significant(value: float, low: float, high: float) -> str:
    """``0.104 [0.0453, 0.222]``: three significant digits, the 95% interval where it has one."""
    if math.isnan(value):
        return "nan"
    return f"{value:.3g}" + ("" if math.isnan(low) or math.isnan(high) else f" [{low:.3g}, {high:.3g}]")


# ----------------------------------------------------------------------------------------------- worst case
def worst_index(values: Sequence[float], highs: Sequence[float], decide_on: str = "bound", *,
                undefined_is_worst: bool = False) -> int | None:
    """Which of several measurements of one risk is the worst case: the highest upper bound (its value where it
    has none), or with ``decide_on='point'`` the highest value; ties go to the higher value, then the first.
    A measurement without a value never wins, unless ``undefined_is_worst`` (an advantage that cannot be
    computed cannot pass a budget). None when there is nothing to choose from."""
    best, best_key = None, None
    for i, (value, high) in enumerate(zip(values, highs, strict=True)):
        value, high = number(value), number(high)
        if math.isnan(value):
            if not undefined_is_worst:
                continue
            key = (math.inf, math.inf)
        else:
            at = value if decide_on == "point" or math.isnan(high) else high
            key = (at, value)
        if best_key is None or key > best_key:
            best, best_key = i, key
    return best


def worst_figure(rows: Sequence[Mapping[str, Any]], decide_on: str = "bound", *, value: str = "value",
                 undefined_is_worst: bool = False) -> Mapping[str, Any] | None:
    """The worst of ``rows`` (mappings with ``value``, ``<value>_ci_high`` or ``ci_high``), by
    :func:`worst_index`."""
    high = "ci_high" if value == "value" else f"{value}_ci_high"
    at = worst_index([r.get(value) for r in rows], [r.get(high) for r in rows], decide_on,
                     undefined_is_worst=undefined_is_worst)
    return None if at is None else rows[at]


# -------------------------------------------------------------------------------------------------- decision
@dataclass(frozen=True)
class Decision:
    """One bound decided on one figure: ``met``, ``missed``, ``undecided`` (the interval straddles the limit) or
    ``unknown`` (no value), how far the value misses it, and the words."""

    bound: Bound
    outcome: str
    miss: float
    value: float
    ci_low: float
    ci_high: float
    n: float
    decide_on: str

    @property
    def met(self) -> bool:
        return self.outcome == "met"

    @property
    def shown(self) -> str:
        """``reidentification 0.104 [0.0453, 0.222]``."""
        return f"{self.bound.column} {_significant(self.value, self.ci_low, self.ci_high)}"

    @property
    def by_interval(self) -> bool:
        """Whether the interval decided it (else the point estimate)."""
        return self.decide_on == "bound" and not (math.isnan(self.ci_low) or math.isnan(self.ci_high))

    @property
    def how(self) -> str:
        """``on the 95% interval's upper bound`` or ``on the point estimate``."""
        side = "upper" if self.bound.op == "<=" else "lower"
        return f"on the 95% interval's {side} bound" if self.by_interval else "on the point estimate"

    @property
    def short(self) -> str:
        """``reidentification 0.104 [0.0453, 0.222] > 0.09`` (a straddled bound reads as missed: not shown met)."""
        if self.outcome == "unknown":
            return f"{self.bound.column} unknown"
        sign = self.bound.op if self.met else {"<=": ">", ">=": "<"}[self.bound.op]
        return f"{self.shown} {sign} {self.bound.limit:g}"

    @property
    def words(self) -> str:
        """Why it is not met, as the report's budget table says it ("" when met)."""
        column, bound = self.bound.column, self.bound
        if self.outcome == "met":
            return ""
        if self.outcome == "unknown":
            return f"{column} unknown"
        if not self.by_interval:
            return f"{column} {self.value:.3g} misses {bound} by {self.miss:.3g}"
        if self.outcome == "missed":
            return f"{self.shown} misses {bound} by {self.miss:.3g} (the whole 95% interval misses it)"
        figure = FIGURES.get(column)
        words = f"{self.shown} is undecided for {bound}" + (f" with n={int(self.n)}" if not math.isnan(self.n) else "")
        if figure is not None and figure.trials and (more := n_to_decide(self.value, bound.limit)) is not None:
            words += f": about {more} {figure.trials} at the observed rate would decide it"
        return words


def decide(bound: Bound, figure: Mapping[str, Any], decide_on: str = "bound") -> Decision:
    """``bound`` decided on ``figure`` (``value``, ``ci_low``, ``ci_high``, ``n``): met when the side of the interval
    that must clear it does (``decide_on='bound'``; a figure without an interval on its value), missed when the
    whole interval misses it, undecided in between; unknown without a value."""
    value = number(figure.get("value"))
    low, high, n = (number(figure.get(k)) for k in ("ci_low", "ci_high", "n"))
    miss = bound.miss(value)
    if math.isnan(miss):
        outcome = "unknown"
    elif decide_on == "point" or math.isnan(low) or math.isnan(high):
        outcome = "met" if miss == 0 else "missed"
    else:
        near, far = (high, low) if bound.op == "<=" else (low, high)  # the side that must clear, the other one
        outcome = "met" if bound.miss(near) == 0 else "missed" if bound.miss(far) > 0 else "undecided"
    return Decision(bound, outcome, miss, value, low, high, n, decide_on)


def decide_all(bounds: Sequence[Bound], figures: Mapping[str, Mapping[str, Any]],
               decide_on: str = "bound") -> list[Decision]:
    """Each bound decided on its figure in ``figures`` (a figure that is missing is unknown, so not met)."""
    return [decide(b, figures.get(b.column, {}), decide_on) for b in bounds]
