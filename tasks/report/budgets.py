"""Privacy/utility budgets: which strategies meet a stated budget, and by how much the others miss it.

A budget is a comma-separated list of bounds on per-strategy columns, as ``synthugc report --require``
takes it: ``"reidentification<=0.10,utility>=0.90"``. ``reidentification`` is the worst case over attacks and
adversary settings (:func:`tasks.privacy.attacks.worst_case`; ``adversaries`` narrows the settings to the
threat model the budget is stated against), ``reidentification_risk`` the same attacks' residual risk over
chance 1/N (Anonymeter's: a budget below chance, e.g. 0.10 with 6 candidate authors, cannot be met by any
text, so a budget on the risk is the one a few-author corpus can state), ``profiling`` the worst attribute's
advantage over guessing its majority class, and ``utility`` a share of the real-data model's score, so a
strategy passes only when it passes against the strongest attack.

Budgets are decided on the 95% interval by default (:data:`DECIDE_ON`): a risk on its upper bound, utility
and meaning on their lower bound. With 10 timelines no re-identification budget of 0.10 can be shown met
(0 of 10 has an upper bound of 0.28), so such a verdict is "undecided with n=10", with the number of
timelines that would decide it at the observed rate (:func:`tasks.intervals.n_to_decide`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from tasks.errors import ConfigError, shown
from tasks.intervals import n_to_decide
from tasks.scores import BASELINE_ROWS, ORIGINAL

_BOUND = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*([<>=!]+)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
OPERATORS: tuple[str, ...] = ("<=", ">=")


@dataclass(frozen=True)
class Bound:
    """One bound: ``column op limit`` with op ``<=`` or ``>=``."""

    column: str
    op: str
    limit: float

    def miss(self, value: float) -> float:
        """How far ``value`` is from meeting the bound (0 when met, nan when the value is unknown)."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return math.nan
        return max(0.0, value - self.limit) if self.op == "<=" else max(0.0, self.limit - value)

    def __str__(self) -> str:
        return f"{self.column}{self.op}{self.limit:g}"


def parse_budget(text: str, where: str = "--require", *, columns: tuple[str, ...] | None = None,
                 operators: tuple[str, ...] = OPERATORS,
                 example: str = "reidentification<=0.10,utility>=0.90") -> list[Bound]:
    """``"a<=0.1,b>=0.9"`` -> bounds on ``columns`` (default :data:`BUDGET_COLUMNS`) with one of ``operators``;
    ConfigError naming ``where`` (the CLI flag, or empty where the caller adds the config key), the bad part
    and what is known."""
    at = f"{where}: " if where else ""
    columns = BUDGET_COLUMNS if columns is None else columns
    example = f"write e.g. {example}"
    bounds = []
    for part in [p for p in text.split(",") if p.strip()]:
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


#: How a budget is decided: on the side of the 95% interval that a reviewer would check (``bound``: the upper
#: bound of a figure that must stay below its limit, the lower bound of one that must stay above it), or on the
#: point estimate alone (``point``).
DECIDE_ON: tuple[str, ...] = ("bound", "point")
#: What one trial of each budget column is, for "how many would decide it" (the proportions only).
TRIALS: dict[str, str] = {"reidentification": "timelines", "pii_leakage": "PII spans", "verbatim": "documents"}


def _number(value: object) -> float:
    return math.nan if value is None or value is pd.NA else float(value)  # type: ignore[arg-type]


def _judge(bound: Bound, rec: dict, decide_on: str) -> tuple[str, float, str]:
    """(met | missed | undecided | unknown, the point's miss, words) for one bound of one strategy."""
    column = bound.column
    value = _number(rec[column])
    miss = bound.miss(value)
    if math.isnan(miss):
        return "unknown", miss, f"{column} unknown"
    low, high = _number(rec.get(f"{column}_ci_low")), _number(rec.get(f"{column}_ci_high"))
    n = rec.get(f"{column}_n")
    if decide_on == "point" or math.isnan(low) or math.isnan(high):
        return ("met", miss, "") if miss == 0 else ("missed", miss, f"{column} {value:.3g} misses {bound} by {miss:.3g}")
    shown = f"{column} {value:.3g} [{low:.3g}, {high:.3g}]"
    near, far = (high, low) if bound.op == "<=" else (low, high)  # the bound that must clear, the other one
    if bound.miss(near) == 0:
        return "met", miss, ""
    if bound.miss(far) > 0:
        return "missed", miss, f"{shown} misses {bound} by {miss:.3g} (the whole 95% interval misses it)"
    trials = TRIALS.get(column, "trials")
    words = f"{shown} is undecided for {bound}" + (f" with n={int(n)}" if n is not None and not pd.isna(n) else "")
    if column in TRIALS and (more := n_to_decide(value, bound.limit)) is not None:
        words += f": about {more} {trials} at the observed rate would decide it"
    return "undecided", miss, words


def check_budget(table: pd.DataFrame, bounds: list[Bound], key: str = "strategy",
                 decide_on: str = "bound") -> pd.DataFrame:
    """Per strategy (rows of ``table``): ``meets`` (every bound met, none unknown or undecided),
    ``undecided`` (no bound missed, some straddled by its interval), the value and the point's miss of each
    bound (``<column>``, ``miss_<column>``), and ``verdict`` in words. With ``decide_on='bound'`` (the
    default) a bound ``<=`` is met when the interval's upper bound (``<column>_ci_high``) is within it and
    missed when its lower bound is beyond it (mirrored for ``>=``); a column without an interval is decided
    on its value. Sorted: strategies that meet it first, then the undecided, then by total miss."""
    if decide_on not in DECIDE_ON:
        raise ConfigError(f"--decide-on must be one of {', '.join(DECIDE_ON)}; got {decide_on!r}")
    missing = [b.column for b in bounds if b.column not in table.columns]
    if missing:
        raise ConfigError(f"--require: no column {missing[0]!r} in the report (have: {', '.join(map(str, table.columns))})")
    rows = []
    for rec in table.to_dict("records"):
        row = {key: rec[key]}
        outcomes, misses, words = [], [], []
        for b in bounds:
            outcome, miss, said = _judge(b, rec, decide_on)
            row[b.column], row[f"miss_{b.column}"] = _number(rec[b.column]), miss
            outcomes.append(outcome)
            misses.append(miss)
            if said:
                words.append(said)
        row["meets"] = all(o == "met" for o in outcomes)
        row["undecided"] = "undecided" in outcomes and not {"missed", "unknown"} & set(outcomes)
        row["total_miss"] = math.inf if any(math.isnan(m) for m in misses) else sum(misses)
        row["verdict"] = ("meets " + ", ".join(map(str, bounds)) if row["meets"] else "; ".join(words))
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.sort_values(["meets", "undecided", "total_miss", key], ascending=[False, False, True, True],
                           kind="stable").reset_index(drop=True)


def worst_row(privacy: pd.DataFrame, metric: str, adversaries: Sequence[str] | None = None) -> pd.Series | None:
    """The score-table row of ``metric`` a budget is decided on: the one whose 95% interval reaches highest (its
    value where it has none), over attacks, adversary settings (those in ``adversaries``, all when None),
    attributes and models; PII over all entity types; a residual risk not above its control counts as 0 with
    its interval. None when nothing was measured."""
    rows = privacy[privacy["metric"] == metric]
    if metric == "pii_leakage" and "entity" in rows.columns:
        rows = rows[rows["entity"].fillna("all") == "all"]
    if adversaries is not None and "adversary" in rows.columns:  # rows of other attacks carry none
        rows = rows[rows["adversary"].isna() | rows["adversary"].isin(list(adversaries))]
    if metric in RESIDUAL_METRICS and "ci_high" in rows.columns:  # not above its control: a risk of 0
        rows = rows.assign(value=rows["value"].where(rows["value"].notna() | rows["ci_high"].isna(), 0.0))
    rows = rows[rows["value"].notna()]
    if rows.empty:
        return None
    high = rows["ci_high"].astype(float) if "ci_high" in rows.columns else rows["value"].astype(float)
    return rows.loc[high.fillna(rows["value"].astype(float)).idxmax()]


def budget_table(summary: pd.DataFrame, adversaries: Sequence[str] | None = None) -> pd.DataFrame:
    """Per (strategy, variant) of a run's long score table, the numbers a budget can bound:
    ``reidentification`` (the worst case over attacks and adversary settings: those in ``adversaries``, all
    when None), ``reidentification_risk`` (the same, as residual risk over chance), ``pii_leakage`` (all entity
    types), ``membership_auc``, ``profiling`` (the worst attribute's advantage over its majority class; a
    risk the attack did not measurably take, i.e. not above its control, counts as 0 with its interval),
    ``utility`` (the substitution
    model trained on all the synthetic data, as a share of the model trained on the real data; for a
    lower-is-better task metric, real / synthetic) and ``meaning`` (the headline meaning metric's mean over
    documents, BERTScore F1), with ``<column>_ci_low``/``_ci_high``/``_n`` beside each. Utility's interval is
    the synthetic model's interval over the test documents divided by the real model's score (the reference,
    taken as fixed)."""
    from tasks.metrics import catalogue

    privacy = summary[summary["level"] == "privacy"]
    utility = summary[summary["level"] == "utility"]
    candidates = [(s, v) for s, v in dict.fromkeys(zip(summary["strategy"], summary["variant"].fillna(""), strict=True))
                  if s not in BASELINE_ROWS]
    task_metric = next((m.name for m in catalogue.metrics("utility") if not m.suffix and m.name in set(utility["metric"])),
                       None)
    meaning_metric = next((m.name for m in catalogue.headline_metrics("meaning")), None)
    unknown = {"value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": math.nan}

    def figure(row: pd.Series) -> dict[str, float]:
        return {"value": float(row["value"]), "ci_low": _number(row.get("ci_low")),
                "ci_high": _number(row.get("ci_high")), "n": _number(row.get("n"))}

    def worst(metric: str, strategy: str, variant: str) -> dict[str, float]:
        row = worst_row(privacy[(privacy["strategy"] == strategy) & (privacy["variant"].fillna("").isin([variant, ""]))],
                        metric, adversaries)
        return unknown if row is None else figure(row)

    def substitution(strategy: str, variant: str) -> dict[str, float]:
        """The task metric of the model trained on all of the strategy's variant (the real data for ``original``)."""
        rows = utility[(utility["strategy"] == strategy) & (utility["metric"] == task_metric)
                       & (utility["fraction"].astype(float) == 1.0)
                       & (utility["setting"] == ("baseline" if strategy == ORIGINAL else "substitution"))]
        mine = rows[rows["variant"].fillna("") == variant]
        rows = mine if len(mine) else rows
        return figure(rows.iloc[0]) if len(rows) else unknown

    def share(strategy: str, variant: str, real: float) -> dict[str, float]:
        mine = substitution(strategy, variant)
        if not (task_metric and math.isfinite(real) and real):
            return unknown
        if catalogue.direction(task_metric) >= 0:
            low, value, high = (mine[k] / real for k in ("ci_low", "value", "ci_high"))
        else:  # lower is better: real / synthetic, whose lower bound comes from the synthetic upper bound
            low, value, high = (real / mine[k] if mine[k] else math.nan for k in ("ci_high", "value", "ci_low"))
        return {"value": value, "ci_low": low, "ci_high": high, "n": mine["n"]}

    def meaning(strategy: str, variant: str) -> dict[str, float]:
        rows = summary[(summary["level"] == "sample-mean") & (summary["metric"] == meaning_metric)
                       & (summary["strategy"] == strategy) & (summary["variant"].fillna("") == variant)]
        return figure(rows.iloc[0]) if len(rows) else unknown

    real = substitution(ORIGINAL, "")["value"] if task_metric else math.nan
    rows = []
    for strategy, variant in candidates:
        row: dict[str, object] = {"strategy": strategy if not variant else f"{strategy} ({variant})"}
        figures = {column: worst(metric, strategy, variant) for column, metric in BUDGET_METRICS.items()}
        figures["utility"], figures["meaning"] = share(strategy, variant, real), meaning(strategy, variant)
        for column, found in figures.items():
            row.update({column: found["value"], f"{column}_ci_low": found["ci_low"],
                        f"{column}_ci_high": found["ci_high"], f"{column}_n": found["n"]})
        rows.append(row)
    interval = [f"{c}_{part}" for c in BUDGET_COLUMNS for part in ("ci_low", "ci_high", "n")]
    return pd.DataFrame(rows, columns=["strategy", *BUDGET_COLUMNS, *interval])


#: The score table's metric behind each privacy budget column (its worst row counts).
BUDGET_METRICS: dict[str, str] = {"reidentification": "reid_accuracy", "reidentification_risk": "reid_residual_risk",
                                  "pii_leakage": "pii_leakage", "membership_auc": "membership_auc",
                                  "profiling": "profiling_advantage", "verbatim": "verbatim"}
#: Residual risks over a control (Anonymeter's): nan with an interval when the attack is not above its control.
RESIDUAL_METRICS: tuple[str, ...] = ("reid_residual_risk", "profiling_advantage")
#: What a budget can bound (the columns of :func:`budget_table`).
BUDGET_COLUMNS: tuple[str, ...] = (*BUDGET_METRICS, "utility", "meaning")
