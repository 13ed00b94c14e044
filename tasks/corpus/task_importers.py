"""Importers for the dialogue-act and timeline task formats (no public copy of SwDA or TalkLife ships here).

- :func:`import_utterance_table`: SwDA-style utterance tables (one row per utterance: conversation,
  caller, utterance index, act tag, text; the column names are a mapping, :data:`SWDA_COLUMNS` by
  default) -> corpus rows with ``group_id`` = conversation, ``author_id`` = ``<conversation>:<caller>``
  (or a speaker-id column), ``position``, ``label`` = act tag, plus ``seg_tags``: one tag per whitespace
  word of ``text`` (``I`` inside a segment, the act tag on a segment's last word; see
  :mod:`tasks.training.task_metrics`). Options: condense SwDA's ~220 tags to the 42-act set
  (:func:`swda_damsl_tag`), merge ``+`` continuation rows into the caller's previous utterance (the usual
  SwDA preprocessing), and group consecutive utterances of a caller into *turns* (one row per turn with
  several segments in ``seg_tags``: the input of word-level segmentation).
- :func:`import_timeline_table`: timelines of posts with per-post labels O/IE/IS (moments of change) ->
  corpus rows with ``group_id`` = timeline, ``author_id`` = user (or timeline), ``position`` from a
  position column, else the order of a timestamp column, else file order.

Both validate with the corpus schema (per-row text failures go to the failure table) and fill missing
splits by whole group (:func:`~tasks.corpus.splits.assign_splits`). ``seg_tags`` is an extra column (a
space-joined string) that the schema does not know; it survives only in the returned table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from tasks.corpus.importers import read_table
from tasks.corpus.schema import DEFAULT_MAX_CHARS, ValidatedCorpus, validate_corpus
from tasks.corpus.splits import DEFAULT_FRACTIONS, assign_splits
from tasks.corpus.tags import segment_tags
from tasks.errors import InputError

#: Default column mapping of an utterance table (Potts' swda CSV files).
SWDA_COLUMNS: dict[str, str] = {"conversation": "conversation_no", "caller": "caller",
                                "utterance": "utterance_index", "subutterance": "subutterance_index",
                                "act": "act_tag", "text": "text"}
CONTINUATION = "+"  #: SwDA's act tag of an utterance continuing the caller's interrupted previous one
TIMELINE_LABELS: tuple[str, ...] = ("O", "IE", "IS")
#: Label spellings seen in moments-of-change data, mapped to O/IE/IS (0 for O; ISB/IEP mark the
#: beginning of a switch and the peak of an escalation, which the task folds into IS/IE).
TIMELINE_LABEL_MAP: dict[str, str] = {"0": "O", "o": "O", "ISB": "IS", "IEP": "IE"}


def swda_damsl_tag(tag: str) -> str:
    """The 42-act (+ continuation) SwDA-DAMSL tag of a raw SwDA act tag, as in Potts' ``swda.py``
    (``Utterance.damsl_act_tag``): the first of several tags, ``^`` suffixes dropped except in qy^d,
    qw^d, b^m (nn^e -> ng, ny^e -> na), markup ``()@*`` removed, and the merged classes joined by ``_``."""
    first = re.split(r"\s*[,;]\s*", str(tag).strip())[0]
    if first in ("qy^d", "qw^d", "b^m"):
        return first
    if first == "nn^e":
        return "ng"
    if first == "ny^e":
        return "na"
    first = re.sub(r"(.)\^.*", r"\1", first)
    first = re.sub(r"[()@*]", "", first)
    merged = {"qr": "qy", "fe": "ba", "oo": "oo_co_cc", "co": "oo_co_cc", "cc": "oo_co_cc", "fx": "sv",
              "aap": "aap_am", "am": "aap_am", "arp": "arp_nd", "nd": "arp_nd"}
    if first in ("fo", "o", "fw", '"', "by", "bc"):
        return 'fo_o_fw_"_by_bc'
    return merged.get(first, first)


_SWDA_MARKUP = [
    (re.compile(r"<+[^<>]*>+"), " "),  # <laughter>, <<noise>>
    (re.compile(r"\{[A-Z]\s*"), " "),  # {F uh }, {D well } -> keep the words
    (re.compile(r"[{}\[\]+/#]|--|\(\(|\)\)"), " "),  # brackets, repair marks, slash units, overlap marks
]


def swda_clean(text: str) -> str:
    """SwDA transcript markup removed (disfluency braces and brackets, slash-unit marks, noises), words
    kept, whitespace collapsed. A light cleaner, not the Penn Treebank tokenisation."""
    for pattern, repl in _SWDA_MARKUP:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def _check_columns(source: pd.DataFrame, mapping: Mapping[str, str | None], path: Path) -> None:
    present = ", ".join(map(str, source.columns))
    for key, col in mapping.items():
        if col is not None and col not in source.columns:
            raise InputError(f"the column mapped to {key} is missing (columns present: {present})",
                             file=str(path), column=col)


def _finish(df: pd.DataFrame, rows: pd.Series, path: Path, extra: pd.DataFrame | None, *, max_chars: int,
            seed: int, split_fractions: tuple[float, float, float]) -> ValidatedCorpus:
    validated = validate_corpus(df, str(path), max_chars=max_chars, rows=rows)
    corpus = assign_splits(validated.corpus, split_fractions, seed=seed)
    if extra is not None:
        corpus = corpus.merge(extra, on="doc_id", how="left", validate="one_to_one")
    return ValidatedCorpus(corpus=corpus, failures=validated.failures)


def _int_or_raise(values: pd.Series, path: Path, column: str, rows: pd.Series) -> pd.Series:
    nums = pd.to_numeric(values, errors="coerce")
    bad = nums.isna() | (nums % 1 != 0)
    if bad.any():
        raise InputError(f"'{values[bad].iloc[0]}' is not an integer", file=str(path), column=column,
                         row=int(rows[bad].iloc[0]))
    return nums.astype("int64")


def import_utterance_table(path: str | Path, *, columns: Mapping[str, str | None] | None = None,
                           speaker_col: str | None = None, split_col: str | None = None,
                           tag_map: Callable[[str], str] | None = None,
                           clean: Callable[[str], str] | None = None, merge_continuations: bool = True,
                           turns: bool = False, fmt: str | None = None, max_chars: int = DEFAULT_MAX_CHARS,
                           seed: int = 0,
                           split_fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> ValidatedCorpus:
    """Import an utterance table (see the module docstring); returns corpus rows with ``seg_tags``.

    ``columns`` maps conversation, caller, utterance, subutterance (optional: None), act and text to the
    file's columns (default :data:`SWDA_COLUMNS`). ``tag_map`` rewrites act tags (e.g.
    :func:`swda_damsl_tag`), ``clean`` rewrites texts (e.g. :func:`swda_clean`) before words are counted.
    With ``merge_continuations`` a ``+`` row's text is appended to the same caller's previous utterance
    of the conversation (one segment, the earlier act); a ``+`` with no previous utterance keeps its row.
    With ``turns`` consecutive utterances of one caller become one row (doc_id of the first; label = act
    of the last segment; ``seg_tags`` holding every segment). doc_ids are
    ``<conversation>-<utterance>[-<subutterance>]``."""
    path = Path(path)
    cols = {**SWDA_COLUMNS, **(columns or {})}
    source, rows = read_table(path, fmt)
    _check_columns(source, {**cols, "speaker": speaker_col, "split": split_col}, path)
    conv = source[cols["conversation"]].astype(str)
    utt = _int_or_raise(source[cols["utterance"]], path, cols["utterance"], rows)
    sub = (_int_or_raise(source[cols["subutterance"]], path, cols["subutterance"], rows)
           if cols.get("subutterance") else pd.Series(0, index=source.index))
    table = pd.DataFrame({
        "conv": conv, "utt": utt, "sub": sub, "row": rows,
        "caller": source[cols["caller"]].astype(str),
        "act": source[cols["act"]].astype(str).map(lambda t: tag_map(t) if tag_map else t.strip()),
        "text": source[cols["text"]],
        "speaker": source[speaker_col].astype(str) if speaker_col else None,
        "split": source[split_col] if split_col else None,
    })
    table["doc_id"] = (table["conv"] + "-" + table["utt"].astype(str)
                       + (("-" + table["sub"].astype(str)) if cols.get("subutterance") else ""))
    table = table.sort_values(["conv", "utt", "sub", "row"], kind="stable").reset_index(drop=True)
    if clean is not None:
        table["text"] = table["text"].map(lambda t: clean(t) if isinstance(t, str) else t)

    # one record per kept row: its segments as (n_words, act) pairs
    records: list[dict] = []
    for _, conv_rows in table.groupby("conv", sort=False):
        last_by_caller: dict[str, dict] = {}
        for rec in conv_rows.to_dict("records"):
            text = rec["text"]
            rec["segments"] = [(len(text.split()) if isinstance(text, str) else 0, rec["act"])]
            prev = last_by_caller.get(rec["caller"])
            if (merge_continuations and rec["act"] == CONTINUATION and prev is not None
                    and isinstance(text, str) and isinstance(prev["text"], str)):
                prev["text"] = f"{prev['text']} {text}".strip()
                n_prev, act = prev["segments"][-1]
                prev["segments"][-1] = (n_prev + len(text.split()), act)
                continue
            records.append(rec)
            last_by_caller[rec["caller"]] = rec
    if turns:
        merged: list[dict] = []
        for rec in records:
            last = merged[-1] if merged else None
            if (last is not None and last["conv"] == rec["conv"] and last["caller"] == rec["caller"]
                    and isinstance(last["text"], str) and isinstance(rec["text"], str)):
                last["text"] = f"{last['text']} {rec['text']}".strip()
                last["segments"] = last["segments"] + rec["segments"]
                last["act"] = rec["act"]
            else:
                merged.append({**rec, "segments": list(rec["segments"])})
        records = merged

    out = pd.DataFrame.from_records(records) if records else table.assign(segments=[])
    position = out.groupby("conv", sort=False).cumcount()
    author = out["speaker"] if speaker_col else out["conv"] + ":" + out["caller"]
    df = pd.DataFrame({"doc_id": out["doc_id"], "text": out["text"], "author_id": author,
                       "group_id": out["conv"], "position": position, "label": out["act"]})
    if split_col:
        df["split"] = out["split"]
    seg = pd.DataFrame({"doc_id": out["doc_id"].astype("string"),
                        "seg_tags": [" ".join(segment_tags([n for n, _ in s], [a for _, a in s]))
                                     for s in out["segments"]]})
    return _finish(df, out["row"], path, seg, max_chars=max_chars, seed=seed, split_fractions=split_fractions)


def import_timeline_table(path: str | Path, *, timeline_col: str, text_col: str, label_col: str,
                          user_col: str | None = None, position_col: str | None = None,
                          timestamp_col: str | None = None, id_col: str | None = None,
                          split_col: str | None = None, label_map: Mapping[str, str] | None = None,
                          labels: tuple[str, ...] = TIMELINE_LABELS, fmt: str | None = None,
                          max_chars: int = DEFAULT_MAX_CHARS, seed: int = 0,
                          split_fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> ValidatedCorpus:
    """Import a timeline table: one row per post with its timeline, text and O/IE/IS label.

    Order within a timeline: ``position_col`` (integers), else ``timestamp_col`` (datetimes or numbers),
    else file order; ties keep file order; positions are renumbered 0..n-1. Labels are mapped with
    :data:`TIMELINE_LABEL_MAP` updated by ``label_map``; an empty label is unknown (null); a label outside
    ``labels`` is fatal (InputError naming the row). Without ``id_col`` doc ids are
    ``<timeline>-<position>``."""
    path = Path(path)
    source, rows = read_table(path, fmt)
    _check_columns(source, {"timeline": timeline_col, "text": text_col, "label": label_col, "user": user_col,
                            "position": position_col, "timestamp": timestamp_col, "id": id_col,
                            "split": split_col}, path)
    mapping = {**TIMELINE_LABEL_MAP, **(label_map or {})}
    raw = source[label_col].map(lambda v: None if v is None or (isinstance(v, str) and not v.strip())
                                else str(v).strip())
    label = raw.map(lambda v: mapping.get(v, v) if v is not None else None)
    bad = label.notna() & ~label.isin(labels)
    if bad.any():
        raise InputError(f"label '{raw[bad].iloc[0]}' is not one of {', '.join(labels)} (map it with label_map)",
                         file=str(path), column=label_col, row=int(rows[bad].iloc[0]))
    timeline = source[timeline_col].astype(str)
    if position_col:
        order = _int_or_raise(source[position_col], path, position_col, rows)
    elif timestamp_col:
        stamps = source[timestamp_col]
        order = pd.to_numeric(stamps, errors="coerce")
        if order.isna().any():
            order = pd.to_datetime(stamps, errors="coerce", utc=True)
        if order.isna().any():
            bad_ts = order.isna()
            raise InputError(f"timestamp '{stamps[bad_ts].iloc[0]}' is neither a number nor a date",
                             file=str(path), column=timestamp_col, row=int(rows[bad_ts].iloc[0]))
    else:
        order = pd.Series(range(len(source)), index=source.index)
    frame = pd.DataFrame({"timeline": timeline, "order": order, "file": range(len(source))})
    frame = frame.sort_values(["timeline", "order", "file"], kind="stable")
    position = frame.groupby("timeline", sort=False).cumcount().reindex(source.index)
    doc_id = source[id_col] if id_col else timeline + "-" + position.astype(str)
    df = pd.DataFrame({"doc_id": doc_id, "text": source[text_col],
                       "author_id": source[user_col].astype(str) if user_col else timeline,
                       "group_id": timeline, "position": position, "label": label})
    if split_col:
        df["split"] = source[split_col]
    result = _finish(df, rows, path, None, max_chars=max_chars, seed=seed, split_fractions=split_fractions)
    corpus = result.corpus.sort_values(["group_id", "position"], kind="stable").reset_index(drop=True)
    return ValidatedCorpus(corpus=corpus, failures=result.failures)
