"""Privacy/utility budgets: which strategies meet a stated budget, and by how much the others miss it.

A budget is a comma-separated list of bounds on per-strategy columns, as ``synthugc report --require``
takes it: ``"reidentification<=0.10,utility>=0.90"``. ``reidentification`` should be the worst case over
attacks and adversary settings (:func:`tasks.privacy.attacks.worst_case`) and ``utility`` a share of the
real-data model's score, so a strategy passes only when it passes against the strongest attack.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from tasks.errors import ConfigError, shown
from tasks.scores import BASELINE_ROWS, ORIGINAL

_BOUND = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


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


def parse_budget(text: str, where: str = "--require") -> list[Bound]:
    """``"a<=0.1,b>=0.9"`` -> bounds on :data:`BUDGET_COLUMNS`; ConfigError naming ``where`` (the CLI flag, or
    empty where the caller adds the config key) and the bad part."""
    at = f"{where}: " if where else ""
    example = "write e.g. reidentification<=0.10,utility>=0.90"
    bounds = []
    for part in [p for p in text.split(",") if p.strip()]:
        m = _BOUND.match(part)
        if not m:
            raise ConfigError(f"{at}cannot read {shown(part.strip())}; {example}")
        if m.group(1) not in BUDGET_COLUMNS:
            raise ConfigError(f"{at}unknown budget column {shown(m.group(1))}; known: {', '.join(BUDGET_COLUMNS)}")
        if not math.isfinite(limit := float(m.group(3))):
            raise ConfigError(f"{at}{shown(part.strip())}: the limit must be a finite number")
        bounds.append(Bound(m.group(1), m.group(2), limit))
    if not bounds:
        raise ConfigError(f"{at}no bound given; {example}")
    return bounds


def check_budget(table: pd.DataFrame, bounds: list[Bound], key: str = "strategy") -> pd.DataFrame:
    """Per strategy (rows of ``table``): ``meets`` (every bound met, none unknown), the value and the
    miss of each bound (``<column>``, ``miss_<column>``), and ``verdict`` in words. Sorted: strategies
    that meet it first, then by total miss."""
    missing = [b.column for b in bounds if b.column not in table.columns]
    if missing:
        raise ConfigError(f"--require: no column {missing[0]!r} in the report (have: {', '.join(map(str, table.columns))})")
    rows = []
    for rec in table.to_dict("records"):
        row = {key: rec[key]}
        misses, words = [], []
        for b in bounds:
            value = float(rec[b.column]) if rec[b.column] is not None else math.nan
            miss = b.miss(value)
            row[b.column], row[f"miss_{b.column}"] = value, miss
            misses.append(miss)
            if math.isnan(miss):
                words.append(f"{b.column} unknown")
            elif miss > 0:
                words.append(f"{b.column} {value:.3g} misses {b} by {miss:.3g}")
        row["meets"] = all(m == 0.0 for m in misses)
        row["total_miss"] = math.inf if any(math.isnan(m) for m in misses) else sum(misses)
        row["verdict"] = "meets " + ", ".join(map(str, bounds)) if row["meets"] else "; ".join(words)
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.sort_values(["meets", "total_miss", key], ascending=[False, True, True], kind="stable").reset_index(drop=True)


def budget_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, variant) of a run's long score table, the numbers a budget can bound:
    ``reidentification`` (the worst case over attacks and adversary settings), ``pii_leakage`` (all entity
    types), ``membership_auc``, ``profiling`` (the worst attribute's accuracy) and ``utility`` (the substitution
    model trained on all the synthetic data, as a share of the model trained on the real data; for a
    lower-is-better task metric, real / synthetic)."""
    from tasks.metrics import catalogue

    privacy = summary[summary["level"] == "privacy"]
    utility = summary[summary["level"] == "utility"]
    candidates = [(s, v) for s, v in dict.fromkeys(zip(summary["strategy"], summary["variant"].fillna(""), strict=True))
                  if s not in BASELINE_ROWS]
    task_metric = next((m.name for m in catalogue.metrics("utility") if not m.suffix and m.name in set(utility["metric"])),
                       None)

    def worst(metric: str, strategy: str, variant: str, entity: bool = False) -> float:
        rows = privacy[(privacy["metric"] == metric) & (privacy["strategy"] == strategy)
                       & (privacy["variant"].fillna("").isin([variant, ""]))]
        if entity:
            rows = rows[rows["entity"].fillna("all") == "all"]
        values = rows["value"].astype(float).dropna()
        return float(values.max()) if len(values) else math.nan

    def substitution(strategy: str) -> float:
        rows = utility[(utility["strategy"] == strategy) & (utility["metric"] == task_metric)
                       & (utility["fraction"].astype(float) == 1.0)
                       & (utility["setting"] == ("baseline" if strategy == ORIGINAL else "substitution"))]
        return float(rows["value"].iloc[0]) if len(rows) else math.nan

    real = substitution(ORIGINAL) if task_metric else math.nan
    rows = []
    for strategy, variant in candidates:
        share = math.nan
        if task_metric and math.isfinite(real) and real:
            mine = substitution(strategy)
            share = mine / real if catalogue.direction(task_metric) >= 0 else (real / mine if mine else math.nan)
        rows.append({"strategy": strategy if not variant else f"{strategy} ({variant})",
                     "reidentification": worst("reid_accuracy", strategy, variant),
                     "pii_leakage": worst("pii_leakage", strategy, variant, entity=True),
                     "membership_auc": worst("membership_auc", strategy, variant),
                     "profiling": worst("profiling_accuracy", strategy, variant), "utility": share})
    return pd.DataFrame(rows, columns=["strategy", *BUDGET_COLUMNS])


#: What a budget can bound (the columns of :func:`budget_table`).
BUDGET_COLUMNS: tuple[str, ...] = ("reidentification", "pii_leakage", "membership_auc", "profiling", "utility")
