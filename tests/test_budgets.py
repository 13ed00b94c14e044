"""Budgets over worst-case re-identification and utility: who meets them, by how much others miss."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tasks.budgets import parse_budget
from tasks.errors import ConfigError
from tasks.privacy.attacks import worst_case
from tasks.report.budgets import budget_table, check_budget


def test_budget_uses_the_worst_attack_and_says_by_how_much_others_miss() -> None:
    attacks = pd.DataFrame({
        "strategy": ["copy", "copy", "stymask", "stymask", "dp", "dp"],
        "attack": ["minhash", "stylometric"] * 3,
        "adversary": ["disjoint"] * 6,
        "accuracy_at_1": [0.05, 0.425, 0.02, 0.30, 0.01, 0.04],
    })
    worst = worst_case(attacks).rename(columns={"accuracy_at_1": "reidentification"})
    table = worst.merge(pd.DataFrame({"strategy": ["copy", "stymask", "dp"], "utility": [1.0, 0.95, None]}))
    got = check_budget(table, parse_budget("reidentification<=0.10, utility>=0.90")).set_index("strategy")
    # copy passes MinHash (0.05) but not the stylometric attack (0.425): it misses by 0.325
    assert not got.loc["copy", "meets"] and got.loc["copy", "miss_reidentification"] == pytest.approx(0.325)
    assert got.loc["copy", "miss_utility"] == 0.0 and "stylometric" not in got.loc["copy", "verdict"]
    assert "misses reidentification<=0.1 by 0.325" in got.loc["copy", "verdict"]
    assert not got.loc["dp", "meets"] and "utility unknown" in got.loc["dp", "verdict"]  # unknown never passes
    assert math.isnan(got.loc["dp", "miss_utility"])
    ok = check_budget(table.assign(utility=0.95), parse_budget("reidentification<=0.5,utility>=0.9"))
    assert ok["meets"].all() and ok["strategy"].iloc[0] == "copy"


def test_budget_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match=r"unknown budget figure 'privacy'; known: reidentification, reidentification_risk, pii_leakage"):
        parse_budget("privacy<0.1")
    with pytest.raises(ConfigError, match=r"unknown operator '<' in 'reidentification<0\.1'; known: <=, >="):
        parse_budget("reidentification<0.1")
    with pytest.raises(ConfigError, match=r"cannot read 'reidentification<=lots'"):
        parse_budget("reidentification<=lots")
    with pytest.raises(ConfigError, match="no bound"):
        parse_budget(" , ")
    with pytest.raises(ConfigError, match="no column 'utility'"):
        check_budget(pd.DataFrame({"strategy": ["a"], "reidentification": [0.1]}), parse_budget("utility>=0.9"))


def _row(strategy: str, metric: str, value: float, **structure) -> dict:
    level = "utility" if metric == "macro_f1" else "privacy"
    return {"strategy": strategy, "variant": "", "level": level, "metric": metric, "value": value, "n": 10,
            "n_failed": 0, "signature": f"metric:{metric}", "reason": None, **structure}


def test_budget_table_takes_the_worst_attack_and_utility_as_a_share_of_the_real_model() -> None:
    from tasks.scores import score_frame

    summary = score_frame([
        _row("stymask", "reid_accuracy", 0.05, attack="minhash", adversary="disjoint"),
        _row("stymask", "reid_accuracy", 0.40, attack="stylometric", adversary="disjoint"),
        _row("dp", "reid_accuracy", 0.02, attack="minhash", adversary="full"),
        _row("dp", "reid_accuracy", 0.08, attack="stylometric", adversary="disjoint"),
        _row("chance", "reid_accuracy", 0.01, attack="minhash", adversary="full"),
        _row("stymask", "pii_leakage", 1.0, entity="all"), _row("stymask", "pii_leakage", 0.5, entity="PERSON"),
        _row("original", "macro_f1", 0.80, setting="baseline", fraction=1.0),
        _row("stymask", "macro_f1", 0.76, setting="substitution", fraction=1.0),
        _row("stymask", "macro_f1", 0.10, setting="substitution", fraction=0.1),
        _row("dp", "macro_f1", 0.60, setting="substitution", fraction=1.0)])
    table = budget_table(summary).set_index("strategy")
    assert list(table.index) == ["stymask", "dp"]  # original and chance are references, not candidates
    assert table.loc["stymask", "reidentification"] == pytest.approx(0.40)  # the stylometric attack won
    assert table.loc["stymask", "pii_leakage"] == 1.0  # all entity types, not the PERSON breakdown
    assert table.loc["stymask", "utility"] == pytest.approx(0.95) and table.loc["dp", "utility"] == pytest.approx(0.75)
    got = check_budget(table.reset_index(), parse_budget("reidentification<=0.10,utility>=0.70")).set_index("strategy")
    assert bool(got.loc["dp", "meets"]) and not bool(got.loc["stymask", "meets"])
    assert "misses reidentification<=0.1 by 0.3" in got.loc["stymask", "verdict"]


def test_report_lists_who_meets_the_budget(tmp_path) -> None:
    from tasks.report.build import ReportData
    from tasks.report.render import render_html, render_markdown
    from tasks.scores import score_frame

    summary = score_frame([_row("dp", "reid_accuracy", 0.02, attack="minhash", adversary="full"),
                           _row("stymask", "reid_accuracy", 0.9, attack="stylometric", adversary="disjoint")])
    data = ReportData(title="t", facts={}, summary=summary, families={"dp": "dp", "stymask": "stymask"},
                      budget="reidentification<=0.10")
    markdown = render_markdown(data).replace("\\<", "<")  # the table cells are escaped for markdown
    assert "## Budget: `reidentification<=0.10`" in markdown
    assert "misses reidentification<=0.1 by 0.8" in markdown and "meets reidentification<=0.1" in markdown
    assert 'id="budget"' in render_html(data)


def test_the_markdown_report_is_escaped_as_markdown_not_html() -> None:
    """report.md holds no HTML entities: a budget reads ``reidentification_risk\\<=0.1`` (a renderer shows ``<=``),
    and real text with ``<``, ``>``, ``&`` and a link is backslash-escaped, never turned into markup; the HTML report
    alone escapes as HTML."""
    import pandas as pd

    from tasks.report.build import ReportData
    from tasks.report.render import render_html, render_markdown
    from tasks.scores import score_frame

    summary = score_frame([_row("dp", "reid_accuracy", 0.02, attack="minhash", adversary="full"),
                           _row("dp", "reid_residual_risk", 0.01, attack="minhash", adversary="full"),
                           _row("stymask", "reid_accuracy", 0.9, attack="stylometric", adversary="disjoint"),
                           _row("stymask", "reid_residual_risk", 0.8, attack="stylometric", adversary="disjoint")])
    evil = "Q&A <b>bold</b> [link](http://x)"
    examples = pd.DataFrame({"doc_id": ["d1"], "original": [evil], "dp": ["fine"]})
    data = ReportData(title="t & <co>", facts={"data": evil}, summary=summary, examples=examples,
                      families={"dp": "dp", "stymask": "stymask"}, budget="reidentification_risk<=0.10")
    markdown = render_markdown(data)
    for entity in ("&lt;", "&gt;", "&amp;", "&#"):
        assert entity not in markdown, entity
    assert "misses reidentification_risk\\<=0.1 by 0.7" in markdown
    assert "Q\\&A \\<b\\>bold\\</b\\> \\[link\\](http://x)" in markdown
    assert "<b>" not in markdown and "&lt;b&gt;bold&lt;/b&gt;" in render_html(data)


def _reid(strategy: str, k: int, n: int) -> dict:
    from tasks.intervals import wilson

    low, high = wilson(k, n)
    return {**_row(strategy, "reid_accuracy", k / n, attack="stylometric", adversary="full"), "n": n,
            "ci_low": low, "ci_high": high}


def test_budget_is_decided_on_the_bound_and_says_undecided_plainly(tmp_path) -> None:
    from tasks.intervals import wilson
    from tasks.scores import score_frame

    path = tmp_path / "scores.parquet"  # the run's long score table, as the report reads it
    score_frame([_reid("ten", 0, 10), _reid("sixty", 0, 60), _reid("leaky", 9, 10), _reid("close", 1, 10),
                 _row("original", "macro_f1", 0.80, setting="baseline", fraction=1.0),
                 *[_row(s, "macro_f1", 0.78, setting="substitution", fraction=1.0)
                   for s in ("ten", "sixty", "leaky", "close")]]).to_parquet(path)
    table = budget_table(pd.read_parquet(path))
    assert table.set_index("strategy").loc["ten", "reidentification_ci_high"] == pytest.approx(wilson(0, 10)[1])
    got = check_budget(table, parse_budget("reidentification<=0.10,utility>=0.9")).set_index("strategy")
    # 0 of 10: the upper bound 0.28 straddles 0.10; 35 timelines at 0% would put it below
    assert not got.loc["ten", "meets"] and got.loc["ten", "undecided"]
    assert "undecided for reidentification<=0.1 with n=10: about 35 timelines" in got.loc["ten", "verdict"]
    assert got.loc["sixty", "meets"]  # 0 of 60: upper bound 0.06
    assert not got.loc["leaky", "undecided"] and "whole 95% interval misses it" in got.loc["leaky", "verdict"]
    assert got.loc["close", "undecided"] and "with n=10" in got.loc["close", "verdict"]  # 0.1 [0.018, 0.40]
    assert got.index[0] == "sixty" and got.loc["ten", "undecided"]  # who meets it first, then the undecided
    point = check_budget(table, parse_budget("reidentification<=0.10"), decide_on="point").set_index("strategy")
    assert point.loc["ten", "meets"] and point.loc["close", "meets"] and not point.loc["leaky", "meets"]
    with pytest.raises(ConfigError, match="--decide-on"):
        check_budget(table, parse_budget("utility>=0.9"), decide_on="median")


def _mean(strategy: str, metric: str, value: float, low: float, high: float, n: int, **structure) -> dict:
    level = "utility" if metric == "macro_f1" else "sample-mean"
    return {**_row(strategy, metric, value, **structure), "level": level, "n": n, "ci_low": low, "ci_high": high}


def test_utility_and_meaning_are_decided_on_their_lower_bound(tmp_path) -> None:
    """Utility (a share of the real model: the synthetic model's interval over the test documents divided by the
    real model's score) and meaning (BERTScore F1's mean over documents) pass a >= budget only when their lower
    bound clears it; an interval across the limit is undecided, one wholly below it missed."""
    from tasks.scores import score_frame

    path = tmp_path / "scores.parquet"
    rows = [_mean("original", "macro_f1", 0.80, 0.70, 0.88, 40, setting="baseline", fraction=1.0)]
    for strategy, f1, f1_low, f1_high, bsc, bsc_low, bsc_high in (("sure", 0.79, 0.76, 0.82, 0.95, 0.93, 0.97),
                                                                  ("open", 0.74, 0.66, 0.80, 0.90, 0.84, 0.95),
                                                                  ("poor", 0.40, 0.30, 0.50, 0.60, 0.55, 0.66)):
        rows += [_mean(strategy, "macro_f1", f1, f1_low, f1_high, 40, setting="substitution", fraction=1.0),
                 _mean(strategy, "bertscore_f1", bsc, bsc_low, bsc_high, 120)]
    score_frame(rows).to_parquet(path)
    table = budget_table(pd.read_parquet(path)).set_index("strategy")
    assert table.loc["open", ["utility", "utility_ci_low", "utility_ci_high"]].tolist() == pytest.approx(
        [0.74 / 0.80, 0.66 / 0.80, 0.80 / 0.80])
    assert table.loc["open", "utility_n"] == 40 and table.loc["open", "meaning_n"] == 120
    assert table.loc["sure", ["meaning", "meaning_ci_low", "meaning_ci_high"]].tolist() == pytest.approx(
        [0.95, 0.93, 0.97])
    got = check_budget(table.reset_index(), parse_budget("utility>=0.9,meaning>=0.88")).set_index("strategy")
    assert got.loc["sure", "meets"]  # 0.95 and 0.93: both lower bounds clear
    assert got.loc["open", "undecided"] and not got.loc["open", "meets"]  # 0.93 [0.83, 1.0] straddles 0.9
    assert "utility 0.925 [0.825, 1] is undecided for utility>=0.9 with n=40" in got.loc["open", "verdict"]
    assert "meaning 0.9 [0.84, 0.95] is undecided for meaning>=0.88" in got.loc["open", "verdict"]
    assert not got.loc["poor", "undecided"] and "whole 95% interval misses it" in got.loc["poor", "verdict"]
    point = check_budget(table.reset_index(), parse_budget("utility>=0.9,meaning>=0.88"),
                         decide_on="point").set_index("strategy")
    assert point.loc["open", "meets"]  # on the point estimates alone it passes


def test_budget_on_risk_over_chance_under_a_stated_threat_model() -> None:
    """``reidentification_risk`` bounds the residual risk over chance (an attack not above its control is a
    risk of 0 with its interval), ``profiling`` the worst attribute's advantage over its majority class, and
    ``adversaries`` keeps the settings the budget is stated against."""
    from tasks.scores import score_frame

    def risk(strategy: str, value: float, high: float, adversary: str) -> dict:
        return {**_row(strategy, "reid_residual_risk", value, attack="delta", adversary=adversary),
                "ci_low": 0.0, "ci_high": high}

    summary = score_frame([
        _row("protect", "reid_accuracy", 0.90, attack="minhash", adversary="full"),
        _row("protect", "reid_accuracy", 0.20, attack="delta", adversary="disjoint"),
        risk("protect", 0.88, 0.95, "full"), risk("protect", math.nan, 0.06, "disjoint"),
        {**_row("protect", "profiling_advantage", 0.30, attribute="party", model="linear"), "ci_high": 0.4},
        {**_row("protect", "profiling_advantage", 0.05, attribute="age", model="linear"), "ci_high": 0.1}])
    every = budget_table(summary).set_index("strategy")
    assert every.loc["protect", "reidentification_risk"] == pytest.approx(0.88)  # the full adversary's
    assert every.loc["protect", "profiling"] == pytest.approx(0.30)  # the worst attribute's advantage
    disjoint = budget_table(summary, adversaries=["disjoint"]).set_index("strategy")
    assert disjoint.loc["protect", "reidentification"] == pytest.approx(0.20)
    assert disjoint.loc["protect", "reidentification_risk"] == 0.0  # not above chance: 0, interval kept
    assert disjoint.loc["protect", "reidentification_risk_ci_high"] == pytest.approx(0.06)
    verdict = check_budget(disjoint.reset_index(), parse_budget("reidentification_risk<=0.10")).iloc[0]
    assert bool(verdict["meets"])
    assert not check_budget(every.reset_index(), parse_budget("reidentification_risk<=0.10"))["meets"].iloc[0]


def test_share_data_names_who_meets_the_run_budget() -> None:
    from tasks.report.goals import Goal
    from tasks.report.recommend import budget_note

    verdicts = pd.DataFrame({"strategy": ["protect (first)", "stymask (first)"], "meets": [True, False]})
    share = Goal("share_data")
    assert budget_note(share, verdicts, "reidentification_risk<=0.10") == (
        "meets the run's budget reidentification_risk<=0.10: protect (first) (eligible to share)")
    assert "no strategy meets" in budget_note(share, verdicts.assign(meets=False), "b<=1")
    assert budget_note(Goal("augment"), verdicts, "b<=1") is None


def test_one_decision_for_every_caller_on_the_interval_or_the_point() -> None:
    """tasks.budgets.decide: met when the side of the interval that must clear the limit does, missed when the whole
    interval misses it, undecided between; on the point when asked or when there is no interval; unknown without
    a value. Protect's loop, the run's budget table and release all read it."""
    from tasks.budgets import Bound, decide

    risk, utility = Bound("reidentification", "<=", 0.1), Bound("utility", ">=", 0.9)
    assert decide(risk, {"value": 0.02, "ci_low": 0.0, "ci_high": 0.08}).outcome == "met"
    assert decide(risk, {"value": 0.05, "ci_low": 0.01, "ci_high": 0.2}).outcome == "undecided"
    assert decide(risk, {"value": 0.05, "ci_low": 0.01, "ci_high": 0.2}, "point").outcome == "met"
    assert decide(risk, {"value": 0.3, "ci_low": 0.2, "ci_high": 0.4}).outcome == "missed"
    assert decide(risk, {"value": 0.05}).outcome == "met"  # no interval: the point decides
    assert decide(risk, {"value": None}).outcome == "unknown" and decide(risk, {}).outcome == "unknown"
    assert decide(utility, {"value": 0.95, "ci_low": 0.92, "ci_high": 0.98}).outcome == "met"
    assert decide(utility, {"value": 0.95, "ci_low": 0.85, "ci_high": 0.98}).outcome == "undecided"
    missed = decide(risk, {"value": 0.104, "ci_low": 0.0453, "ci_high": 0.222})
    assert missed.short == "reidentification 0.104 [0.0453, 0.222] > 0.1" and missed.miss == pytest.approx(0.004)
    assert missed.how == "on the 95% interval's upper bound"


def test_the_worst_case_is_the_highest_upper_bound_and_an_undefined_advantage_can_be_made_worst() -> None:
    from tasks.budgets import worst_index

    # 0.4 [bound 0.69] of 10 timelines beats 0.5 [0.65] of 40 on the bound; on the point 0.5 wins
    assert worst_index([0.5, 0.4], [0.65, 0.69]) == 1 and worst_index([0.5, 0.4], [0.65, 0.69], "point") == 0
    assert worst_index([math.nan, 0.1], [math.nan, 0.2]) == 1  # nothing measured never wins ...
    assert worst_index([math.nan, 0.1], [math.nan, 0.2], undefined_is_worst=True) == 0  # ... unless undefined is worst
    assert worst_index([], []) is None and worst_index([0.3], [math.nan]) == 0  # no interval: the value


def test_protect_and_run_budgets_read_by_one_parser_name_what_is_known() -> None:
    from tasks.budgets import BUDGET_COLUMNS, PROTECT_FIGURES

    assert [str(b) for b in parse_budget("verbatim<=0.05,reidentification<=0.1", protect=True)] == [
        "verbatim<=0.05", "reidentification<=0.1"]
    with pytest.raises(ConfigError, match=rf"--budget: unknown budget figure 'utility'; known: {', '.join(PROTECT_FIGURES)}$"):
        parse_budget("utility>=0.9", "--budget", protect=True)  # protect bounds risks only
    with pytest.raises(ConfigError, match=r"--budget: unknown operator '>=' in 'verbatim>=0'; known: <=$"):
        parse_budget("verbatim>=0", "--budget", protect=True)
    assert set(PROTECT_FIGURES) < set(BUDGET_COLUMNS) and "verbatim" in PROTECT_FIGURES
