"""The article's result tables built from a run's long score table: intrinsic sample level (seed 000
Table 4), distribution level (Table 13), substitution utility (Table 5), privacy (Table 6) and
augmentation (Tables 7-9, one per task level), with the best values marked as the article marks them.

A table is data (rows of numbers plus marks), rendered to markdown and HTML by :mod:`tasks.report.render`;
the numbers are the summary's values, unrounded, so a test can hold them against the parquet artifacts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tasks.metrics.suite import BAG_METRICS, CLOSER_IS_HIGHER

#: Rows that are not generation strategies: the attack on (or training with) the real text, and chance.
ORIGINAL, CHANCE = "original", "chance"
BASELINE_ROWS = (ORIGINAL, CHANCE)

#: Sample-level columns (Table 4): the article's four first (BSc, Idio, POS, Div), then the rest.
#: Every one is "higher = more of the named aspect"; self_bleu (similarity among variants) is the exception.
SAMPLE_COLUMNS: dict[str, str] = {
    "bertscore_f1": "BSc", "style_cosine": "Style", "pos_jaccard": "POS", "bleu_divergence": "Div",
    "bertscore_p": "BSc-P", "bertscore_r": "BSc-R", "cps": "CPS", "sti": "STI", "sti_pct": "STI %",
    "self_bleu_diversity": "Self-Div", "self_bleu": "Self-BLEU",
}
#: Distribution-level columns (Table 13): BFD, IFD (style embedding Fréchet), POS JSD, Div (char-trigram JSD).
DISTRIBUTION_COLUMNS: dict[str, str] = {
    "fbd": "BFD", "style_frechet": "IFD", "pos_jsd": "POS", "char_jsd": "Div", "fbd_sbert": "BFD-SBERT",
    "fcsd": "FCSD",
}
#: +1: higher is better in the table's sense (more kept, or more divergent: the article's Table 4 reads
#: "higher is better for all metrics"); -1: lower is better (distances, errors, attack success).
DIRECTION: dict[str, int] = {
    **{m: 1 for m in SAMPLE_COLUMNS}, "self_bleu": -1,
    **{m: -1 for m in DISTRIBUTION_COLUMNS}, "char_jsd": 1,
    **{m: 1 if CLOSER_IS_HIGHER.get(m, True) else -1 for m in BAG_METRICS},
}
_UTILITY_NAME = re.compile(r"^(?P<setting>[a-z]+)\[(?P<pct>\d+)%\] (?P<metric>.+)$")
#: Task metrics where lower is better: the dialogue-act error rates (DSER, DER, and any *WER: SegWER, JointWER).
_LOWER_IS_BETTER_TASK_METRICS = ("dser", "der")


#: Variants that need no mention in a row label (the only or first output of a strategy; missing values).
_PLAIN_VARIANTS = ("", "first", "none", "nan", "<na>")


def strategy_label(strategy: object, variant: object = None) -> str:
    """``strategy`` or ``strategy (variant)``: how the report names a row, a plot point or a sheet group."""
    def text(value: object) -> str:
        return "" if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)) else str(value)
    name, var = text(strategy), text(variant)
    return name if var.lower() in _PLAIN_VARIANTS else f"{name} ({var})"


def task_metric_direction(metric: str) -> int:
    """+1 for F1 and coverage precision/recall, -1 for the error rates (SegWER, JointWER, DSER, DER)."""
    name = metric.lower()
    return -1 if name in _LOWER_IS_BETTER_TASK_METRICS or name.endswith("wer") else 1


@dataclass(frozen=True)
class Column:
    """One numeric column: the summary metric it shows, its header and which direction is better."""

    metric: str
    header: str
    direction: int  # +1 higher is better, -1 lower is better, 0 no ranking
    group: str = ""  # a spanning header (e.g. the augmentation metric over 10/50/100%)


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

    def value(self, row: int, metric: str) -> float:
        return self.values.get((row, metric), math.nan)

    def label(self, row: int) -> str:
        strategy, variant = self.rows[row]
        return self.row_labels.get(row) or strategy_label(strategy, variant)

    def is_baseline(self, row: int) -> bool:
        return self.rows[row][0] in BASELINE_ROWS

    def mark(self, row: int, metric: str, kind: str) -> None:
        self.marks.setdefault((row, metric), set()).add(kind)

    def frame(self) -> pd.DataFrame:
        """The table as a frame (label, then one column per metric): what the markdown shows, unrounded."""
        data = {"strategy": [self.label(i) for i in range(len(self.rows))]}
        for col in self.columns:
            data[col.metric] = [self.value(i, col.metric) for i in range(len(self.rows))]
        return pd.DataFrame(data)


def _measured(value: float) -> bool:
    """A number to rank: anything but NaN (±inf is a real extreme, e.g. ClusTF of identical bags)."""
    return isinstance(value, (int, float)) and not math.isnan(value)


def _rank_best(table: ArticleTable, rows: Sequence[int], metric: str, direction: int, top: int,
               kind: str = "best", key=None) -> None:
    """Mark the rows among ``rows`` with fewer than ``top`` strictly better values of ``metric`` (competition
    ranking: ties share a place). Nothing is marked when fewer than two rows have a value or all tie."""
    if direction == 0:
        return
    score = key or (lambda v: direction * v)
    scored = [(score(table.value(r, metric)), r) for r in rows if _measured(table.value(r, metric))]
    if len(scored) < 2 or len({s for s, _ in scored}) == 1:
        return
    for s, r in scored:
        if sum(other > s for other, _ in scored) < top:
            table.mark(r, metric, kind)


def _wide(summary: pd.DataFrame, level: str) -> pd.DataFrame:
    part = summary[summary["level"] == level]
    if part.empty:
        return pd.DataFrame()
    part = part.assign(variant=part["variant"].fillna("").astype(str))
    unique = part.drop_duplicates(["strategy", "variant", "metric"])
    wide = unique.set_index(["strategy", "variant", "metric"])["value"].astype(float).unstack("metric")
    return wide.reindex(columns=list(dict.fromkeys(unique["metric"])))  # the summary's metric order


def _strategy_order(keys: Sequence[tuple[str, str]], order: Sequence[str] | None) -> list[tuple[str, str]]:
    rank = {s: i for i, s in enumerate(order or [])}
    return sorted(keys, key=lambda k: (k[0] in BASELINE_ROWS, rank.get(k[0], len(rank)), str(k[0]), str(k[1])))


def _table(key: str, title: str, caption: str, columns: list[Column], wide: pd.DataFrame,
           rows: list[tuple[str, str]], row_labels: Mapping[tuple[str, str], str] | None = None) -> ArticleTable:
    table = ArticleTable(key=key, title=title, caption=caption, columns=columns, rows=rows, values={})
    for i, row in enumerate(rows):
        for col in columns:
            if row in wide.index and col.metric in wide.columns:
                v = wide.loc[row, col.metric]
                table.values[(i, col.metric)] = float(v) if v is not None and not pd.isna(v) else math.nan
        if row_labels and row in row_labels:
            table.row_labels[i] = row_labels[row]
    return table


def _present(columns: Mapping[str, str], wide: pd.DataFrame) -> list[str]:
    """Metrics of ``columns`` that have at least one finite value, in the mapping's order."""
    return [m for m in columns if m in wide.columns and np.isfinite(pd.to_numeric(wide[m], errors="coerce")).any()]


#: Syntax-controlled paraphrase strategies: the article underlines the best of them in Tables 4 and 13.
SYNTAX_FAMILIES = frozenset({"synsim", "syndiff", "synorig", "syntr"})
#: Per intrinsic level: (columns, table key, how many top values are bold, title, caption).
_INTRINSIC: dict[str, tuple[Mapping[str, str], str, int, str, str]] = {
    "sample-mean": (SAMPLE_COLUMNS, "table4", 1, "Intrinsic evaluation, sample level (Table 4)",
                    "Meaning (BERTScore F1), style (style-embedding cosine, POS-trigram Jaccard) and divergence "
                    "(1 − BLEU/100), means over the synthetic texts. Higher is better for all but Self-BLEU. "
                    "In bold: top scoring method for each metric."),
    "distribution": (DISTRIBUTION_COLUMNS, "table13", 2, "Intrinsic evaluation, distribution level (Table 13)",
                     "Meaning (BERT Fréchet distance), style (style-embedding Fréchet distance, POS-trigram JSD) and "
                     "divergence (character-trigram JSD). Lower is better for all metrics except divergence. "
                     "In bold: top two scoring methods for each metric."),
    "bag-mean": ({m: m for m in BAG_METRICS}, "bags", 1, "Bag-level metrics (means over groups)",
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
    wide = _wide(summary, level)
    if wide.empty:
        return None
    names, key, top, title, caption = _INTRINSIC[level]
    metrics = _present(names, wide)
    if not metrics:
        return None
    columns = [Column(m, names[m], DIRECTION.get(m, 1)) for m in metrics]
    rows = _strategy_order([k for k in wide.index if k[0] not in BASELINE_ROWS], order)
    families = families or {}
    syntax = [i for i, (strategy, _) in enumerate(rows) if families.get(strategy, strategy) in SYNTAX_FAMILIES]
    underline = level != "bag-mean" and 2 <= len(syntax) < len(rows)
    if underline:
        caption += " Underlined: top scoring syntax-controlled paraphrase strategy."
    table = _table(key, title, caption, columns, wide, rows)
    for col in columns:
        _rank_best(table, range(len(rows)), col.metric, col.direction, top)
        if underline:
            _rank_best(table, syntax, col.metric, col.direction, 1, kind="underline")
    return table


def _utility_columns(wide: pd.DataFrame, setting: str) -> list[tuple[str, int, str]]:
    """(summary metric, percent, task metric) of one setting's columns, by task metric then percent."""
    found = []
    for name in wide.columns:
        match = _UTILITY_NAME.match(str(name))
        if match and match["setting"] == setting:
            found.append((str(name), int(match["pct"]), match["metric"]))
    task_order = list(dict.fromkeys(m for _, _, m in found))
    return sorted(found, key=lambda f: (task_order.index(f[2]), f[1]))


def substitution_table(summary: pd.DataFrame, order: Sequence[str] | None = None) -> ArticleTable | None:
    """Table 5: train on synthetic instead of real (1-to-1), test on real. Bold: top two synthetic; underline:
    outperforms the best system trained on original data."""
    wide = _wide(summary, "utility")
    if wide.empty:
        return None
    subs = [c for c in _utility_columns(wide, "substitution") if c[1] == 100] or _utility_columns(wide, "substitution")
    if not subs:
        return None
    columns = [Column(name, f"{metric}{' ↓' if task_metric_direction(metric) < 0 else ' ↑'}",
                      task_metric_direction(metric)) for name, _, metric in subs]
    rows = _strategy_order([k for k in wide.index if k[0] not in BASELINE_ROWS], order)
    original = [k for k in wide.index if k[0] == ORIGINAL]
    table = _table("table5", "Substitution: train on synthetic, test on real (Table 5)",
                   "Task performance when the real training data is replaced 1-to-1 by synthetic data; means over "
                   "seeds. In bold: top two strategies; underlined: outperforms the system trained on original data.",
                   columns, wide, rows + original[:1], row_labels={k: "Trained on original data" for k in original})
    synthetic_rows = range(len(rows))
    for (_name, pct, metric), col in zip(subs, columns, strict=True):
        _rank_best(table, synthetic_rows, col.metric, col.direction, 2)
        if original:  # the baseline at the same training fraction lives under the baseline[...] column
            base_name = f"baseline[{pct}%] {metric}"
            base = float(wide.loc[original[0], base_name]) if base_name in wide.columns else math.nan
            table.values[(len(rows), col.metric)] = base
            for r in synthetic_rows:
                v = table.value(r, col.metric)
                if _measured(v) and _measured(base) and col.direction * (v - base) > 0:
                    table.mark(r, col.metric, "underline")
    return table


def augmentation_table(summary: pd.DataFrame, level: str = "post",
                       order: Sequence[str] | None = None) -> ArticleTable | None:
    """Tables 7 (post), 8 (dialogue), 9 (timeline): augmentation at 10/50/100% of the training data, with
    the no-augmentation baseline last. Bold: best strategy per column; underline: outperforms no-augmentation."""
    wide = _wide(summary, "utility")
    if wide.empty:
        return None
    aug = _utility_columns(wide, "augmentation")
    if not aug:
        return None
    number = {"post": 7, "dialogue": 8, "timeline": 9}.get(level, 7)
    columns = [Column(name, f"{pct}%", task_metric_direction(metric),
                      group=f"{metric} {'↓' if task_metric_direction(metric) < 0 else '↑'}") for name, pct, metric in aug]
    rows = _strategy_order([k for k in wide.index if k[0] not in BASELINE_ROWS], order)
    original = [k for k in wide.index if k[0] == ORIGINAL]
    table = _table(f"table{number}", f"Augmentation, {level} level (Table {number})",
                   "Real training data at 10/50/100% of its size plus the synthetic version of it; means over seeds. "
                   "In bold: best strategy per column; underlined: outperforms no augmentation.",
                   columns, wide, rows + original[:1], row_labels={k: "Original (without augmentation)" for k in original})
    for name, pct, metric in aug:
        direction = task_metric_direction(metric)
        _rank_best(table, range(len(rows)), name, direction, 1)
        if original:
            base_name = f"baseline[{pct}%] {metric}"
            base = float(wide.loc[original[0], base_name]) if base_name in wide.columns else math.nan
            table.values[(len(rows), name)] = base
            for r in range(len(rows)):
                v = table.value(r, name)
                if _measured(v) and _measured(base) and direction * (v - base) > 0:
                    table.mark(r, name, "underline")
    return table


#: Privacy columns (Table 6): attack success rates, lower = more private. Membership AUC is better the
#: closer it is to 0.5 (the attacker cannot tell members from non-members).
_PRIVACY_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"^profiling_accuracy\[(?P<x>.+)\]$", "Profiling {x}"),
    (r"^llm_profiling_accuracy\[(?P<x>.+)\]$", "LLM profiling {x}"),
    (r"^reid_accuracy$", "Re-identified users"),
    (r"^membership_auc$", "Membership AUC"),
)


def _privacy_header(metric: str) -> str | None:
    for pattern, header in _PRIVACY_PATTERNS:
        match = re.match(pattern, metric)
        if match:
            return header.format(**match.groupdict())
    return None


def privacy_table(summary: pd.DataFrame, families: Mapping[str, str] | None = None,
                  order: Sequence[str] | None = None) -> ArticleTable | None:
    """Table 6: profiling accuracy and re-identified users per strategy, then the random baseline and the
    original data. Bold: most privacy-preserving overall; underlined: most privacy-preserving without a
    formal DP guarantee (strategies whose family is ``dp``)."""
    wide = _wide(summary, "privacy")
    if wide.empty:
        return None
    metrics = sorted((m for m in wide.columns if _privacy_header(str(m))),
                     key=lambda m: ([p for p, _ in _PRIVACY_PATTERNS].index(
                         next(p for p, _ in _PRIVACY_PATTERNS if re.match(p, str(m)))), str(m)))
    metrics = [m for m in metrics if np.isfinite(pd.to_numeric(wide[m], errors="coerce")).any()]
    if not metrics:
        return None
    columns = [Column(str(m), f"{_privacy_header(str(m))} {'→0.5' if m == 'membership_auc' else '↓'}", -1)
               for m in metrics]
    rows = _strategy_order([k for k in wide.index if k[0] not in BASELINE_ROWS], order)
    chance = [k for k in wide.index if k[0] == CHANCE][:1]
    original = [k for k in wide.index if k[0] == ORIGINAL][:1]
    table = _table("table6", "Privacy attacks (Table 6)",
                   "Author profiling accuracy, membership-inference AUC and share of re-identified users: lower is "
                   "more private (AUC: closer to 0.5). In bold: most privacy-preserving overall; underlined: most "
                   "privacy-preserving without a differential-privacy guarantee.",
                   columns, wide, rows + chance + original,
                   row_labels={**{k: "Random baseline" for k in chance}, **{k: "Original data" for k in original}})
    families = families or {}
    non_dp = [i for i, (s, _) in enumerate(rows) if families.get(s, s) != "dp"]
    for col in columns:
        key = (lambda v: -abs(v - 0.5)) if col.metric == "membership_auc" else None
        _rank_best(table, range(len(rows)), col.metric, col.direction, 1, key=key)
        if len(non_dp) < len(rows):
            _rank_best(table, non_dp, col.metric, col.direction, 1, kind="underline", key=key)
    return table


def article_tables(summary: pd.DataFrame, *, level: str = "post", families: Mapping[str, str] | None = None,
                   order: Sequence[str] | None = None) -> list[ArticleTable]:
    """Every table the run has numbers for, in the article's order: 4, 13, bags, 5, 6, 7-9."""
    built = [intrinsic_table(summary, "sample-mean", order, families),
             intrinsic_table(summary, "distribution", order, families), intrinsic_table(summary, "bag-mean", order), substitution_table(summary, order),
             privacy_table(summary, families, order), augmentation_table(summary, level, order)]
    return [t for t in built if t is not None]
