"""The run report: a markdown summary and a self-contained HTML page (inline CSS, no network), built
from the distribution-level scores of each strategy."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import pandas as pd

#: What each metric measures and its direction (↑ higher = more of the named aspect), shown as header tips.
METRIC_NOTES: dict[str, str] = {
    "bertscore_p": "meaning, precision ↑", "bertscore_r": "meaning, recall ↑", "bertscore_f1": "meaning ↑",
    "fbd": "meaning distance ↓", "fbd_sbert": "meaning distance (SBERT) ↓", "fcsd": "cosine-to-real-mean distance ↓",
    "style_cosine": "style kept ↑", "style_frechet": "style distance ↓", "pos_jaccard": "syntax kept ↑",
    "pos_jsd": "syntax divergence ↓", "bleu_divergence": "divergence (1 − BLEU/100) ↑",
    "self_bleu": "self-BLEU among variants ↓", "self_bleu_diversity": "diversity among variants ↑",
    "char_jsd": "character-trigram divergence ↑", "sti": "style transfer intensity toward target ↑",
    "sti_pct": "% of possible style gain ↑", "cps": "content preserved ↑",
}
#: Section of the report per metric level (the article's Table 4 is sample level, Table 13 distribution level).
LEVEL_TITLES: dict[str, str] = {"sample-mean": "Sample-level metrics (means)",
                                "distribution": "Distribution-level metrics",
                                "bag-mean": "Bag-level metrics (means over groups)",
                                "utility": "Utility: train on synthetic, test on real (mean over seeds)",
                                "privacy": "Privacy attacks (lower accuracy, AUC or re-identification = more private)"}
CORRELATION_TITLE = "Metric correlations across strategies (absolute Spearman)"
_STRATEGY_COLUMNS = ["metric", "level", "mean", "std", "median", "n", "failed", "reason"]


@dataclass
class ReportInputs:
    """What the report shows: run facts, the distribution summary, and failure counts."""

    title: str
    facts: dict[str, str]
    summary: pd.DataFrame  # strategy, variant, level, metric, value, std, median, n, n_failed, signature, reason
    failed_stages: dict[str, str] = field(default_factory=dict)
    correlations: pd.DataFrame | None = None  # metric x metric absolute Spearman across strategies (Fig. 5)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.4f}"
    return str(value)


def strategy_tables(summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """One table per strategy (and variant): a row per metric with level, mean, std, median, n, failed, reason."""
    tables = {}
    for (strategy, variant), group in summary.groupby(["strategy", "variant"], sort=True):
        name = strategy if variant in ("first", "", None) else f"{strategy} ({variant})"
        tables[name] = pd.DataFrame({
            "metric": group["metric"].tolist(),
            "level": group["level"].tolist(),
            "mean": group["value"].tolist(),
            "std": group["std"].tolist(),
            "median": group["median"].tolist(),
            "n": group["n"].astype(int).tolist(),
            "failed": group["n_failed"].astype(int).tolist(),
            "reason": group["reason"].fillna("").astype(str).tolist(),
        }, columns=_STRATEGY_COLUMNS)
    return tables


#: Rows shown before the strategies: the attack on the real text, then the chance rate (as the article's tables).
BASELINE_ROWS = ("original", "chance")


def _baselines_first(value: object) -> tuple[int, str]:
    text = str(value)
    return (BASELINE_ROWS.index(text), "") if text in BASELINE_ROWS else (len(BASELINE_ROWS), text)


def overview_tables(summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per metric level: strategies as rows, metric values as columns (Table 4 / Table 13 layouts)."""
    tables = {}
    for level, title in LEVEL_TITLES.items():
        part = summary[summary["level"] == level]
        if part.empty:
            continue
        order = list(dict.fromkeys(part["metric"]))
        wide = part.set_index(["strategy", "variant", "metric"])["value"].unstack("metric").reset_index()
        wide = wide.sort_values(["strategy", "variant"], key=lambda col: col.map(_baselines_first), kind="stable")
        tables[title] = wide[["strategy", "variant", *order]].reset_index(drop=True).rename_axis(columns=None)
    return tables


def _md_table(df: pd.DataFrame) -> str:
    header = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _signatures(summary: pd.DataFrame) -> list[str]:
    return sorted(summary[["metric", "signature"]].drop_duplicates().itertuples(index=False, name=None))


def render_markdown(inputs: ReportInputs) -> str:
    """The markdown summary (also published as a Prefect artifact)."""
    lines = [f"# {inputs.title}", ""]
    lines += [f"- **{k}**: {v}" for k, v in inputs.facts.items()]
    if inputs.failed_stages:
        lines += ["", "## Failed stages", ""]
        lines += [f"- `{stage}`: {reason}" for stage, reason in sorted(inputs.failed_stages.items())]
    for title, overview in overview_tables(inputs.summary).items():
        lines += ["", f"## {title}", "", _md_table(overview)]
    if inputs.correlations is not None and inputs.correlations.drop(columns="metric").notna().any().any():
        lines += ["", f"## {CORRELATION_TITLE}", "", _md_table(inputs.correlations)]
    for name, table in strategy_tables(inputs.summary).items():
        lines += ["", f"## {name}", "", _md_table(table)]
    if not inputs.summary.empty:
        lines += ["", "## Metric signatures", ""]
        lines += [f"- `{metric}`: `{sig}`" for metric, sig in _signatures(inputs.summary)]
    return "\n".join(lines) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:70rem;color:#1b1f24;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #d0d7de;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.5rem 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:right}th{background:#f6f8fa}
td:first-child,th:first-child{text-align:left}dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem}
dt{font-weight:600}.failed{color:#b42318}.sig{font-family:ui-monospace,monospace;font-size:.8rem;color:#57606a}
.note{font-size:.8rem;color:#57606a}
"""


def _html_table(df: pd.DataFrame, table_id: str) -> str:
    head = "".join(
        f"<th title=\"{html.escape(METRIC_NOTES.get(str(c), ''))}\">{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for row in df.itertuples(index=False):
        cells = "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row)
        rows.append(f"<tr>{cells}</tr>")
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def render_html(inputs: ReportInputs) -> str:
    """A self-contained HTML page: everything inline, nothing fetched."""
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{html.escape(inputs.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(inputs.title)}</h1><dl>",
        *[f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in inputs.facts.items()],
        "</dl>",
    ]
    if inputs.failed_stages:
        parts.append("<h2 class=\"failed\">Failed stages</h2><ul>")
        parts += [f"<li class=\"failed\"><code>{html.escape(s)}</code>: {html.escape(r)}</li>"
                  for s, r in sorted(inputs.failed_stages.items())]
        parts.append("</ul>")
    for i, (title, overview) in enumerate(overview_tables(inputs.summary).items()):
        parts += [f"<h2>{html.escape(title)}</h2>", _html_table(overview, f"overview-{i}")]
        notes = [f"{m}: {n}" for m, n in METRIC_NOTES.items() if m in overview.columns]
        if notes:
            parts.append(f"<p class=\"note\">{html.escape('; '.join(notes))}</p>")
    if inputs.correlations is not None and inputs.correlations.drop(columns="metric").notna().any().any():
        parts += [f"<h2>{html.escape(CORRELATION_TITLE)}</h2>", _html_table(inputs.correlations, "correlations")]
    for i, (name, table) in enumerate(strategy_tables(inputs.summary).items()):
        parts += [f"<h2>{html.escape(name)}</h2>", _html_table(table, f"strategy-{i}")]
    if not inputs.summary.empty:
        parts.append("<h2>Metric signatures</h2><ul>")
        parts += [f"<li><b>{html.escape(m)}</b> <span class=\"sig\">{html.escape(s)}</span></li>"
                  for m, s in _signatures(inputs.summary)]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
