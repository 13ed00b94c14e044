"""The article's tables from a long score table: which cells are bold/underlined, which rows come last,
and that the HTML shows exactly the summary's numbers."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from report_page import parse_report

from tasks.report.build import ReportData
from tasks.report.render import fmt, render_html, render_markdown
from tasks.report.tables import (
    article_tables,
    augmentation_table,
    intrinsic_table,
    privacy_table,
    substitution_table,
)
from tasks.scores import column_key, column_keys


def U(setting: str, pct: int, metric: str) -> tuple[str, tuple]:
    """A utility score: the task metric at a setting and training fraction (real columns, not a name)."""
    return metric, (("setting", setting), ("fraction", pct / 100))


def P(metric: str, attribute: str, model: str) -> tuple[str, tuple]:
    """A profiling score: the attacked attribute and the attacker's model."""
    return metric, (("attribute", attribute), ("model", model))


def key(metric: str | tuple) -> str:
    """The report's column key of a plain metric name or a ``U``/``P`` score."""
    return metric if isinstance(metric, str) else column_key(metric[0], dict(metric[1]))


def _rows(level: str, values: dict[tuple[str, str], dict], signature: str = "sig") -> list[dict]:
    rows = []
    for (s, v), metrics in values.items():
        for m, x in metrics.items():
            name, structure = (m, {}) if isinstance(m, str) else (m[0], dict(m[1]))
            rows.append({"strategy": s, "variant": v, "level": level, "metric": name, **structure, "value": x,
                         "std": math.nan, "median": math.nan, "n": 10, "n_failed": 0,
                         "signature": f"{signature}:{name}", "reason": None})
    return rows


@pytest.fixture()
def summary() -> pd.DataFrame:
    rows = _rows("sample-mean", {
        ("a", "first"): {"bertscore_f1": 0.90, "style_cosine": 0.80, "bleu_divergence": 0.20},
        ("b", "first"): {"bertscore_f1": 0.85, "style_cosine": 0.95, "bleu_divergence": 0.60},
        ("dp50", "first"): {"bertscore_f1": 0.70, "style_cosine": 0.50, "bleu_divergence": 0.95}})
    rows += _rows("distribution", {
        ("a", "first"): {"fbd": 0.5, "char_jsd": 0.10}, ("b", "first"): {"fbd": 0.2, "char_jsd": 0.30},
        ("dp50", "first"): {"fbd": 2.0, "char_jsd": 0.40}})
    rows += _rows("utility", {
        ("original", ""): {U("baseline", 10, "macro_f1"): 0.50, U("baseline", 100, "macro_f1"): 0.80},
        ("a", ""): {U("substitution", 100, "macro_f1"): 0.82, U("augmentation", 10, "macro_f1"): 0.55,
                    U("augmentation", 100, "macro_f1"): 0.79},
        ("b", ""): {U("substitution", 100, "macro_f1"): 0.75, U("augmentation", 10, "macro_f1"): 0.49,
                    U("augmentation", 100, "macro_f1"): 0.81},
        ("dp50", ""): {U("substitution", 100, "macro_f1"): 0.60, U("augmentation", 10, "macro_f1"): 0.52,
                       U("augmentation", 100, "macro_f1"): 0.80}})
    rows += _rows("privacy", {
        ("original", ""): {P("profiling_accuracy", "gender", "linear"): 0.90, "reid_accuracy": math.nan},
        ("chance", ""): {P("profiling_accuracy", "gender", "linear"): 0.50, "reid_accuracy": 0.01},
        ("a", "first"): {P("profiling_accuracy", "gender", "linear"): 0.85, "reid_accuracy": 0.90, "membership_auc": 0.90},
        ("b", "first"): {P("profiling_accuracy", "gender", "linear"): 0.60, "reid_accuracy": 0.40, "membership_auc": 0.45},
        ("dp50", "first"): {P("profiling_accuracy", "gender", "linear"): 0.52, "reid_accuracy": 0.00,
                            "membership_auc": 0.56}})
    return pd.DataFrame(rows)


def _marked(table, kind: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for (row, metric), marks in table.marks.items():
        if kind in marks:
            out.setdefault(metric, set()).add(table.rows[row][0])
    return out


def test_table4_bolds_the_top_method_per_metric(summary):
    table = intrinsic_table(summary, "sample-mean")
    assert [c.header for c in table.columns][:3] == ["BSc", "Style", "Div"]  # article order, present ones only
    assert _marked(table, "best") == {"bertscore_f1": {"a"}, "style_cosine": {"b"}, "bleu_divergence": {"dp50"}}


def test_table13_bolds_top_two_with_each_metrics_direction(summary):
    table = intrinsic_table(summary, "distribution")
    best = _marked(table, "best")
    assert best["fbd"] == {"a", "b"}  # lower distance is better
    assert best["char_jsd"] == {"b", "dp50"}  # higher divergence is better


def test_table5_marks_top_two_and_underlines_beating_the_original(summary):
    table = substitution_table(summary)
    assert table.label(len(table.rows) - 1) == "Trained on original data"
    assert table.value(len(table.rows) - 1, key(U("substitution", 100, "macro_f1"))) == 0.80  # the 100% baseline
    assert _marked(table, "best") == {key(U("substitution", 100, "macro_f1")): {"a", "b"}}
    assert _marked(table, "underline") == {key(U("substitution", 100, "macro_f1")): {"a"}}  # 0.82 > 0.80 only


def test_table6_bold_overall_underline_without_dp_and_baselines_last(summary):
    table = privacy_table(summary, families={"a": "stymask", "b": "llm", "dp50": "dp"})
    assert [table.label(i) for i in range(len(table.rows))][-2:] == ["Random baseline", "Original data"]
    best, under = _marked(table, "best"), _marked(table, "underline")
    assert best[key(P("profiling_accuracy", "gender", "linear"))] == {"dp50"}
    assert under[key(P("profiling_accuracy", "gender", "linear"))] == {"b"}  # most private without a DP guarantee
    assert best["reid_accuracy"] == {"dp50"} and under["reid_accuracy"] == {"b"}


def test_membership_auc_is_ranked_by_distance_to_chance(summary):
    table = privacy_table(summary, families={})  # |0.45 - 0.5| = 0.05 beats |0.56 - 0.5| = 0.06
    assert _marked(table, "best")["membership_auc"] == {"b"}


def test_augmentation_table_underlines_what_beats_no_augmentation(summary):
    table = augmentation_table(summary, level="post")
    assert table.key == "table7" and table.label(len(table.rows) - 1) == "Original (without augmentation)"
    under = _marked(table, "underline")
    assert under[key(U("augmentation", 10, "macro_f1"))] == {"a", "dp50"}  # 0.55, 0.52 > 0.50; 0.49 is not
    assert under[key(U("augmentation", 100, "macro_f1"))] == {"b"}  # 0.81 > 0.80; 0.80 ties, 0.79 below
    assert augmentation_table(summary, level="timeline").key == "table9"


def test_html_cells_show_the_summary_numbers_and_nothing_is_fetched(summary):
    data = ReportData(title="t <script>", facts={"data": "x"}, summary=summary, level="post",
                      families={"a": "stymask", "b": "llm", "dp50": "dp"})
    page = render_html(data)
    parser = parse_report(page)
    assert parser.cells
    lookup = summary.assign(key=column_keys(summary)).set_index(["strategy", "variant", "key"])["value"]
    checked = 0
    for cell in parser.cells:
        strategy, variant = cell["row"]
        metric = cell["metric"]
        if strategy == "original":  # the no-synthetic row of the utility tables shows the baseline number
            metric = re.sub(r"setting=(substitution|augmentation)", "setting=baseline", metric)
        expected = float(lookup.get((strategy, variant, metric), math.nan))
        got = float(cell["value"])
        assert (math.isnan(got) and math.isnan(expected)) or got == expected, cell
        assert cell["text"] == fmt(expected), cell
        checked += 1
    assert checked >= 20
    assert "<script>" not in page.split("<body>")[1].split("</h1>")[0]  # the title is escaped
    assert not re.search(r"""(src|href)=["']?https?:""", page) and "@import" not in page


def test_markdown_marks_bold_and_underline_and_lists_signatures(summary):
    text = render_markdown(ReportData(title="t", facts={}, summary=summary, level="post",
                                      families={"a": "stymask", "b": "llm", "dp50": "dp"}))
    assert "**0.900**" in text  # a's BSc, the best
    assert "**<u>0.820</u>**" in text  # a's substitution F1: top two and beats the original
    assert "## Metric signatures" in text and "`sig:bertscore_f1`" in text


def test_article_tables_skip_levels_without_numbers(summary):
    only_sample = summary[summary["level"] == "sample-mean"]
    assert [t.key for t in article_tables(only_sample)] == ["table4"]
    assert article_tables(summary.iloc[0:0]) == []


def test_dialogue_and_timeline_task_metrics_rank_in_their_direction():
    rows = _rows("utility", {
        ("original", ""): {U("baseline", 100, "SegWER"): 0.20, U("baseline", 100, "IS_Cr"): 0.30},
        ("a", ""): {U("substitution", 100, "SegWER"): 0.15, U("substitution", 100, "IS_Cr"): 0.10},
        ("b", ""): {U("substitution", 100, "SegWER"): 0.30, U("substitution", 100, "IS_Cr"): 0.40},
        ("c", ""): {U("substitution", 100, "SegWER"): 0.40, U("substitution", 100, "IS_Cr"): 0.20}})
    table = substitution_table(pd.DataFrame(rows))
    assert [c.header for c in table.columns] == ["SegWER ↓", "IS_Cr ↑"]
    assert _marked(table, "best") == {key(U("substitution", 100, "SegWER")): {"a", "b"}, key(U("substitution", 100, "IS_Cr")): {"b", "c"}}
    assert _marked(table, "underline") == {key(U("substitution", 100, "SegWER")): {"a"},  # a lower error than the original
                                           key(U("substitution", 100, "IS_Cr")): {"b"}}


def test_infinite_values_rank_as_extremes_and_ties_share_a_place():
    rows = _rows("bag-mean", {("a", "first"): {"clus_tf": math.inf, "cos_tf": 0.9},
                              ("b", "first"): {"clus_tf": 170.0, "cos_tf": 0.9},
                              ("c", "first"): {"clus_tf": math.inf, "cos_tf": 0.9}})
    rows += _rows("distribution", {("a", "first"): {"fbd": 0.1}, ("b", "first"): {"fbd": 0.1},
                                   ("c", "first"): {"fbd": 0.2}})
    frame = pd.DataFrame(rows)
    bags = intrinsic_table(frame, "bag-mean")
    assert _marked(bags, "best") == {"clus_tf": {"a", "c"}}  # ∞ = identical bags, the closest; all-tied cos_tf unmarked
    assert "∞" in render_html(ReportData(title="t", facts={}, summary=frame))
    assert _marked(intrinsic_table(frame, "distribution"), "best") == {"fbd": {"a", "b"}}  # top two: a tie for first


def test_best_syntax_controlled_paraphrase_is_underlined():
    rows = _rows("sample-mean", {("sim", "first"): {"bertscore_f1": 0.85}, ("diff", "first"): {"bertscore_f1": 0.80},
                                 ("mask", "first"): {"bertscore_f1": 0.95}})
    table = intrinsic_table(pd.DataFrame(rows), "sample-mean", families={"sim": "synsim", "diff": "syndiff",
                                                                           "mask": "stymask"})
    assert _marked(table, "best") == {"bertscore_f1": {"mask"}}
    assert _marked(table, "underline") == {"bertscore_f1": {"sim"}} and "syntax-controlled" in table.caption


def test_real_text_in_examples_and_labels_is_escaped_in_html_and_markdown(summary):
    evil = "<img src=x onerror=alert(1)> | a\r\nb"
    examples = pd.DataFrame({"doc_id": ["d1"], "original": [evil], "a": ["fine"]})
    data = ReportData(title="t", facts={"data": evil}, summary=summary, examples=examples)
    page, text = render_html(data), render_markdown(data)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert not re.search(r"(?<!\\)<img src=x", text) and "\\<img src=x onerror=alert(1)\\> \\| a b" in text
    assert all(line.count("|") >= 2 for line in text.split("## Example outputs")[1].splitlines() if line.startswith("|"))


def test_details_keep_a_strategys_utility_rows_with_its_metrics(summary):
    page = render_html(ReportData(title="t", facts={}, summary=summary))
    details = page.split('id="details"')[1]
    block = details.split("<summary>a</summary>")[1].split("</details>")[0]
    assert "bertscore_f1" in block and "membership_auc" in block
    assert "macro_f1" in block and "setting substitution, fraction 1" in block  # the structure, in its own column
    assert details.count("<summary>a</summary>") == 1


def test_privacy_cells_show_their_interval_and_residual_risk_is_said_plainly(summary, tmp_path):
    from tasks.intervals import METHOD, residual_risk, wilson
    from tasks.privacy.audit import NOTHING_MEASURABLE, reidentification_rows
    from tasks.scores import score_frame

    privacy = summary["level"] == "privacy"
    with_ci = summary.assign(ci_low=math.nan, ci_high=math.nan)
    b_reid = privacy & (summary["strategy"] == "b") & (summary["metric"] == "reid_accuracy")
    with_ci.loc[b_reid, ["ci_low", "ci_high"]] = wilson(4, 10)
    # the attack's own rows: b's stylometric risk above chance, dp50's not above it
    above = {"accuracy_at_1": 0.4, "n_timelines": 10, "chance": 0.1, "risk": residual_risk(4, 10, control_rate=0.1).value,
             "risk_ci_low": 0.05, "risk_ci_high": 0.6}
    nothing = {"accuracy_at_1": 0.0, "n_timelines": 10, "chance": 0.1, "risk": residual_risk(0, 10, control_rate=0.1).value,
               "risk_ci_low": 0.0, "risk_ci_high": 0.2}
    risks = [r for s, rec in (("b", above), ("dp50", nothing))
             for r in reidentification_rows(rec, s, "first", "sig", attack="stylometric", adversary="full")
             if r["metric"] == "reid_residual_risk"]
    path = tmp_path / "scores.parquet"
    score_frame(pd.concat([score_frame(with_ci), score_frame(risks)], ignore_index=True)).to_parquet(path)
    data = ReportData(title="t", facts={}, summary=pd.read_parquet(path), level="post",
                      families={"a": "stymask", "b": "llm", "dp50": "dp"})
    table = privacy_table(data.summary)
    row = table.rows.index(("b", "first"))
    assert table.interval(row, "reid_accuracy") == pytest.approx(wilson(4, 10))
    text = render_markdown(data)
    low, high = wilson(4, 10)
    assert f"0.400 [{low:.3f}, {high:.3f}]" in text  # "0.400 [0.168, 0.687]"
    assert "## Residual risk over a control" in text and "nothing measurable" in text
    assert NOTHING_MEASURABLE.startswith("the attack found nothing measurable")
    assert "0.000" not in text.split("## Residual risk")[1].split("## Methods")[0]  # never a 0% risk
    page = render_html(data)
    assert text.count(METHOD[:40]) == 1 and page.count(METHOD[:40]) == 1  # the method is named once


def test_a_cell_shows_the_interval_of_the_row_it_shows(summary):
    """PII rows per entity share a column key with the all-entities row: the cell shows the first (all)."""
    rows = [{**r, "level": "privacy", "metric": "pii_leakage", "entity": entity, "value": value, "ci_low": low,
             "ci_high": high}
            for r in _rows("privacy", {("a", "first"): {"pii_leakage": 0.0}})
            for entity, value, low, high in (("all", 0.95, 0.92, 0.97), ("PERSON", 0.9, 0.34, 1.0))]
    table = privacy_table(pd.concat([summary, pd.DataFrame(rows)], ignore_index=True))
    row = table.rows.index(("a", "first"))
    assert table.value(row, "pii_leakage") == 0.95 and table.interval(row, "pii_leakage") == (0.92, 0.97)


def test_mean_and_utility_cells_show_their_interval_the_original_row_its_baselines(summary):
    """Table 4's means over documents and Tables 5/7's utility cells show the interval the score table holds; the
    'trained on original data' row shows the baseline's own interval at the same training fraction."""
    with_ci = summary.assign(ci_low=math.nan, ci_high=math.nan)
    intervals = {("a", "sample-mean", "bertscore_f1", None): (0.88, 0.92),
                 ("a", "utility", "macro_f1", ("substitution", 1.0)): (0.78, 0.86),
                 ("a", "utility", "macro_f1", ("augmentation", 0.1)): (0.50, 0.60),
                 ("original", "utility", "macro_f1", ("baseline", 1.0)): (0.74, 0.85),
                 ("original", "utility", "macro_f1", ("baseline", 0.1)): (0.44, 0.56)}
    for (strategy, level, metric, structure), bounds in intervals.items():
        where = ((with_ci["strategy"] == strategy) & (with_ci["level"] == level) & (with_ci["metric"] == metric))
        if structure:
            where &= (with_ci["setting"] == structure[0]) & (with_ci["fraction"] == structure[1])
        assert where.sum() == 1
        with_ci.loc[where, ["ci_low", "ci_high"]] = bounds
    table4 = intrinsic_table(with_ci, "sample-mean")
    assert table4.interval(table4.rows.index(("a", "first")), "bertscore_f1") == (0.88, 0.92)
    assert table4.interval(table4.rows.index(("b", "first")), "bertscore_f1") is None
    table5 = substitution_table(with_ci)
    col = key(U("substitution", 100, "macro_f1"))
    assert table5.interval(table5.rows.index(("a", "")), col) == (0.78, 0.86)
    assert table5.interval(len(table5.rows) - 1, col) == (0.74, 0.85)  # the real-data model's own interval
    table7 = augmentation_table(with_ci)
    col = key(U("augmentation", 10, "macro_f1"))
    assert table7.interval(table7.rows.index(("a", "")), col) == (0.50, 0.60)
    assert table7.interval(len(table7.rows) - 1, col) == (0.44, 0.56)
    text = render_markdown(ReportData(title="t", facts={}, summary=with_ci, level="post"))
    assert "0.900 [0.880, 0.920]" in text and "0.820 [0.780, 0.860]" in text and "0.800 [0.740, 0.850]" in text


def test_counts_and_booleans_print_as_a_person_writes_them():
    import numpy as np

    assert [fmt(True), fmt(np.bool_(False)), fmt(14), fmt(np.int64(12345)), fmt(0.5), fmt(math.nan)] == \
        ["yes", "no", "14", "12,345", "0.500", "–"]


def test_report_opens_with_the_verdict_and_keeps_degenerate_rows_for_the_appendix(summary):
    """The verdict comes first: the strategy per goal with its cost, the risk against chance of the strategy to share
    over trials named by what they are (turns, by speakers) and what the full adversary holds; a residual risk with nothing to measure
    (an empty history) and the signatures go to the appendix, the measured risks stay in the body."""
    from tasks.privacy.audit import reidentification_rows
    from tasks.report.goals import GOALS
    from tasks.report.verdict import Trials

    reid = summary["metric"] == "reid_accuracy"
    scores = summary.assign(attack=None, adversary=None)
    scores.loc[reid, ["attack", "adversary", "n"]] = ["stylometric", "full", 473]
    measured = {"accuracy_at_1": 0.4, "n_timelines": 473, "chance": 0.01, "risk": 0.39, "risk_ci_low": 0.3,
                "risk_ci_high": 0.45}
    empty = {"n_timelines": 0, "reason": "history is empty"}
    risks = [r for s, rec in (("b", measured), ("a", empty))
             for r in reidentification_rows(rec, s, "first", "sig", attack="stylometric", adversary="full")
             if r["metric"] == "reid_residual_risk"]
    data = ReportData(title="t", facts={"level": "dialogue"}, summary=pd.concat([scores, pd.DataFrame(risks)]),
                      families={"a": "stymask", "b": "llm", "dp50": "dp"}, goals=[GOALS["augment"], GOALS["share-data"]],
                      trials=Trials("dialogue", 1.0, 6))
    text = render_markdown(data)
    assert text.startswith("# t\n\n## Verdict\n\n- **Augment a public dataset with synthetic text**: use a (score ")
    verdict = text.split("\n\n")[2]
    assert "- **Share synthetic data in place of sensitive data**: use b (score " in verdict
    assert ("- **Re-identification against chance**: the strongest attack on b, the stylometric attack with the full adversary, "
            "named the right speaker for 40% of 473 turns (each attacked on its own) by 6 speakers; guessing names "
            "the right one for 1% (one in 100 candidates).") in verdict
    assert ("- **What the adversaries hold**: the full adversary holds the users' other posts and the source texts of "
            "the rewritten rows (the strongest case: it has the originals).") in verdict
    assert "re-identified 40% of 473 turns" in text and "author timelines" not in text
    body, appendix = text.split("\n## Appendix\n")
    risk_section = body.split("## Residual risk over a control")[1].split("\n## ")[0]
    assert "0.390 \\[0.300, 0.450\\]" in risk_section and "– (history is empty)" not in body
    assert "1 attack had no residual risk to measure (see the appendix)" in risk_section
    assert "### Residual risks with nothing to measure" in appendix and "– (history is empty)" in appendix
    assert "### Metric signatures" in appendix and "`sig:bertscore_f1`" in appendix and "`sig:" not in body
    page = render_html(data)
    assert page.index('id="verdict"') < page.index("<dl>") < page.index('id="residual-risk"') \
        < page.index('id="appendix"') < page.index('id="residual-risk-degenerate"')
    degenerate = page.split('id="residual-risk-degenerate"')[1].split("</table>")[0]
    assert "history is empty" in degenerate and "history is empty" not in page.split('id="residual-risk"')[1].split(
        "</table>")[0]
