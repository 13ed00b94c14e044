"""Strategy recommendations (seed 000 §7) on small hand-built score tables (a real run's: tests/test_report_e2e.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tasks.errors import InputError
from tasks.report.aspects import AUGMENTATION_GAIN_SCALE, SUBSTITUTION_LOSS_SCALE
from tasks.report.goals import GOALS, Goal, parse_goal
from tasks.report.recommend import recommend, recommendation_notes
from tasks.report.score_lookup import format_delta, format_number, format_percent
from tasks.scores import SCORES, score_frame

NAN = float("nan")
def row(strategy: str, variant: str, level: str, metric: str, value: float, *, std: float = NAN, n: int = 5,
        reason: str | None = None, **structure: object) -> dict:
    """One long score row; ``structure`` fills setting, fraction, attribute, model, epsilon, ..."""
    return {"strategy": strategy, "variant": variant, "level": level, "metric": metric, **structure, "value": value,
            "std": std, "median": NAN, "n": n, "n_failed": 0, "signature": "", "reason": reason}


def frame(rows: list[dict]) -> pd.DataFrame:
    """The rows as the declared score table (absent structure columns are null)."""
    return score_frame(rows, SCORES)


def _epsilon(variant: str) -> dict:
    """The DP budget a test variant was generated with (the generator's epsilon column), for ``dp-bart-eps50``."""
    return {"epsilon": float(variant.rsplit("eps", 1)[1])} if "-eps" in variant else {}


def intrinsic(strategy: str, variant: str, *, meaning: float, style: float, pos: float, div: float) -> list[dict]:
    eps = _epsilon(variant)
    return [row(strategy, variant, "sample-mean", "bertscore_f1", meaning, **eps),
            row(strategy, variant, "sample-mean", "style_cosine", style, **eps),
            row(strategy, variant, "sample-mean", "pos_jaccard", pos, **eps),
            row(strategy, variant, "sample-mean", "bleu_divergence", div, **eps)]


GENDER = {"attribute": "gender", "model": "linear"}


def privacy(strategy: str, variant: str, *, reid: float, profiling: float, auc: float) -> list[dict]:
    eps = _epsilon(variant)
    return [row(strategy, variant, "privacy", "reid_accuracy", reid, n=20, **eps),
            row(strategy, variant, "privacy", "profiling_accuracy", profiling, n=100, **GENDER, **eps),
            row(strategy, variant, "privacy", "membership_auc", auc, n=200, **eps)]


PRIVACY_BASELINES = [row("original", "", "privacy", "profiling_accuracy", 0.90, n=100, **GENDER),
                     row("chance", "", "privacy", "profiling_accuracy", 0.50, n=100, **GENDER),
                     row("chance", "", "privacy", "reid_accuracy", 0.05, n=20)]


def utility(strategy: str, *, substitution: float | None = None, augmentation: dict[int, float] | None = None,
            metric: str = "macro_f1", std: float = NAN) -> list[dict]:
    out = []
    if substitution is not None:
        out.append(row(strategy, "", "utility", metric, substitution, std=std, setting="substitution", fraction=1.0))
    for pct, value in (augmentation or {}).items():
        out.append(row(strategy, "", "utility", metric, value, std=std, setting="augmentation", fraction=pct / 100))
    return out


def baseline(values: dict[int, float], metric: str = "macro_f1", std: float = NAN) -> list[dict]:
    return [row("original", "", "utility", metric, v, std=std, setting="baseline", fraction=pct / 100)
            for pct, v in values.items()]


BASE = {10: 0.50, 50: 0.60, 100: 0.70}


def by_label(recs):
    return {r.label: r for r in recs}


# ---------------------------------------------------------------------------------------------- goals


def test_goal_validation_names_the_field_and_value():
    with pytest.raises(ValueError, match=r"use_case.*'share'"):
        Goal("share")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"formal_dp.*'yes'"):
        Goal("augment", formal_dp="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="longitudinal"):
        Goal("augment", longitudinal=1)  # type: ignore[arg-type]


def test_describe_is_one_sentence_with_the_weights():
    for goal in GOALS.values():
        text = goal.describe()
        assert text.endswith(".") and ". " not in text
        assert "%" in text
        assert ("only DP strategies are eligible" in text) == goal.formal_dp
        assert ("privacy not scored" in text) == (goal.use_case == "augment")


def test_parse_goal_accepts_presets_and_words_and_names_bad_words():
    assert parse_goal("share_model,dp,longitudinal") == Goal("share_model", formal_dp=True, longitudinal=True)
    assert parse_goal("share-data-dp") == GOALS["share-data-dp"] == Goal("share_data", formal_dp=True)
    assert parse_goal(" Augment + timeline ") == Goal("augment", longitudinal=True)
    with pytest.raises(ValueError, match="'foo'"):
        parse_goal("share_model,foo")
    with pytest.raises(ValueError, match="exactly one use case"):
        parse_goal("dp")
    with pytest.raises(ValueError, match="exactly one use case"):
        parse_goal("augment,share_data")


# ---------------------------------------------------------------------------------------------- ranking


def _dp_run() -> tuple[pd.DataFrame, dict[str, str]]:
    rows = [*PRIVACY_BASELINES, *baseline(BASE),
            *intrinsic("dp", "dp-bart-eps50", meaning=0.80, style=0.50, pos=0.48, div=0.98),
            *privacy("dp", "dp-bart-eps50", reid=0.10, profiling=0.70, auc=0.60),
            *utility("dp", substitution=0.50),
            *intrinsic("stymask", "first", meaning=0.97, style=0.90, pos=0.94, div=0.20),
            *privacy("stymask", "first", reid=0.10, profiling=0.70, auc=0.60),
            *utility("stymask", substitution=0.69),
            *intrinsic("llm", "first", meaning=0.85, style=0.55, pos=0.60, div=0.96),
            *privacy("llm", "first", reid=0.06, profiling=0.55, auc=0.52),
            *utility("llm", substitution=0.66)]
    return frame(rows), {"stymask": "stymask", "dp": "dp", "llm": "llm"}


def test_formal_dp_puts_the_dp_strategy_first_even_with_lower_utility():
    summary, families = _dp_run()
    open_goal = by_label(recommend(summary, Goal("share_model"), families))
    assert open_goal["dp/dp-bart-eps50"].aspects["utility"] < open_goal["stymask/first"].aspects["utility"]
    assert open_goal["dp/dp-bart-eps50"].rank > open_goal["stymask/first"].rank  # without the DP requirement

    recs = recommend(summary, Goal("share_model", formal_dp=True), families)
    assert (recs[0].strategy, recs[0].rank, recs[0].eligible) == ("dp", 1, True)
    assert recs[0].reasons[0] == "formal DP guarantee (ε = 50 per document)"
    for rec in recs[1:]:
        assert rec.rank is None and not rec.eligible
        assert rec.reasons[0] == f"no formal DP guarantee (family {rec.family!r})"
        assert math.isfinite(rec.score)  # still scored, for information
    assert not any("no strategy with formal DP" in n for n in recommendation_notes(Goal("share_model", True), recs))


def test_formal_dp_without_a_dp_strategy_is_said_in_the_notes():
    summary, families = _dp_run()
    summary = summary[summary["strategy"] != "dp"]
    goal = Goal("share_data", formal_dp=True)
    recs = recommend(summary, goal, families)
    assert recs and all(r.rank is None and not r.eligible for r in recs)
    notes = recommendation_notes(goal, recs)
    assert any(n.startswith("no strategy with formal DP in this run: add `dp`") for n in notes)


def test_augment_ranks_the_higher_gain_and_meaning_first_and_quotes_the_gains():
    gains = {"de": {10: 0.56, 50: 0.63, 100: 0.71}, "strap": {10: 0.49, 50: 0.60, 100: 0.69}}
    rows = [*baseline(BASE),
            *intrinsic("de", "de", meaning=0.95, style=0.85, pos=0.85, div=0.50),
            *utility("de", augmentation=gains["de"]),
            *intrinsic("strap", "strap", meaning=0.85, style=0.85, pos=0.85, div=0.85),
            *utility("strap", augmentation=gains["strap"])]
    recs = recommend(frame(rows), GOALS["augment"], {"strap": "paraphrase", "de": "backtranslate"})
    assert [r.label for r in recs] == ["de/de", "strap/strap"]
    assert [r.rank for r in recs] == [1, 2]
    parts = ", ".join(f"{p}% {format_number(v)} vs {format_number(BASE[p])} without ({format_delta(v - BASE[p])})"
                      for p, v in gains["de"].items())
    assert f"augmentation macro-F1: {parts}" in recs[0].reasons
    assert f"meaning: BERTScore F1 {format_number(0.95)}" in recs[0].reasons
    assert "privacy not scored: augmenting a public dataset" in recs[0].reasons
    # the data-scarce fraction weighs most: 10% +0.06 (saturated), 50% +0.03, 100% +0.01
    w = {p: p ** -0.5 for p in BASE}
    expect = sum(w[p] * min(1.0, 0.5 + (gains["de"][p] - BASE[p]) / (2 * AUGMENTATION_GAIN_SCALE)) for p in BASE)
    assert recs[0].aspects["utility"] == pytest.approx(expect / sum(w.values()))


def test_share_data_ranks_low_reidentification_above_high():
    rows = [*PRIVACY_BASELINES, *baseline(BASE)]
    for name, reid in (("de", 0.97), ("llm", 0.05)):
        rows += [*intrinsic(name, "first", meaning=0.9, style=0.7, pos=0.7, div=0.8),
                 *privacy(name, "first", reid=reid, profiling=0.8, auc=0.7), *utility(name, substitution=0.65)]
    recs = recommend(frame(rows), GOALS["share-data"], {"de": "backtranslate", "llm": "llm"})
    assert [r.strategy for r in recs] == ["llm", "de"]
    assert recs[0].aspects["privacy"] > recs[1].aspects["privacy"]
    assert f"re-identified {format_percent(0.97)} of 20 author timelines (chance {format_percent(0.05)}; " \
        "no residual risk measured)" in recs[1].reasons
    assert f"re-identified {format_percent(0.97)} (chance {format_percent(0.05)})" in recs[1].cost


def test_reasons_quote_substitution_profiling_and_membership_numbers():
    summary, families = _dp_run()
    rec = by_label(recommend(summary, GOALS["share-model"], families))["stymask/first"]
    assert (f"substitution macro-F1 {format_number(0.69)} vs {format_number(0.70)} on real data "
            f"({format_delta(0.69 - 0.70)})") in rec.reasons
    assert (f"gender profiling (linear) accuracy {format_number(0.70)}, real text {format_number(0.90)}, "
            f"chance {format_number(0.50)}: {format_percent((0.90 - 0.70) / (0.90 - 0.50))} of the way to chance"
            ) in rec.reasons
    assert f"membership AUC {format_number(0.60)} (0.5 = members indistinguishable)" in rec.reasons
    assert rec.cost.startswith(f"utility: substitution macro-F1 {format_delta(0.69 - 0.70)}; privacy: ")
    no_reduction = frame([*PRIVACY_BASELINES, *privacy("x", "v", reid=0.5, profiling=0.90, auc=0.5)])
    rec = recommend(no_reduction, GOALS["share-data"], {"x": "stymask"})[0]
    assert (f"gender profiling (linear) accuracy {format_number(0.90)}, real text {format_number(0.90)}, chance "
            f"{format_number(0.50)}: no reduction") in rec.reasons


def test_llm_profiling_counts_and_an_uninformative_attack_is_not_scored():
    rows = [row("original", "", "privacy", "llm_profiling_accuracy", 0.43, attribute="gender"),
            row("chance", "", "privacy", "llm_profiling_accuracy", 0.33, attribute="gender"),
            row("x", "v", "privacy", "llm_profiling_accuracy", 0.35, attribute="gender"),
            row("original", "", "privacy", "llm_profiling_success", 0.02),
            row("chance", "", "privacy", "llm_profiling_success", 0.02),
            row("x", "v", "privacy", "llm_profiling_success", 0.01)]
    rec = recommend(frame(rows), GOALS["share-data"], {"x": "llm"})[0]
    share = (0.43 - 0.35) / (0.43 - 0.33)
    assert (f"gender profiling (LLM) accuracy {format_number(0.35)}, real text {format_number(0.43)}, chance "
            f"{format_number(0.33)}: {format_percent(share)} of the way to chance") in rec.reasons
    assert (f"LLM profiling of all attributes success rate: the attack on the real text is no better than chance "
            f"({format_number(0.02)} vs {format_number(0.02)}): not scored") in rec.reasons
    assert rec.aspects["privacy"] == pytest.approx(share)  # the only scored attack


def test_membership_is_scored_by_its_distance_to_the_catalogues_target(monkeypatch):
    from dataclasses import replace

    from tasks.metrics import catalogue

    rows = frame([row("x", "v", "privacy", "membership_auc", 0.62)])
    rec = recommend(rows, GOALS["share-data"], {"x": "stymask"})[0]
    assert rec.aspects["privacy"] == pytest.approx(1 - 0.12 / 0.5)  # the only scored attack: blind at 0.5
    registered = catalogue.CATALOGUE["membership_auc"]
    monkeypatch.setitem(catalogue.CATALOGUE, "membership_auc", replace(registered, target=0.6))
    rec = recommend(rows, GOALS["share-data"], {"x": "stymask"})[0]
    assert rec.aspects["privacy"] == pytest.approx(1 - 0.02 / 0.6)  # read from the registration, not repeated
    assert f"membership AUC {format_number(0.62)} (0.6 = members indistinguishable)" in rec.reasons


def test_error_rate_metrics_count_lower_as_better():
    rows = [*baseline({100: 0.25}, metric="SegWER"), *utility("syn", substitution=0.30, metric="SegWER")]
    rec = recommend(frame(rows), GOALS["share-model"], {"syn": "synsim"})[0]
    assert rec.aspects["utility"] == pytest.approx(1 - 0.05 / SUBSTITUTION_LOSS_SCALE)
    assert any(r.startswith(f"substitution SegWER {format_number(0.30)} vs {format_number(0.25)} on real data "
                            f"({format_delta(0.05)}, lower is better") for r in rec.reasons)


def test_missing_aspects_do_not_crash_and_are_named():
    rows = [*intrinsic("a", "v", meaning=0.9, style=0.8, pos=0.7, div=0.6),
            row("b", "v", "distribution", "fbd", 1.0),
            row("c", "v", "privacy", "reid_accuracy", NAN, n=0, reason="needs at least 2 timelines")]
    goal = GOALS["share-data"]
    recs = by_label(recommend(frame(rows), goal, {"a": "llm", "b": "llm", "c": "llm"}))
    a = recs["a/v"]
    for text in ("no re-identification measured in this run", "no profiling attack measured in this run",
                 "no membership attack measured in this run", "no substitution utility measured in this run"):
        assert text in a.reasons
    assert set(a.aspects) == {"meaning", "style", "divergence"}  # style is measured but not weighted here
    assert a.score == pytest.approx((0.15 * 0.9 + 0.10 * 0.6) / 0.25)
    assert a.cost == "utility: not measured; privacy: not measured"
    assert "re-identification not available: needs at least 2 timelines" in recs["c/v"].reasons
    for label in ("b/v", "c/v"):  # nothing of this goal measured: NaN, ranked after the scored one
        assert math.isnan(recs[label].score) and recs[label].rank > a.rank
        assert "no aspect of this goal was measured for this strategy: not scored" in recs[label].reasons
    notes = recommendation_notes(goal, list(recs.values()))
    assert any(n.startswith("no privacy numbers in this run") for n in notes)
    assert any(n.startswith("no utility numbers in this run") for n in notes)


def test_a_strategy_lacking_an_aspect_others_have_ranks_after_the_complete_ones():
    rows = [*PRIVACY_BASELINES, *baseline(BASE), *utility("dp", substitution=0.64)]
    for variant, meaning in (("dp-bart-eps50", 0.80), ("dp-bart-eps250", 0.84)):
        rows += [*intrinsic("dp", variant, meaning=meaning, style=0.5, pos=0.5, div=0.97),
                 *privacy("dp", variant, reid=0.05, profiling=0.55, auc=0.52)]
    goal = GOALS["share-model-dp"]
    recs = recommend(frame(rows), goal, {"dp": "dp"})
    eps50, eps250 = by_label(recs)["dp/dp-bart-eps50"], by_label(recs)["dp/dp-bart-eps250"]
    assert "utility" not in eps50.aspects and "utility" in eps250.aspects
    assert eps50.score > eps250.score  # renormalised without its (unmeasured) utility ...
    assert (eps250.rank, eps50.rank) == (1, 2)  # ... but less evidence does not win
    assert "ranked after the strategies measured on every aspect: no utility numbers for this one" in eps50.reasons
    notes = recommendation_notes(goal, recs)
    assert any(n.startswith(f"several privacy budgets (ε = 50: meaning {format_number(0.80)}, ε = 250: meaning "
                            f"{format_number(0.84)})") for n in notes)


def test_ties_keep_the_run_order():
    rows = []
    for name in ("alpha", "beta", "gamma"):
        rows += [*intrinsic(name, "first", meaning=0.9, style=0.8, pos=0.8, div=0.5)]
    summary = frame(rows)
    recs = recommend(summary, GOALS["augment"], {"gamma": "llm", "alpha": "llm", "beta": "llm"})
    assert [r.strategy for r in recs] == ["gamma", "alpha", "beta"]
    assert [r.rank for r in recs] == [1, 2, 3]
    assert len({r.score for r in recs}) == 1
    recs = recommend(summary, GOALS["augment"], {})  # no config order: the table's
    assert [r.strategy for r in recs] == ["alpha", "beta", "gamma"]


def test_utility_of_a_multi_variant_strategy_belongs_to_its_first_variant():
    rows = [*baseline(BASE), *utility("llm", substitution=0.68),
            *intrinsic("llm", "first", meaning=0.87, style=0.66, pos=0.6, div=0.96),
            *intrinsic("llm", "second", meaning=0.84, style=0.63, pos=0.57, div=0.97)]
    recs = by_label(recommend(frame(rows), GOALS["share-model"], {"llm": "llm"}))
    assert set(recs) == {"llm/first", "llm/second"}  # no separate pair for the strategy-level utility rows
    assert "utility" in recs["llm/first"].aspects
    assert "utility" not in recs["llm/second"].aspects
    assert "utility not measured for this variant: the utility runs trained on variant 'first'" \
        in recs["llm/second"].reasons


def test_longitudinal_goal_scores_moments_of_change_recall_when_measured():
    # (baseline, SynSim, SynTr) at 10%: SynSim gains precision, SynTr recall (§6.3.1)
    metrics = {"IS_Cp": (0.30, 0.35, 0.26), "IS_Cr": (0.10, 0.10, 0.15), "IE_Cr": (0.30, 0.30, 0.35)}
    rows = []
    for metric, (base, sim, tr) in metrics.items():
        rows += [*baseline({10: base}, metric=metric), *utility("synsim", augmentation={10: sim}, metric=metric),
                 *utility("syntr", augmentation={10: tr}, metric=metric)]
    rows += [*intrinsic("synsim", "sim", meaning=0.95, style=0.90, pos=0.90, div=0.5),
             *intrinsic("syntr", "tr", meaning=0.90, style=0.80, pos=0.80, div=0.9)]
    families = {"synsim": "synsim", "syntr": "syntr"}
    plain = recommend(frame(rows), GOALS["augment"], families)
    longitudinal = recommend(frame(rows), GOALS["augment-longitudinal"], families)
    assert plain[0].strategy == "synsim"
    assert longitudinal[0].strategy == "syntr"
    tr = by_label(longitudinal)["syntr/tr"]
    assert "longitudinal" in tr.aspects
    assert (f"moments of change: augmentation IS coverage recall: 10% {format_number(0.15)} vs "
            f"{format_number(0.10)} without ({format_delta(0.15 - 0.10)})") in tr.reasons
    assert any("(SynTr)" in r and "not measured here" in r for r in tr.reasons)


def test_longitudinal_goal_without_timeline_numbers_says_so():
    rows = [*baseline(BASE), *utility("de", augmentation={10: 0.55}),
            *intrinsic("de", "de", meaning=0.9, style=0.8, pos=0.8, div=0.5)]
    goal = GOALS["augment-longitudinal"]
    recs = recommend(frame(rows), goal, {"de": "backtranslate"})
    assert "longitudinal" not in recs[0].aspects
    assert any(r.startswith("no timeline utility") for r in recs[0].reasons)
    assert any("no longitudinal (timeline) utility numbers" in n for n in recommendation_notes(goal, recs))


def test_seed_spread_and_seed_count_are_reported():
    rows = [*baseline({10: 0.50}, std=0.05), *utility("de", augmentation={10: 0.52}, std=0.04),
            *intrinsic("de", "de", meaning=0.9, style=0.8, pos=0.8, div=0.5)]
    recs = recommend(frame(rows), GOALS["augment"], {"de": "backtranslate"})
    assert (f"augmentation macro-F1: 10% {format_number(0.52)} vs {format_number(0.50)} without "
            f"({format_delta(0.52 - 0.50)}, within the seed std {format_number(0.05)})") in recs[0].reasons
    assert recs[0].seeds == 5
    assert any(n.startswith("utility measured with 5 seeds") for n in recommendation_notes(GOALS["augment"], recs))


def test_a_table_without_the_score_columns_is_refused():
    with pytest.raises(InputError, match="value"):
        recommend(pd.DataFrame({"strategy": ["a"], "variant": [""], "metric": ["x"]}), GOALS["augment"], {})


def test_reidentification_reason_quotes_its_interval_and_a_risk_never_zero(tmp_path):
    """A figure with an interval is quoted with it; an attack not above chance found nothing measurable."""
    from tasks.intervals import residual_risk, wilson
    from tasks.privacy.audit import NOTHING_MEASURABLE, reidentification_rows

    rows = [*PRIVACY_BASELINES, *baseline(BASE)]
    for name, k in (("de", 8), ("llm", 0)):
        risk = residual_risk(k, 20, control_rate=0.05)
        summary = {"accuracy_at_1": k / 20, "n_timelines": 20, "chance": 0.05, "risk": risk.value,
                   "risk_ci_low": risk.ci_low, "risk_ci_high": risk.ci_high,
                   **dict(zip(("accuracy_at_1_ci_low", "accuracy_at_1_ci_high"), wilson(k, 20), strict=True))}
        rows += [*intrinsic(name, "first", meaning=0.9, style=0.7, pos=0.7, div=0.8),
                 *[r for r in reidentification_rows(summary, name, "first", "sig", attack="stylometric")
                   if r["strategy"] != "chance"], *utility(name, substitution=0.65)]
    path = tmp_path / "scores.parquet"
    frame(rows).to_parquet(path)
    recs = {r.strategy: r for r in recommend(pd.read_parquet(path), GOALS["share-data"],
                                             {"de": "backtranslate", "llm": "llm"})}
    low, high = wilson(8, 20)
    said = " ".join(recs["de"].reasons)
    assert f"re-identified 40% [{format_percent(low)}, {format_percent(high)}] of 20 author timelines" in said
    assert "residual risk over chance 37%" in said
    assert NOTHING_MEASURABLE in " ".join(recs["llm"].reasons) and "risk over chance 0%" not in " ".join(recs["llm"].reasons)


def test_a_utility_interval_over_test_documents_is_not_read_as_seeds():
    """With the runs' predictions a utility row's n counts test documents (its interval is over them), not
    seeds: the notes must not say "measured with 89 seeds"."""
    rows = [*baseline({10: 0.50}, std=0.05), *utility("de", augmentation={10: 0.52}, std=0.04),
            *intrinsic("de", "de", meaning=0.9, style=0.8, pos=0.8, div=0.5)]
    table = frame(rows)
    utility_rows = table["level"] == "utility"
    table.loc[utility_rows, ["n", "ci_low", "ci_high"]] = [89, 0.4, 0.6]
    recs = recommend(table, GOALS["augment"], {"de": "backtranslate"})
    assert recs[0].seeds is None
    assert not any("seeds" in n for n in recommendation_notes(GOALS["augment"], recs))


def test_sharing_data_under_a_budget_ranks_only_what_meets_it_and_the_glance_says_when_none_does():
    """With a run budget, a strategy that misses it is not eligible to share (it keeps its reasons, plus why); the
    at-a-glance row then names no first choice instead of the best of those that miss it."""
    from tasks.report.recommend import within_budget
    from tasks.report.render import _glance_rows

    rows = [*PRIVACY_BASELINES, *baseline(BASE)]
    for name, reid in (("de", 0.97), ("llm", 0.05)):
        rows += [*intrinsic(name, "first", meaning=0.9, style=0.7, pos=0.7, div=0.8),
                 *privacy(name, "first", reid=reid, profiling=0.8, auc=0.7), *utility(name, substitution=0.65)]
    goal = GOALS["share-data"]
    recs = recommend(frame(rows), goal, {"de": "backtranslate", "llm": "llm"})
    one = within_budget(goal, recs, pd.DataFrame({"strategy": ["llm", "de"], "meets": [True, False]}), "b<=0.1")
    assert [(r.strategy, r.rank, r.eligible) for r in one] == [("llm", 1, True), ("de", None, False)]
    assert one[1].reasons[-1] == "not eligible: it misses the run's budget b<=0.1"
    none = within_budget(goal, recs, pd.DataFrame({"strategy": ["llm", "de"], "meets": [False, False]}), "b<=0.1")
    assert all(r.rank is None for r in none)
    assert _glance_rows([(goal, none, [])]) == [(goal.headline(), "none eligible", "–",
                                                  "no strategy of this run meets the run's budget")]
    assert _glance_rows([(goal, one, [])])[0][1] == "llm"
    assert within_budget(GOALS["augment"], recs, pd.DataFrame({"strategy": [], "meets": []}), "b<=0.1") == recs


def test_profiling_without_a_single_baseline_counts_as_no_reduction_and_never_raises_privacy():
    # The real-text baseline differs between strategies (report's baselines_once leaves it empty, with its reason):
    # both strategies' profiling counts as no reduction, so the one that profiles worse does not rank more private
    # for lack of a baseline, and the reason says why.
    conflict = "differs between strategies (0.8, 0.9): each strategy's residual risk is over its own"
    rows = [row("original", "", "privacy", "profiling_accuracy", NAN, n=100, reason=conflict, **GENDER),
            row("chance", "", "privacy", "profiling_accuracy", 0.50, n=100, **GENDER),
            row("chance", "", "privacy", "reid_accuracy", 0.05, n=20)]
    for name in ("a", "b"):
        rows += privacy(name, "v", reid=0.30, profiling=0.55 if name == "a" else 0.90, auc=0.5)
    recs = by_label(recommend(frame(rows), GOALS["share-data"], {"a": "stymask", "b": "stymask"}))
    alone = by_label(recommend(frame([r for r in rows if r["metric"] != "profiling_accuracy"]), GOALS["share-data"],
                               {"a": "stymask", "b": "stymask"}))
    for label in ("a/v", "b/v"):
        assert recs[label].aspects["privacy"] < alone[label].aspects["privacy"]
        assert "profiling not reduced" in recs[label].cost
    assert recs["a/v"].aspects["privacy"] == pytest.approx(recs["b/v"].aspects["privacy"])
    assert (f"gender profiling (linear) accuracy {format_number(0.90)} has no single real-text or chance baseline "
            f"({conflict}): counted as no reduction, the conservative reading") in recs["b/v"].reasons


def test_without_a_shared_real_text_baseline_a_strategy_is_scored_against_its_own_real_text_accuracy():
    # The privacy stage pairs each strategy's profiling with the real text on the test units it covered
    # (profiling_reduction = real - synthetic); where strategies disagree on the shared real-text row, that pair is
    # the strategy's baseline. The LLM attacks have no such pair: they stay at the conservative reading.
    conflict = "differs between strategies (0.85, 0.9): each strategy's residual risk is over its own"
    rows = [row("original", "", "privacy", "profiling_accuracy", NAN, n=100, reason=conflict, **GENDER),
            row("chance", "", "privacy", "profiling_accuracy", 0.50, n=100, **GENDER),
            *privacy("a", "v", reid=0.30, profiling=0.55, auc=0.5),
            row("a", "v", "privacy", "profiling_reduction", 0.30, n=100, **GENDER)]
    rec = recommend(frame(rows), GOALS["share-data"], {"a": "stymask"})[0]
    share = 0.30 / (0.85 - 0.50)
    assert (f"gender profiling (linear) accuracy {format_number(0.55)}, real text {format_number(0.85)}, chance "
            f"{format_number(0.50)}: {format_percent(share)} of the way to chance") in rec.reasons
    assert f"profiling {format_percent(share)} of the way to chance" in rec.cost
