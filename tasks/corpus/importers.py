"""Read a user's corpus from CSV, JSONL or parquet, map its columns to the schema, validate, split.

Reading never crashes on bad bytes: a value that is not UTF-8 is decoded with ``surrogateescape`` (CSV,
JSONL) or kept as bytes (parquet) and reaches validation, which turns a bad text into a per-row "invalid
UTF-8" failure and refuses a bad id, author, group, label or attribute. Cells are read as strings (CSV) or
kept as their JSON/parquet type, so a number where text belongs becomes a "text is not a string" failure,
and an empty CSV cell becomes "text is empty", never a lost row. Every CSV record, the first as the rest,
must have as many fields as the header and close its quotes, else the file is refused naming the line.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.corpus.schema import (
    ATTR_PREFIX,
    DEFAULT_MAX_CHARS,
    ValidatedCorpus,
    check_synthetic,
    validate_corpus,
)
from tasks.corpus.splits import DEFAULT_FRACTIONS, assign_splits
from tasks.errors import ConfigError, InputError
from tasks.paths import write_atomic

FORMATS: dict[str, str] = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
                           ".parquet": "parquet", ".pq": "parquet"}


def detect_format(path: str | Path) -> str:
    """The format named by a file's extension (csv, tsv, jsonl or parquet)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(f"cannot tell the format from the extension '{suffix}'; name it "
                         f"(one of {', '.join(sorted(set(FORMATS.values())))})", file=str(path))
    return FORMATS[suffix]


def _read_csv(path: Path, sep: str) -> pd.DataFrame:
    """Every record checked against the header before any is used, the first as the rest: a field more than the
    header, or a quote never closed, is refused naming the line. (pandas, given a first row with one field
    more than the header, silently took the first column as the index and shifted every column; the stdlib
    reader with strict quoting sees each record as written.)"""
    # surrogateescape: bytes that are not UTF-8 reach validation (a per-row failure in text, refused elsewhere).
    # utf-8-sig drops a byte-order mark. Cells stay strings: "NA" or "null" in a text cell is text.
    limit = csv.field_size_limit()
    csv.field_size_limit(sys.maxsize)  # a text over max_chars is a per-row failure, not a reader error
    try:
        with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
            reader = csv.reader(f, delimiter=sep, strict=True)
            header = next(reader, None)
            if not header:
                raise InputError("the file is empty (no header)", file=str(path))
            if duplicated := [c for c, n in Counter(header).items() if n > 1]:
                raise InputError(f"the header names column '{duplicated[0]}' twice", file=str(path))
            records: list[list[str]] = []
            while True:
                start = reader.line_num + 1
                try:
                    fields = next(reader, None)
                except csv.Error as exc:
                    if "end of data" in str(exc):
                        problem = "a quote opened in this record is never closed (the file ends inside it)"
                    elif reader.line_num > start:
                        problem = f"a quote opened in this record runs to line {reader.line_num}, where {exc}"
                    else:
                        problem = str(exc)
                    raise InputError(f"line {start}: {problem}", file=str(path), row=len(records) + 1) from None
                if fields is None:
                    break
                if len(fields) > len(header):
                    raise InputError(f"line {start} has {len(fields)} fields but the header has {len(header)} "
                                     f"(a {'tab' if sep == chr(9) else repr(sep)} in an unquoted value?)", file=str(path), row=len(records) + 1)
                # a short record (a blank line too) ends in empty cells, as CSV has no null: its row is kept
                records.append(fields + [""] * (len(header) - len(fields)))
    finally:
        csv.field_size_limit(limit)
    return pd.DataFrame({c: pd.Series([r[i] for r in records], dtype=object) for i, c in enumerate(header)},
                        index=pd.RangeIndex(len(records)))


def _read_jsonl(path: Path) -> tuple[pd.DataFrame, pd.Series]:
    records: list[dict] = []
    lines: list[int] = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.decode("utf-8", "surrogateescape")
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                # json's messages may end in "at" ("Unterminated string starting at"): one "at", not two
                raise InputError(f"line {number} is not valid JSON ({exc.msg.removesuffix(' at')} at character "
                                 f"{exc.colno})",
                                 file=str(path), row=number) from exc
            if not isinstance(record, dict):
                raise InputError(f"line {number} is a JSON {type(record).__name__}, not an object",
                                 file=str(path), row=number)
            records.append(record)
            lines.append(number)
    columns = list(dict.fromkeys(k for r in records for k in r))
    df = pd.DataFrame({c: pd.Series([r.get(c) for r in records], dtype=object) for c in columns},
                      index=pd.RangeIndex(len(records)))
    return df, pd.Series(lines, dtype="int64")


def _check_is_file(path: Path) -> None:
    if path.is_dir():
        raise InputError("is a folder, not a file", file=str(path))
    if not path.is_file():
        raise InputError("file not found", file=str(path))


def check_parquet_file(path: str | os.PathLike) -> None:
    """Fail with InputError unless ``path`` is a parquet file (its footer is read, not its rows: for inputs
    too large to load here, such as the adversary's posting histories)."""
    path = Path(path)
    _check_is_file(path)
    try:
        pq.ParquetFile(path).close()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"not a readable parquet file: {exc}", file=str(path)) from exc


def _as_bytes_if_not_utf8(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A string column holding bytes that are not UTF-8 (Arrow does not check them when reading, and pandas then
    crashed) as a binary column: its values reach validation as bytes, as a binary column's do."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return column
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        return column.cast(pa.large_binary())
    return column


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"not a readable parquet file: {exc}", file=str(path)) from exc
    table = pa.Table.from_arrays([_as_bytes_if_not_utf8(c) for c in table.columns], names=table.column_names)
    return table.to_pandas(integer_object_nulls=True)  # an int text stays int


def read_table(path: str | Path, fmt: str | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """Read a CSV/TSV, JSONL or parquet file; return the table and each row's number in the source.

    Row numbers are 1-based record numbers (CSV: the header is not counted; JSONL: the line number,
    blank lines skipped; parquet: the row index + 1). CSV cells are strings (object dtype, no NA
    parsing: an empty cell is ""); JSONL and parquet values keep their types. A JSONL line that is
    not a JSON object is fatal (InputError naming file and line).
    """
    path = Path(path)
    fmt = (fmt or detect_format(path)).lower()
    _check_is_file(path)
    if fmt in ("csv", "tsv"):
        df = _read_csv(path, "," if fmt == "csv" else "\t")
        rows = pd.Series(range(1, len(df) + 1), dtype="int64")
    elif fmt == "jsonl":
        df, rows = _read_jsonl(path)
    elif fmt == "parquet":
        df = _read_parquet(path)
        rows = pd.Series(range(1, len(df) + 1), dtype="int64")
    else:
        raise InputError(f"unknown format '{fmt}' (one of csv, tsv, jsonl, parquet)", file=str(path))
    df = df.reset_index(drop=True)
    return df, rows.set_axis(df.index)


def _attr_name(name: str) -> str:
    name = name.removeprefix(ATTR_PREFIX)
    if not name or not name.replace("_", "").isalnum():
        raise ConfigError(f"attribute name '{name}' must be letters, digits and underscores")
    return ATTR_PREFIX + name


def read_corpus(path: str | os.PathLike, fmt: str | None = None, *, max_chars: int = DEFAULT_MAX_CHARS) -> ValidatedCorpus:
    """A file already in the corpus schema, read and validated (fatal problems raise; bad rows become
    failure records)."""
    df, rows = read_table(path, fmt)
    return require_documents(validate_corpus(df, str(path), max_chars=max_chars, rows=rows), str(path))


def require_documents(validated: ValidatedCorpus, source: str) -> ValidatedCorpus:
    """``validated`` unchanged when it keeps at least one document; else InputError saying why (no rows, or
    every row failed: how many and the first reason), since every later step needs a document."""
    if len(validated.corpus):
        return validated
    if not len(validated.failures):
        raise InputError("no rows: the table has no document", file=source)
    first = validated.failures.iloc[0]
    raise InputError(f"no document passed validation: all {len(validated.failures)} row(s) failed "
                     f"(first: {first['reason']})", file=source, column=str(first["field"]), row=int(first["row"]))


def read_synthetic(path: str | os.PathLike, corpus_ids: pd.Series | None = None) -> pd.DataFrame:
    """A synthetic table (schema) read and checked; with ``corpus_ids``, every doc_id must have a source."""
    df, _ = read_table(path)
    check_synthetic(df, str(path), corpus_ids)
    return df


def import_corpus(path: str | Path, *, text_col: str, id_col: str | None = None,
                  author_col: str | None = None, group_col: str | None = None,
                  position_col: str | None = None, label_col: str | None = None,
                  attrs: Mapping[str, str] | None = None, split_col: str | None = None,
                  fmt: str | None = None, max_chars: int = DEFAULT_MAX_CHARS, seed: int = 0,
                  split_fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> ValidatedCorpus:
    """Import a corpus file: map source columns to the schema, validate, and fill missing splits.

    ``attrs`` maps attribute names to source columns (``{"gender": "user_gender"}`` gives
    ``attr_gender``). A mapped column that the file lacks is fatal (InputError naming file and
    column). Without ``id_col``, doc ids are generated as ``<file stem>-<row:06d>`` from the row
    number in the source (see :func:`read_table`), so they are stable and point back at the record.
    Empty id/author/group/position/split/label/attr cells are nulls (schema rule); an empty text cell is a
    per-row failure. Rows with a null split (all of them when there is no ``split_col``) get one
    from :func:`~tasks.corpus.splits.assign_splits` by group, with ``seed`` and ``split_fractions``.
    """
    path = Path(path)
    source, rows = read_table(path, fmt)
    mapping: dict[str, str] = {"text": text_col}
    for target, col in (("doc_id", id_col), ("author_id", author_col), ("group_id", group_col),
                        ("position", position_col), ("label", label_col), ("split", split_col)):
        if col is not None:
            mapping[target] = col
    for name, col in (attrs or {}).items():
        target = _attr_name(name)
        if target in mapping:
            raise ConfigError(f"attribute '{name}' is mapped twice")
        mapping[target] = col
    present = list(map(str, source.columns))
    for target, col in mapping.items():
        if col not in source.columns:
            raise InputError(f"the column mapped to {target} is missing (columns present: {', '.join(present)})",
                             file=str(path), column=col)

    df = pd.DataFrame(index=source.index)
    if "doc_id" not in mapping:
        df["doc_id"] = pd.Series([f"{path.stem}-{int(r):06d}" for r in rows], index=source.index, dtype=object)
    for target, col in mapping.items():
        df[target] = source[col]

    validated = require_documents(validate_corpus(df, str(path), max_chars=max_chars, rows=rows), str(path))
    corpus = assign_splits(validated.corpus, split_fractions, seed=seed)
    return ValidatedCorpus(corpus=corpus, failures=validated.failures)


def write_parquet_atomic(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a table as parquet through a temporary file beside the target and an atomic rename."""
    return write_atomic(path, lambda tmp: pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp))


def failures_path(out_path: str | Path) -> Path:
    """Where the failure table of a corpus file goes: ``out.parquet`` -> ``out.failures.parquet``."""
    out_path = Path(out_path)
    stem = out_path.name.removesuffix(".parquet")
    return out_path.with_name(f"{stem}.failures.parquet")


def write_corpus(validated: ValidatedCorpus, out_path: str | Path) -> tuple[Path, Path]:
    """Write the valid rows to ``out_path`` and the failures beside it; both atomically.

    Returns (corpus path, failures path). The failure file is written even when empty, so its
    absence never has to be interpreted.
    """
    out_path = Path(out_path)
    fail_path = failures_path(out_path)
    write_parquet_atomic(validated.failures, fail_path)
    write_parquet_atomic(validated.corpus, out_path)
    return out_path, fail_path
