"""Group-wise, deterministic splits and nested undersampling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tasks.corpus.splits import assign_splits, cap_documents, group_keys, undersample
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
