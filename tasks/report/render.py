"""The run report: a markdown summary and a self-contained HTML page (inline CSS, no network), built
from the distribution-level scores of each strategy."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import pandas as pd

#: Direction of each metric, shown in table headers (higher is better for all of these so far).
METRIC_NOTES: dict[str, str] = {
    "bertscore_p": "meaning, precision ↑",
    "bertscore_r": "meaning, recall ↑",
    "bertscore_f1": "meaning ↑",
    "bleu_divergence": "divergence (1 − BLEU/100) ↑",
}
_STRATEGY_COLUMNS = ["metric", "mean", "std", "median", "n", "failed"]


@dataclass
class ReportInputs:
    """What the report shows: run facts, the distribution summary, and failure counts."""

    title: str
    facts: dict[str, str]
    summary: pd.DataFrame  # strategy, variant, metric, value, std, median, n, n_failed, signature
    failed_stages: dict[str, str] = field(default_factory=dict)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.4f}"
    return str(value)


def strategy_tables(summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """One table per strategy (and variant): a row per metric with mean, std, median, n, failed."""
    tables = {}
    for (strategy, variant), group in summary.groupby(["strategy", "variant"], sort=True):
        name = strategy if variant in ("first", "", None) else f"{strategy} ({variant})"
        tables[name] = pd.DataFrame({
            "metric": group["metric"].tolist(),
            "mean": group["value"].tolist(),
            "std": group["std"].tolist(),
            "median": group["median"].tolist(),
            "n": group["n"].astype(int).tolist(),
            "failed": group["n_failed"].astype(int).tolist(),
        }, columns=_STRATEGY_COLUMNS)
    return tables


def overview_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Strategies as rows, metric means as columns (the article's Table 4 layout)."""
    if summary.empty:
        return pd.DataFrame()
    wide = summary.pivot_table(index=["strategy", "variant"], columns="metric", values="value", sort=True)
    return wide.reset_index()


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
    overview = overview_table(inputs.summary)
    if not overview.empty:
        lines += ["", "## Overview (means)", "", _md_table(overview)]
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
    overview = overview_table(inputs.summary)
    if not overview.empty:
        parts += ["<h2>Overview (means)</h2>", _html_table(overview, "overview")]
        notes = [f"{m}: {n}" for m, n in METRIC_NOTES.items() if m in overview.columns]
        parts.append(f"<p class=\"note\">{html.escape('; '.join(notes))}</p>")
    for i, (name, table) in enumerate(strategy_tables(inputs.summary).items()):
        parts += [f"<h2>{html.escape(name)}</h2>", _html_table(table, f"strategy-{i}")]
    if not inputs.summary.empty:
        parts.append("<h2>Metric signatures</h2><ul>")
        parts += [f"<li><b>{html.escape(m)}</b> <span class=\"sig\">{html.escape(s)}</span></li>"
                  for m, s in _signatures(inputs.summary)]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
