"""Each author's history split in two halves: one to give a rewriting loop its feedback, the other to judge
it with an attack whose profiles the loop never saw.

Within each author the posts are ranked by a keyed hash of their ``doc_id`` (SipHash-2-4, pandas'
``hash_array``, keyed by the seed) and alternate between the halves: ranks 0, 2, 4, ... go to the first,
1, 3, 5, ... to the second. So an author's halves differ by at most one post (an author with one post is
in the first half), and which half a post lands in depends only on the seed, its author's doc_ids and its
own: not on the file's row order or row groups.

Memory: the author_id and doc_id columns are read whole (8.7M ids: a few hundred MB), the rows are streamed
in batches into the two files; both are written under temporary names and renamed at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.errors import InputError
from tasks.limits import MAX_SEED, check_range

#: The columns the split reads whole; every other column is carried along.
KEY_COLUMNS = ("author_id", "doc_id")
_HASH_CHUNK = 1_000_000  # doc_ids hashed at a time (pandas hashes Python strings)


def _first_row(mask: np.ndarray) -> int:
    """The 1-based row number of the first True."""
    return int(np.argmax(mask)) + 1


def _keyed_hashes(doc_ids: pa.ChunkedArray, seed: int) -> np.ndarray:
    """SipHash-2-4 of each doc_id's text, keyed by the seed."""
    key = f"{seed:016x}"[-16:]
    text = pc.cast(doc_ids, pa.string())
    out = np.empty(len(text), np.uint64)
    for start in range(0, len(text), _HASH_CHUNK):
        part = text.slice(start, _HASH_CHUNK).to_numpy(zero_copy_only=False)
        out[start:start + len(part)] = pd.util.hash_array(part, hash_key=key, categorize=False)
    return out


def first_half_mask(histories: str | os.PathLike, *, seed: int = 0) -> np.ndarray:
    """Per row of the history file, whether its post goes to the first half; InputError naming the file
    and the field on a missing column, a null author or doc_id, or a repeated doc_id."""
    check_range("seed", seed, 0, MAX_SEED)
    path = os.fspath(histories)
    if not Path(path).exists():
        raise InputError("history file not found", file=path)
    names = pq.ParquetFile(path).schema_arrow.names
    for column in KEY_COLUMNS:
        if column not in names:
            raise InputError("history data lacks required column", file=path, column=column)
    ids = pq.read_table(path, columns=list(KEY_COLUMNS))
    for column in KEY_COLUMNS:
        nulls = ids.column(column).is_null().to_numpy(zero_copy_only=False)
        if nulls.any():
            raise InputError(f"{column} is null", file=path, column=column, row=_first_row(nulls))
    hashes = _keyed_hashes(ids.column("doc_id"), seed)
    authors = pc.dictionary_encode(ids.column("author_id").combine_chunks()).indices.to_numpy(zero_copy_only=False)
    del ids
    order = np.lexsort((hashes, authors))
    sorted_authors, sorted_hashes = authors[order], hashes[order]
    same = (sorted_authors[1:] == sorted_authors[:-1]) & (sorted_hashes[1:] == sorted_hashes[:-1])
    if same.any():
        doc_ids = pq.read_table(path, columns=["doc_id"]).column("doc_id")
        row = int(order[np.argmax(same) + 1])
        raise InputError(f"duplicate doc_id {doc_ids[row].as_py()!r} within one author", file=path,
                         column="doc_id", row=row + 1)
    starts = np.flatnonzero(np.r_[True, sorted_authors[1:] != sorted_authors[:-1]])
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    first = np.empty(len(order), bool)
    first[order] = rank % 2 == 0
    return first


def split_histories_by_author(histories: str | os.PathLike, out_first: str | os.PathLike,
                              out_second: str | os.PathLike, *, seed: int = 0,
                              chunk_rows: int = 1_000_000) -> tuple[int, int]:
    """Write each author's posts split in two halves (every column kept) to ``out_first`` and ``out_second``;
    returns their row counts."""
    path = os.fspath(histories)
    first = first_half_mask(path, seed=seed)
    outs = [os.fspath(out_first), os.fspath(out_second)]
    temps = [f"{out}.tmp-{os.getpid()}" for out in outs]
    source = pq.ParquetFile(path)
    counts = [0, 0]
    try:
        for out in outs:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
        with pq.ParquetWriter(temps[0], source.schema_arrow) as one, pq.ParquetWriter(temps[1], source.schema_arrow) as two:
            start = 0
            for batch in source.iter_batches(batch_size=chunk_rows):
                mask = first[start:start + batch.num_rows]
                start += batch.num_rows
                for writer, keep, half in ((one, mask, 0), (two, ~mask, 1)):
                    part = batch.filter(pa.array(keep))
                    if part.num_rows:
                        writer.write_batch(part)
                        counts[half] += part.num_rows
        for temp, out in zip(temps, outs, strict=True):
            os.replace(temp, out)
    finally:
        for temp in temps:
            if os.path.exists(temp):
                os.remove(temp)
    return counts[0], counts[1]
