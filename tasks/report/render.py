"""The run report: a markdown summary and one self-contained HTML page (inline CSS, JS and images; nothing
is fetched), laid out to answer "which strategy should I use for my data, and what does it cost me in
utility and privacy?": recommendations first, then the article's tables and the plots, the human
evaluation, example outputs (only when switched on) and the metric signatures as footnotes."""

from __future__ import annotations

import html
import math

import pandas as pd

from tasks.metrics import catalogue
from tasks.report import plots
from tasks.report.build import (
    CORRELATED_LEVELS,
    EXAMPLE_MAX_CHARS,
    PSEUDONYMISED_SOURCE,
    ReportData,
    aspect_points,
)
from tasks.report.recommend import Recommendation, recommend, recommendation_notes
from tasks.report.tables import BASELINE_ROWS, ArticleTable, article_tables, strategy_label
from tasks.scores import column_keys, structure_of


def fmt(value: object, digits: int = 3) -> str:
    """How the report prints a number: fixed decimals, ∞ for infinities, – for missing."""
    if isinstance(value, float | int) and not isinstance(value, bool):
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
        recs = recommend(data.summary, goal, data.families)
        out.append((goal, recs, recommendation_notes(goal, recs)))
    return out


def _details_tables(summary: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per strategy (and variant): every number with std, median, n, failures and the reason when missing.
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
            "failed": group["n_failed"].astype(int).tolist(),
            "reason": group["reason"].astype(object).where(group["reason"].notna(), "").astype(str).tolist()})
        tables[name] = pd.concat([tables[name], table], ignore_index=True) if name in tables else table
    return tables


def _plots(data: ReportData) -> list[plots.Plot]:
    """The report's figures, in reading order; a figure that cannot be drawn carries its reason."""
    points = aspect_points(data.summary) if not data.summary.empty else pd.DataFrame()
    figures = [plots.tradeoff_chart(points), plots.reid_vs_divergence(points)]
    if data.distributions is not None:
        figures.append(plots.cosine_distributions(data.distributions))
    if data.correlations is not None:
        levels = data.summary[data.summary["level"].isin(CORRELATED_LEVELS)]
        n = len(levels.loc[~levels["strategy"].isin(BASELINE_ROWS), ["strategy", "variant"]].drop_duplicates())
        figures.append(plots.correlation_heatmap(
            data.correlations, title=f"Sample- and distribution-level metrics across {n} strategies (|Spearman|)"))
    if data.metaeval is not None:
        figures.append(plots.metaeval_chart(data.metaeval))
    return figures


# ------------------------------------------------------------------------------------------------ markdown
def _md_cell(table: ArticleTable, row: int, metric: str) -> str:
    text = fmt(table.value(row, metric))
    marks = table.marks.get((row, metric), set())
    if "underline" in marks:
        text = f"<u>{text}</u>"
    if "best" in marks:
        text = f"**{text}**"
    return text


def _md(text: object) -> str:
    """Text safe in a markdown table cell or line: HTML escaped (the markdown may be rendered as HTML, e.g.
    by the Prefect UI, and real user text must not become markup), one line, pipes escaped."""
    flat = " ".join(str(text).replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    return html.escape(flat, quote=False).replace("|", "\\|")


def _md_frame(df: pd.DataFrame) -> str:
    header = "| " + " | ".join(_md(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(_md(fmt(v)) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _md_article_table(table: ArticleTable, signatures: dict[str, list[tuple[int, str]]]) -> list[str]:
    def header(col) -> str:
        mark = "[" + ",".join(str(n) for n, _ in signatures[col.key]) + "]" if col.key in signatures else ""
        return f"{col.group} {col.header}".strip() + mark

    lines = [f"## {table.title}", "", table.caption, "",
             "| strategy | " + " | ".join(header(c) for c in table.columns) + " |",
             "|---|" + "|".join("---" for _ in table.columns) + "|"]
    for i in range(len(table.rows)):
        lines.append(f"| {_md(table.label(i))} | " + " | ".join(_md_cell(table, i, c.key) for c in table.columns)
                     + " |")
    return lines


def budget_verdicts(data: ReportData) -> pd.DataFrame | None:
    """The strategies that meet the run's stated budget under the worst-case attack, then by how much the
    others miss it (``report.require`` / ``synthugc report --require``)."""
    if not data.budget:
        return None
    from tasks.report.budgets import budget_table, check_budget, parse_budget

    bounds = parse_budget(data.budget)
    verdicts = check_budget(budget_table(data.summary), bounds)
    return verdicts[["strategy", "meets", "verdict"]] if not verdicts.empty else verdicts


def render_markdown(data: ReportData) -> str:
    """The markdown summary (also published as a Prefect artifact); the plots are in the HTML page."""
    signatures = _signature_index(data.summary)
    lines = [f"# {_md(data.title)}", ""]
    lines += [f"- **{_md(k)}**: {_md(v)}" for k, v in data.facts.items()]
    if data.failed_stages:
        lines += ["", "## Failed stages", ""]
        lines += [f"- `{stage}`: {_md(reason)}" for stage, reason in sorted(data.failed_stages.items())]
    ranked = _recommendations(data)
    if ranked:
        glance = pd.DataFrame(_glance_rows(ranked), columns=["goal", "first choice", "score", "what it costs"])
        lines += ["", "## Which strategy should I use?", "", _md_frame(glance)]
    if (budget := budget_verdicts(data)) is not None:
        lines += ["", f"## Budget: `{(data.budget or '').replace('`', '')}`", "", _md_frame(budget)]
    for goal, recs, notes in ranked:
        lines += ["", f"## Recommendation: {goal.describe()}", ""]
        lines += [f"> {_md(note)}" for note in notes]
        for rec in recs:
            head = f"{rec.rank}." if rec.rank is not None else "–"
            name = strategy_label(rec.strategy, rec.variant)
            lines.append(f"- {head} **{_md(name)}** (score {fmt(rec.score, 2)}): {_md(rec.cost)}")
            lines += [f"  - {_md(reason)}" for reason in rec.reasons]
    for table in article_tables(data.summary, level=data.level, families=data.families, order=data.order):
        lines += ["", *_md_article_table(table, signatures)]
    if data.correlations is not None:
        lines += ["", "## Metric correlations across strategies (absolute Spearman, Fig. 5)", "",
                  _md_frame(data.correlations)]
    if data.human is not None:
        lines += ["", "## Human evaluation", "", f"{data.human.n_annotations} ratings.", "",
                  _md_frame(data.human.agreement), "", _md_frame(data.human.strategy_scores), "",
                  _md_frame(data.human.metric_human_correlations)]
    if data.examples is not None:
        lines += ["", "## Example outputs (Appendix A.3)", "", _md_frame(_clipped_examples(data.examples))]
    if signatures:
        lines += ["", "## Metric signatures", ""]
        lines += [f"{n}. `{sig}` ({', '.join(metrics)})" for n, sig, metrics in _footnotes(signatures)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- HTML
_CSS = """
:root{--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--head:#f6f8fa;--accent:#0072B2}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:2rem auto;max-width:78rem;
color:var(--fg);padding:0 1rem;line-height:1.45}
h1{font-size:1.7rem;margin-bottom:.3rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid var(--line);
padding-bottom:.3rem}h3{font-size:1.05rem;margin-top:1.4rem}
table{border-collapse:collapse;margin:.5rem 0;font-variant-numeric:tabular-nums;font-size:.9rem}
th,td{border:1px solid var(--line);padding:.28rem .55rem;text-align:right;vertical-align:top}th{background:var(--head)}
td:first-child,th:first-child{text-align:left}tr.baseline td{background:#fbfbfc;color:var(--muted)}
td strong{color:#000}td u{text-decoration-thickness:2px;text-underline-offset:2px}
dl{display:grid;grid-template-columns:max-content auto;gap:.15rem 1rem}dt{font-weight:600}
.failed{color:#b42318}.sig{font-family:ui-monospace,monospace;font-size:.78rem;color:var(--muted);word-break:break-all}
.caption,.note{font-size:.85rem;color:var(--muted);max-width:60rem}
nav{background:var(--head);border:1px solid var(--line);padding:.5rem 1rem;font-size:.9rem}
nav a{margin-right:1rem;color:var(--accent)}
figure{margin:1rem 0}figure img{max-width:100%;height:auto;border:1px solid var(--line)}
figcaption{font-size:.85rem;color:var(--muted);max-width:60rem}
.recs{list-style:none;padding-left:0}.recs>li{border:1px solid var(--line);border-radius:6px;padding:.5rem .8rem;
margin:.4rem 0}.recs .rank{font-weight:700;color:var(--accent);margin-right:.4rem}.recs .ineligible{color:var(--muted)}
.recs ul{margin:.2rem 0 0 1rem;font-size:.9rem}.cost{font-size:.9rem}
.examples td{text-align:left;max-width:30rem;white-space:pre-wrap}
details summary{cursor:pointer;font-weight:600;margin:.4rem 0}.scroll{overflow-x:auto;max-width:100%}
.glance td:nth-child(2){font-weight:700}.glance td,.glance th,.examples th{text-align:left}
"""

#: On load: counts the figures that loaded and records where each figure and table sits, so a reader (or a
#: headless browser test holding a screenshot) can tell the page is complete and find each part in it.
_JS = """
window.addEventListener('load',function(){var imgs=document.querySelectorAll('figure img');var ok=0;
imgs.forEach(function(i){if(i.complete&&i.naturalWidth>0){ok++;}});
function box(e){var r=e.getBoundingClientRect();e.setAttribute('data-box',[Math.round(r.left+scrollX),
Math.round(r.top+scrollY),Math.round(r.width),Math.round(r.height)].join(','));}
document.querySelectorAll('figure img, table').forEach(box);
document.body.setAttribute('data-figures',imgs.length);document.body.setAttribute('data-figures-loaded',ok);
document.body.setAttribute('data-height',document.documentElement.scrollHeight);});
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _html_article_table(table: ArticleTable, signatures: dict[str, list[tuple[int, str]]]) -> str:
    groups = [c.group for c in table.columns]
    head = ""
    if any(groups):
        spans = []
        for g in groups:
            if spans and spans[-1][0] == g:
                spans[-1][1] += 1
            else:
                spans.append([g, 1])
        head += "<tr><th></th>" + "".join(f'<th colspan="{n}">{_e(g)}</th>' for g, n in spans) + "</tr>"
    cells = []
    for col in table.columns:
        sup = ""
        if col.key in signatures:
            sup = "<sup>" + ",".join(f'<a href="#sig-{n}">{n}</a>' for n, _ in signatures[col.key]) + "</sup>"
        cells.append(f'<th title="{_e(col.note)}" data-metric="{_e(col.key)}">{_e(col.header)}{sup}</th>')
    head += "<tr><th>Generation strategy</th>" + "".join(cells) + "</tr>"
    body = []
    for i, (strategy, variant) in enumerate(table.rows):
        tds = []
        for col in table.columns:
            value = table.value(i, col.key)
            text = _e(fmt(value))
            marks = table.marks.get((i, col.key), set())
            if "underline" in marks:
                text = f"<u>{text}</u>"
            if "best" in marks:
                text = f"<strong>{text}</strong>"
            tds.append(f'<td data-metric="{_e(col.key)}" data-value="{_e(repr(value))}">{text}</td>')
        cls = ' class="baseline"' if table.is_baseline(i) else ""
        body.append(f'<tr{cls} data-strategy="{_e(strategy)}" data-variant="{_e(variant)}"><td>{_e(table.label(i))}'
                    f"</td>{''.join(tds)}</tr>")
    return (f'<section id="{_e(table.key)}"><h2>{_e(table.title)}</h2><p class="caption">{_e(table.caption)}</p>'
            f'<div class="scroll"><table class="article" id="{_e(table.key)}-table"><thead>{head}</thead><tbody>'
            f'{"".join(body)}</tbody></table></div></section>')


def _note(name: str) -> str:
    """The catalogue's header tip of a registered metric, else nothing."""
    registered = catalogue.lookup(name)
    return registered.note if registered is not None else ""


def _html_frame(df: pd.DataFrame, table_id: str, cls: str = "") -> str:
    head = "".join(f'<th title="{_e(_note(str(c)))}">{_e(c)}</th>' for c in df.columns)
    rows = "".join("<tr>" + "".join(f"<td>{_e(fmt(v))}</td>" for v in row) + "</tr>"
                   for row in df.itertuples(index=False))
    klass = f' class="{cls}"' if cls else ""
    return (f'<div class="scroll"><table id="{_e(table_id)}"{klass}><thead><tr>{head}</tr></thead><tbody>{rows}'
            "</tbody></table></div>")


def _html_plot(figure: plots.Plot) -> str:
    if figure.png is None:
        return (f'<figure id="plot-{_e(figure.name)}" class="missing"><figcaption><b>{_e(figure.title)}</b>: not '
                f"drawn: {_e(figure.reason)}</figcaption></figure>")
    return (f'<figure id="plot-{_e(figure.name)}"><img alt="{_e(figure.title)}" src="{figure.data_uri()}">'
            f"<figcaption><b>{_e(figure.title)}.</b> {_e(figure.caption)}</figcaption></figure>")


def _glance_rows(ranked: list[tuple[object, list[Recommendation], list[str]]]) -> list[tuple[str, str, str, str]]:
    """(goal, first choice, score, what it costs) per goal: the report's answer in one table."""
    rows = []
    for goal, recs, _ in ranked:
        top = next((r for r in recs if r.rank == 1), None)
        name = "none eligible" if top is None else strategy_label(top.strategy, top.variant)
        rows.append((goal.headline(), name, fmt(top.score, 2) if top else "–", top.cost if top else
                     "no strategy of this run meets the goal"))
    return rows


def _html_recommendations(data: ReportData) -> str:
    ranked = _recommendations(data)
    glance = pd.DataFrame(_glance_rows(ranked), columns=["goal", "first choice", "score", "what it costs"])
    parts = ["<h3>At a glance</h3>", _html_frame(glance, "at-a-glance", "glance")]
    for i, (goal, recs, notes) in enumerate(ranked):
        parts.append(f'<h3 id="goal-{i}">{_e(goal.describe())}</h3>')
        parts += [f'<p class="note">{_e(n)}</p>' for n in notes]
        items = []
        for rec in recs:
            name = strategy_label(rec.strategy, rec.variant)
            rank = f'<span class="rank">{rec.rank}.</span>' if rec.rank is not None else '<span class="rank">–</span>'
            cls = "" if rec.eligible else ' class="ineligible"'
            reasons = "".join(f"<li>{_e(r)}</li>" for r in rec.reasons)
            items.append(f"<li{cls} data-strategy=\"{_e(rec.strategy)}\">{rank}<b>{_e(name)}</b> "
                         f"<span class=\"note\">score {_e(fmt(rec.score, 2))}</span>"
                         f'<div class="cost">{_e(rec.cost)}</div><ul>{reasons}</ul></li>')
        parts.append(f'<ol class="recs">{"".join(items)}</ol>')
    return "".join(parts)


def _clipped_examples(examples: pd.DataFrame) -> pd.DataFrame:
    def clip(v: object) -> object:
        return v if not isinstance(v, str) or len(v) <= EXAMPLE_MAX_CHARS else v[:EXAMPLE_MAX_CHARS - 1] + "…"
    return examples.map(clip)


def _sections(data: ReportData) -> list[tuple[str, str]]:
    """(anchor, title) of the sections the page has, for the navigation bar."""
    out = []
    if data.goals:
        out.append(("recommendations", "Recommendations"))
    out += [("figures", "Trade-offs"), ("tables", "Tables")]
    if data.human is not None:
        out.append(("human", "Human evaluation"))
    if data.examples is not None:
        out.append(("examples", "Examples"))
    out += [("details", "Details"), ("signatures", "Signatures")]
    return out


def render_html(data: ReportData) -> str:
    """A self-contained HTML page: CSS, JS and images inline, nothing fetched."""
    signatures = _signature_index(data.summary)
    figures = _plots(data)
    by_name = {f.name: f for f in figures}
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(data.title)}</title><style>{_CSS}</style><script>{_JS}</script></head><body>",
        f"<h1>{_e(data.title)}</h1><dl>",
        *[f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in data.facts.items()],
        "</dl><nav>" + "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in _sections(data)) + "</nav>",
    ]
    if data.failed_stages:
        parts.append('<h2 class="failed">Failed stages</h2><ul>')
        parts += [f'<li class="failed"><code>{_e(s)}</code>: {_e(r)}</li>' for s, r in sorted(data.failed_stages.items())]
        parts.append("</ul>")
    if data.goals:
        parts += ['<h2 id="recommendations">Which strategy should I use?</h2>',
                  '<p class="caption">Strategies of this run ranked for the stated goal from the measured numbers '
                  "(seed 000 §7); each reason quotes the numbers it rests on.</p>", _html_recommendations(data)]
    if (budget := budget_verdicts(data)) is not None:
        parts += [f'<h2 id="budget">Budget: {_e(data.budget or "")}</h2>',
                  '<p class="caption">Re-identification is the worst case over the run\'s attacks and adversary '
                  "settings; utility is the substitution model's score as a share of the real-data model's.</p>",
                  _html_frame(budget, "budget")]
    parts.append('<h2 id="figures">What each strategy keeps and leaks</h2>')
    parts += [_html_plot(by_name[n]) for n in ("aspect-tradeoff", "reid-vs-divergence") if n in by_name]
    parts.append('<div id="tables"></div>')
    for table in article_tables(data.summary, level=data.level, families=data.families, order=data.order):
        parts.append(_html_article_table(table, signatures))
        if table.key == "table13" and "cosine-distributions" in by_name:
            parts.append(_html_plot(by_name["cosine-distributions"]))
    checks = [by_name[n] for n in ("metric-correlations", "metric-metaeval") if n in by_name]
    if checks:
        parts.append('<h2 id="metric-checks">How the metrics relate, and whether they measure what they claim</h2>')
        parts += [_html_plot(f) for f in checks]
    if data.human is not None:
        h = data.human
        parts += ['<h2 id="human">Human evaluation</h2>',
                  f'<p class="caption">{h.n_annotations} ratings imported with <code>synthugc annotate import</code> '
                  "(fluency 1-5, meaning 1-5, sensitive-attribute guess; seed 004 guideline).</p>",
                  "<h3>Inter-annotator agreement</h3>", _html_frame(h.agreement, "human-agreement"),
                  "<h3>Human scores per strategy</h3>", _html_frame(h.strategy_scores, "human-strategies"),
                  "<h3>Automatic metrics against human scores (Spearman)</h3>",
                  _html_frame(h.metric_human_correlations, "human-metric-correlations")]
    if data.examples is not None:
        what = ("Pseudonymised source texts and their rewrites (strategies that rewrote the original texts are "
                "left out)" if PSEUDONYMISED_SOURCE in data.examples.columns else "Real source texts and their rewrites")
        parts += ['<h2 id="examples">Example outputs (Appendix A.3)</h2>',
                  f'<p class="caption">{what}; shown because <code>report.examples</code> '
                  "is set in the config.</p>", _html_frame(_clipped_examples(data.examples), "examples", "examples")]
    parts.append('<h2 id="details">Every number, per strategy</h2>')
    for i, (name, table) in enumerate(_details_tables(data.summary).items()):
        parts.append(f"<details><summary>{_e(name)}</summary>{_html_frame(table, f'strategy-{i}')}</details>")
    parts.append('<h2 id="signatures">Metric signatures</h2><ol class="sig">')
    parts += [f'<li id="sig-{n}">{_e(sig)} <span>({_e(", ".join(ms))})</span></li>' for n, sig, ms in _footnotes(signatures)]
    parts.append("</ol></body></html>")
    return "\n".join(parts)


def article_table_frames(data: ReportData) -> dict[str, pd.DataFrame]:
    """The article tables as frames keyed by table key (published as Prefect table artifacts)."""
    return {t.key: t.frame() for t in article_tables(data.summary, level=data.level, families=data.families,
                                                        order=data.order)}


def render_report(data: ReportData) -> tuple[str, str]:
    """(markdown, html) of the report."""
    return render_markdown(data), render_html(data)

