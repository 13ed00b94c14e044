"""The LSH re-identification attack: datasketch candidate sets, attribution, caching, Dask, edge cases."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasketch import MinHash, MinHashLSH

import tasks.privacy.reidentify as reidentify_module
from tasks.corpus.simulate import simulate_histories, simulate_synthetic
from tasks.errors import InputError
from tasks.parallel import dask_client
from tasks.privacy.minhash import MinHashParams, sign, signatures
from tasks.privacy.reidentify import (
    LSHParams,
    build_index,
    probe,
    reidentify,
    reidentify_dask,
    reidentify_signed,
    sign_histories,
    text_batches,
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pd.DataFrame]:
    path = str(tmp_path_factory.mktemp("sim") / "h.parquet")
    simulate_histories(300, 20_000, seed=3, out_path=path, row_group_rows=5_000, vocab_size=5_000)
    return path, simulate_synthetic(path, 20, 600, rewrite_strength=0.2, seed=4)


def _syn(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["group_id", "author_id", "text"])


def test_candidates_equal_datasketch_minhashlsh() -> None:
    rng = np.random.default_rng(0)
    base = ["".join(rng.choice(list("abcdefg "), 80)) for _ in range(200)]
    queries = [b[:60] + "".join(rng.choice(list("abcdefg "), 20)) for b in base[:50]] + base[50:60]
    k, bands, rows = 64, 32, 2
    hsig, qsig = signatures(base, k), signatures(queries, k)
    lsh = MinHashLSH(num_perm=k, params=(bands, rows))
    for i, s in enumerate(hsig):
        lsh.insert(i, MinHash(num_perm=k, hashvalues=s, scheme="affine32"))
    expected = {(i, q) for q, s in enumerate(qsig) for i in lsh.query(MinHash(num_perm=k, hashvalues=s, scheme="affine32"))}
    params = LSHParams(k=k, bands=bands, rows=rows)
    index = build_index(_syn([(f"g{q}", "a", t) for q, t in enumerate(queries)]), params)
    _, keys = sign(base, params.minhash, bands=bands, rows=rows, want_signatures=False)
    got = set(zip(*probe(index, keys), strict=True))
    got = {(int(r), int(p)) for r, p in got}
    assert len(expected) > 100 and got == expected


def test_verbatim_timelines_are_reidentified(sim: tuple[str, pd.DataFrame]) -> None:
    path, _ = sim
    syn = simulate_synthetic(path, 20, 600, rewrite_strength=0.0, seed=4)
    res = reidentify(path, syn, chunk_rows=3_000)
    s = res.summary
    assert s["accuracy"] == 1.0 and s["candidate_recall"] == 1.0 and s["n_timelines_no_candidates"] == 0
    assert s["n_history_users"] == 300 and s["n_history_posts"] == 20_000 and s["chance"] == 1 / 300
    assert math.isclose(s["s_curve_threshold"], (1 / 16) ** (1 / 8))
    per = res.per_timeline
    assert len(per) == 20 and (per["predicted_author"] == per["author_id"]).all() and per["n_posts"].sum() == 600


def test_chunking_dataframe_and_filter_consistency(sim: tuple[str, pd.DataFrame]) -> None:
    path, syn = sim
    ref = reidentify(path, syn)
    df = pd.read_parquet(path)
    for other in (reidentify(path, syn, chunk_rows=777), reidentify(df, syn, chunk_rows=5000, parallel=False)):
        pd.testing.assert_frame_equal(ref.per_timeline, other.per_timeline)
        assert ref.summary == other.summary
    filt = reidentify(path, syn, jaccard_threshold=0.5)
    assert filt.summary["n_candidate_pairs"] <= ref.summary["n_candidate_pairs"]
    assert 0.0 < ref.summary["accuracy"] <= 1.0


@pytest.mark.parametrize("readers", [1, 2, 3])
@pytest.mark.parametrize("chunk_rows", [777, 2_500, 5_000, 50_000])
def test_text_batches_read_every_row_once_in_order_within_the_batch_size(sim: tuple[str, pd.DataFrame],
                                                                          chunk_rows: int, readers: int) -> None:
    """Row groups of 5,000 rows: read whole when at most twice the batch size (777: streamed), split into
    batches of at most ``chunk_rows``; every row once, in file order, without doc_id unless asked, however many
    row groups decode side by side."""
    path, _ = sim
    assert pq.ParquetFile(path).metadata.num_row_groups == 4
    batches = list(text_batches(path, chunk_rows, readers=readers))
    assert all(b.num_rows <= chunk_rows for b in batches) and all(b.schema.names == ["author_id", "text"]
                                                                  for b in batches)
    got = pa.Table.from_batches(batches)
    want = pq.read_table(path, columns=["author_id", "text"])
    assert got.num_rows == want.num_rows == 20_000 and got.equals(want)


def test_row_groups_decode_side_by_side_only_within_the_byte_budget(sim: tuple[str, pd.DataFrame],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two readers decode the file's row groups on threads of their own while two of the largest groups' decoded
    columns fit the budget; a byte less (a corpus of long posts) and the groups are read one at a time here. The
    rows are the same either way."""
    path, _ = sim
    want = pq.read_table(path, columns=["author_id", "text"])
    meta = pq.ParquetFile(path).metadata
    largest = max(sum(meta.row_group(g).column(c).total_uncompressed_size for c in range(meta.num_columns)
                      if meta.row_group(g).column(c).path_in_schema in ("author_id", "text"))
                  for g in range(meta.num_row_groups))
    read_on: list[str] = []
    original = reidentify_module._read_row_group

    def spy(path: str, group: int, columns: list[str]) -> pa.Table:
        read_on.append(threading.current_thread().name)
        return original(path, group, columns)

    monkeypatch.setattr(reidentify_module, "_read_row_group", spy)
    for budget, side_by_side in ((2 * largest, True), (2 * largest - 1, False)):
        monkeypatch.setattr(reidentify_module, "SIDE_BY_SIDE_READ_BYTES", budget)
        read_on.clear()
        assert pa.Table.from_batches(list(text_batches(path, 5_000, readers=2))).equals(want)
        if side_by_side:
            assert len(read_on) == 4 and all(name.startswith("row-groups") for name in read_on)
        else:
            assert read_on == []


def test_signed_histories_are_reused(sim: tuple[str, pd.DataFrame], tmp_path: Path) -> None:
    path, syn = sim
    signed = sign_histories(path, tmp_path / "signed.parquet", with_signatures=True, chunk_rows=4_000)
    for thr in (None, 0.4):
        ref, got = reidentify(path, syn, jaccard_threshold=thr), reidentify_signed(signed, syn, jaccard_threshold=thr)
        pd.testing.assert_frame_equal(ref.per_timeline, got.per_timeline)
        assert ref.summary == got.summary
    bare = sign_histories(path, tmp_path / "bare.parquet")
    with pytest.raises(InputError, match="needs signatures"):
        reidentify_signed(bare, syn, jaccard_threshold=0.4)


def test_signed_histories_serve_the_disjoint_adversary(sim: tuple[str, pd.DataFrame], tmp_path: Path) -> None:
    """The signed histories keep doc_id, so the disjoint setting skips the rewritten documents' rows and
    equals streaming the histories without them; histories signed without doc_id say so."""
    path, syn = sim
    signed = sign_histories(path, tmp_path / "signed.parquet", chunk_rows=4_000)
    ref, got = reidentify(path, syn, setting="disjoint"), reidentify_signed(signed, syn, setting="disjoint")
    pd.testing.assert_frame_equal(ref.per_timeline, got.per_timeline)
    assert ref.summary == got.summary and got.summary["adversary"] == "disjoint"
    assert got.summary["n_history_posts"] == 20_000 - len(syn)
    full = reidentify_signed(signed, syn)
    assert full.summary["accuracy"] > got.summary["accuracy"]  # the near-duplicates were the evidence
    nameless = pq.read_table(path).drop(["doc_id"])
    pq.write_table(nameless, tmp_path / "nameless.parquet")
    unnamed = sign_histories(str(tmp_path / "nameless.parquet"), tmp_path / "unnamed.parquet")
    assert reidentify_signed(unnamed, syn).summary == full.summary
    with pytest.raises(InputError, match="disjoint setting needs doc_id"):
        reidentify_signed(unnamed, syn, setting="disjoint")


def _shards(path: str, tmp_path: Path, n: int) -> list[str]:
    table = pq.read_table(path)
    bounds = np.linspace(0, table.num_rows, n + 1).astype(int)
    out = []
    for i in range(n):
        p = str(tmp_path / f"shard{i}.parquet")
        pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]), p)
        out.append(p)
    return out


def test_dask_threads_equal_single_process(sim: tuple[str, pd.DataFrame], tmp_path: Path) -> None:
    path, syn = sim
    shards = _shards(path, tmp_path, 3)
    ref = reidentify(path, syn, jaccard_threshold=0.3)
    with dask_client(n_workers=2, threads_per_worker=1) as client:
        got = reidentify_dask(client, shards, syn, jaccard_threshold=0.3, chunk_rows=2_500)
        signed = [sign_histories(s, tmp_path / f"signed{i}.parquet", with_signatures=True) for i, s in enumerate(shards)]
        got_signed = reidentify_dask(client, signed, syn, jaccard_threshold=0.3, signed=True)
    for g in (got, got_signed):
        pd.testing.assert_frame_equal(ref.per_timeline, g.per_timeline)
        assert ref.summary == g.summary


@pytest.mark.slow
def test_dask_processes_equal_single_process(sim: tuple[str, pd.DataFrame], tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    path, syn = sim
    shards = _shards(path, tmp_path, 4)
    ref = reidentify(path, syn)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        got = reidentify_dask(client, shards, syn)
    pd.testing.assert_frame_equal(ref.per_timeline, got.per_timeline)
    assert ref.summary == got.summary


def test_one_post_users_shared_texts_ties_and_no_candidates() -> None:
    hist = pd.DataFrame({
        "author_id": ["solo", "twinA", "twinB", "many", "many", "many", "blank"],
        "text": ["a single post about my green bicycle", "the very same words everywhere",
                 "the very same words everywhere", "walking the dog in the rain again",
                 "coffee first then the long commute", "evening run along the river bank", ""],
    })
    syn = _syn([
        ("t_solo", "solo", "a single post about my green bicycle"),
        ("t_twin", "twinA", "the very same words everywhere"),
        ("t_many", "many", "walking the dog in the rain again"),
        ("t_many", "many", "coffee first then the long commute"),
        ("t_none", "many", "zzqx unrelated qqqq"),
        ("t_empty", "blank", ""),
    ])
    res = reidentify(hist, syn)
    per = res.per_timeline.set_index("group_id")
    assert per.loc["t_solo", "correct"] and per.loc["t_many", "correct"] and per.loc["t_many", "votes_true"] == 2
    assert per.loc["t_twin", "tie"] and not per.loc["t_twin", "correct"]  # same text under two users: a tie
    assert per.loc["t_twin", "predicted_author"] == "twinA"  # smallest tied id is reported, yet a failure
    assert per.loc["t_none", "n_candidate_authors"] == 0 and not per.loc["t_none", "correct"]
    assert per.loc["t_empty", "n_candidate_authors"] == 0  # empty texts never match, not even each other
    s = res.summary
    assert s["accuracy"] == 2 / 5 and s["n_timelines_no_candidates"] == 2 and s["n_history_users"] == 5
    assert s["candidate_recall"] == 4 / 6 and s["n_ties"] == 1


def test_empty_history(tmp_path: Path) -> None:
    syn = _syn([("t1", "u1", "some text here"), ("t2", "u2", "other text")])
    empty = pd.DataFrame({"author_id": pd.Series([], dtype=object), "text": pd.Series([], dtype=object)})
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"author_id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), path)
    for hist in (empty, str(path)):
        s = reidentify(hist, syn).summary
        assert s["accuracy"] == 0.0 and math.isnan(s["chance"]) and "empty" in s["reason"]
        assert s["n_timelines_no_candidates"] == 2 and s["n_history_users"] == 0
    signed = sign_histories(path, tmp_path / "signed.parquet")
    assert math.isnan(reidentify_signed(signed, syn).summary["chance"])


def test_bad_inputs(tmp_path: Path) -> None:
    syn = _syn([("t1", "u1", "text")])
    with pytest.raises(InputError, match="text"):
        reidentify(pd.DataFrame({"author_id": ["a"]}), syn)
    with pytest.raises(InputError, match="not found"):
        reidentify(tmp_path / "missing.parquet", syn)
    with pytest.raises(InputError, match="several true authors"):
        reidentify(pd.DataFrame({"author_id": ["a"], "text": ["x"]}), _syn([("t", "a", "x"), ("t", "b", "y")]))
    with pytest.raises(ValueError, match="bands"):
        LSHParams(k=64, bands=16, rows=8)
    assert MinHashParams().k == 128
