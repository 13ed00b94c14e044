"""The attribution output shared by every attack (ranks, accuracy@k, MRR, chance) and the adversary
settings (full / disjoint) on the MinHash attack."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import rankdata

from tasks.errors import InputError
from tasks.privacy.attribution import attribute_scores, chance, held_out_doc_ids, ranks_from_scores
from tasks.privacy.reidentify import reidentify


def test_ranks_equal_scipy_max_rank_and_ties_are_misses() -> None:
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, (200, 30)).astype(float)  # many ties
    true_col = rng.integers(-1, 30, 200)
    rank, best = ranks_from_scores(scores, true_col)
    for i in range(200):
        if true_col[i] < 0:
            assert math.isnan(rank[i])
        else:
            assert rank[i] == rankdata(-scores[i], method="max")[true_col[i]]
        assert best[i] == np.flatnonzero(scores[i] == scores[i].max())[0]
    per, summary = attribute_scores(scores, np.array([f"a{j:02d}" for j in range(30)]), [f"g{i}" for i in range(200)],
                                    [f"a{c:02d}" if c >= 0 else "stranger" for c in true_col], np.ones(200, int))
    unique_top = np.array([t >= 0 and (scores[i] == scores[i, t]).sum() == 1 and scores[i, t] == scores[i].max()
                           for i, t in enumerate(true_col)])
    assert (per["correct"].to_numpy() == unique_top).all()
    assert summary["n_no_history"] == int((true_col < 0).sum()) and "count as misses" in summary["reason"]
    expected_mrr = np.where(true_col >= 0, 1.0 / np.nan_to_num(rank, nan=np.inf), 0.0).mean()
    assert summary["mrr"] == pytest.approx(expected_mrr)
    assert summary["accuracy_at_10"] == pytest.approx(np.mean(np.nan_to_num(rank, nan=99) <= 10))


def test_chance_rates_match_a_uniform_guess() -> None:
    n = 37
    ranks = np.arange(1, n + 1)
    c = chance(n)
    assert c["chance"] == pytest.approx(1 / n) and c["chance_at_10"] == pytest.approx(10 / n)
    assert c["chance_mrr"] == pytest.approx(np.mean(1.0 / ranks))
    assert chance(3)["chance_at_10"] == 1.0 and math.isnan(chance(0)["chance"])


def _corpus() -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(1)
    words = ["".join(rng.choice(list("abcdefghij"), 6)) for _ in range(400)]
    for a in range(12):
        for p in range(6):
            rows.append((f"d{a}_{p}", f"u{a:02d}", " ".join(rng.choice(words, 25))))
    rows.append(("solo", "u_solo", "my only post ever written here"))
    rows.append(("empty", "u_empty", ""))
    rows.append(("cyr", "u_cyr", "Привет всем, это мой первый пост на русском языке"))
    rows.append(("cyr2", "u_cyr", "Сегодня хорошая погода, и я иду гулять в парк"))
    rows.append(("zh", "u_zh", "今天天气很好我们去公园散步吧"))
    return pd.DataFrame(rows, columns=["doc_id", "author_id", "text"])


def test_minhash_full_and_disjoint_settings() -> None:
    hist = _corpus()
    released = hist[hist["doc_id"].str.endswith(("_0", "_1")) | hist["doc_id"].isin(["solo", "empty", "cyr", "zh"])]
    syn = released.assign(group_id=released["author_id"])
    full = reidentify(hist, syn, setting="full")
    disj = reidentify(hist, syn, setting="disjoint")
    assert full.summary["adversary"] == "full" and disj.summary["adversary"] == "disjoint"
    assert full.summary["n_history_posts"] == len(hist)
    assert disj.summary["n_history_posts"] == len(hist) - len(syn)  # the released originals are held out
    per_full = full.per_timeline.set_index("group_id")
    per_disj = disj.per_timeline.set_index("group_id")
    assert len(per_full) == len(per_disj) == syn["group_id"].nunique()  # nothing lost
    # verbatim copies: found when the adversary holds them, not by near-duplicates of other posts
    assert per_full.loc[[f"u{a:02d}" for a in range(12)], "correct"].all()
    assert per_full.loc["u_cyr", "correct"] and per_full.loc["u_zh", "correct"]
    assert not per_disj.loc[[f"u{a:02d}" for a in range(12)], "correct"].any()
    # one-post and Chinese-only users have no history left in disjoint: misses, said so
    for g in ("u_solo", "u_zh", "u_empty"):
        assert not per_disj.loc[g, "in_history"] and math.isnan(per_disj.loc[g, "rank"])
        assert per_disj.loc[g, "reciprocal_rank"] == 0.0 and not per_disj.loc[g, "correct"]
    assert disj.summary["n_no_history"] == 3 and "count as misses" in disj.summary["reason"]
    assert per_disj.loc["u_cyr", "in_history"]  # the other Cyrillic post is still there
    assert full.summary["accuracy"] == full.summary["accuracy_at_1"]
    assert full.summary["mrr"] >= full.summary["accuracy_at_1"] > disj.summary["accuracy_at_1"]
    assert full.summary["chance"] == pytest.approx(1 / hist["author_id"].nunique())


def test_disjoint_needs_doc_ids() -> None:
    hist = _corpus()
    syn = hist.head(6).assign(group_id="g")
    with pytest.raises(InputError, match="doc_id"):
        reidentify(hist.drop(columns="doc_id"), syn, setting="disjoint")
    with pytest.raises(InputError, match="doc_id"):
        held_out_doc_ids(syn.drop(columns="doc_id"), "disjoint")
    with pytest.raises(ValueError, match="full, disjoint"):
        held_out_doc_ids(syn, "partial")  # type: ignore[arg-type]


def test_worst_case_names_the_winning_attack_and_setting() -> None:
    from tasks.privacy.attacks import worst_case

    rows = pd.DataFrame({
        "strategy": ["copy"] * 4 + ["stymask"] * 4 + ["empty"],
        "attack": ["minhash", "minhash", "stylometric", "stylometric"] * 2 + ["minhash"],
        "adversary": ["full", "disjoint"] * 4 + ["full"],
        "accuracy_at_1": [1.0, 0.05, 0.9, 0.425, 0.2, 0.0, 0.5, 0.425, np.nan],
    })
    got = worst_case(rows).set_index("strategy")
    assert list(got.index) == ["copy", "stymask"]  # a strategy with only nan values has no verdict
    assert tuple(got.loc["copy", ["attack", "adversary"]]) == ("minhash", "full")
    assert tuple(got.loc["stymask", ["attack", "adversary"]]) == ("stylometric", "full")
    assert got.loc["stymask", "accuracy_at_1"] == 0.5 and got.loc["copy", "n_attacks"] == 4
    disjoint = worst_case(rows[rows["adversary"] == "disjoint"]).set_index("strategy")
    assert disjoint.loc["copy", "attack"] == "stylometric" and disjoint.loc["copy", "accuracy_at_1"] == 0.425


def test_summary_intervals_equal_scipy_and_an_empty_history_has_none() -> None:
    from scipy import stats

    from tasks.intervals import residual_risk

    rng = np.random.default_rng(3)
    scores = rng.random((30, 12))
    true = np.array([f"a{i % 12}" for i in range(30)], dtype=object)
    scores[np.arange(0, 30, 3), np.arange(0, 30, 3) % 12] += 1.0  # every third timeline: its author on top
    per, summary = attribute_scores(scores, np.array([f"a{i}" for i in range(12)], dtype=object),
                                    [f"t{i}" for i in range(30)], true, np.ones(30, np.int64))
    k, k10 = int(per["correct"].sum()), int(per["in_top10"].sum())
    for name, hits in (("accuracy_at_1", k), ("accuracy_at_10", k10)):
        ref = stats.binomtest(hits, 30).proportion_ci(0.95, method="wilson")
        assert (summary[f"{name}_ci_low"], summary[f"{name}_ci_high"]) == pytest.approx((ref.low, ref.high), abs=1e-9)
    ref = stats.bootstrap((per["reciprocal_rank"].to_numpy(),), np.mean, n_resamples=1000, method="percentile", rng=0)
    assert (summary["mrr_ci_low"], summary["mrr_ci_high"]) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)
    assert summary["risk"] == pytest.approx(residual_risk(k, 30, control_rate=1 / 12).value)
    _, empty = attribute_scores(np.zeros((4, 0)), np.array([], dtype=object), list("wxyz"), list("abcd"),
                                np.ones(4, np.int64))
    assert empty["reason"].startswith("history is empty") and math.isnan(empty["accuracy_at_1"])
    assert math.isnan(empty["accuracy_at_1_ci_high"]) and math.isnan(empty["risk"])  # no trial, no interval


def test_residual_risk_is_over_the_timelines_whose_author_the_history_holds() -> None:
    """A timeline without history is a miss by construction: counted, it would pull the risk to the others
    below chance (40 unknown authors beside 10 known ones, 5 of those found, with 5 candidates)."""
    from tasks.intervals import residual_risk
    from tasks.privacy.attribution import attribution_summary

    known, unknown = 10, 40
    per = pd.DataFrame({"correct": [True] * 5 + [False] * (known - 5 + unknown),
                        "in_top10": [True] * known + [False] * unknown,
                        "reciprocal_rank": [1.0] * 5 + [0.5] * 5 + [0.0] * unknown,
                        "in_history": [True] * known + [False] * unknown})
    summary = attribution_summary(per, 5, n_resamples=10)
    assert summary["accuracy_at_1"] == pytest.approx(5 / 50)  # the share of released timelines found
    expected = residual_risk(5, known, control_rate=1 / 5)
    assert (summary["risk"], summary["risk_ci_high"]) == pytest.approx((expected.value, expected.ci_high))
    assert summary["risk"] == pytest.approx((0.5 - 0.2) / 0.8)  # not (0.1 - 0.2) / 0.8 < 0
