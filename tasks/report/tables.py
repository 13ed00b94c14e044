"""The article's result tables built from a run's long score table: intrinsic sample level (seed 000
Table 4), distribution level (Table 13), substitution utility (Table 5), privacy (Table 6) and
augmentation (Tables 7-9, one per task level), with the best values marked as the article marks them.

A table is data (rows of numbers plus marks), rendered to markdown and HTML by :mod:`tasks.report.render`;
the numbers are the summary's values, unrounded, so a test can hold them against the parquet artifacts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tasks.catalogues import summary_line
from tasks.metrics import catalogue
from tasks.privacy.audit import NOTHING_MEASURABLE
from tasks.privacy.dp_audit import audited_epsilon
from tasks.scores import BASELINE_ROWS, CHANCE, ORIGINAL, column_key, column_keys, structure_of

#: Variants that need no mention in a row label (the only or first output of a strategy; missing values).
_PLAIN_VARIANTS = ("", "first", "none", "nan", "<na>")


def strategy_label(strategy: object, variant: object = None) -> str:
    """``strategy`` or ``strategy (variant)``: how the report names a row, a plot point or a sheet group."""
    def text(value: object) -> str:
        return "" if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)) else str(value)
    name, var = text(strategy), text(variant)
    return name if var.lower() in _PLAIN_VARIANTS else f"{name} ({var})"


@dataclass(frozen=True)
class Column:
    """One numeric column: the registered metric it shows and the structure values that set it apart
    (setting, fraction, attribute, model, ...), its header and which direction is better. ``key``
    identifies the column in the table's values and marks."""

    metric: str
    header: str
    direction: int  # +1 higher is better, -1 lower is better
    group: str = ""  # a spanning header (e.g. the augmentation metric over 10/50/100%)
    structure: Mapping[str, object] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return column_key(self.metric, self.structure)

    @property
    def note(self) -> str:
        """The header tip: what the metric measures and which way is better (from the catalogue)."""
        registered = catalogue.lookup(self.metric)
        return registered.note if registered is not None else self.metric


@dataclass
class ArticleTable:
    """A result table: rows of (strategy, variant) with one value per column, and per-cell marks.

    ``marks[(row, metric)]`` holds ``"best"`` (bold) and/or ``"underline"``; ``kind`` says which article table."""

    key: str
    title: str
    caption: str
    columns: list[Column]
    rows: list[tuple[str, str]]
    values: dict[tuple[int, str], float]
    marks: dict[tuple[int, str], set[str]] = field(default_factory=dict)
    row_labels: dict[int, str] = field(default_factory=dict)
    #: ``(row, column key) -> (ci_low, ci_high)``: the 95% interval of a cell, where the score table has one.
    intervals: dict[tuple[int, str], tuple[float, float]] = field(default_factory=dict)

    def value(self, row: int, metric: str) -> float:
        return self.values.get((row, metric), math.nan)

    def interval(self, row: int, metric: str) -> tuple[float, float] | None:
        """The cell's 95% interval, or None where it has none."""
        return self.intervals.get((row, metric))

    def label(self, row: int) -> str:
        strategy, variant = self.rows[row]
        return self.row_labels.get(row) or strategy_label(strategy, variant)

    def is_baseline(self, row: int) -> bool:
        return self.rows[row][0] in BASELINE_ROWS

    def mark(self, row: int, metric: str, kind: str) -> None:
        self.marks.setdefault((row, metric), set()).add(kind)

    def frame(self) -> pd.DataFrame:
        """The table as a frame (label, then one column per column key): what the markdown shows, unrounded."""
        data = {"strategy": [self.label(i) for i in range(len(self.rows))]}
        for col in self.columns:
            data[col.key] = [self.value(i, col.key) for i in range(len(self.rows))]
        return pd.DataFrame(data)


def _measured(value: float) -> bool:
    """A number to rank: anything but NaN (±inf is a real extreme, e.g. ClusTF of identical bags)."""
    return isinstance(value, (int, float)) and not math.isnan(value)


def _rank_best(table: ArticleTable, rows: Sequence[int], col: Column, top: int, kind: str = "best") -> None:
    """Mark the rows among ``rows`` with fewer than ``top`` strictly better values in column ``col``, better as
    the catalogue ranks the column's metric (its direction, or the distance to its target; competition
    ranking: ties share a place). Nothing is marked when fewer than two rows have a value or all tie."""
    scored = [(catalogue.rank(col.metric, table.value(r, col.key)), r) for r in rows
              if _measured(table.value(r, col.key))]
    if len(scored) < 2 or len({s for s, _ in scored}) == 1:
        return
    for s, r in scored:
        if sum(other > s for other, _ in scored) < top:
            table.mark(r, col.key, kind)


def _wide(summary: pd.DataFrame, level: str) -> tuple[pd.DataFrame, dict[str, dict]]:
    """(strategy, variant) x column key values of one level, and each key's metric and structure
    (``{"metric": ..., **structure}``), in the summary's order."""
    part = summary[summary["level"] == level]
    if part.empty:
        return pd.DataFrame(), {}
    part = part.assign(variant=part["variant"].fillna("").astype(str), _key=column_keys(part))
    unique = part.drop_duplicates(["strategy", "variant", "_key"])
    wide = unique.set_index(["strategy", "variant", "_key"])["value"].astype(float).unstack("_key")
    keys = {}
    for record in unique.drop_duplicates("_key").to_dict("records"):
        keys[record["_key"]] = {"metric": str(record["metric"]), **structure_of(record)}
    return wide.reindex(columns=list(keys)).rename_axis(columns=None), keys


Bounds = dict[tuple[str, str, str], tuple[float, float]]


def _intervals(table: ArticleTable, summary: pd.DataFrame, level: str) -> Bounds:
    """Fill ``table.intervals`` from the score table's ci_low/ci_high: the interval of the row whose value
    the cell shows (the first of its key, as :func:`_wide` keeps it), where that row has both bounds. Returns
    every such interval of the level by (strategy, variant, column key)."""
    if "ci_low" not in summary.columns:
        return {}
    part = summary[summary["level"] == level]
    if part.empty:
        return {}
    part = part.assign(variant=part["variant"].fillna("").astype(str), _key=column_keys(part))
    bounds: dict[tuple[str, str, str], tuple[float, float]] = {}
    for s, v, k, lo, hi in part[["strategy", "variant", "_key", "ci_low", "ci_high"]].itertuples(index=False, name=None):
        bounds.setdefault((s, v, k), (float(lo), float(hi)))  # the first row of a key, as _wide keeps its value
    bounds = {key: b for key, b in bounds.items() if not (math.isnan(b[0]) or math.isnan(b[1]))}
    for i, (strategy, variant) in enumerate(table.rows):
        for col in table.columns:
            if (found := bounds.get((strategy, variant, col.key))) is not None:
                table.intervals[(i, col.key)] = found
    return bounds


def _strategy_order(keys: Sequence[tuple[str, str]], order: Sequence[str] | None) -> list[tuple[str, str]]:
    rank = {s: i for i, s in enumerate(order or [])}
    return sorted(keys, key=lambda k: (k[0] in BASELINE_ROWS, rank.get(k[0], len(rank)), str(k[0]), str(k[1])))


def _table(key: str, title: str, caption: str, columns: list[Column], wide: pd.DataFrame,
           rows: list[tuple[str, str]], row_labels: Mapping[tuple[str, str], str] | None = None) -> ArticleTable:
    table = ArticleTable(key=key, title=title, caption=caption, columns=columns, rows=rows, values={})
    for i, row in enumerate(rows):
        for col in columns:
            if row in wide.index and col.key in wide.columns:
                v = wide.loc[row, col.key]
                table.values[(i, col.key)] = float(v) if v is not None and not pd.isna(v) else math.nan
        if row_labels and row in row_labels:
            table.row_labels[i] = row_labels[row]
    return table


def _finite(wide: pd.DataFrame, key: str) -> bool:
    """Whether column ``key`` has at least one finite value."""
    return key in wide.columns and bool(np.isfinite(pd.to_numeric(wide[key], errors="coerce")).any())


def _arrow(metric: str) -> str:
    registered = catalogue.lookup(metric)
    return registered.arrow if registered is not None else "↑"


#: Syntax-controlled paraphrase strategies: the article underlines the best of them in Tables 4 and 13.
SYNTAX_FAMILIES = frozenset({"synsim", "syndiff", "synorig", "syntr"})
#: Per intrinsic summary level: (table key, how many top values are bold, title, caption); the columns are the
#: catalogue's metrics of the levels summarised at it (tasks.metrics.catalogue.SUMMARY_LEVEL).
_INTRINSIC: dict[str, tuple[str, int, str, str]] = {
    "sample-mean": ("table4", 1, "Intrinsic evaluation, sample level (Table 4)",
                    "Meaning (BERTScore F1), style (style-embedding cosine, POS-trigram Jaccard) and divergence "
                    "(1 − BLEU/100), means over the synthetic texts. Higher is better for all but Self-BLEU. "
                    "In bold: top scoring method for each metric."),
    "distribution": ("table13", 2, "Intrinsic evaluation, distribution level (Table 13)",
                     "Meaning (BERT Fréchet distance), style (style-embedding Fréchet distance, POS-trigram JSD) and "
                     "divergence (character-trigram JSD). Lower is better for all metrics except divergence. "
                     "In bold: top two scoring methods for each metric."),
    "bag-mean": ("bags", 1, "Bag-level metrics (means over groups)",
                 "Traffic metrics between real and synthetic bags (seed 003): higher = the synthetic bag is closer "
                 "to the real one. In bold: top scoring method for each metric."),
}


def intrinsic_table(summary: pd.DataFrame, level: str, order: Sequence[str] | None = None,
                    families: Mapping[str, str] | None = None) -> ArticleTable | None:
    """Table 4 (``sample-mean``: bold = top method per metric), Table 13 (``distribution``: bold = top two)
    or the bag-level table (``bag-mean``); in Tables 4 and 13 the best syntax-controlled paraphrase is
    underlined when the run has one next to other strategies."""
    if level not in _INTRINSIC:
        raise ValueError(f"intrinsic_table: unknown level {level!r}")
    wide, _ = _wide(summary, level)
    if wide.empty:
        return None
    key, top, title, caption = _INTRINSIC[level]
    levels = [name for name, summarised in catalogue.SUMMARY_LEVEL.items() if summarised == level]
    registered = [m for m in catalogue.metrics(*levels) if m.in_tables and _finite(wide, m.name)]
    if not registered:
        return None
    columns = [Column(m.name, m.label, m.direction) for m in registered]
    rows = _strategy_order([k for k in wide.index if k[0] not in BASELINE_ROWS], order)
    families = families or {}
    syntax = [i for i, (strategy, _) in enumerate(rows) if families.get(strategy, strategy) in SYNTAX_FAMILIES]
    underline = level != "bag-mean" and 2 <= len(syntax) < len(rows)
    if underline:
        caption += " Underlined: top scoring syntax-controlled paraphrase strategy."
    table = _table(key, title, caption, columns, wide, rows)
    _intervals(table, summary, level)
    for col in columns:
        _rank_best(table, range(len(rows)), col, top)
        if underline:
            _rank_best(table, syntax, col, 1, kind="underline")
    return table


def _utility_columns(keys: Mapping[str, dict], setting: str) -> list[tuple[str, str, float]]:
    """(column key, task metric, fraction) of one setting's columns, by task metric then fraction."""
    found = [(key, str(k["metric"]), float(k["fraction"])) for key, k in keys.items()
             if k.get("setting") == setting and "fraction" in k]
    task_order = list(dict.fromkeys(m for _, m, _ in found))
    return sorted(found, key=lambda f: (task_order.index(f[1]), f[2]))


def _percent(fraction: float) -> int:
    return round(100 * fraction)


def _baseline_cell(table: ArticleTable, row: int, col: Column, wide: pd.DataFrame, bounds: Bounds,
                   original: list[tuple[str, str]], metric: str, fraction: float) -> float:
    """Show in ``row`` (the ``original`` row) the real-data baseline of a task metric at a training fraction,
    with its 95% interval where it has one; returns it (NaN when the run has none)."""
    key = column_key(metric, {"setting": "baseline", "fraction": fraction})
    base = float(wide.loc[original[0], key]) if original and key in wide.columns else math.nan
    table.values[(row, col.key)] = base
    if original and (found := bounds.get((*original[0], key))) is not None:
        table.intervals[(row, col.key)] = found
    return base


def substitution_table(summary: pd.DataFrame, order: Sequence[str] | None = None) -> ArticleTable | None:
    """Table 5: train on synthetic instead of real (1-to-1), test on real. Bold: top two synthetic; underline:
    outperforms the best system trained on original data."""
    wide, keys = _wide(summary, "utility")
    if wide.empty:
        return None
    subs = [c for c in _utility_columns(keys, "substitution") if c[2] == 1.0] or _utility_columns(keys, "substitution")
    if not subs:
        return None
    columns = [Column(metric, f"{metric} {_arrow(metric)}", catalogue.direction(metric),
                      structure={"setting": "substitution", "fraction": fraction}) for _key, metric, fraction in subs]
    rows = _strategy_order([k for k in wide.index if k[0] not in BASELINE_ROWS], order)
    original = [k for k in wide.index if k[0] == ORIGINAL]
    table = _table("table5", "Substitution: train on synthetic, test on real (Table 5)",
                   "Task performance when the real training data is replaced 1-to-1 by synthetic data; means over "
                   "seeds. In bold: top two strategies; underlined: outperforms the system trained on original data.",
                   columns, wide, rows + original[:1], row_labels={k: "Trained on original data" for k in original})
    synthetic_rows = range(len(rows))
    bounds = _intervals(table, summary, "utility")
    for (_key, metric, fraction), col in zip(subs, columns, strict=True):
        _rank_best(table, synthetic_rows, col, 2)
        if original:  # the baseline at the same training fraction is the original row's baseline number
            base = _baseline_cell(table, len(rows), col, wide, bounds, original, metric, fraction)
            for r in synthetic_rows:
                v = table.value(r, col.key)
                if _measured(v) and _measured(base) and col.direction * (v - base) > 0:
                    table.mark(r, col.key, "underline")
    return table


def augmentation_table(summary: pd.DataFrame, level: str = "post",
                       order: Sequence[str] | None = None) -> ArticleTable | None:
    """Tables 7 (post), 8 (dialogue), 9 (timeline): augmentation at 10/50/100% of the training data, with
    the no-augmentation baseline last. Bold: best strategy per column; underline: outperforms no-augmentation."""
    wide, keys = _wide(summary, "utility")
    if wide.empty:
        return None
    aug = _utility_columns(keys, "augmentation")
    if not aug:
        return None
    number = {"post": 7, "dialogue": 8, "timeline": 9}.get(level, 7)
    columns = [Column(metric, f"{_percent(fraction)}%", catalogue.direction(metric),
                      group=f"{metric} {_arrow(metric)}", structure={"setting": "augmentation", "fraction": fraction})
               for _key, metric, fraction in aug]
    rows = _strategy_order([k for k in wide.index if k[0] not in BASELINE_ROWS], order)
    original = [k for k in wide.index if k[0] == ORIGINAL]
    table = _table(f"table{number}", f"Augmentation, {level} level (Table {number})",
                   "Real training data at 10/50/100% of its size plus the synthetic version of it; means over seeds. "
                   "In bold: best strategy per column; underlined: outperforms no augmentation.",
                   columns, wide, rows + original[:1], row_labels={k: "Original (without augmentation)" for k in original})
    bounds = _intervals(table, summary, "utility")
    for (_key, metric, fraction), col in zip(aug, columns, strict=True):
        _rank_best(table, range(len(rows)), col, 1)
        if original:
            base = _baseline_cell(table, len(rows), col, wide, bounds, original, metric, fraction)
            for r in range(len(rows)):
                v = table.value(r, col.key)
                if _measured(v) and _measured(base) and col.direction * (v - base) > 0:
                    table.mark(r, col.key, "underline")
    return table


def _privacy_header(metric: catalogue.Metric, structure: Mapping[str, object], varied: set[str]) -> str:
    """``Profiling gender/linear ↓``: the label, the attacked attribute and attacker model, and the attack or
    adversary setting when the table has several of them; the catalogue's arrow."""
    about = "/".join(str(structure[k]) for k in ("attribute", "model") if k in structure)
    how = ", ".join(str(structure[k]) for k in ("attack", "adversary") if k in structure and k in varied)
    return " ".join(p for p in (metric.label, about, f"({how})" if how else "", metric.arrow) if p)


def _attacks_caption(keys: Mapping[object, Mapping[str, object]], found: Sequence[object]) -> str:
    """The re-identification attacks the table shows, each with its registered one-line description."""
    # deferred: loads llvmlite, numba, yaml only when this runs
    from tasks.privacy.attacks import attack_class, available_attacks

    known = set(available_attacks())
    names = sorted({str(keys[key]["attack"]) for key in found if keys[key].get("attack") in known})
    return "".join(f" {name}: {summary_line(attack_class(name))}" for name in names)


def privacy_table(summary: pd.DataFrame, families: Mapping[str, str] | None = None,
                  order: Sequence[str] | None = None) -> ArticleTable | None:
    """Table 6: profiling accuracy and re-identified users per strategy, then the random baseline and the
    original data. Bold: most privacy-preserving overall; underlined: most privacy-preserving without a
    formal DP guarantee (strategies whose family is ``dp``)."""
    wide, keys = _wide(summary, "privacy")
    if wide.empty:
        return None
    shown = [m.name for m in catalogue.metrics("privacy", "pair") if m.in_tables]
    found = sorted((key for key, k in keys.items() if k["metric"] in shown and _finite(wide, key)),
                   key=lambda key: (shown.index(keys[key]["metric"]), key))
    if not found:
        return None
    varied = {k for k in ("attack", "adversary")
              for metric in shown if len({keys[key].get(k) for key in found if keys[key]["metric"] == metric}) > 1}
    columns = []
    for key in found:
        metric = catalogue.CATALOGUE[keys[key]["metric"]]
        structure = {k: v for k, v in keys[key].items() if k != "metric"}
        columns.append(Column(metric.name, _privacy_header(metric, structure, varied), metric.direction,
                              structure=structure))
    rows = _strategy_order([k for k in wide.index if k[0] not in BASELINE_ROWS], order)
    chance = [k for k in wide.index if k[0] == CHANCE][:1]
    original = [k for k in wide.index if k[0] == ORIGINAL][:1]
    table = _table("table6", "Privacy attacks (Table 6)",
                   "Author profiling accuracy, membership-inference AUC and share of re-identified users: lower is "
                   "more private (AUC: closer to 0.5). In bold: most privacy-preserving overall; underlined: most "
                   "privacy-preserving without a differential-privacy guarantee. In brackets: the 95% interval "
                   "(see Methods)." + _attacks_caption(keys, found),
                   columns, wide, rows + chance + original,
                   row_labels={**{k: "Random baseline" for k in chance}, **{k: "Original data" for k in original}})
    _intervals(table, summary, "privacy")
    families = families or {}
    non_dp = [i for i, (s, _) in enumerate(rows) if families.get(s, s) != "dp"]
    for col in columns:
        _rank_best(table, range(len(rows)), col, 1)
        if len(non_dp) < len(rows):
            _rank_best(table, non_dp, col, 1, kind="underline")
    return table


#: The residual-risk metrics and what their control is (tasks.privacy.audit writes them).
RESIDUAL_METRICS: dict[str, str] = {"reid_residual_risk": "chance (1/N history authors)",
                                    "profiling_advantage": "the majority class"}


def residual_risk_table(summary: pd.DataFrame, order: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per residual risk of the run (re-identification over chance, profiling over the majority
    class), per strategy and attack: the risk with its 95% interval, or, where the attack is not above its
    control, the plain words that it found nothing measurable (never a 0% risk)."""
    part = summary[(summary["level"] == "privacy") & summary["metric"].isin(list(RESIDUAL_METRICS))]
    columns = ["strategy", "figure", "attack", "control", "n", "residual risk [95% interval]"]
    if part.empty:
        return pd.DataFrame(columns=columns)
    rank = {s: i for i, s in enumerate(order or [])}
    part = part.assign(_order=[rank.get(s, len(rank)) for s in part["strategy"]])
    part = part.sort_values(["_order", "strategy", "variant", "metric"], kind="stable")
    rows = []
    for r in part.to_dict("records"):
        about = structure_of(r)
        attack = ", ".join(str(about[k]) for k in ("attack", "adversary", "attribute", "model") if k in about)
        if _measured(float(r["value"])):
            said = f"{r['value']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        elif r.get("reason") == NOTHING_MEASURABLE:
            said = "nothing measurable: the attack is not above its control"
        else:
            said = f"– ({r.get('reason') or 'not measured'})"
        rows.append({"strategy": strategy_label(r["strategy"], r["variant"]),
                     "figure": catalogue.CATALOGUE[str(r["metric"])].label, "attack": attack,
                     "control": RESIDUAL_METRICS[str(r["metric"])], "n": str(int(r["n"])),
                     "residual risk [95% interval]": said})
    return pd.DataFrame(rows, columns=columns)


def split_degenerate(risks: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of :func:`residual_risk_table` with a risk (or nothing measurable above the control), and the
    degenerate ones the attack had nothing to measure on (an empty history, no trials), which go to an appendix."""
    if risks.empty:
        return risks, risks
    degenerate = risks["residual risk [95% interval]"].astype(str).str.startswith("– (")
    return risks[~degenerate].reset_index(drop=True), risks[degenerate].reset_index(drop=True)


#: What the DP table says for a DP setting whose run did not audit it.
NOT_AUDITED = "not audited (enable privacy.audit_dp)"
DP_COLUMNS = ["strategy", "nominal epsilon (per document)", "audited epsilon", "documents audited", "violations"]


def dp_table(summary: pd.DataFrame, audits: Mapping[str, pd.DataFrame], order: Sequence[str] | None = None
             ) -> pd.DataFrame:
    """One row per DP setting of the run (a strategy variant generated with an epsilon, or an audited strategy):
    the nominal epsilon against the audited one (the ``audit-dp`` stage's table, by strategy label: DP-Prompt's
    largest measured privacy loss, DP-BART's largest epsilon lower bound), the documents scored and the
    violations; without an audit, the nominal epsilon and :data:`NOT_AUDITED`."""
    settings = summary.reindex(columns=["strategy", "variant", "epsilon"]).dropna(subset=["epsilon"])
    settings = settings[~settings["strategy"].isin(BASELINE_ROWS)].drop_duplicates(["strategy", "variant"])
    found = {(str(s), str(v)): float(e) for s, v, e in settings.itertuples(index=False, name=None)}
    for label in audits:
        if not any(s == label for s, _ in found):
            found[(label, "")] = float("nan")
    rank = {s: i for i, s in enumerate(order or [])}
    rows = []
    for (strategy, variant), epsilon in sorted(found.items(), key=lambda kv: (rank.get(kv[0][0], len(rank)), kv[0])):
        row = {"strategy": strategy_label(strategy, variant), "nominal epsilon (per document)": f"{epsilon:g}",
               "audited epsilon": NOT_AUDITED, "documents audited": "–", "violations": "–"}
        if strategy in audits and len(audits[strategy]):
            f = audited_epsilon(audits[strategy])
            row.update({"nominal epsilon (per document)": f"{f['nominal']:g}",
                        "audited epsilon": f"{f['audited']:.4g} ({f['method']}: {f['what']})",
                        "documents audited": f"{f['scored']} (+{f['not_scored']} not scored)" if f["not_scored"]
                        else str(f["scored"]), "violations": str(f["violations"])})
        rows.append(row)
    return pd.DataFrame(rows, columns=DP_COLUMNS)


def article_tables(summary: pd.DataFrame, *, level: str = "post", families: Mapping[str, str] | None = None,
                   order: Sequence[str] | None = None) -> list[ArticleTable]:
    """Every table the run has numbers for, in the article's order: 4, 13, bags, 5, 6, 7-9."""
    built = [intrinsic_table(summary, "sample-mean", order, families),
             intrinsic_table(summary, "distribution", order, families), intrinsic_table(summary, "bag-mean", order), substitution_table(summary, order),
             privacy_table(summary, families, order), augmentation_table(summary, level, order)]
    return [t for t in built if t is not None]
