"""Manipulations (seeded, nested, strength 0 = reference), metric validation and correlation matrices."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from tasks.metrics.metaeval import (
    MANIPULATIONS,
    SYNONYMS,
    eda_delete,
    eda_insert,
    eda_replace,
    eda_swap,
    flatten_style,
    manipulate,
    metric_correlations,
    run_metaeval,
    summarize_metaeval,
    validate_metrics,
)

BAG = [
    "I really love this little phone, the screen is great",
    "the battery died after two days and support was rude",
    "Can't believe how fast the delivery was!!",
    "my kid thinks the movie is funny but I found it boring",
    "We'll buy another one if the price drops",
    "the food was cheap and the place was clean",
    "honestly the worst car I have ever owned",
    "great story, strange ending, would watch again",
    "I think the shop near my house is closed now",
    "she said the new job is hard but interesting",
]
NOISE = [f"noise text number {i} about gardening tools and soil" for i in range(20)]


def overlap(reference: list[str], bag: list[str]) -> float:
    """Share of the reference's tokens (multiset) found in the bag."""
    ref = Counter(w for t in reference for w in t.split())
    got = Counter(w for t in bag for w in t.split())
    return sum((ref & got).values()) / sum(ref.values())


@pytest.mark.parametrize("name", MANIPULATIONS)
def test_strength_zero_is_reference_and_seeded(name: str) -> None:
    bag = [*BAG, BAG[0], BAG[0], BAG[1]]  # some repeats so TDM has a head
    assert manipulate(bag, name, 0.0, seed=1, noise_texts=NOISE) == bag
    a = manipulate(bag, name, 0.6, seed=1, noise_texts=NOISE)
    b = manipulate(bag, name, 0.6, seed=1, noise_texts=NOISE)
    assert a == b and len(a) == len(bag) and a != bag
    full = manipulate(bag, name, 1.0, seed=1, noise_texts=NOISE)
    assert full != bag


@pytest.mark.parametrize("name", ["eda-swap", "eda-delete", "nti", "style", "tdm-peaked"])
def test_levels_are_nested(name: str) -> None:
    bag = [*BAG, BAG[0], BAG[2]]
    changed = []
    for s in (0.2, 0.4, 0.6, 0.8, 1.0):
        out = manipulate(bag, name, s, seed=7, noise_texts=NOISE)
        changed.append({i for i, (x, y) in enumerate(zip(bag, out, strict=True)) if x != y})
    for small, big in itertools.pairwise(changed):
        assert small <= big


def test_seed_changes_the_choice() -> None:
    outs = {tuple(manipulate(BAG, "eda-delete", 0.5, seed=s)) for s in range(5)}
    assert len(outs) > 1


def test_tdm_peaked_and_flat() -> None:
    bag = ["a"] * 6 + ["b"] * 3 + ["c", "d", "e", "f", "g", "h", "i", "j", "k"]  # 18 texts, 11 distinct
    peaked = manipulate(bag, "tdm-peaked", 1.0, seed=0, head_share=0.2)  # head = a, b, (c: 3rd of ceil 2.2)
    assert set(peaked) <= {"a", "b", "c"} and len(peaked) == len(bag)
    half = manipulate(bag, "tdm-peaked", 0.5, seed=0, head_share=0.2)
    tail_left = sum(1 for t in half if t not in {"a", "b", "c"})
    assert tail_left == 8 - round(0.5 * 8)
    flat = Counter(manipulate(bag, "tdm-flat", 1.0, seed=0))
    assert sum(flat.values()) == 18 and set(flat) == set(bag)
    assert max(flat.values()) - min(flat.values()) <= 1
    mid = Counter(manipulate(bag, "tdm-flat", 0.5, seed=0))
    assert 1 < mid["a"] < 6  # (1 - .5) * 6 + .5 * 18 / 11 = 3.8
    assert manipulate(BAG, "tdm-flat", 1.0) == BAG  # all distinct: already flat


def test_nti_replaces_with_noise() -> None:
    out = manipulate(BAG, "nti", 1.0, seed=0, noise_texts=NOISE)
    assert set(out) <= set(NOISE) and len(set(out)) == len(BAG)
    assert sum(t in NOISE for t in manipulate(BAG, "nti", 0.4, seed=0, noise_texts=NOISE)) == 4
    with pytest.raises(ValueError, match="noise_texts"):
        manipulate(BAG, "nti", 0.4)


def test_eda_operations_hand_checked() -> None:
    rng = np.random.default_rng(0)
    text = "the movie was great and the food was cheap"
    swapped = eda_swap(text, rng)
    assert sorted(swapped.split()) == sorted(text.split()) and swapped != text
    deleted = eda_delete(text, rng, alpha=0.1)
    assert len(deleted.split()) < len(text.split())
    assert eda_delete("one", rng) == "one"
    replaced = eda_replace("The movie was great", np.random.default_rng(1), alpha=0.5)
    words = replaced.split()
    assert words[0] == "The" and words[2] == "was"  # stopwords untouched
    assert words[1] in SYNONYMS["movie"] + ("movie",) and words[3] in SYNONYMS["great"] + ("great",)
    assert replaced != "The movie was great"
    assert eda_replace("Movie!", np.random.default_rng(0)) in {s.capitalize() + "!" for s in SYNONYMS["movie"]}
    inserted = eda_insert(text, np.random.default_rng(2))
    assert len(inserted.split()) == len(text.split()) + 1
    extra = Counter(inserted.split()) - Counter(text.split())
    (new,) = extra
    assert any(new in SYNONYMS[w] for w in ("movie", "great", "food", "cheap"))
    assert eda_insert("of the and", np.random.default_rng(0)) == "of the and"  # no synonyms: unchanged
    assert flatten_style("I can't BELIEVE it, we'll see!!! 😂") == "i cannot believe it we will see"


# ------------------------------------------------------------------------------------------ validation
def test_validate_metrics_monotone_constant_and_distance() -> None:
    metrics = {
        "overlap": overlap,
        "constant": lambda r, g: 0.5,
        "distance": lambda r, g: 1 - overlap(r, g),
        "broken": lambda r, g: 1 / 0,
    }
    df = validate_metrics(BAG, metrics, manipulations=["eda-delete", "nti", "tdm-flat"], seed=0,
                          higher_is_better={"distance": False}, noise_texts=NOISE)
    row = df.set_index(["metric", "manipulation"])
    assert row.loc[("overlap", "eda-delete"), "rho"] == pytest.approx(1.0)
    assert row.loc[("distance", "eda-delete"), "rho"] == pytest.approx(1.0)
    assert row.loc[("overlap", "nti"), "rho"] == pytest.approx(1.0)
    scores = row.loc[("overlap", "eda-delete"), "scores"]
    assert scores[0] == 1.0 and all(a > b for a, b in itertools.pairwise(scores))
    ref = spearmanr([0, 0.2, 0.4, 0.6, 0.8, 1.0], scores)
    assert row.loc[("overlap", "eda-delete"), "p_value"] == pytest.approx(ref.pvalue)
    assert row.loc[("overlap", "eda-delete"), "n_levels"] == 6
    assert math.isnan(row.loc[("constant", "eda-delete"), "rho"])
    assert row.loc[("constant", "eda-delete"), "reason"] == "metric is constant across levels"
    assert math.isnan(row.loc[("overlap", "tdm-flat"), "rho"])
    assert "unchanged" in row.loc[("overlap", "tdm-flat"), "reason"]
    assert "ZeroDivisionError" in row.loc[("broken", "eda-delete"), "reason"]
    # an anti-correlated metric gets -1
    anti = validate_metrics(BAG, {"neg": lambda r, g: -overlap(r, g)}, manipulations=["eda-delete"])
    assert anti["rho"][0] == pytest.approx(-1.0)


def test_validate_metrics_without_noise_skips_nti() -> None:
    df = validate_metrics(BAG, {"overlap": overlap}, manipulations=["nti"])
    assert math.isnan(df["rho"][0]) and "noise_texts" in df["reason"][0]


def test_run_metaeval_and_summary() -> None:
    corpus = BAG + NOISE
    rows = run_metaeval(corpus, {"overlap": overlap}, bag_size=8, n_bags=2, seed=3,
                        manipulations=["eda-delete", "nti", "style"])
    assert len(rows) == 6 and set(rows["bag"]) == {0, 1} and (rows["bag_size"] == 8).all()
    again = run_metaeval(corpus, {"overlap": overlap}, bag_size=8, n_bags=2, seed=3,
                         manipulations=["eda-delete", "nti", "style"])
    pd.testing.assert_frame_equal(rows, again)
    summary = summarize_metaeval(rows)
    assert len(summary) == 3 and (summary["n_bags"] == 2).all()
    nti = summary.set_index("manipulation").loc["nti"]
    assert nti["rho_mean"] == pytest.approx(1.0) and nti["n_defined"] == 2


def test_prefetch_sees_every_bag_text_once_before_any_metric() -> None:
    """The caller's prefetch gets the reference and every manipulated bag's texts, each once, before the
    first metric call (so a suite can embed them in one pass), and the rows are those without it."""
    events: list[tuple[str, object]] = []

    def prefetch(texts: list[str]) -> None:
        events.append(("prefetch", texts))

    def seen_overlap(r: list[str], g: list[str]) -> float:
        events.append(("metric", tuple(g)))
        return overlap(r, g)

    kw = {"manipulations": ["eda-delete", "nti", "style"], "seed": 0, "noise_texts": NOISE}
    rows = validate_metrics(BAG, {"overlap": seen_overlap}, prefetch=prefetch, **kw)
    (first, texts), *later = events
    assert first == "prefetch" and all(kind == "metric" for kind, _ in later)
    assert len(texts) == len(set(texts)) and set(BAG) <= set(texts)
    assert set(texts) == set(BAG) | {t for _, bag in later for t in bag}
    pd.testing.assert_frame_equal(rows, validate_metrics(BAG, {"overlap": overlap}, **kw))


# ------------------------------------------------------------------------------------------ correlations
def test_metric_correlations_match_scipy_pairwise() -> None:
    rng = np.random.default_rng(0)
    n = 30
    a = rng.normal(size=n)
    frame = pd.DataFrame({"a": a, "b": a + rng.normal(scale=0.5, size=n), "c": -a ** 3,
                          "d": rng.normal(size=n), "label": ["x"] * n})
    frame.loc[[2, 5, 11], "b"] = np.nan
    frame.loc[[5, 7], "d"] = np.nan
    cols = ["a", "b", "c", "d"]
    signed = metric_correlations(frame, cols, absolute=False)
    for i in cols:
        for j in cols:
            ok = frame[i].notna() & frame[j].notna()
            ref = 1.0 if i == j else spearmanr(frame.loc[ok, i], frame.loc[ok, j]).statistic
            assert signed.loc[i, j] == pytest.approx(ref)
    assert signed.loc["a", "c"] == pytest.approx(-1.0)
    absolute = metric_correlations(frame)  # numeric columns by default, |rho| as in Fig. 5
    assert list(absolute.columns) == cols
    np.testing.assert_allclose(absolute.to_numpy(), np.abs(signed.to_numpy()))
    # no ties and no NaN: equals scipy's matrix form
    full = frame[["a", "c"]].assign(e=rng.normal(size=n))
    np.testing.assert_allclose(metric_correlations(full, absolute=False).to_numpy(), spearmanr(full).statistic)
    sparse = pd.DataFrame({"x": [1.0, 2.0, np.nan, np.nan], "y": [1.0, np.nan, 3.0, 4.0], "z": [1, 1, 1, 1]})
    m = metric_correlations(sparse, absolute=False)
    assert math.isnan(m.loc["x", "y"]) and math.isnan(m.loc["z", "z"])


def test_rows_carry_signatures() -> None:
    df = validate_metrics(BAG, {"overlap": overlap}, manipulations=["eda-replace", "style"], seed=4)
    sig = df.set_index("manipulation")["signature"]
    assert sig["eda-replace"].startswith("metric:metaeval|manipulation:eda-replace|levels:0,0.2,0.4,0.6,0.8,1")
    assert "seed:4" in sig["eda-replace"] and "alpha:0.1" in sig["eda-replace"]
    assert "synonyms:builtin" in sig["eda-replace"] and "alpha" not in sig["style"]
