"""The run's score schema: the columns and dtypes of every score table a run writes, declared once.

Score tables are long tables with real columns. What a number is about lives in its own column
(``setting``, ``fraction``, ``attribute``, ``model``, ``attack``, ``adversary``, ``epsilon``), null where it
does not apply; a metric name is only the name of the measure (``macro_f1``, ``profiling_accuracy``),
never ``substitution[10%] macro_f1``. Every writer builds its frame with :func:`score_frame`, which fills
the absent optional columns with nulls, casts to the declared dtypes and fails with one line naming the
table and the column when a required column is missing or a value does not fit its type; readers may
check a frame they did not build with :func:`validate_scores`.

Dtypes: ``text`` is pandas' ``str`` (missing = NaN, so comparisons with a missing value are False, not
NA), ``float`` is float64 (missing = NaN), ``int`` is int64, ``list`` is a column of Python lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from tasks.errors import InputError

Kind = Literal["text", "float", "int", "list"]
#: The pandas dtype each kind is stored as (``list`` stays object).
DTYPES: dict[str, Any] = {"text": pd.StringDtype(na_value=np.nan), "float": np.dtype("float64"),
                          "int": np.dtype("int64"), "list": np.dtype("object")}


class ScoreSchemaError(InputError, ValueError):
    """A score frame that does not match its declared table: names the table and the column."""


@dataclass(frozen=True)
class ScoreTable:
    """One declared table: its columns (name -> kind) in order, which may be absent (filled with nulls),
    and the kind of any further column (the wide tables' per-metric columns), or None to allow none."""

    name: str
    columns: Mapping[str, Kind]
    optional: frozenset[str] = field(default_factory=frozenset)
    extra: Kind | None = None
    extra_text_suffix: str | None = None  # further columns ending so are text (``<metric>_reason``)
    description: str = ""

    def kind_of(self, column: str) -> Kind | None:
        """The declared kind of ``column`` (a further column's kind for the wide tables), or None."""
        if column in self.columns:
            return self.columns[column]
        if self.extra_text_suffix and column.endswith(self.extra_text_suffix):
            return "text"
        return self.extra


#: The ``strategy`` of the baseline rows of a score table: the attack on (or training with) the unchanged
#: source text, and the chance rate; neither is a generation strategy.
ORIGINAL, CHANCE = "original", "chance"
BASELINE_ROWS: tuple[str, ...] = (ORIGINAL, CHANCE)

#: The structure of a score: the columns that say what a number is about. Null where they do not apply.
#: ``setting`` substitution/augmentation/baseline (utility); ``fraction`` of the real training data;
#: ``attribute`` the attacked sensitive attribute; ``model`` the attacker's or trainer's model; ``attack``
#: the attack (a registered name: minhash, stylometric, ...); ``adversary`` full (holds the released originals) / disjoint (only the
#: users' other posts); ``epsilon`` the DP budget the strategy variant was generated with.
STRUCTURE_COLUMNS: dict[str, Kind] = {"setting": "text", "fraction": "float", "attribute": "text", "model": "text",
                                      "attack": "text", "adversary": "text", "epsilon": "float",
                                      "entity": "text"}

#: The long score table: one number per (strategy, variant, level, metric, structure).
SCORES = ScoreTable(
    "scores",
    {"strategy": "text", "variant": "text", "level": "text", "metric": "text", **STRUCTURE_COLUMNS,
     "value": "float", "std": "float", "median": "float", "n": "int", "n_failed": "int", "ci_low": "float",
     "ci_high": "float", "signature": "text", "reason": "text"},
    optional=frozenset({*STRUCTURE_COLUMNS, "std", "median", "ci_low", "ci_high"}),
    description="one number per strategy x variant x level x metric x structure columns (metrics, privacy, "
                "re-identification, LLM profiling, utility scores, the report's summary); ``n`` the trials behind "
                "it and ``ci_low``/``ci_high`` its 95% interval (:mod:`tasks.intervals`), null where none applies")
#: Where a score is the same kind of number: the key of a long score row.
SCORE_KEY: tuple[str, ...] = ("strategy", "variant", "level", "metric", *STRUCTURE_COLUMNS)

#: Per pair: one float column per sample/variant metric, with ``<metric>_reason`` beside it.
SAMPLE_SCORES = ScoreTable(
    "sample_scores", {"doc_id": "text", "strategy": "text", "variant": "text", "status": "text"},
    extra="float", extra_text_suffix="_reason",
    description="one row per synthetic text; one float column per sample metric and a text <metric>_reason")

#: The series behind distribution-level plots (FCSD's cosine-to-real-mean values).
DISTRIBUTIONS = ScoreTable(
    "distributions", {"strategy": "text", "variant": "text", "metric": "text", "series": "text", "values": "list"},
    description="per strategy x variant x metric: named series of values behind the distribution plots")

#: One downstream run per row, one float column per task metric (macro_f1, SegWER, IE_Cr, ...).
UTILITY_RUNS = ScoreTable(
    "utility_runs",
    {"setting": "text", "fraction": "float", "strategy": "text", "variant": "text", "seed": "int", "n_train": "int",
     "n_val": "int",
     "n_test": "int", "status": "text", "reason": "text", "seconds": "float"},
    extra="float", description="one row per setting x fraction x strategy x variant x seed; one float column per "
                               "task metric")

#: Per downstream run of a post task, every real test document's true label and the model's prediction (as
#: text): what the 95% interval of the run's scores resamples (:func:`tasks.training.utility.utility_intervals`).
UTILITY_PREDICTIONS = ScoreTable(
    "utility_predictions",
    {"setting": "text", "fraction": "float", "strategy": "text", "variant": "text", "seed": "int", "doc_id": "text",
     "truth": "text", "prediction": "text"},
    description="one row per downstream run x real test document: its true label and the model's prediction")

#: The metric meta-evaluation: Spearman of each metric with the true ranking of manipulated bags.
METAEVAL_SUMMARY = ScoreTable(
    "metaeval_summary",
    {"metric": "text", "manipulation": "text", "rho_mean": "float", "rho_std": "float", "n_bags": "int",
     "n_defined": "int", "reason": "text"},
    description="per metric x manipulation: mean and std of rho over bags")
METAEVAL_ROWS = ScoreTable(
    "metaeval_rows",
    {"metric": "text", "manipulation": "text", "rho": "float", "p_value": "float", "n_levels": "int",
     "n_distinct_bags": "int", "reason": "text", "scores": "list", "signature": "text", "bag": "int",
     "bag_size": "int"},
    description="per metric x manipulation x bag: rho, its p-value and the metric's scores per level")
#: Metric x metric |Spearman| (the run's strategies, or the meta-evaluation's manipulated bags).
METRIC_CORRELATIONS = ScoreTable("metric_correlations", {"metric": "text"}, extra="float",
                                 description="metric x metric absolute Spearman correlation")

#: Every declared table, by name.
TABLES: dict[str, ScoreTable] = {t.name: t for t in (SCORES, SAMPLE_SCORES, DISTRIBUTIONS, UTILITY_RUNS,
                                                      UTILITY_PREDICTIONS, METAEVAL_SUMMARY, METAEVAL_ROWS,
                                                      METRIC_CORRELATIONS)}


def _fits(series: pd.Series, kind: Kind) -> bool:
    if kind == "text":
        if pd.api.types.is_string_dtype(series.dtype) and not pd.api.types.is_object_dtype(series.dtype):
            return True
        return series.dtype == object and all(isinstance(v, str) for v in series.dropna())
    if kind == "float":
        return pd.api.types.is_float_dtype(series.dtype) or (
            pd.api.types.is_integer_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype))
    if kind == "int":
        return pd.api.types.is_integer_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)
    return series.dtype == object


def validate_scores(frame: pd.DataFrame, table: ScoreTable = SCORES) -> pd.DataFrame:
    """``frame`` unchanged if it has every required column of ``table`` with a fitting dtype (and no
    undeclared column where the table allows none); else :class:`ScoreSchemaError` naming the column."""
    missing = [c for c in table.columns if c not in frame.columns and c not in table.optional]
    if missing:
        raise ScoreSchemaError(f"{table.name} table lacks column(s) {', '.join(missing)}", column=missing[0])
    for column in frame.columns:
        kind = table.kind_of(str(column))
        if kind is None:
            raise ScoreSchemaError(f"{table.name} table has undeclared column {column!r}", column=str(column))
        if not _fits(frame[column], kind):
            raise ScoreSchemaError(f"{table.name} table: column {column!r} has dtype {frame[column].dtype}, "
                                   f"declared {kind}", column=str(column))
    return frame


def _cast(values: pd.Series, kind: Kind, table: str, column: str) -> pd.Series:
    try:
        if kind == "text":
            return values.astype(DTYPES["text"])  # non-strings become their str(); None, NA and NaN missing
        if kind == "int":
            if values.isna().any():
                raise ValueError("missing value in an int column")
            return values.astype("int64")
        if kind == "float":
            return pd.to_numeric(values, errors="raise").astype("float64")
        return values.astype(object)
    except (TypeError, ValueError) as exc:
        raise ScoreSchemaError(f"{table} table: column {column!r} does not fit {kind}: {exc}",
                               column=column) from None


def score_frame(rows: Iterable[Mapping[str, Any]] | pd.DataFrame, table: ScoreTable = SCORES) -> pd.DataFrame:
    """A frame of ``table`` from ``rows`` (dicts or a frame): declared columns first, in order, the absent
    optional ones filled with nulls, every column cast to its declared dtype, further columns after
    (where the table allows them). Raises :class:`ScoreSchemaError` for a missing required column, an
    undeclared one or a value that does not fit."""
    frame = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if frame.empty and not len(frame.columns):  # no rows at all: the declared columns, empty
        frame = pd.DataFrame(columns=list(table.columns))
    frame = frame.reset_index(drop=True)
    for column in table.optional:
        if column not in frame.columns:
            frame[column] = np.nan
    missing = [c for c in table.columns if c not in frame.columns]
    if missing:
        raise ScoreSchemaError(f"{table.name} table lacks column(s) {', '.join(missing)}", column=missing[0])
    extra = [c for c in frame.columns if c not in table.columns]
    out = pd.DataFrame(index=frame.index)
    for column in [*table.columns, *extra]:
        kind = table.kind_of(str(column))
        if kind is None:
            raise ScoreSchemaError(f"{table.name} table has undeclared column {column!r}", column=str(column))
        out[column] = _cast(frame[column], kind, table.name, str(column))
    return out


def variant_epsilons(synthetic: pd.DataFrame) -> dict[str, float]:
    """variant -> the per-document DP budget its rows were generated with (the DP strategy's
    ``epsilon_doc_bound`` column: the configured epsilon); empty for a strategy without one."""
    column = "epsilon_doc_bound"
    if column not in synthetic.columns or "variant" not in synthetic.columns:
        return {}
    known = synthetic.dropna(subset=[column])
    return {str(v): float(e) for v, e in known.groupby("variant", sort=False)[column].first().items()}


#: The structure columns that set apart numbers of one metric in a report table (epsilon belongs to the
#: row: it is a property of the strategy variant).
COLUMN_STRUCTURE: tuple[str, ...] = ("setting", "fraction", "attribute", "model", "attack", "adversary")


def _present(value: object) -> bool:
    return value is not None and value is not pd.NA and not (isinstance(value, float) and np.isnan(value))


def structure_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The structure columns of a score row that hold a value (``{}`` for a plain metric)."""
    return {k: row[k] for k in COLUMN_STRUCTURE if k in row and _present(row[k])}


def column_key(metric: str, structure: Mapping[str, Any] | None = None) -> str:
    """An opaque identifier of one report column: the metric and its structure values (never parsed)."""
    given = structure or {}
    values = [(k, given[k]) for k in COLUMN_STRUCTURE if k in given and _present(given[k])]
    parts = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values]
    return "|".join([metric, *parts])


def column_keys(frame: pd.DataFrame) -> pd.Series:
    """:func:`column_key` of every row of a long score frame."""
    present = [c for c in COLUMN_STRUCTURE if c in frame.columns]
    records = frame[["metric", *present]].to_dict("records")
    return pd.Series([column_key(str(r["metric"]), r) for r in records], index=frame.index, dtype=object)
