"""Splitting each author's history in two halves: every post in exactly one, halves within one post of each
other per author, the same split whatever the row order and row groups, every column kept, bad input named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.errors import InputError
from tasks.privacy.history_split import split_histories_by_author


def _histories(n_authors: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sizes = np.r_[1, 2, 3, rng.integers(1, 30, n_authors - 3)]  # one post, two, three, then any
    rows = [{"author_id": f"a{a}", "doc_id": f"d{a}-{i}", "text": f"post {i} of {a}", "score": float(i),
             "when": pd.Timestamp("2020-01-01") + pd.Timedelta(days=i)}
            for a, size in enumerate(sizes) for i in range(size)]
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)


def _split(df: pd.DataFrame, tmp: Path, name: str, *, row_group_size: int = 50, seed: int = 0,
           chunk_rows: int = 1_000_000) -> tuple[pd.DataFrame, pd.DataFrame, tuple[int, int]]:
    src = tmp / f"{name}.parquet"
    df.to_parquet(src, row_group_size=row_group_size, index=False)
    counts = split_histories_by_author(src, tmp / f"{name}.1.parquet", tmp / f"{name}.2.parquet", seed=seed,
                                       chunk_rows=chunk_rows)
    return pd.read_parquet(tmp / f"{name}.1.parquet"), pd.read_parquet(tmp / f"{name}.2.parquet"), counts


def test_every_post_in_one_half_and_halves_balanced_per_author(tmp_path) -> None:
    df = _histories()
    first, second, counts = _split(df, tmp_path, "h", chunk_rows=37)
    assert counts == (len(first), len(second)) and sum(counts) == len(df)
    assert not set(first["doc_id"]) & set(second["doc_id"])
    assert sorted([*first["doc_id"], *second["doc_id"]]) == sorted(df["doc_id"])
    n1 = first.groupby("author_id").size().reindex(df["author_id"].unique(), fill_value=0)
    n2 = second.groupby("author_id").size().reindex(df["author_id"].unique(), fill_value=0)
    total = n1 + n2
    assert (n1 == (total + 1) // 2).all() and (n2 == total // 2).all()  # ceil to the first, floor to the second
    assert n1["a0"] == 1 and n2["a0"] == 0  # an author with one post is in the first half
    # every column and every value kept, rows in the file's order within each half
    pd.testing.assert_frame_equal(first, df[df["doc_id"].isin(set(first["doc_id"]))].reset_index(drop=True))
    pd.testing.assert_frame_equal(second, df[df["doc_id"].isin(set(second["doc_id"]))].reset_index(drop=True))
    assert list(pq.read_schema(tmp_path / "h.1.parquet").names) == list(df.columns)


def test_the_split_depends_on_the_seed_only(tmp_path) -> None:
    """Shuffled rows and other row groups and batches give the same halves; another seed another split;
    the same seed in another process the same split."""
    df = _histories()
    first, _, _ = _split(df, tmp_path, "a", row_group_size=50)
    shuffled, _, _ = _split(df.sample(frac=1.0, random_state=9), tmp_path, "b", row_group_size=7, chunk_rows=5)
    assert set(first["doc_id"]) == set(shuffled["doc_id"])
    reseeded, _, _ = _split(df, tmp_path, "c", seed=1)
    assert set(reseeded["doc_id"]) != set(first["doc_id"])
    code = ("from tasks.privacy.history_split import split_histories_by_author as s; import sys; "
            "print(s(sys.argv[1], sys.argv[2], sys.argv[3]))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "a.parquet"), str(tmp_path / "p.1.parquet"),
                    str(tmp_path / "p.2.parquet")], check=True, cwd=Path(__file__).resolve().parent.parent)
    assert set(pd.read_parquet(tmp_path / "p.1.parquet")["doc_id"]) == set(first["doc_id"])


def test_the_halves_are_not_ordered_by_doc_id(tmp_path) -> None:
    """The hash, not the ids' order, decides: the first half is not the lower half of each author's ids."""
    df = _histories()
    first, _, _ = _split(df, tmp_path, "h")
    ranks = df.assign(rank=df.groupby("author_id")["doc_id"].rank(method="first"))
    in_first = ranks["doc_id"].isin(set(first["doc_id"]))
    assert 0.3 < in_first[ranks["rank"] % 2 == 1].mean() < 0.7


def test_integer_ids_and_an_empty_file(tmp_path) -> None:
    df = pd.DataFrame({"author_id": [7, 7, 8, 7], "doc_id": [1, 2, 3, 4], "text": ["a", "b", "c", "d"]})
    first, second, counts = _split(df, tmp_path, "ints")
    assert second["author_id"].tolist() == [7]
    assert counts == (3, 1) and set(first["author_id"]) == {7, 8} and first["doc_id"].dtype == np.int64
    empty, other, counts = _split(df.iloc[:0], tmp_path, "empty")
    assert counts == (0, 0) and list(empty.columns) == list(df.columns) and other.empty


@pytest.mark.parametrize(("change", "message"), [
    (lambda df: df.drop(columns=["doc_id"]), r"column 'doc_id': history data lacks required column"),
    (lambda df: df.drop(columns=["author_id"]), r"column 'author_id': history data lacks required column"),
    (lambda df: df.assign(author_id=df["author_id"].where(df.index != 5, None)),
     r"column 'author_id', row 6: author_id is null"),
    (lambda df: df.assign(doc_id=df["doc_id"].where(df.index != 2, None)), r"column 'doc_id', row 3: doc_id is null"),
    (lambda df: pd.concat([df, df.iloc[[4]]], ignore_index=True), r"column 'doc_id', row \d+: duplicate doc_id 'd"),
])
def test_bad_input_names_the_file_and_the_field(tmp_path, change, message) -> None:
    src = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pandas(change(_histories()), preserve_index=False), src)
    out1, out2 = tmp_path / "o1.parquet", tmp_path / "o2.parquet"
    with pytest.raises(InputError, match=rf"^file {src}, " + message):
        split_histories_by_author(src, out1, out2)
    assert not out1.exists() and not out2.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]
    with pytest.raises(InputError, match="history file not found"):
        split_histories_by_author(tmp_path / "missing.parquet", out1, out2)


def test_the_halves_minhash_indexes_serve_the_full_histories(tmp_path):
    """Protect's certificate attacks the full histories; MinHash reads the indexes already signed for the halves
    (each post in one of them, their votes unioned) and signs no index of the full file: its rows equal those of
    an index of the full histories, under both adversaries."""
    from tasks.corpus.simulate import simulate_histories, simulate_synthetic
    from tasks.privacy.audit import attack_timelines
    from tasks.protect.attackers import Attackers, RoleSpec

    full = simulate_histories(30, 1_500, seed=3, out_path=tmp_path / "histories.parquet")
    halves = (str(tmp_path / "feedback.parquet"), str(tmp_path / "judge.parquet"))
    split_histories_by_author(full, *halves, seed=0)
    synthetic = simulate_synthetic(full, n_timelines=12, n_posts=48, rewrite_strength=0.2, seed=4)
    timelines = attack_timelines(synthetic.assign(status="ok"))
    docs = frozenset(synthetic["doc_id"].astype(str))
    minhash = (("minhash", {}),)
    adversaries = ("full", "disjoint")
    from_halves = Attackers([RoleSpec("certificate", minhash, str(full), adversaries, halves)], docs,
                            tmp_path / "a").run(timelines)
    from_full = Attackers([RoleSpec("certificate", minhash, str(full), adversaries)], docs, tmp_path / "b").run(timelines)
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "a").glob("*.index")) == ["feedback", "judge"]
    assert [p.name.split("-")[0] for p in (tmp_path / "b").glob("*.index")] == ["histories"]
    pd.testing.assert_frame_equal(from_halves, from_full)
    assert from_full.loc[from_full["adversary"] == "full", "correct"].mean() > 0.5  # the attack finds authors here
