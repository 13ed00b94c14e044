"""The corpus, synthetic and failure tables: the one module that owns their columns and validation.

Corpus columns (one row per document; a document is a post, a dialogue turn or a timeline post):

- ``doc_id``   unique string id (required)
- ``text``     the document text (required)
- ``author_id``, ``group_id`` (conversation or timeline), ``position`` (order in the group),
  ``split`` (train/val/test), ``label`` (task label): optional, null where unknown
- ``attr_<name>``: sensitive attributes (e.g. ``attr_gender``), strings
- ``seg_tags``: word-level dialogue-act tags of a dialogue turn (one per whitespace token: ``I`` inside
  a segment, the act on a segment's last word; see :mod:`tasks.training.task_metrics`), string, optional.
  Kept so that the dialogue task scores SegWER/JointWER against the word-level gold in the flow as in
  ``synthugc utility``.

Validation splits problems in two kinds:

- Fatal (raise :class:`~tasks.errors.InputError`, the CLI exits with code 2 and one line naming
  file, column and first bad row): a missing required column, a duplicate ``doc_id``, a null
  ``doc_id``, a ``position`` that is not an integer, a ``split`` outside train/val/test, invalid UTF-8
  (or a lone surrogate) in any column but ``text``. These make the table ambiguous as a whole, so no
  row can be trusted: repairing bad bytes in an id, author, group, label or attribute would merge
  values that differ.
- Per row (the row moves to the failure table with its reason; every other row goes on):
  null text, non-string text, empty or whitespace-only text, invalid UTF-8, control characters
  (anything in Unicode category Cc except tab, newline and carriage return), text longer than
  ``max_chars``. Nothing is dropped silently: ``len(valid) + len(failures) == len(input)``.

An empty or whitespace-only value in any column but ``text`` is a null (CSV has no other way to
write one): an empty ``doc_id`` cell is a null doc_id, an empty ``split`` cell an unassigned split.

Row numbers in messages and failure records are 1-based record numbers in the source (the header
of a CSV is not counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

import pandas as pd

from tasks.errors import InputError

REQUIRED_COLUMNS: tuple[str, ...] = ("doc_id", "text")
OPTIONAL_COLUMNS: tuple[str, ...] = ("author_id", "group_id", "position", "split", "label")
CORPUS_COLUMNS: tuple[str, ...] = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
#: Task columns kept through validation when present (strings; blank = null), absent otherwise.
TASK_COLUMNS: tuple[str, ...] = ("seg_tags",)
ATTR_PREFIX = "attr_"
SPLITS: tuple[str, ...] = ("train", "val", "test")
DEFAULT_MAX_CHARS = 20_000

#: Columns a synthetic table carries over from its source row.
CARRIED_COLUMNS: tuple[str, ...] = ("author_id", "group_id", "position", "split", "label")
#: ``unchanged`` (nullable bool): an ok row whose text is its source's, up to whitespace (not rewritten).
SYNTHETIC_COLUMNS: tuple[str, ...] = ("doc_id", "strategy", "variant", "text", *CARRIED_COLUMNS, "status", "reason",
                                      "unchanged")
FAILURE_COLUMNS: tuple[str, ...] = ("source", "row", "doc_id", "field", "reason")

STATUS_OK = "ok"
STATUS_FAILED = "failed"

#: Unicode category Cc (U+0000-U+001F, U+007F-U+009F) except tab, newline and carriage return.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
#: Lone surrogates: U+DC80-U+DCFF is what ``surrogateescape`` leaves for bytes that are not UTF-8;
#: the rest can only come from escapes such as JSON's "\\ud800". A valid str never holds one.
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Something visible: not whitespace and not an invisible format or filler character (zero-width space and
#: joiners, word joiner, BOM, soft hyphen, bidi marks, variation selectors, Hangul fillers); a text of only
#: those would pass as non-empty while showing nothing.
_VISIBLE = re.compile("[^\\s\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
                      "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0]")


class Level(StrEnum):
    """The unit a corpus is organised in: single posts, dialogues (turns in a conversation) or timelines."""

    post = "post"
    dialogue = "dialogue"
    timeline = "timeline"


@dataclass(frozen=True)
class ValidatedCorpus:
    """The rows that passed validation and the failure records of those that did not."""

    corpus: pd.DataFrame
    failures: pd.DataFrame


def attr_columns(df: pd.DataFrame) -> list[str]:
    """The sensitive-attribute columns of a table, in order."""
    return [c for c in df.columns if c.startswith(ATTR_PREFIX)]


def failure_table(records: list[dict]) -> pd.DataFrame:
    """A failure table from records with the keys of FAILURE_COLUMNS."""
    df = pd.DataFrame.from_records(records, columns=list(FAILURE_COLUMNS))
    df["row"] = df["row"].astype("Int64")
    for col in ("source", "doc_id", "field", "reason"):
        df[col] = df[col].astype("string")
    return df


def text_problem(value: object, max_chars: int) -> str | None:
    """Why a text value cannot be used, or None when it can."""
    if value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NA:
        return "text is null"
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"invalid UTF-8 at byte {exc.start}"
    if not isinstance(value, str):
        return f"text is not a string ({type(value).__name__})"
    if bad := _SURROGATE.search(value):
        if 0xDC80 <= ord(bad.group()) <= 0xDCFF:
            return f"invalid UTF-8 at character {bad.start()}"
        return f"lone surrogate U+{ord(bad.group()):04X} at character {bad.start()}"
    if not _VISIBLE.search(value):
        return "text is empty" if not value.strip() else "text is empty (only invisible characters)"
    if bad := _CONTROL.search(value):
        return f"control character U+{ord(bad.group()):04X} at character {bad.start()}"
    if len(value) > max_chars:
        return f"text has {len(value)} characters, over the limit of {max_chars}"
    return None


def _encoding_problem(value: object) -> str | None:
    """Why a value of an identifying column holds no text that can be kept exactly, or None: bytes that are not
    UTF-8 (lone surrogates U+DC80-U+DCFF after ``surrogateescape``, or undecodable ``bytes``) or another lone
    surrogate (a JSON escape such as "\\ud800")."""
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"invalid UTF-8 (byte 0x{value[exc.start]:02X} at byte {exc.start})"
        return None
    if isinstance(value, str) and (bad := _SURROGATE.search(value)):
        code = ord(bad.group())
        if 0xDC80 <= code <= 0xDCFF:
            return f"invalid UTF-8 (byte 0x{code - 0xDC00:02X} at character {bad.start()})"
        return f"lone surrogate U+{code:04X} at character {bad.start()}"
    return None


def _as_string(values: pd.Series, source: str, column: str, rows: pd.Series) -> pd.Series:
    """An identifying column (ids, authors, groups, labels, splits, attributes) as pandas strings. A value that
    is not valid text is refused, naming its row: replacing bad bytes by U+FFFD made different values equal
    (``u\\xff1`` and ``u\\xfe1`` both became one author), which the text column alone may afford."""
    if values.dtype == object:
        problems = values.map(_encoding_problem)
        bad = problems.notna()
        if bad.any():
            raise InputError(f"{problems[bad].iloc[0]}; identifying values are kept exactly, so fix the file's "
                             f"encoding (replacing bad bytes would merge values that differ)", file=source,
                             column=column, row=_first_bad_row(bad, rows))
        values = values.map(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v)
    return values.astype("string")


def _blank_to_na(values: pd.Series) -> pd.Series:
    """Empty or whitespace-only strings as nulls; other values unchanged."""
    blank = values.map(lambda v: isinstance(v, str) and not v.strip()).to_numpy(dtype=bool)
    if not blank.any():
        return values
    return values.astype(object).where(~blank, None)


#: How a value's type is named in messages (a JSON file may hold the id 1 and the id "1").
_TYPE_NAMES: dict[type, str] = {int: "integer", float: "number", str: "string", bool: "boolean", bytes: "bytes"}


def _first_bad_row(mask: pd.Series, rows: pd.Series) -> int:
    return int(rows[mask.to_numpy()].iloc[0])


def validate_corpus(df: pd.DataFrame, source: str, *, max_chars: int = DEFAULT_MAX_CHARS,
                    rows: pd.Series | None = None) -> ValidatedCorpus:
    """Check a table against the corpus schema; return typed valid rows and per-row failure records.

    ``source`` names the file in messages; ``rows`` gives each row's 1-based record number in the
    source (default: 1..n). Raises InputError for the fatal problems listed in the module docstring.
    """
    rows = pd.Series(range(1, len(df) + 1), index=df.index) if rows is None else rows.set_axis(df.index)
    for col in REQUIRED_COLUMNS:
        if col not in df.columns:
            raise InputError(f"required column is missing (columns present: {', '.join(map(str, df.columns))})",
                             file=source, column=col)
    bad_names = [c for c in df.columns if not isinstance(c, str)]
    if bad_names:
        raise InputError("column names must be strings", file=source, column=str(bad_names[0]))

    # CSV cannot write a null: an empty or whitespace-only cell outside ``text`` means "unknown".
    # (Before, an empty split cell was fatal and empty group cells formed one group named "".)
    blanks = {c: _blank_to_na(df[c]) for c in ("doc_id", *OPTIONAL_COLUMNS, *TASK_COLUMNS, *attr_columns(df))
              if c in df.columns}
    df = df.assign(**blanks)

    ids = df["doc_id"]
    null_ids = ids.isna()
    if null_ids.any():
        raise InputError("doc_id is null", file=source, column="doc_id", row=_first_bad_row(null_ids, rows))
    original = ids
    ids = _as_string(ids, source, "doc_id", rows)
    dup = ids.duplicated(keep="first")
    if dup.any():
        first = _first_bad_row(dup, rows)
        value = ids[dup].iloc[0]
        types = list(dict.fromkeys(_TYPE_NAMES.get(type(v), type(v).__name__)
                                   for v in original[(ids == value).to_numpy()]))
        kinds = (f": the ids have different types ({' and '.join(types)}) but the same text, and ids are compared "
                 f"as text; give them one type" if len(types) > 1 else "")
        raise InputError(f"duplicate doc_id '{value}'{kinds}", file=source, column="doc_id", row=first)

    out = pd.DataFrame(index=df.index)
    out["doc_id"] = ids
    out["text"] = df["text"]
    for col in ("author_id", "group_id", "label"):
        out[col] = _as_string(df[col], source, col, rows) if col in df.columns else pd.Series(pd.NA, index=df.index, dtype="string")
    if "position" in df.columns:
        pos = pd.to_numeric(df["position"], errors="coerce")
        bad = (pos.isna() & df["position"].notna()) | (pos.notna() & (pos % 1 != 0))
        if bad.any():
            raise InputError(f"position '{df['position'][bad].iloc[0]}' is not an integer",
                             file=source, column="position", row=_first_bad_row(bad, rows))
        out["position"] = pos.astype("Int64")
    else:
        out["position"] = pd.Series(pd.NA, index=df.index, dtype="Int64")
    if "split" in df.columns:
        split = _as_string(df["split"], source, "split", rows)
        bad = split.notna() & ~split.isin(SPLITS)
        if bad.any():
            raise InputError(f"split '{split[bad].iloc[0]}' is not one of {', '.join(SPLITS)}",
                             file=source, column="split", row=_first_bad_row(bad, rows))
        out["split"] = split
    else:
        out["split"] = pd.Series(pd.NA, index=df.index, dtype="string")
    for col in attr_columns(df):
        out[col] = _as_string(df[col], source, col, rows)
    for col in TASK_COLUMNS:
        if col in df.columns:
            out[col] = _as_string(df[col], source, col, rows)

    problems = [text_problem(v, max_chars) for v in df["text"].tolist()]
    failed = pd.Series([p is not None for p in problems], index=df.index, dtype=bool)  # bool even with no rows
    failures = failure_table([
        {"source": source, "row": int(r), "doc_id": d, "field": "text", "reason": p}
        for r, d, p in zip(rows, out["doc_id"], problems, strict=True) if p is not None
    ])
    valid = out[~failed.to_numpy()].copy()
    valid["text"] = valid["text"].map(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v).astype("string")
    return ValidatedCorpus(corpus=valid.reset_index(drop=True), failures=failures)


def corpus_level(df: pd.DataFrame) -> Level:
    """Infer the level: post when no groups, timeline when groups are single-author, else dialogue."""
    if df["group_id"].isna().all():
        return Level.post
    authors_per_group = df.dropna(subset=["group_id"]).groupby("group_id")["author_id"].nunique()
    return Level.timeline if bool((authors_per_group <= 1).all()) else Level.dialogue


SYNTHETIC_REQUIRED: tuple[str, ...] = ("doc_id", "strategy", "variant", "text", "status")


def check_synthetic(df: pd.DataFrame, source: str, corpus_ids: pd.Series | None = None) -> None:
    """Fatal checks of a synthetic table: required columns, status values, and (given the corpus ids)
    that every doc_id has a source document. Raises InputError naming file, column and first bad row."""
    for col in SYNTHETIC_REQUIRED:
        if col not in df.columns:
            raise InputError(f"required column is missing (columns present: {', '.join(map(str, df.columns))})",
                             file=source, column=col)
    rows = pd.Series(range(1, len(df) + 1), index=df.index)
    bad_status = ~df["status"].isin([STATUS_OK, STATUS_FAILED])
    if bad_status.any():
        raise InputError(f"status '{df['status'][bad_status].iloc[0]}' is not ok or failed", file=source,
                         column="status", row=_first_bad_row(bad_status, rows))
    dup = df.duplicated(subset=["doc_id", "strategy", "variant"], keep="first")
    if dup.any():
        first = df[dup.to_numpy()].iloc[0]
        raise InputError(f"duplicate synthetic row for doc_id '{first['doc_id']}', strategy '{first['strategy']}', "
                         f"variant '{first['variant']}' (each source has one row per strategy and variant)",
                         file=source, column="doc_id", row=_first_bad_row(dup, rows))
    if corpus_ids is not None:
        unknown = ~df["doc_id"].astype(str).isin(set(corpus_ids.astype(str)))
        if unknown.any():
            raise InputError(f"doc_id '{df['doc_id'][unknown].iloc[0]}' is not in the corpus", file=source,
                             column="doc_id", row=_first_bad_row(unknown, rows))
