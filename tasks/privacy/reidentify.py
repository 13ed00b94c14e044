"""Re-identification attack of seed 000 §5.3.2: attribute synthetic timelines to history authors with
MinHash LSH over character 3-grams.

Method. Synthetic posts (the small side, 17.8k in the article) are signed and indexed: each LSH band of
``rows`` signature values is hashed to one uint64 key; the (band key, post) pairs are sorted, with a 2 MB
bitmap in front so that almost every history probe is rejected with one cache access. History posts (the
large side, 8.7M) are streamed in chunks (``chunk_rows``) from parquet, signed by the numba kernel and
probed band by band; any shared band key makes a (history post, synthetic post) candidate pair (the
same rule as datasketch ``MinHashLSH``). With ``jaccard_threshold`` a pair is kept only when the share of
equal signature values (the Jaccard estimate) reaches it. About 8 bytes x bands per history post are
held per chunk; nothing per history post is kept across chunks.

Voting. Each candidate pair votes for its history post's author in its synthetic post's timeline;
a synthetic post counts at most once per candidate author (however many of that author's posts
match it). A timeline is attributed to the author with the most matching synthetic posts. Ties count
as failures: a timeline is re-identified only when the true author is the unique argmax (the reported
``predicted_author`` on a tie is the smallest tied id, flagged ``tie``). A timeline without candidates
is a failure.

Banding. Defaults ``k=128, bands=16, rows=8``: the S-curve P(candidate | J) = 1 - (1 - J^r)^b has its
threshold near (1/b)^(1/r) = (1/16)^(1/8) ~= 0.71 ("near duplicates"); J=0.5 is caught with p ~= 0.06
per post, J=0.9 with p ~= 1. ``bands*rows`` may be less than k (the first bands*rows values are banded;
all k are used by the Jaccard filter).

Report. ``accuracy`` = share of timelines attributed to their true author; ``chance`` = 1/N, N the
number of distinct history authors (nan with a ``reason`` when the history is empty);
``candidate_recall`` = share of synthetic posts whose true author is among their candidate authors;
``n_timelines_no_candidates``; plus the attribution output every attack shares
(:mod:`tasks.privacy.attribution`): the true author's rank by votes, accuracy@1 (= ``accuracy``),
accuracy@10, MRR and their chance rates. ``setting="disjoint"`` drops the synthetic posts' source
documents (by ``doc_id``) from the histories as they stream.
"""

from __future__ import annotations

import json
import math
import os
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.errors import InputError
from tasks.limits import MAX_HASHES, MAX_NGRAM, MAX_SEED, check_range
from tasks.parallel import map_shards
from tasks.privacy.attribution import (
    Setting,
    attribution_summary,
    attribution_table,
    check_timelines,
    held_out_doc_ids,
)
from tasks.privacy.minhash import MinHashParams, Scheme, sign

HistorySource = str | os.PathLike | pd.DataFrame
_BITMAP_BITS = 24
_META_KEY = b"synthugc.minhash"


@dataclass(frozen=True)
class LSHParams:
    """MinHash + banding parameters; identical params make signatures and band keys comparable."""

    n: int = 3
    k: int = 128
    bands: int = 16
    rows: int = 8
    seed: int = 1
    scheme: Scheme = "affine32"
    lower: bool = False

    def __post_init__(self) -> None:
        check_range("n", self.n, 1, MAX_NGRAM)
        check_range("k", self.k, 1, MAX_HASHES)
        check_range("seed", self.seed, 0, MAX_SEED)
        if self.bands < 1 or self.rows < 1 or self.bands * self.rows > self.k:
            raise ValueError(f"need bands >= 1, rows >= 1 and bands*rows <= k; got {self.bands}x{self.rows}, k={self.k}")

    @property
    def minhash(self) -> MinHashParams:
        return MinHashParams(n=self.n, k=self.k, seed=self.seed, scheme=self.scheme, lower=self.lower)

    @property
    def threshold(self) -> float:
        """The S-curve's threshold (1/b)^(1/r)."""
        return (1.0 / self.bands) ** (1.0 / self.rows)


@dataclass
class ReidResult:
    """Per-timeline attributions and the summary (accuracy, chance, recall, counts, parameters)."""

    per_timeline: pd.DataFrame
    summary: dict[str, Any]


@dataclass
class SyntheticIndex:
    """The indexed synthetic side: sorted band keys -> post, post -> timeline and true author."""

    params: LSHParams
    keys: np.ndarray          # sorted uint64 band keys
    posts: np.ndarray         # int32 synthetic post per key
    bitmap: np.ndarray        # uint64 words, bit (key >> (64 - _BITMAP_BITS)) set for present keys
    signatures: np.ndarray | None  # (S, k) uint32 when the Jaccard filter is used
    group_codes: np.ndarray   # int64 timeline code per synthetic post
    groups: np.ndarray        # timeline ids (object)
    true_author: np.ndarray   # true author per synthetic post (object)
    n_posts: int


# ------------------------------------------------------------------------------------------- kernels

@nb.njit(nogil=True, cache=True)
def _probe_count(keys, index_keys, bitmap, shift, counts):
    n, b = keys.shape
    for i in range(n):
        c = 0
        for t in range(b):
            key = keys[i, t]
            if key == 0:
                continue
            bit = key >> shift
            if not (bitmap[bit >> np.uint64(6)] >> (bit & np.uint64(63))) & np.uint64(1):
                continue
            lo = np.searchsorted(index_keys, key)
            while lo < index_keys.shape[0] and index_keys[lo] == key:
                c += 1
                lo += 1
        counts[i] = c


@nb.njit(nogil=True, cache=True)
def _probe_fill(keys, index_keys, index_posts, bitmap, shift, starts, out_rows, out_posts):
    n, b = keys.shape
    for i in range(n):
        p = starts[i]
        if p == starts[i + 1]:
            continue
        for t in range(b):
            key = keys[i, t]
            if key == 0:
                continue
            bit = key >> shift
            if not (bitmap[bit >> np.uint64(6)] >> (bit & np.uint64(63))) & np.uint64(1):
                continue
            lo = np.searchsorted(index_keys, key)
            while lo < index_keys.shape[0] and index_keys[lo] == key:
                out_rows[p] = i
                out_posts[p] = index_posts[lo]
                p += 1
                lo += 1


def probe(index: SyntheticIndex, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(history row, synthetic post) for every shared band key; a pair sharing several bands repeats."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    n = keys.shape[0]
    if n == 0 or index.keys.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int32)
    shift = np.uint64(64 - _BITMAP_BITS)
    counts = np.empty(n, np.int64)
    _probe_count(keys, index.keys, index.bitmap, shift, counts)
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    rows = np.empty(starts[-1], np.int64)
    posts = np.empty(starts[-1], np.int32)
    _probe_fill(keys, index.keys, index.posts, index.bitmap, shift, starts, rows, posts)
    return rows, posts


# ------------------------------------------------------------------------------------------ the index

def _check_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    for col in columns:
        if col not in df.columns:
            raise InputError(f"{what} lacks required column", column=col)


def build_index(synthetic: pd.DataFrame, params: LSHParams, *, with_signatures: bool = False,
                parallel: bool = True) -> SyntheticIndex:
    """Sign and index the synthetic posts (columns group_id, author_id, text)."""
    check_timelines(synthetic)
    texts = pa.array(synthetic["text"].astype(object).where(synthetic["text"].notna(), None).tolist(), pa.large_string())
    sig, keys = sign(texts, params.minhash, bands=params.bands, rows=params.rows,
                     want_signatures=with_signatures, parallel=parallel)
    assert keys is not None
    posts = np.repeat(np.arange(len(synthetic), dtype=np.int32), params.bands)
    flat = keys.ravel()
    keep = flat != 0
    flat, posts = flat[keep], posts[keep]
    order = np.argsort(flat, kind="stable")
    flat, posts = flat[order], posts[order]
    bitmap = np.zeros((1 << _BITMAP_BITS) // 64, np.uint64)
    bits = flat >> np.uint64(64 - _BITMAP_BITS)
    np.bitwise_or.at(bitmap, (bits >> np.uint64(6)).astype(np.int64), np.uint64(1) << (bits & np.uint64(63)))
    codes, groups = pd.factorize(synthetic["group_id"], sort=False)
    return SyntheticIndex(params=params, keys=flat, posts=posts, bitmap=bitmap, signatures=sig,
                          group_codes=codes.astype(np.int64), groups=np.asarray(groups, dtype=object),
                          true_author=synthetic["author_id"].to_numpy(dtype=object), n_posts=len(synthetic))


# --------------------------------------------------------------------------------------- the stream

@dataclass
class _Votes:
    """What a shard contributes: unique (synthetic post, author) pairs, its authors and post count."""

    pairs: pd.DataFrame
    authors: set
    n_posts: int

    @staticmethod
    def merge(parts: Sequence[_Votes]) -> _Votes:
        pairs = [p.pairs for p in parts if len(p.pairs)]
        merged = pd.concat(pairs, ignore_index=True).drop_duplicates() if pairs else _empty_pairs()
        return _Votes(merged, set().union(*[p.authors for p in parts]) if parts else set(),
                      sum(p.n_posts for p in parts))


def _empty_pairs() -> pd.DataFrame:
    return pd.DataFrame({"post": np.empty(0, np.int32), "author": np.empty(0, object)})


def _batch_pairs(index: SyntheticIndex, authors: pa.Array, keys: np.ndarray, hist_sig: Any,
                 jaccard_threshold: float | None) -> pd.DataFrame:
    """Unique (post, author) pairs of one history batch; ``hist_sig(rows)`` gives signatures of rows."""
    rows, posts = probe(index, keys)
    if rows.size == 0:
        return _empty_pairs()
    if jaccard_threshold is not None:
        pair_code = np.unique(rows * np.int64(index.n_posts) + posts)
        rows, posts = pair_code // index.n_posts, (pair_code % index.n_posts).astype(np.int32)
        uniq, inv = np.unique(rows, return_inverse=True)
        sig_h = hist_sig(uniq)[inv]
        assert index.signatures is not None
        est = (sig_h == index.signatures[posts]).mean(axis=1)
        keep = est >= jaccard_threshold
        rows, posts = rows[keep], posts[keep]
        if rows.size == 0:
            return _empty_pairs()
    author = authors.take(pa.array(rows)).to_numpy(zero_copy_only=False)
    return pd.DataFrame({"post": posts, "author": author}).drop_duplicates()


def history_rows(histories: HistorySource) -> int:
    """Rows of a history source before any filtering (a file's count from its footer; 0 when the file is
    missing: reading it says so)."""
    if isinstance(histories, pd.DataFrame):
        return len(histories)
    path = os.fspath(histories)
    return pq.ParquetFile(path).metadata.num_rows if os.path.exists(path) else 0


def has_doc_ids(source: HistorySource) -> bool:
    """Whether a history source names its documents (what the disjoint setting holds out by)."""
    if isinstance(source, pd.DataFrame):
        return "doc_id" in source.columns
    path = os.fspath(source)
    return Path(path).exists() and "doc_id" in pq.ParquetFile(path).schema_arrow.names


def text_batches(source: HistorySource, chunk_rows: int, held_out: frozenset[str] | None = None, *,
                 keep_doc_id: bool = False, readers: int = 1) -> Iterator[pa.RecordBatch]:
    """(author_id, text[, doc_id when ``keep_doc_id``]) batches of a history parquet file or DataFrame,
    without the documents whose ``doc_id`` is in ``held_out`` (the disjoint adversary's view; needs a
    doc_id column); a file's row groups are read ``readers`` at a time (:func:`_row_group_batches`)."""
    columns = ["author_id", "text"] + (["doc_id"] if held_out is not None or keep_doc_id else [])
    if isinstance(source, pd.DataFrame):
        _check_columns(source, columns, "history data")
        df = source[columns]
        batches: Iterator[pa.RecordBatch] = (
            pa.RecordBatch.from_pandas(df.iloc[start:start + chunk_rows], preserve_index=False)
            for start in range(0, len(df), chunk_rows))
    else:
        path = os.fspath(source)
        if not Path(path).exists():
            raise InputError("history file not found", file=path)
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        for col in columns:
            if col not in names:
                raise InputError("history data lacks required column", file=path, column=col)
        batches = _row_group_batches(pf, path, chunk_rows, columns, readers)
    if held_out is None:
        yield from batches
        return
    for batch in batches:
        kept = batch if keep_doc_id else pa.RecordBatch.from_arrays([batch.column("author_id"), batch.column("text")],
                                                                    names=["author_id", "text"])
        yield kept.filter(_not_held_out(batch.column("doc_id"), held_out))


#: Decoded bytes of the read columns that row groups read side by side may hold at once (``text_batches``'
#: ``readers``): groups are bounded in rows, not bytes, and a corpus of long posts has large ones, so a file whose
#: largest group is over a ``readers``-th of this is read one group at a time, as before.
SIDE_BY_SIDE_READ_BYTES = 1 << 30


def _read_row_group(path: str, group: int, columns: list[str]) -> pa.Table:
    """One row group, from a reader of its own: a ``ParquetFile`` is not safe to read from two threads at once."""
    return pq.ParquetFile(path).read_row_group(group, columns=columns, use_threads=True)


def _side_by_side(meta: pq.FileMetaData, columns: list[str], chunk_rows: int, readers: int) -> int:
    """How many row groups to decode at once: ``readers``, fewer when they would hold more than
    :data:`SIDE_BY_SIDE_READ_BYTES`, and 1 when a group is streamed (over twice ``chunk_rows`` rows)."""
    if readers <= 1 or meta.num_row_groups < 2:
        return 1
    names = [meta.schema.column(c).name for c in range(meta.num_columns)]
    wanted = [names.index(col) for col in columns]
    largest = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows > 2 * chunk_rows:
            return 1
        largest = max(largest, sum(group.column(c).total_uncompressed_size for c in wanted))
    return max(1, min(readers, SIDE_BY_SIDE_READ_BYTES // max(largest, 1)))


def _row_group_batches(pf: pq.ParquetFile, path: str, chunk_rows: int, columns: list[str],
                       readers: int = 1) -> Iterator[pa.RecordBatch]:
    """Batches of at most ``chunk_rows`` rows, a row group at a time: reading a whole row group decodes its
    columns on Arrow's threads (about twice as fast as ``iter_batches`` on 2 cores); a row group over
    twice ``chunk_rows`` is streamed instead, so memory stays bounded by the batch size. With ``readers`` > 1
    up to that many row groups are decoded side by side, in order (each group's text column decodes on one
    thread, so a pass that does little with its batches is bound by it; :func:`_side_by_side` says how many)."""
    groups = range(pf.metadata.num_row_groups)
    at_once = _side_by_side(pf.metadata, columns, chunk_rows, readers)
    if at_once == 1:
        for i in groups:
            if pf.metadata.row_group(i).num_rows > 2 * chunk_rows:
                yield from pf.iter_batches(batch_size=chunk_rows, row_groups=[i], columns=columns)
            else:
                yield from pf.read_row_group(i, columns=columns, use_threads=True).to_batches(max_chunksize=chunk_rows)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(at_once, thread_name_prefix="row-groups") as pool:
        pending: deque = deque()
        for i in groups:
            pending.append(pool.submit(_read_row_group, path, i, columns))
            if len(pending) == at_once:
                yield from pending.popleft().result().to_batches(max_chunksize=chunk_rows)
        while pending:
            yield from pending.popleft().result().to_batches(max_chunksize=chunk_rows)


def _not_held_out(doc: pa.Array, held_out: frozenset[str]) -> pa.Array:
    """Mask of the rows whose doc_id is not held out (a null doc_id is never held out)."""
    drop = pa.array(sorted(held_out), pa.string())
    return pc.invert(pc.fill_null(pc.is_in(pc.cast(doc, pa.string()), drop), False))


def _as_text(col: pa.Array) -> pa.Array:
    if pa.types.is_null(col.type):
        return pa.array([None] * len(col), pa.large_string())
    return col


def _shard_votes(source: HistorySource, index: SyntheticIndex, *, jaccard_threshold: float | None,
                 chunk_rows: int, parallel: bool, held_out: frozenset[str] | None = None) -> _Votes:
    """Sign one history source chunk by chunk and probe it against the index."""
    params = index.params
    parts, authors, n_posts = [], set(), 0
    for batch in text_batches(source, chunk_rows, held_out):
        texts = _as_text(batch.column("text"))
        author_col = batch.column("author_id")
        _, keys = sign(texts, params.minhash, bands=params.bands, rows=params.rows, want_signatures=False,
                       parallel=parallel)

        def hist_sig(rows: np.ndarray, texts: pa.Array = texts) -> np.ndarray:
            sig, _ = sign(texts.take(pa.array(rows)), params.minhash, parallel=parallel)
            return sig

        parts.append(_Votes(_batch_pairs(index, author_col, keys, hist_sig, jaccard_threshold), set(), 0))
        authors.update(pc.unique(author_col.drop_null()).to_pylist())
        n_posts += batch.num_rows
    merged = _Votes.merge(parts)
    return _Votes(merged.pairs, authors, n_posts)


# ------------------------------------------------------------------------------------- attribution

def attribute(index: SyntheticIndex, votes: _Votes, jaccard_threshold: float | None = None,
              setting: Setting = "full") -> ReidResult:
    """Vote per timeline, apply the tie rule and build the report (see the module docstring)."""
    pairs = votes.pairs
    n_groups = len(index.groups)
    group_author = pd.Series(index.true_author).groupby(index.group_codes).first().reindex(range(n_groups))
    n_posts_group = np.bincount(index.group_codes, minlength=n_groups)
    post = pairs["post"].to_numpy(np.int64)
    is_true = pairs["author"].to_numpy(object) == index.true_author[post] if len(pairs) else np.zeros(0, bool)
    recall_posts = np.unique(post[is_true])
    with_cands = np.unique(post)
    posts_with_cands_group = np.bincount(index.group_codes[with_cands], minlength=n_groups)

    per = pd.DataFrame({"group_id": index.groups, "author_id": group_author.to_numpy(object),
                        "n_posts": n_posts_group, "n_posts_with_candidates": posts_with_cands_group})
    if len(pairs):
        v = pd.DataFrame({"g": index.group_codes[post], "author": pairs["author"].to_numpy(object)})
        counts = v.groupby(["g", "author"], sort=True).size().rename("votes").reset_index()
        top = counts.groupby("g")["votes"].transform("max")
        at_top = counts[counts["votes"] == top]
        n_top = at_top.groupby("g").size()
        best = at_top.groupby("g").first()  # smallest author id among the tied (sorted groupby)
        n_authors = counts.groupby("g").size()
        true_votes = counts[counts["author"].to_numpy(object) == group_author.to_numpy(object)[counts["g"]]]
        true_votes = true_votes.set_index("g")["votes"]
        idx = np.arange(n_groups)
        per["predicted_author"] = best["author"].reindex(idx).to_numpy(object)
        per["votes_top"] = best["votes"].reindex(idx).fillna(0).astype(np.int64).to_numpy()
        per["votes_true"] = true_votes.reindex(idx).fillna(0).astype(np.int64).to_numpy()
        per["n_candidate_authors"] = n_authors.reindex(idx).fillna(0).astype(np.int64).to_numpy()
        per["tie"] = n_top.reindex(idx).fillna(0).to_numpy() > 1
    else:
        per["predicted_author"] = pd.Series([None] * n_groups, dtype=object)
        per["votes_top"] = 0
        per["votes_true"] = 0
        per["n_candidate_authors"] = 0
        per["tie"] = False
    per["correct"] = (per["votes_top"] > 0) & (per["votes_true"] == per["votes_top"]) & ~per["tie"]

    n_users = len(votes.authors)
    rank = _vote_ranks(per, pairs, index, votes.authors, n_users)
    shared = attribution_table(per["group_id"], per["author_id"], per["predicted_author"], rank,
                               per["votes_true"].to_numpy(float), per["votes_top"].to_numpy(float), per["n_posts"],
                               evidence=per["votes_true"].to_numpy() > 0)
    assert (shared["correct"].to_numpy() == per["correct"].to_numpy()).all()
    for col in ("rank", "reciprocal_rank", "in_top10", "in_history"):
        per[col] = shared[col].to_numpy()
    shared_summary = attribution_summary(per, n_users)
    summary: dict[str, Any] = {
        "attack": "minhash", "adversary": setting,
        "accuracy": float(per["correct"].mean()) if n_groups else math.nan,
        "n_timelines": int(n_groups),
        "n_correct": int(per["correct"].sum()),
        "n_history_users": int(n_users),
        "n_history_posts": int(votes.n_posts),
        "n_synthetic_posts": int(index.n_posts),
        "candidate_recall": len(recall_posts) / index.n_posts if index.n_posts else math.nan,
        "n_timelines_no_candidates": int((per["n_candidate_authors"] == 0).sum()),
        "n_candidate_pairs": len(pairs),
        "n_ties": int(per["tie"].sum()),
        "s_curve_threshold": index.params.threshold,
        "jaccard_threshold": jaccard_threshold,
        **{f"param_{k}": v for k, v in asdict(index.params).items()},
        **{k: v for k, v in shared_summary.items() if k not in ("n_timelines", "n_correct")},
    }
    return ReidResult(per_timeline=per, summary=summary)


def _vote_ranks(per: pd.DataFrame, pairs: pd.DataFrame, index: SyntheticIndex, authors: set,
                n_users: int) -> np.ndarray:
    """Pessimistic rank of each timeline's true author by votes: the number of history authors with at
    least its votes (all N when it has none); nan when the true author is not in the history."""
    true_votes = per["votes_true"].to_numpy(np.int64)
    in_history = np.array([a in authors for a in per["author_id"].to_numpy(object)], dtype=bool)
    rank = np.where(in_history, float(n_users), np.nan)
    if len(pairs):
        post = pairs["post"].to_numpy(np.int64)
        v = pd.DataFrame({"g": index.group_codes[post], "author": pairs["author"].to_numpy(object)})
        counts = v.groupby(["g", "author"], sort=False).size().to_numpy()
        g = v.groupby(["g", "author"], sort=False).size().index.get_level_values("g").to_numpy(np.int64)
        at_least = np.bincount(g, weights=(counts >= true_votes[g]), minlength=len(per))
        voted = in_history & (true_votes > 0)
        rank[voted] = at_least[voted]
    return rank


# ------------------------------------------------------------------------------------------ entry points

def reidentify(histories: HistorySource, synthetic: pd.DataFrame, *, n: int = 3, k: int = 128, bands: int = 16,
               rows: int = 8, seed: int = 1, jaccard_threshold: float | None = None, chunk_rows: int = 1_000_000,
               scheme: Scheme = "affine32", lower: bool = False, parallel: bool = True,
               setting: Setting = "full") -> ReidResult:
    """Attribute each synthetic timeline (group_id, true author_id, text) to a history author.

    ``histories``: a parquet path or DataFrame with author_id and text (and doc_id for the ``disjoint``
    setting, which drops the synthetic posts' source documents), streamed in ``chunk_rows``."""
    params = LSHParams(n=n, k=k, bands=bands, rows=rows, seed=seed, scheme=scheme, lower=lower)
    held_out = held_out_doc_ids(synthetic, setting)
    index = build_index(synthetic, params, with_signatures=jaccard_threshold is not None, parallel=parallel)
    votes = _shard_votes(histories, index, jaccard_threshold=jaccard_threshold, chunk_rows=chunk_rows,
                         parallel=parallel, held_out=held_out)
    return attribute(index, votes, jaccard_threshold, setting)


def sign_histories(histories: HistorySource, out_path: str | os.PathLike, *, n: int = 3, k: int = 128,
                   bands: int = 16, rows: int = 8, seed: int = 1, scheme: Scheme = "affine32", lower: bool = False,
                   with_signatures: bool = False, chunk_rows: int = 1_000_000, parallel: bool = True) -> str:
    """Sign the histories once: parquet (author_id, band_keys[bands] uint64, signature[k] uint32 if
    ``with_signatures``) with the parameters in the schema metadata; written atomically. Returns the path.

    Every strategy's attack then reuses it with :func:`reidentify_signed` (~8 B x bands per post on disk,
    plus 4 B x k with signatures)."""
    params = LSHParams(n=n, k=k, bands=bands, rows=rows, seed=seed, scheme=scheme, lower=lower)
    out_path = os.fspath(out_path)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{out_path}.tmp-{os.getpid()}"
    fields = [pa.field("author_id", pa.string()), pa.field("band_keys", pa.list_(pa.uint64(), bands))]
    if with_signatures:
        fields.append(pa.field("signature", pa.list_(pa.uint32(), k)))
    with_doc_ids = has_doc_ids(histories)
    if with_doc_ids:  # so the disjoint setting can hold documents out of the signed histories
        fields.append(pa.field("doc_id", pa.string()))
    meta = {**asdict(params), "with_signatures": with_signatures}
    schema = pa.schema(fields, metadata={_META_KEY: json.dumps(meta).encode()})
    author_type: pa.DataType | None = None
    writer: pq.ParquetWriter | None = None
    try:
        for batch in text_batches(histories, chunk_rows, keep_doc_id=with_doc_ids):
            author = batch.column("author_id")
            if author_type is None:
                author_type = author.type if not pa.types.is_null(author.type) else pa.string()
                schema = schema.set(0, pa.field("author_id", author_type))
                writer = pq.ParquetWriter(tmp, schema)
            sig, keys = sign(_as_text(batch.column("text")), params.minhash, bands=bands, rows=rows,
                             want_signatures=with_signatures, parallel=parallel)
            cols = [author.cast(author_type), pa.FixedSizeListArray.from_arrays(pa.array(keys.ravel()), bands)]
            if with_signatures:
                cols.append(pa.FixedSizeListArray.from_arrays(pa.array(sig.ravel()), k))
            if with_doc_ids:
                cols.append(pc.cast(batch.column("doc_id"), pa.string()))
            writer.write_batch(pa.record_batch(cols, schema=schema))  # type: ignore[union-attr]
        if writer is None:
            writer = pq.ParquetWriter(tmp, schema)
        writer.close()
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out_path


def signed_params(signed_path: str | os.PathLike) -> tuple[LSHParams, bool]:
    """The parameters a signature artifact was made with, and whether it holds signatures."""
    meta = pq.read_schema(os.fspath(signed_path)).metadata or {}
    if _META_KEY not in meta:
        raise InputError("not a signature artifact (no synthugc.minhash metadata)", file=os.fspath(signed_path))
    d = json.loads(meta[_META_KEY])
    with_sig = d.pop("with_signatures")
    return LSHParams(**d), with_sig


def _signed_votes(signed_path: str | os.PathLike, index: SyntheticIndex, *, jaccard_threshold: float | None,
                  chunk_rows: int, held_out: frozenset[str] | None = None) -> _Votes:
    params, with_sig = signed_params(signed_path)
    if params != index.params:
        raise InputError(f"signature artifact made with {params}, index with {index.params}",
                         file=os.fspath(signed_path))
    if jaccard_threshold is not None and not with_sig:
        raise InputError("the Jaccard filter needs signatures: sign with with_signatures=True",
                         file=os.fspath(signed_path))
    cols = ["author_id", "band_keys"] + (["signature"] if jaccard_threshold is not None else [])
    if held_out is not None:
        if "doc_id" not in pq.read_schema(os.fspath(signed_path)).names:
            raise InputError("the disjoint setting needs doc_id in the histories; sign them again with doc_id",
                             file=os.fspath(signed_path))
        cols.append("doc_id")
    parts, authors, n_posts = [], set(), 0
    for batch in pq.ParquetFile(os.fspath(signed_path)).iter_batches(batch_size=chunk_rows, columns=cols):
        if held_out is not None:
            batch = batch.filter(_not_held_out(batch.column("doc_id"), held_out))
        kcol = batch.column("band_keys")
        keys = kcol.flatten().to_numpy().reshape(-1, params.bands)

        def hist_sig(rows: np.ndarray, batch: pa.RecordBatch = batch) -> np.ndarray:
            s = batch.column("signature").take(pa.array(rows))
            return s.flatten().to_numpy().reshape(-1, params.k)

        author_col = batch.column("author_id")
        parts.append(_Votes(_batch_pairs(index, author_col, keys, hist_sig, jaccard_threshold), set(), 0))
        authors.update(pc.unique(author_col.drop_null()).to_pylist())
        n_posts += batch.num_rows
    merged = _Votes.merge(parts)
    return _Votes(merged.pairs, authors, n_posts)


def reidentify_signed(signed_path: str | os.PathLike | Sequence[str | os.PathLike], synthetic: pd.DataFrame, *,
                      jaccard_threshold: float | None = None, chunk_rows: int = 250_000,
                      setting: Setting = "full") -> ReidResult:
    """The attack against histories signed by :func:`sign_histories` (parameters come from the artifact; several
    artifacts are the shards of one history, each post in one of them, and their votes are unioned, so the result
    equals the attack on the whole signed at once); ``disjoint`` skips the signed rows of the synthetic posts'
    source documents, as :func:`reidentify` does. The signed rows are read ``chunk_rows`` at a time: a protect
    round runs this on every round, beside the profiles it keeps, so a batch's band keys and probe stay small."""
    paths = [signed_path] if isinstance(signed_path, str | os.PathLike) else list(signed_path)
    params, _ = signed_params(paths[0])
    index = build_index(synthetic, params, with_signatures=jaccard_threshold is not None)
    held_out = held_out_doc_ids(synthetic, setting)
    votes = _Votes.merge([_signed_votes(path, index, jaccard_threshold=jaccard_threshold, chunk_rows=chunk_rows,
                                        held_out=held_out) for path in paths])
    return attribute(index, votes, jaccard_threshold, setting)


def reidentify_dask(client: Any, history_shards: Sequence[HistorySource], synthetic: pd.DataFrame, *, n: int = 3,
                    k: int = 128, bands: int = 16, rows: int = 8, seed: int = 1,
                    jaccard_threshold: float | None = None, chunk_rows: int = 1_000_000,
                    scheme: Scheme = "affine32", lower: bool = False, signed: bool = False) -> ReidResult:
    """Scale out: each history shard (parquet path or DataFrame; signature artifacts with ``signed``) is
    signed and probed on a worker against the broadcast synthetic index; the per-shard unique
    (post, author) vote tables are unioned, so the result equals :func:`reidentify` on the concatenation."""
    if signed and history_shards:
        params, _ = signed_params(history_shards[0])
    else:
        params = LSHParams(n=n, k=k, bands=bands, rows=rows, seed=seed, scheme=scheme, lower=lower)
    index = build_index(synthetic, params, with_signatures=jaccard_threshold is not None)
    [index_future] = client.scatter([index], broadcast=True)
    parts = map_shards(client, _remote_votes, list(history_shards), index=index_future, signed=signed,
                       jaccard_threshold=jaccard_threshold, chunk_rows=chunk_rows)
    return attribute(index, _Votes.merge(parts), jaccard_threshold)


def _remote_votes(shard: HistorySource, *, index: SyntheticIndex, signed: bool, jaccard_threshold: float | None,
                  chunk_rows: int) -> _Votes:
    """A worker's share: single-threaded, GIL-free kernels (the worker's threads are the parallelism)."""
    if signed:
        return _signed_votes(shard, index, jaccard_threshold=jaccard_threshold, chunk_rows=chunk_rows)
    return _shard_votes(shard, index, jaccard_threshold=jaccard_threshold, chunk_rows=chunk_rows, parallel=False)
