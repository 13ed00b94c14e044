"""The run report: a markdown summary and one self-contained HTML page (inline CSS, JS and images; nothing
is fetched), laid out to answer "which strategy should I use for my data, and what does it cost me in
utility and privacy?": recommendations first, then the article's tables and the plots, the human
evaluation, example outputs (only when switched on) and the metric signatures as footnotes."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tasks.budgets import parse_budget
from tasks.intervals import METHOD
from tasks.layout import PROTECT_LABEL
from tasks.metrics import catalogue
from tasks.protect.files import frontier_points
from tasks.report.budgets import budget_table, check_budget
from tasks.report.build import (
    CORRELATED_LEVELS,
    EXAMPLE_MAX_CHARS,
    PSEUDONYMISED_SOURCE,
    Protection,
    ReportData,
    aspect_points,
)
from tasks.report.recommend import (
    OVER_BUDGET,
    Recommendation,
    budget_note,
    protect_note,
    recommend,
    recommendation_notes,
    within_budget,
)
from tasks.report.tables import (
    BASELINE_ROWS,
    ArticleTable,
    article_tables,
    dp_table,
    residual_risk_table,
    split_degenerate,
    strategy_label,
)
from tasks.report.templating import render
from tasks.report.verdict import verdict_items
from tasks.scores import column_keys, structure_of

if TYPE_CHECKING:
    from tasks.report.plots import Plot


def fmt(value: object, digits: int = 3) -> str:
    """How the report prints a value as a person writes it: a boolean as yes or no, a count (an integer) with
    thousands separators, a measured number with fixed decimals, ∞ for infinities, – for missing."""
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | int):
        v = float(value)
        if math.isnan(v):
            return "–"
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        return f"{v:.{digits}f}"
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


# ------------------------------------------------------------------------------------------ shared parts
def _signature_index(summary: pd.DataFrame) -> dict[str, list[tuple[int, str]]]:
    """metric -> [(footnote number, signature)]: one footnote per distinct signature; a metric computed
    differently for some strategies (another model, another n) lists every signature it has."""
    if summary.empty:
        return {}
    pairs = summary.dropna(subset=["signature"])
    pairs = pairs[pairs["signature"].astype(str) != ""]
    pairs = pd.DataFrame({"metric": column_keys(pairs), "signature": pairs["signature"]}).drop_duplicates()
    numbers: dict[str, int] = {}
    out: dict[str, list[tuple[int, str]]] = {}
    for metric, signature in sorted(pairs.itertuples(index=False, name=None)):
        numbers.setdefault(signature, len(numbers) + 1)
        out.setdefault(metric, []).append((numbers[signature], signature))
    return out


def _footnotes(signatures: dict[str, list[tuple[int, str]]]) -> list[tuple[int, str, list[str]]]:
    """(number, signature, metrics) per footnote, by number."""
    numbered: dict[int, tuple[str, list[str]]] = {}
    for metric, entries in signatures.items():
        for number, signature in entries:
            numbered.setdefault(number, (signature, []))[1].append(metric.replace("|", " "))
    return [(n, sig, metrics) for n, (sig, metrics) in sorted(numbered.items())]


def _recommendations(data: ReportData) -> list[tuple[object, list[Recommendation], list[str]]]:
    out = []
    for goal in data.goals:
        recs = recommend(data.summary, goal, data.families, trials=data.trials.unit())
        verdicts = budget_verdicts(data)
        if verdicts is not None:  # sharing data: only what meets the run's budget is eligible
            recs = within_budget(goal, recs, verdicts, data.budget or "")
        notes = recommendation_notes(goal, recs)
        if data.protection is not None and (note := protect_note(goal, recs, PROTECT_LABEL, data.protection.budget,
                                                                 data.protection.met)):
            notes.insert(0, note)
        if verdicts is not None and (note := budget_note(goal, verdicts, data.budget or "")):
            notes.insert(0, note)
        out.append((goal, recs, notes))
    return out


#: A rank correlation between metrics across fewer strategies than this says little (and across fewer strategies
#: than metrics, the matrix is degenerate): the report shows it in its appendix.
MIN_CORRELATION_STRATEGIES = 5


def _correlation_strategies(data: ReportData) -> int:
    """How many strategies (variants) the metric correlations are computed across."""
    levels = data.summary[data.summary["level"].isin(CORRELATED_LEVELS)]
    return len(levels.loc[~levels["strategy"].isin(BASELINE_ROWS), ["strategy", "variant"]].drop_duplicates())


def correlations_in_appendix(data: ReportData) -> bool:
    """Whether the metric correlation matrix goes to the appendix: computed across fewer strategies than
    :data:`MIN_CORRELATION_STRATEGIES` or than the metrics it relates."""
    if data.correlations is None:
        return False
    n = _correlation_strategies(data)
    return n < MIN_CORRELATION_STRATEGIES or n < len(data.correlations)


def _correlation_note(data: ReportData) -> str:
    n, metrics = _correlation_strategies(data), 0 if data.correlations is None else len(data.correlations)
    return (f"Computed across {n} strategies for {metrics} metrics: a rank correlation over so few strategies says "
            "little about how the metrics relate, so it is kept here for reference.")


def _attacks(n: int) -> str:
    """``1 attack had`` / ``20 attacks had``."""
    return f"{n:,} attack{'' if n == 1 else 's'} had"


def verdict(data: ReportData) -> list[tuple[str, str]]:
    """The report's opening verdict: (what, plain sentence) pairs (:func:`tasks.report.verdict.verdict_items`)."""
    return verdict_items(_recommendations(data), data.summary, data.trials, data.budget)


def _details_tables(summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per strategy (and variant): every number with std, median, n, its 95% interval where it has one,
    failures and the reason when missing.
    The utility rows carry no variant; they join the strategy's ``first`` (or only unnamed) entry."""
    tables: dict[str, pd.DataFrame] = {}
    ordered = summary.assign(_base=summary["strategy"].isin(BASELINE_ROWS))
    for (_, strategy, variant), group in ordered.groupby(["_base", "strategy", "variant"], sort=True):
        name = strategy_label(strategy, variant)
        table = pd.DataFrame({
            "metric": group["metric"].tolist(),
            "about": [", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in structure_of(r).items())
                      for r in group.to_dict("records")],
            "level": group["level"].tolist(), "mean": group["value"].tolist(),
            "std": group["std"].tolist(), "median": group["median"].tolist(), "n": group["n"].astype(int).tolist(),
            "95% interval": [f"[{fmt(lo)}, {fmt(hi)}]" if pd.notna(lo) and pd.notna(hi) else ""
                             for lo, hi in zip(group.get("ci_low", pd.Series(math.nan, index=group.index)),
                                               group.get("ci_high", pd.Series(math.nan, index=group.index)),
                                               strict=True)],
            "failed": group["n_failed"].astype(int).tolist(),
            "reason": group["reason"].astype(object).where(group["reason"].notna(), "").astype(str).tolist()})
        tables[name] = pd.concat([tables[name], table], ignore_index=True) if name in tables else table
    return tables


def _plots(data: ReportData) -> list[Plot]:
    """The report's figures, in reading order; a figure that cannot be drawn carries its reason."""
    # matplotlib (0.5 s): deferred on purpose, only the HTML report draws
    from tasks.report import plots, plots_metrics, plots_protect

    points = aspect_points(data.summary) if not data.summary.empty else pd.DataFrame()
    figures = [plots.tradeoff_chart(points), plots.reid_vs_divergence(points)]
    if data.distributions is not None:
        figures.append(plots_metrics.cosine_distributions(data.distributions))
    if data.correlations is not None:
        levels = data.summary[data.summary["level"].isin(CORRELATED_LEVELS)]
        n = len(levels.loc[~levels["strategy"].isin(BASELINE_ROWS), ["strategy", "variant"]].drop_duplicates())
        figures.append(plots_metrics.correlation_heatmap(
            data.correlations, title=f"Sample- and distribution-level metrics across {n} strategies (|Spearman|)"))
    if data.metaeval is not None:
        figures.append(plots_metrics.metaeval_chart(data.metaeval))
    if data.protection is not None:
        figures.append(plots_protect.protect_curve_chart(data.protection.curve, data.protection.limit,
                                                         figure=data.protection.figure))
        if data.protection.frontier is not None and data.protection.frontier["floor"].nunique() > 1:
            figures.append(plots_protect.protect_frontier_chart(data.protection.frontier, data.protection.limit))
    return figures


# ------------------------------------------------------------------------------------------------ markdown
def with_interval(value: object, low: object = None, high: object = None) -> str:
    """A number as the report prints it, with its 95% interval where both bounds are known
    (``0.400 [0.168, 0.687]``); the release's dataset card prints its figures so too."""
    text = fmt(value)
    known = [b for b in (low, high) if isinstance(b, float | int) and not math.isnan(float(b))]
    if len(known) == 2 and text != "–":
        text += f" [{fmt(low)}, {fmt(high)}]"
    return text


def cell_text(table: ArticleTable, row: int, metric: str) -> str:
    """A table cell as the report prints it: the value, and its 95% interval where it has one."""
    return with_interval(table.value(row, metric), *(table.interval(row, metric) or (None, None)))


def _md_cell(table: ArticleTable, row: int, metric: str) -> str:
    text = cell_text(table, row, metric)
    marks = table.marks.get((row, metric), set())
    if "underline" in marks:
        text = f"<u>{text}</u>"
    if "best" in marks:
        text = f"**{text}**"
    return text


#: What :func:`escape_markdown` escapes with a backslash: raw HTML and entities (``<``, ``>``, ``&``), links
#: (``[``, ``]``), code spans, table cells and the backslash itself.
_MARKDOWN_SPECIAL = re.compile(r"([\\`<>&\[\]|])")


def escape_markdown(text: object) -> str:
    """Text safe in a markdown table cell or line, escaped as markdown (the page may be rendered, e.g. by the
    Prefect UI, and real user text must not become markup or a link): one line, markdown's special characters
    backslash-escaped, so a renderer shows them as written and the raw file reads without HTML entities."""
    flat = " ".join(str(text).replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    return _MARKDOWN_SPECIAL.sub(r"\\\1", flat)


def _md_frame(df: pd.DataFrame) -> str:
    header = "| " + " | ".join(escape_markdown(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(escape_markdown(fmt(v)) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _md_article_table(table: ArticleTable, signatures: dict[str, list[tuple[int, str]]]) -> list[str]:
    def header(col) -> str:
        mark = "[" + ",".join(str(n) for n, _ in signatures[col.key]) + "]" if col.key in signatures else ""
        return f"{col.group} {col.header}".strip() + mark

    lines = [f"## {table.title}", "", table.caption, "",
             "| strategy | " + " | ".join(header(c) for c in table.columns) + " |",
             "|---|" + "|".join("---" for _ in table.columns) + "|"]
    for i in range(len(table.rows)):
        lines.append(f"| {escape_markdown(table.label(i))} | " + " | ".join(_md_cell(table, i, c.key) for c in table.columns)
                     + " |")
    return lines


def _methods(data: ReportData) -> str:
    """The methods paragraph: how every interval is made (named once), and how budgets are decided."""
    decided = ("on the interval's bound (a risk's upper bound, utility's and meaning's lower bound; a budget the "
               "interval straddles is undecided)" if data.decide_on == "bound" else "on the point estimate alone")
    threat = (f" A budget's re-identification figures take the worst case over the {', '.join(data.budget_adversaries)} "
              "adversary setting(s) only (report.adversaries); the tables show every setting."
              if data.budget_adversaries else "")
    return (f"{METHOD} Controls: chance 1/N for re-identification, the majority class for profiling. "
            f"Budgets are decided {decided}.{threat}")


def budget_verdicts(data: ReportData) -> pd.DataFrame | None:
    """The strategies that meet the run's stated budget under the worst-case attack, then by how much the
    others miss it (``report.budget`` / ``synthugc report --budget``), decided on the interval's bound
    unless ``report.decide_on`` / ``--decide-on`` says point; a straddled budget is undecided."""
    if not data.budget:
        return None

    bounds = parse_budget(data.budget)
    verdicts = check_budget(budget_table(data.summary, data.budget_adversaries), bounds, decide_on=data.decide_on)
    return verdicts[["strategy", "meets", "undecided", "verdict"]] if not verdicts.empty else verdicts


#: The protect rounds table's columns the report shows (tasks.protect.files.ROUNDS_COLUMNS), by their header;
#: accuracy@1 carries its 95% interval.
PROTECT_ROUNDS_SHOWN: dict[str, str] = {
    "round": "round", "role": "role", "attack": "attack", "adversary": "adversary", "accuracy_at_1": "accuracy@1",
    "residual_risk": "residual risk over chance", "meaning": "meaning (BERTScore F1)", "documents_rewritten": "documents rewritten", "seconds": "seconds"}


def protect_rounds_table(protection: Protection) -> pd.DataFrame:
    """The protect stage's rounds as the report shows them, every cell already text."""
    rounds = protection.rounds

    def interval(column: str) -> list[str]:  # a rounds table older than the column shows it empty
        values = (rounds.get(c, pd.Series(math.nan, index=rounds.index)).astype(float)
                  for c in (column, f"{column}_ci_low", f"{column}_ci_high"))
        return [with_interval(v, lo, hi) for v, lo, hi in zip(*values, strict=True)]

    shown = {
        "round": rounds["round"].astype(int).astype(str), "role": rounds["role"].astype(str),
        "attack": rounds["attack"].astype(str), "adversary": rounds["adversary"].astype(str),
        "accuracy_at_1": interval("accuracy_at_1"), "residual_risk": interval("residual_risk"),
        "meaning": rounds["meaning"].astype(float).map(fmt),
        "documents_rewritten": rounds["documents_rewritten"].astype(int).astype(str),
        "seconds": rounds["seconds"].astype(float).map(lambda v: fmt(v, 1))}
    return pd.DataFrame({header: shown[column] for column, header in PROTECT_ROUNDS_SHOWN.items()})


def protect_frontier_table(frontier: pd.DataFrame) -> pd.DataFrame:
    """The frontier's points as the report shows them (highest floor first), every cell already text."""
    points = frontier_points(frontier)

    def column(name: str) -> pd.Series:
        return points.get(name, pd.Series(math.nan, index=points.index)).astype(float)

    def interval(name: str, bounds: str) -> list[str]:  # bounds: the prefix of the interval's columns
        return [with_interval(v, lo, hi) for v, lo, hi in zip(column(name), column(f"{bounds}ci_low"),
                                                            column(f"{bounds}ci_high"), strict=True)]

    return pd.DataFrame({
        "meaning floor": points["floor"].map(lambda v: f"{v:g}"),
        "certificate (worst attack)": [f"{v} ({a})" for v, a in zip(interval("value", ""),
                                                                    points["worst_attack"].map(_text_cell), strict=True)],
        "meaning (BERTScore F1)": interval("meaning", "meaning_"),
        "fluency (vs source)": interval("fluency", "fluency_"),
        "kept / held back": [f"{k} / {h}" for k, h in zip(points["documents_kept"], points["documents_held_back"],
                                                          strict=True)],
        "released": column("documents_released").map(lambda v: "–" if math.isnan(v) else f"{int(v):,}"),
        "substitution F1": column("substitution_macro_f1").map(fmt),
        "augmentation F1": column("augmentation_macro_f1").map(fmt),
        "linkability AUC": interval("linkability_auc", "linkability_"),
        "moves (documents)": points["moves"].map(_text_cell) if "moves" in points.columns else "–",
        "budget": points["met"].map({True: "met", False: "not met"}),
        "chosen": points["chosen"].map({True: "yes", False: ""})})


def _text_cell(value: object) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def protect_moves_table(protection: Protection) -> pd.DataFrame:
    """How many documents of the protected output each move made last (most first)."""
    moves = sorted(protection.moves.items(), key=lambda kv: (-kv[1], kv[0]))
    return pd.DataFrame({"move": [m for m, _ in moves], "documents": [str(n) for _, n in moves]})


def protect_verdict(protection: Protection) -> str:
    """The protect stage's verdict line: budget met or not on the certificate, then the loop's own verdict and
    notes."""
    met = "met" if protection.met else "not met"
    return (f"Budget {protection.budget} {met} on the certificate (every registered attack on the full histories). "
            f"{protection.verdict}")


def render_markdown(data: ReportData) -> str:
    """The markdown summary (also published as a Prefect artifact); the plots are in the HTML page."""
    signatures = _signature_index(data.summary)
    lines = [f"# {escape_markdown(data.title)}", ""]
    if items := verdict(data):
        lines += ["## Verdict", ""]
        lines += [f"- **{escape_markdown(what)}**: {escape_markdown(said)}." for what, said in items]
        lines += ["", "## This run", ""]
    lines += [f"- **{escape_markdown(k)}**: {escape_markdown(v)}" for k, v in data.facts.items()]
    if data.failed_stages:
        lines += ["", "## Failed stages", ""]
        lines += [f"- `{stage}`: {escape_markdown(reason)}" for stage, reason in sorted(data.failed_stages.items())]
    ranked = _recommendations(data)
    if ranked:
        glance = pd.DataFrame(_glance_rows(ranked), columns=["goal", "first choice", "score", "what it costs"])
        lines += ["", "## Which strategy should I use?", "", _md_frame(glance)]
    if (budget := budget_verdicts(data)) is not None:
        lines += ["", f"## Budget: `{(data.budget or '').replace('`', '')}`", "", _md_frame(budget)]
    for goal, recs, notes in ranked:
        lines += ["", f"## Recommendation: {goal.describe()}", ""]
        lines += [f"> {escape_markdown(note)}" for note in notes]
        for rec in recs:
            head = f"{rec.rank}." if rec.rank is not None else "–"
            name = strategy_label(rec.strategy, rec.variant)
            lines.append(f"- {head} **{escape_markdown(name)}** (score {fmt(rec.score, 2)}): {escape_markdown(rec.cost)}")
            lines += [f"  - {escape_markdown(reason)}" for reason in rec.reasons]
    if (p := data.protection) is not None:
        lines += ["", "## Protection", "", f"**{escape_markdown(protect_verdict(p))}**", "",
                  _md_frame(protect_rounds_table(p)), "", "Moves (documents each move made last):", "",
                  _md_frame(protect_moves_table(p))]
        if p.frontier is not None and p.frontier["floor"].nunique() > 1:
            lines += ["", "Frontier (one certified point per meaning floor; P is the chosen one):", "",
                      _md_frame(protect_frontier_table(p.frontier))]
            lines += [f"> {escape_markdown(note)}" for note in p.frontier_notes]
    for table in article_tables(data.summary, level=data.level, families=data.families, order=data.order):
        lines += ["", *_md_article_table(table, signatures)]
    risks, degenerate = split_degenerate(residual_risk_table(data.summary, data.order))
    if not risks.empty or not degenerate.empty:
        lines += ["", "## Residual risk over a control (Anonymeter)", ""]
        lines += [_md_frame(risks) if not risks.empty else "No residual risk was measured."]
        if not degenerate.empty:
            lines += ["", f"{_attacks(len(degenerate))} no residual risk to measure (see the appendix)."]
    if not (dp := dp_table(data.summary, data.dp_audits, data.order)).empty:
        lines += ["", f"## {DP_TITLE}", "", escape_markdown(DP_CAPTION), "", _md_frame(dp)]
    lines += ["", "## Methods", "", escape_markdown(_methods(data))]
    if data.correlations is not None and not correlations_in_appendix(data):
        lines += ["", "## Metric correlations across strategies (absolute Spearman, Fig. 5)", "",
                  _md_frame(data.correlations)]
    if data.human is not None:
        lines += ["", "## Human evaluation", "", f"{data.human.n_annotations} ratings.", "",
                  _md_frame(data.human.agreement), "", _md_frame(data.human.strategy_scores), "",
                  _md_frame(data.human.metric_human_correlations)]
    if data.examples is not None:
        lines += ["", "## Example outputs (Appendix A.3)", "", _md_frame(_clipped_examples(data.examples))]
    appendix = []
    if not degenerate.empty:
        appendix += ["", "### Residual risks with nothing to measure", "", _md_frame(degenerate)]
    if data.correlations is not None and correlations_in_appendix(data):
        appendix += ["", "### Metric correlations across strategies (absolute Spearman, Fig. 5)", "",
                     escape_markdown(_correlation_note(data)), "", _md_frame(data.correlations)]
    if signatures:
        appendix += ["", "### Metric signatures", ""]
        appendix += [f"{n}. `{sig}` ({', '.join(metrics)})" for n, sig, metrics in _footnotes(signatures)]
    if appendix:
        lines += ["", "## Appendix", *appendix]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- HTML
# The page is laid out by templates/report.html.j2 (with report.css and report.js inlined); the functions here
# turn the report's objects into the plain rows and strings it shows.


def _note(name: str) -> str:
    """The catalogue's header tip of a registered metric, else nothing."""
    registered = catalogue.lookup(name)
    return registered.note if registered is not None else ""


def _frame_view(df: pd.DataFrame, table_id: str, cls: str = "") -> dict:
    """A frame as the template's ``frame`` macro shows it: id, class, (header, tip) pairs, formatted rows."""
    return {"id": table_id, "cls": cls, "head": [(str(c), _note(str(c))) for c in df.columns],
            "rows": [[fmt(v) for v in row] for row in df.itertuples(index=False)]}


def _article_view(table: ArticleTable, signatures: dict[str, list[tuple[int, str]]]) -> dict:
    """An article table as the template shows it: the column groups' spans, the headers with their footnote
    numbers, and per row its cells (exact value, shown text, marks)."""
    spans: list[list] = []
    if any(c.group for c in table.columns):
        for col in table.columns:
            if spans and spans[-1][0] == col.group:
                spans[-1][1] += 1
            else:
                spans.append([col.group, 1])
    columns = [{"key": c.key, "header": c.header, "note": c.note,
                "footnotes": [n for n, _ in signatures.get(c.key, [])]} for c in table.columns]
    rows = []
    for i, (strategy, variant) in enumerate(table.rows):
        cells = [{"key": c.key, "value": repr(table.value(i, c.key)), "text": cell_text(table, i, c.key),
                  "marks": table.marks.get((i, c.key), set())} for c in table.columns]
        rows.append({"strategy": strategy, "variant": variant, "label": table.label(i),
                     "baseline": table.is_baseline(i), "cells": cells})
    return {"key": table.key, "title": table.title, "caption": table.caption, "spans": spans, "columns": columns,
            "rows": rows}


def _glance_rows(ranked: list[tuple[object, list[Recommendation], list[str]]]) -> list[tuple[str, str, str, str]]:
    """(goal, first choice, score, what it costs) per goal: the report's answer in one table."""
    rows = []
    for goal, recs, _ in ranked:
        top = next((r for r in recs if r.rank == 1), None)
        over = any(r.reasons and r.reasons[-1].startswith(OVER_BUDGET) for r in recs)
        name = "none eligible" if top is None else strategy_label(top.strategy, top.variant)
        rows.append((goal.headline(), name, fmt(top.score, 2) if top else "–", top.cost if top else
                     "no strategy of this run meets the run's budget" if over else
                     "no strategy of this run meets the goal"))
    return rows


def _recommendations_view(data: ReportData) -> dict:
    """The at-a-glance table and, per goal, its notes and ranked strategies."""
    ranked = _recommendations(data)
    glance = pd.DataFrame(_glance_rows(ranked), columns=["goal", "first choice", "score", "what it costs"])
    goals = [{"title": goal.describe(), "notes": notes,
              "recs": [{"strategy": rec.strategy, "name": strategy_label(rec.strategy, rec.variant),
                        "rank": rec.rank, "eligible": rec.eligible, "score": fmt(rec.score, 2), "cost": rec.cost,
                        "reasons": rec.reasons} for rec in recs]}
             for goal, recs, notes in ranked]
    return {"glance": _frame_view(glance, "at-a-glance", "glance"), "goals": goals}


def _clipped_examples(examples: pd.DataFrame) -> pd.DataFrame:
    def clip(v: object) -> object:
        return v if not isinstance(v, str) or len(v) <= EXAMPLE_MAX_CHARS else v[:EXAMPLE_MAX_CHARS - 1] + "…"
    return examples.map(clip)


def _sections(data: ReportData) -> list[tuple[str, str]]:
    """(anchor, title) of the sections the page has, for the navigation bar."""
    out = []
    if data.goals:
        out.append(("recommendations", "Recommendations"))
    if data.protection is not None:
        out.append(("protection", "Protection"))
    out += [("figures", "Trade-offs"), ("tables", "Tables")]
    if data.human is not None:
        out.append(("human", "Human evaluation"))
    if data.examples is not None:
        out.append(("examples", "Examples"))
    out += [("methods", "Methods"), ("appendix", "Appendix")]
    return out


DP_TITLE = "Differential privacy: nominal against audited epsilon"
DP_CAPTION = ("Per DP setting, the epsilon it states per document and the one the audit measured on this corpus "
              "(synthugc audit-dp): DP-Prompt's largest privacy loss of an output against neighbouring documents, "
              "DP-BART's largest epsilon lower bound of a distinguishing game. A violation is an audited epsilon "
              "above the nominal one.")


def _dp_view(data: ReportData) -> dict | None:
    table = dp_table(data.summary, data.dp_audits, data.order)
    return None if table.empty else {"title": DP_TITLE, "caption": DP_CAPTION, "table": _frame_view(table, "dp")}


def _risk_view(data: ReportData) -> tuple[dict | None, dict | None]:
    """The residual risks measured, and the ones with nothing to measure (the appendix's)."""
    risks, degenerate = split_degenerate(residual_risk_table(data.summary, data.order))
    return (None if risks.empty and degenerate.empty else _frame_view(risks, "residual-risk"),
            None if degenerate.empty else _frame_view(degenerate, "residual-risk-degenerate"))


def render_html(data: ReportData) -> str:
    """A self-contained HTML page (template ``report.html.j2``): CSS, JS and images inline, nothing fetched."""
    signatures = _signature_index(data.summary)
    by_name = {f.name: f for f in _plots(data)}
    budget = budget_verdicts(data)
    human = data.human
    risks, degenerate = _risk_view(data)
    appendix_correlations = correlations_in_appendix(data)
    return render(
        "report.html.j2", title=data.title, verdict=verdict(data), facts=data.facts, sections=_sections(data),
        failed_stages=sorted(data.failed_stages.items()),
        recommendations=_recommendations_view(data) if data.goals else None,
        budget=None if budget is None else {"rule": data.budget or "", "table": _frame_view(budget, "budget")},
        figures=by_name,
        protection=None if (p := data.protection) is None else {
            "verdict": protect_verdict(p), "met": p.met, "curve": by_name["protect-rounds"],
            "rounds": _frame_view(protect_rounds_table(p), "protect-rounds-table"),
            "moves": _frame_view(protect_moves_table(p), "protect-moves")},
        tables=[_article_view(t, signatures) for t in article_tables(data.summary, level=data.level,
                                                                     families=data.families, order=data.order)],
        checks=[by_name[n] for n in ("metric-correlations", "metric-metaeval")
                if n in by_name and not (n == "metric-correlations" and appendix_correlations)],
        appendix_correlations=(by_name.get("metric-correlations"), _correlation_note(data))
        if appendix_correlations else None,
        human=None if human is None else {
            "n": human.n_annotations, "agreement": _frame_view(human.agreement, "human-agreement"),
            "strategies": _frame_view(human.strategy_scores, "human-strategies"),
            "correlations": _frame_view(human.metric_human_correlations, "human-metric-correlations")},
        examples=None if data.examples is None else _frame_view(_clipped_examples(data.examples), "examples",
                                                                "examples"),
        examples_what=None if data.examples is None else (
            "Pseudonymised source texts and their rewrites (strategies that rewrote the original texts are left out)"
            if PSEUDONYMISED_SOURCE in data.examples.columns else "Real source texts and their rewrites"),
        residual_risk=risks, degenerate_risks=degenerate, dp=_dp_view(data), methods=_methods(data),
        details=[(name, _frame_view(table, f"strategy-{i}"))
                 for i, (name, table) in enumerate(_details_tables(data.summary).items())],
        footnotes=_footnotes(signatures))


def article_table_frames(data: ReportData) -> dict[str, pd.DataFrame]:
    """The article tables as frames keyed by table key (published as Prefect table artifacts)."""
    return {t.key: t.frame() for t in article_tables(data.summary, level=data.level, families=data.families,
                                                        order=data.order)}


def render_report(data: ReportData) -> tuple[str, str]:
    """(markdown, html) of the report."""
    return render_markdown(data), render_html(data)

