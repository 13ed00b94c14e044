"""A run's budget table: per strategy, the figures a budget can bound (:mod:`tasks.budgets` owns them, how a
budget is read and decided, and the worst case), read from the run's long score table, and which strategies
meet a stated budget, by how much the others miss it.

``reidentification`` is the worst case over attacks and adversary settings (``adversaries`` narrows the settings
to the threat model the budget is stated against), ``reidentification_risk`` the same attacks' residual risk over
chance 1/N (Anonymeter's: a budget below chance, e.g. 0.10 with 6 candidate authors, cannot be met by any text, so
a budget on the risk is the one a few-author corpus can state), ``profiling`` the worst attribute's advantage over
guessing its majority class, ``verbatim`` the share of documents holding a run of their source, and ``utility`` a
share of the real-data model's score, so a strategy passes only when it passes against the strongest attack.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from tasks.budgets import (
    BUDGET_COLUMNS,
    BUDGET_METRICS,
    RESIDUAL_METRICS,
    Bound,
    check_decide_on,
    decide,
    number,
    worst_index,
)
from tasks.errors import ConfigError
from tasks.scores import BASELINE_ROWS, ORIGINAL


def check_budget(table: pd.DataFrame, bounds: list[Bound], key: str = "strategy",
                 decide_on: str = "bound") -> pd.DataFrame:
    """Per strategy (rows of ``table``): ``meets`` (every bound met, none unknown or undecided),
    ``undecided`` (no bound missed, some straddled by its interval), the value and the point's miss of each
    bound (``<column>``, ``miss_<column>``), and ``verdict`` in words, each bound decided by
    :func:`tasks.budgets.decide` on ``<column>`` and ``<column>_ci_low``/``_ci_high``/``_n``. Sorted: strategies
    that meet it first, then the undecided, then by total miss."""
    check_decide_on(decide_on)
    missing = [b.column for b in bounds if b.column not in table.columns]
    if missing:
        raise ConfigError(f"--budget: no column {missing[0]!r} in the report (have: {', '.join(map(str, table.columns))})")
    rows = []
    for rec in table.to_dict("records"):
        row = {key: rec[key]}
        decisions = [decide(b, {"value": rec[b.column], **{part: rec.get(f"{b.column}_{part}")
                                                            for part in ("ci_low", "ci_high", "n")}}, decide_on)
                     for b in bounds]
        for d in decisions:
            row[d.bound.column], row[f"miss_{d.bound.column}"] = d.value, d.miss
        outcomes = {d.outcome for d in decisions}
        row["meets"] = outcomes == {"met"}
        row["undecided"] = "undecided" in outcomes and not {"missed", "unknown"} & outcomes
        row["total_miss"] = math.inf if any(math.isnan(d.miss) for d in decisions) else sum(d.miss for d in decisions)
        row["verdict"] = ("meets " + ", ".join(map(str, bounds)) if row["meets"] else
                          "; ".join(d.words for d in decisions if d.words))
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
    at = worst_index(rows["value"].tolist(), rows["ci_high"].tolist() if "ci_high" in rows.columns
                     else [math.nan] * len(rows))
    return None if at is None else rows.iloc[at]


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
    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
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
        return {"value": float(row["value"]), "ci_low": number(row.get("ci_low")),
                "ci_high": number(row.get("ci_high")), "n": number(row.get("n"))}

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
