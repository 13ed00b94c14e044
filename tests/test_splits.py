"""Group-wise, deterministic splits and nested undersampling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tasks.corpus.splits import assign_splits, author_timelines, cap_documents, group_keys, undersample
from tasks.errors import ConfigError


def _table(n_docs: int = 20_000, n_groups: int = 2_000, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, n_groups, n_docs)
    group_id = pd.array([f"g{g}" if g % 7 else None for g in groups], dtype="string")  # some ungrouped docs
    return pd.DataFrame({"doc_id": pd.array([f"d{i}" for i in range(n_docs)], dtype="string"),
                         "text": "x", "group_id": group_id,
                         "split": pd.array([None] * n_docs, dtype="string")})


def _straddling(df: pd.DataFrame) -> int:
    return int((df.assign(k=group_keys(df)).groupby("k")["split"].nunique() > 1).sum())


def test_groups_never_straddle_and_fractions_are_hit():
    out = assign_splits(_table(), fractions=(0.8, 0.1, 0.1), seed=3)
    assert _straddling(out) == 0 and out["split"].notna().all()
    shares = out["split"].value_counts(normalize=True)
    assert shares["train"] == pytest.approx(0.8, abs=0.02)
    assert shares["val"] == pytest.approx(0.1, abs=0.02) and shares["test"] == pytest.approx(0.1, abs=0.02)


def test_deterministic_and_independent_of_row_order():
    df = _table(3_000, 300)
    a = assign_splits(df, seed=5)
    b = assign_splits(df.sample(frac=1.0, random_state=0), seed=5).loc[a.index]
    pd.testing.assert_series_equal(a["split"], b["split"])
    c = assign_splits(df, seed=6)
    assert (a["split"] != c["split"]).any()


def test_few_groups_every_split_gets_one():
    sizes = {"VP": 520, "1st": 325, "3rd": 166, "2nd": 111}
    df = pd.DataFrame({"doc_id": [f"{g}-{i}" for g, n in sizes.items() for i in range(n)],
                       "group_id": [g for g, n in sizes.items() for _ in range(n)]})
    for seed in range(20):
        out = assign_splits(df, seed=seed)
        assert set(out["split"]) == {"train", "val", "test"}, seed
        assert _straddling(out) == 0
    three = df[df["group_id"] != "2nd"]
    assert set(assign_splits(three, seed=0)["split"]) == {"train", "val", "test"}


def test_zero_fraction_split_stays_empty():
    out = assign_splits(_table(2_000, 200), fractions=(0.9, 0.0, 0.1))
    assert "val" not in set(out["split"])


def test_given_splits_are_kept():
    df = _table(1_000, 100)
    df.loc[df.index[:50], "split"] = "test"
    out = assign_splits(df)
    assert (out["split"].iloc[:50] == "test").all()
    assert _straddling(out) == 0


def test_bad_fractions():
    with pytest.raises(ConfigError):
        assign_splits(_table(10, 5), fractions=(0.5, 0.5))
    with pytest.raises(ConfigError):
        assign_splits(_table(10, 5), fractions=(-1.0, 1.0, 1.0))


def test_undersample_is_nested_by_group_and_leaves_other_splits():
    df = assign_splits(_table(), seed=0)
    train = int((df["split"] == "train").sum())
    half, tenth = undersample(df, 0.5, seed=2), undersample(df, 0.1, seed=2)
    assert set(tenth["doc_id"]) <= set(half["doc_id"])
    assert (half["split"] == "train").sum() == pytest.approx(0.5 * train, rel=0.03)
    assert (tenth["split"] == "train").sum() == pytest.approx(0.1 * train, rel=0.05)
    for sample in (half, tenth):
        for other in ("val", "test"):
            assert (sample["split"] == other).sum() == (df["split"] == other).sum()
        kept_keys = set(group_keys(sample[sample["split"] == "train"]))
        full = df[df["split"] == "train"]
        assert len(full[group_keys(full).isin(kept_keys)]) == (sample["split"] == "train").sum()  # whole groups
    pd.testing.assert_frame_equal(undersample(df, 0.1, seed=2), tenth)
    assert len(undersample(df, 1.0)) == len(df)
    with pytest.raises(ConfigError):
        undersample(df, 0.0)


def test_cap_documents_keeps_splits_and_groups():
    df = assign_splits(_table(5_000, 500), seed=0)
    capped = cap_documents(df, 400, seed=0)
    assert len(capped) <= 400 and set(capped["split"]) == {"train", "val", "test"}
    assert len(capped) >= 350
    kept = set(group_keys(capped))
    assert len(df[group_keys(df).isin(kept)]) == len(capped)
    pd.testing.assert_frame_equal(cap_documents(df, 400, seed=0), capped)


def _authored(seed: int = 0) -> pd.DataFrame:
    """Authors with 3 to 14 documents over one or two groups, positions in each group, rows shuffled."""
    rng = np.random.default_rng(seed)
    rows = []
    for a in range(30):
        n = int(rng.integers(3, 15))
        groups = [f"s{a}-0"] * (n // 2) + [f"s{a}-1"] * (n - n // 2) if a % 3 == 0 else [f"s{a}"] * n
        position = {g: 0 for g in groups}
        for i, g in enumerate(groups):
            position[g] += 1
            rows.append({"doc_id": f"a{a}-{i}", "author_id": f"a{a}", "group_id": g, "position": position[g],
                         "text": f"text {a} {i}"})
    rows.append({"doc_id": "orphan", "author_id": None, "group_id": "x", "position": 1, "text": "no author"})
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)


def test_author_timelines_one_run_per_author_rest_in_histories():
    corpus = _authored()
    timelines, histories = author_timelines(corpus, n_posts=5, seed=1)
    assert len(timelines) + len(histories) == len(corpus)
    assert not set(timelines["doc_id"]) & set(histories["doc_id"])
    sizes = corpus.groupby("author_id").size()
    group_max = corpus.groupby(["author_id", "group_id"]).size().groupby("author_id").max()
    eligible = set(sizes.index[(sizes >= 6) & (group_max.reindex(sizes.index) >= 5)])
    assert set(timelines["author_id"]) == eligible and eligible != set(sizes.index)
    assert timelines.groupby("group_id").size().eq(5).all()
    assert (timelines.groupby("group_id")["author_id"].nunique() == 1).all()
    assert timelines["group_id"].nunique() == len(eligible)
    for _, run in timelines.groupby("group_id"):
        assert run["source_group_id"].nunique() == 1  # inside one group, consecutive positions
        assert sorted(run["position"]) == list(range(run["position"].min(), run["position"].min() + 5))
    for author in eligible:  # the author's other documents are the adversary's
        assert (histories["author_id"] == author).sum() == sizes[author] - 5
    assert "orphan" in set(histories["doc_id"])


def test_author_timelines_are_seeded_and_independent_of_row_order():
    corpus = _authored()
    a, ha = author_timelines(corpus, seed=2)
    b, hb = author_timelines(corpus.iloc[::-1], seed=2)
    pd.testing.assert_frame_equal(a, b)
    assert set(ha["doc_id"]) == set(hb["doc_id"])
    runs = {seed: set(author_timelines(corpus, seed=seed)[0]["doc_id"]) for seed in range(4)}
    assert len({frozenset(r) for r in runs.values()}) > 1  # another seed, other runs
    one, _ = author_timelines(corpus, n_posts=1)
    assert one.groupby("author_id").size().eq(1).all() and len(one) == corpus["author_id"].nunique()
    with pytest.raises(ConfigError):
        author_timelines(corpus, n_posts=0)
    with pytest.raises(ConfigError, match="author_id"):
        author_timelines(corpus.drop(columns="author_id"))
