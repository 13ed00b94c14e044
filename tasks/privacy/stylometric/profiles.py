"""The adversary's side of the stylometric attack: :class:`HistoryProfiles` (author ids, IDF and one profile
per author), computed once per run by :func:`profile_histories` (text, exact or sketch mode) or
:func:`profile_histories_dask` (sketch mode over shards), with the history readers they share (author codes,
batches, the history's text size, the document-frequency sample)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from tasks.parallel import map_shards, read_ahead
from tasks.privacy.reidentify import HistorySource, history_rows, text_batches
from tasks.privacy.stylometric.features import (
    _exact_tfidf,
    _l2_rows,
    _l2_rows_in_place,
    _mean_rows,
    _smooth_idf,
    _sublinear_rows,
    _text_counts,
    normalize_texts,
)
from tasks.privacy.stylometric.kernels import _bucket_df, _bucket_table, _sample, _sketch_add, _views
from tasks.privacy.stylometric.params import StyloParams


@dataclass
class HistoryProfiles:
    """The adversary's side, computed once per run: author ids, IDF, and one L2-normalised profile per
    author (sparse over ``vocab`` in text and exact mode, a dense count sketch in sketch mode)."""

    params: StyloParams
    authors: np.ndarray      # object ids, one per profile row
    idf: np.ndarray          # float64 per vocabulary entry (text, exact) or float32 per bucket (sketch; 0 = unseen)
    vocab: np.ndarray | None  # text, exact: sorted uint64 n-gram keys
    profiles: Any            # text, exact: csr (authors x vocab); sketch: float32 (authors x width)
    n_posts: int
    mode: str = "exact"      # the mode that built them (``params.resolved_mode``: auto is text or sketch)


def _profile_text(table: pa.Table, params: StyloParams) -> HistoryProfiles:
    """Text mode: each author's posts as one text (the sum of its posts' n-gram counts, no n-gram across two
    posts), weighted by sublinear TF times the posts' smooth IDF and L2-normalised."""
    authors: dict[Any, int] = {}
    owner = author_codes(table.column("author_id"), authors, grow=True)
    vocab, df, counts = _text_counts(normalize_texts(table.column("text"), params.lowercase), owner, len(authors),
                                     params)
    idf = _smooth_idf(df, table.num_rows)
    return HistoryProfiles(params, ordered_authors(authors), idf, vocab, _sublinear_rows(counts, idf),
                           table.num_rows, "text")


# ------------------------------------------------------------------------------------------ profiling

def author_codes(col: pa.Array, index: dict[Any, int], grow: bool) -> np.ndarray:
    """Global author code per row (-1 for null or, when not ``grow``, unknown authors)."""
    enc = pc.dictionary_encode(col)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    names = enc.dictionary.to_pylist()
    if grow:
        for name in names:
            index.setdefault(name, len(index))
    lut = np.array([index.get(name, -1) for name in names] + [-1], np.int64)
    idx = enc.indices.fill_null(len(names)).to_numpy(zero_copy_only=False).astype(np.int64)
    return lut[idx]


def author_batches(histories: HistorySource, chunk_rows: int, held_out: frozenset[str] | None, *,
                   readers: int = 1) -> Iterator[pa.RecordBatch]:
    """(author_id, text) batches of the histories without held-out documents and posts of no author (a file's
    row groups read ``readers`` at a time)."""
    for batch in text_batches(histories, chunk_rows, held_out, readers=readers):
        keep = pc.is_valid(batch.column("author_id"))
        yield batch.filter(keep) if batch.column("author_id").null_count else batch


def history_text_bytes(histories: HistorySource) -> int:
    """Bytes of text in a history source before any filtering: the text column's uncompressed size in a
    parquet file's metadata (nothing is read), the UTF-8 length of a DataFrame's texts; 0 when the file is
    missing (reading it says so)."""
    if isinstance(histories, pd.DataFrame):
        if "text" not in histories.columns or histories.empty:
            return 0
        return int(pa.array(histories["text"].astype(object).where(histories["text"].notna(), None),
                            pa.large_string()).nbytes)
    path = os.fspath(histories)
    if not os.path.exists(path):
        return 0
    meta = pq.ParquetFile(path).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if "text" not in names:
        return 0
    col = names.index("text")
    return sum(meta.row_group(g).column(col).total_uncompressed_size for g in range(meta.num_row_groups))


def df_stride(rows: int, params: StyloParams) -> int:
    """One doc in ``stride`` (by hash) goes into the document-frequency sample: about ``df_sample`` docs."""
    return max(1, -(-rows // params.df_sample))


def _sketch_df(histories: HistorySource, params: StyloParams, chunk_rows: int, held_out: frozenset[str] | None,
               stride: int, parallel: bool = True) -> tuple[np.ndarray, int, int, dict[Any, int]]:
    """Pass 1 over one history source: bucket document frequencies of the sampled posts, post count,
    sampled post count, author index. Both passes read the next batch while this one is counted, so the core
    the read leaves idle counts too (benchmarks/reidentify.py)."""
    df = np.zeros(1 << params.hash_bits, np.int64)
    authors: dict[Any, int] = {}
    n_posts = n_sampled = 0
    for batch in read_ahead(author_batches(histories, chunk_rows, held_out)):
        author_codes(batch.column("author_id"), authors, grow=True)
        texts = _sample(batch.column("text"), stride)
        offsets, data, valid = _views(normalize_texts(texts, params.lowercase))
        if len(texts):
            part, sampled = _bucket_df(offsets, data, valid, params, parallel)
            df += part
            n_sampled += sampled
        n_posts += batch.num_rows
    return df, n_posts, n_sampled, authors


def estimated_idf(df: np.ndarray, n_sampled: int, n_posts: int) -> np.ndarray:
    """Smooth IDF per bucket (float32, as the sketch kernel reads it) from the sample's document frequencies.
    With every post sampled it is :func:`_smooth_idf` exactly; otherwise df is scaled by n_posts / n_sampled
    and a bucket the sample never saw gets df = half of that scale (its true df is below it)."""
    if n_sampled >= n_posts:
        return _smooth_idf(df, n_posts).astype(np.float32)
    scale = n_posts / max(n_sampled, 1)
    estimate = np.where(df > 0, df * scale, 0.5 * scale)
    return (np.log((1.0 + n_posts) / (1.0 + estimate)) + 1.0).astype(np.float32)


def _sketch_rows(histories: HistorySource, params: StyloParams, idf: np.ndarray, authors: dict[Any, int],
                 chunk_rows: int, held_out: frozenset[str] | None,
                 parallel: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Pass 2 over one history source: (author codes present, their summed sketch rows)."""
    sketch = np.zeros((len(authors), params.width), np.float32)
    posts = np.zeros(len(authors), np.int64)
    table = _bucket_table(idf, params.width, params.seed)
    for batch in read_ahead(author_batches(histories, chunk_rows, held_out)):
        owner = author_codes(batch.column("author_id"), authors, grow=False)
        offsets, data, valid = _views(normalize_texts(batch.column("text"), params.lowercase))
        if len(batch):
            _sketch_add(offsets, data, valid, owner, params, table, sketch, parallel)
        posts += np.bincount(owner[owner >= 0], minlength=len(authors))
    present = np.flatnonzero(posts)
    return present, sketch if len(present) == len(authors) else sketch[present]


def ordered_authors(authors: dict[Any, int]) -> np.ndarray:
    """The author ids of an :func:`author_codes` index, in code order."""
    out = np.empty(len(authors), dtype=object)
    for name, code in authors.items():
        out[code] = name
    return out


def profile_histories(histories: HistorySource, params: StyloParams = StyloParams(), *, chunk_rows: int = 1_000_000,
                      held_out: frozenset[str] | None = None) -> HistoryProfiles:
    """Profile every history author once (parquet path or DataFrame with author_id, text; doc_id when
    ``held_out`` names documents the adversary lacks). ``auto`` mode is resolved on the rows of the
    histories before any is held out, so both settings of a run profile in the same mode."""
    mode = params.resolved_mode(history_text_bytes(histories)) if params.mode == "auto" else params.mode
    if mode in ("text", "exact"):
        batches = list(author_batches(histories, chunk_rows, held_out))
        table = pa.Table.from_batches(batches) if batches else None
        if table is None or table.num_rows == 0:
            return HistoryProfiles(params, np.empty(0, object), np.zeros(0), np.zeros(0, np.uint64),
                                   sp.csr_matrix((0, 0)), 0, mode)
        if mode == "text":
            return _profile_text(table, params)
        authors: dict[Any, int] = {}
        owner = author_codes(table.column("author_id"), authors, grow=True)
        rows, vocab, idf = _exact_tfidf(normalize_texts(table.column("text"), params.lowercase), params, None, None)
        profiles = _l2_rows(_mean_rows(rows, owner, len(authors))).tocsr()
        return HistoryProfiles(params, ordered_authors(authors), idf, vocab, profiles, table.num_rows, mode)
    df, n_posts, n_sampled, authors = _sketch_df(histories, params, chunk_rows, held_out,
                                                 df_stride(history_rows(histories), params))
    idf = estimated_idf(df, n_sampled, n_posts)
    present, rows = _sketch_rows(histories, params, idf, authors, chunk_rows, held_out)
    if len(present) == len(authors):
        sketch = rows
    else:
        sketch = np.zeros((len(authors), params.width), np.float32)
        sketch[present] = rows
    return HistoryProfiles(params, ordered_authors(authors), idf, None, _l2_rows_in_place(sketch), n_posts, mode)


def profile_histories_dask(client: Any, shards: Sequence[HistorySource], params: StyloParams = StyloParams(), *,
                           chunk_rows: int = 1_000_000, held_out: frozenset[str] | None = None) -> HistoryProfiles:
    """:func:`profile_histories` (sketch mode) with the history shards on Dask workers: per-shard
    document frequencies and author sets are summed, then per-shard author sketches are summed by
    author; equal to the single-process result up to float32 summation order."""
    if params.mode not in ("sketch", "auto"):
        raise ValueError("the Dask path profiles in sketch mode (auto: sharded histories are large)")
    stride = df_stride(sum(history_rows(shard) for shard in shards), params)  # one sample across shards
    parts = map_shards(client, _sketch_df, list(shards), params=params, chunk_rows=chunk_rows, held_out=held_out,
                       stride=stride, parallel=False)
    df = np.sum([p[0] for p in parts], axis=0) if parts else np.zeros(1 << params.hash_bits, np.int64)
    n_posts, n_sampled = sum(p[1] for p in parts), sum(p[2] for p in parts)
    names = sorted({name for p in parts for name in p[3]}, key=str)
    authors = {name: i for i, name in enumerate(names)}
    idf = estimated_idf(df, n_sampled, n_posts)
    sketch = np.zeros((len(authors), params.width), np.float32)
    idf_future, authors_future = client.scatter([idf, authors], broadcast=True)
    for present, rows in map_shards(client, _sketch_rows, list(shards), params=params, idf=idf_future,
                                    authors=authors_future, chunk_rows=chunk_rows, held_out=held_out, parallel=False):
        sketch[present] += rows
    return HistoryProfiles(params, ordered_authors(authors), idf, None, _l2_rows_in_place(sketch), n_posts, "sketch")
