"""How the strategy ranking (:mod:`tasks.report.recommend`) reads a run's long score table: lookups by
(strategy, variant, column key) with the strategy-level fallback (:class:`_Scores`), the candidates to
rank, and the formatting of the numbers its reasons quote."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from tasks.errors import InputError
from tasks.metrics import catalogue
from tasks.scores import BASELINE_ROWS, column_key, structure_of

# ---------------------------------------------------------------------------------------------- formatting


def format_number(value: float) -> str:
    """A measured number in a reason: three decimals (``n/a`` when missing)."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def format_delta(value: float) -> str:
    """A signed difference in a reason: ``+0.031`` / ``−0.024`` (a real minus sign); ``±0.000`` when it
    rounds to zero."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return "±0.000" if abs(value) < 0.0005 else f"{value:+.3f}".replace("-", "−")


def format_percent(value: float) -> str:
    """A rate in a reason: ``17%``; rates under 1% keep two significant digits (``0.0026%``)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.0%}" if value == 0 or abs(value) >= 0.01 else f"{100 * value:.2g}%"


def metric_label(metric: str) -> str:
    """How a task metric is named in a reason: ``macro-F1``, ``IS coverage recall``, ``SegWER``."""
    return "macro-F1" if metric == "macro_f1" else catalogue.label(metric)


def _clip(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


# ---------------------------------------------------------------------------------------------- score table


@dataclass(frozen=True)
class _Value:
    value: float
    std: float
    n: int | None
    reason: str | None
    ci_low: float = math.nan
    ci_high: float = math.nan

    @property
    def ok(self) -> bool:
        return math.isfinite(self.value)

    def percent(self) -> str:
        """The value as a percentage with its 95% interval where it has one: ``40% [17%, 69%]``."""
        shown = format_percent(self.value)
        if math.isfinite(self.ci_low) and math.isfinite(self.ci_high):
            shown += f" [{format_percent(self.ci_low)}, {format_percent(self.ci_high)}]"
        return shown


def _float(x: object) -> float:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")
    return v


def _text(x: object) -> str | None:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return None
    s = str(x).strip()
    return s.splitlines()[0] if s else None


class _Scores:
    """Lookups into the long score table: (strategy, variant, column key) -> value, std, n, reason, where
    the column key is the metric with its structure (setting, fraction, attribute, ...; tasks.scores)."""

    def __init__(self, summary: pd.DataFrame) -> None:
        missing = [c for c in ("strategy", "variant", "metric", "value") if c not in summary.columns]
        if missing:
            raise InputError(f"score table lacks column(s) {', '.join(missing)}; expected the run's long "
                             "summary (strategy, variant, level, metric, value, std, n, ..., reason)")
        self.index: dict[tuple[str, str, str], _Value] = {}
        self.structure: dict[str, dict] = {}  # column key -> {"metric": ..., **structure}
        self.epsilon: dict[tuple[str, str], float] = {}
        order: dict[tuple[str, str], None] = {}
        for row in summary.to_dict("records"):
            strategy, variant = str(row["strategy"]), "" if _text(row["variant"]) is None else str(row["variant"])
            structure = structure_of(row)
            key = column_key(str(row["metric"]), structure)
            self.structure.setdefault(key, {"metric": str(row["metric"]), **structure})
            n = _float(row.get("n"))
            entry = _Value(_float(row["value"]), _float(row.get("std")), None if not math.isfinite(n) else int(n),
                           _text(row.get("reason")), _float(row.get("ci_low")), _float(row.get("ci_high")))
            old = self.index.get((strategy, variant, key))
            if old is None or (not old.ok and entry.ok):  # duplicates: the first measured one
                self.index[(strategy, variant, key)] = entry
            if math.isfinite(eps := _float(row.get("epsilon"))):
                self.epsilon.setdefault((strategy, variant), eps)
            order.setdefault((strategy, variant), None)
        self.order: list[tuple[str, str]] = list(order)

    def get(self, strategy: str, variant: str, key: str) -> _Value | None:
        """The exact row, else the strategy-level one (variant '')."""
        return self.index.get((strategy, variant, key)) or self.index.get((strategy, "", key))

    def baseline(self, name: str, key: str) -> _Value | None:
        hits = [v for (s, _, k), v in self.index.items() if s == name and k == key]
        return next((v for v in hits if v.ok), hits[0] if hits else None)

    def keys_of(self, strategy: str, variant: str, *metrics: str) -> list[str]:
        """The column keys of this candidate's rows whose metric is one of ``metrics``."""
        return list(dict.fromkeys(k for (s, v, k) in self.index
                                  if s == strategy and v in (variant, "") and self.structure[k]["metric"] in metrics))


def candidates(summary: pd.DataFrame, families: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The (strategy, variant) pairs to rank: every strategy but ``original``/``chance``, one pair per
    named variant (strategy-level rows with variant '' only make a pair when the strategy has no named
    variant), in the order of ``families`` (the run config), then of the table."""
    return _candidates(_Scores(summary), families)


def _candidates(scores: _Scores, families: Mapping[str, str] | None) -> list[tuple[str, str]]:
    pairs = [p for p in scores.order if p[0] not in BASELINE_ROWS]
    named = {s for s, v in pairs if v}
    pairs = [(s, v) for s, v in pairs if v or s not in named]
    order = {label: i for i, label in enumerate(families or {})}
    return sorted(pairs, key=lambda p: order.get(p[0], len(order)))  # stable: table order within
