"""Corpus validation on real files: every fatal problem names file, column and first bad row; every
per-row problem becomes a failure record and nothing is dropped silently."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.corpus.importers import read_table
from tasks.corpus.schema import corpus_level, text_problem, validate_corpus
from tasks.errors import InputError


def _validate(path: Path, **kwargs):
    df, rows = read_table(path)
    return df, validate_corpus(df, str(path), rows=rows, **kwargs)


def _write_csv(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _assert_fatal(path: Path, column: str, row: int | None, fragment: str) -> None:
    df, rows = read_table(path)
    with pytest.raises(InputError) as info:
        validate_corpus(df, str(path), rows=rows)
    err = info.value
    assert err.file == str(path) and err.column == column and err.row == row
    message = str(err)
    assert str(path) in message and f"column '{column}'" in message and fragment in message
    if row is not None:
        assert f"row {row}" in message
    assert "\n" not in message


def test_missing_required_column(tmp_path):
    path = _write_csv(tmp_path / "c.csv", "doc_id,body\n1,hello\n")
    _assert_fatal(path, "text", None, "required column is missing")


def test_duplicate_doc_id_names_first_duplicate_row(tmp_path):
    path = _write_csv(tmp_path / "c.csv", "doc_id,text\na,one\nb,two\nc,three\nb,four\n")
    _assert_fatal(path, "doc_id", 4, "duplicate doc_id 'b'")


def test_null_doc_id_empty_csv_cell(tmp_path):
    path = _write_csv(tmp_path / "c.csv", "doc_id,text\na,one\n,two\n")
    _assert_fatal(path, "doc_id", 2, "doc_id is null")


def test_null_doc_id_jsonl_uses_line_number(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"doc_id": "a", "text": "x"}\n\n{"doc_id": null, "text": "y"}\n', encoding="utf-8")
    _assert_fatal(path, "doc_id", 3, "doc_id is null")


@pytest.mark.parametrize("value", ["2.5", "three"])
def test_non_integer_position(tmp_path, value):
    path = _write_csv(tmp_path / "c.csv", f"doc_id,text,position\na,one,1\nb,two,\nc,three,{value}\n")
    _assert_fatal(path, "position", 3, f"position '{value}' is not an integer")


def test_bad_split_value(tmp_path):
    path = _write_csv(tmp_path / "c.csv", "doc_id,text,split\na,one,train\nb,two,\nc,three,dev\nd,four,x\n")
    _assert_fatal(path, "split", 3, "split 'dev' is not one of train, val, test")


def test_empty_optional_cells_are_nulls(tmp_path):
    path = _write_csv(tmp_path / "c.csv",
                      "doc_id,text,author_id,group_id,position,split,attr_age\na,one,,, ,,\nb,two,u,g,2,test,30\n")
    _, result = _validate(path)
    corpus = result.corpus
    assert corpus.loc[0, ["author_id", "group_id", "position", "split", "attr_age"]].isna().all()
    assert corpus.loc[1, "position"] == 2 and corpus.loc[1, "split"] == "test"
    assert str(corpus["position"].dtype) == "Int64"


def _check_failures(result, n_input: int, expected: dict[int, str]) -> None:
    failures = result.failures
    assert len(result.corpus) + len(failures) == n_input
    got = {int(r): reason for r, reason in zip(failures["row"], failures["reason"], strict=True)}
    assert got.keys() == expected.keys()
    for row, fragment in expected.items():
        assert fragment in got[row], (row, got[row])
    assert set(failures["field"]) <= {"text"}
    assert not set(failures["doc_id"]) & set(result.corpus["doc_id"])


def test_per_row_failures_csv(tmp_path):
    path = tmp_path / "c.csv"
    long_text = "y" * 51
    path.write_bytes(
        b"doc_id,text\n"
        b"ok1,fine text\n"
        b"empty,\n"
        b"blank,\"   \"\n"
        b"badutf,caf\xe9 au lait\n"
        b"ctrl,bell \x07 here\n"
        + f"long,{long_text}\n".encode()
        + b"ok2,\"tab\tand\nnewline are fine\"\n"
        b"na,NA\n"
        b"short\n"
    )
    df, result = _validate(path, max_chars=50)
    _check_failures(result, len(df), {
        2: "text is empty", 3: "text is empty", 4: "invalid UTF-8 at character 3",
        5: "control character U+0007 at character 5", 6: "text has 51 characters, over the limit of 50",
        9: "text is empty",  # a short row: the missing cell reads as empty (CSV has no null)
    })
    failures = result.failures.set_index("row")
    assert failures.loc[4, "doc_id"] == "badutf" and failures.loc[4, "source"] == str(path)
    assert list(result.corpus["doc_id"]) == ["ok1", "ok2", "na"]
    assert result.corpus.loc[2, "text"] == "NA"  # the string NA is text, not a null


def test_per_row_failures_jsonl(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = [
        json.dumps({"doc_id": "ok", "text": "fine"}).encode(),
        json.dumps({"doc_id": "null", "text": None}).encode(),
        json.dumps({"doc_id": "int", "text": 5}).encode(),
        json.dumps({"doc_id": "list", "text": ["a"]}).encode(),
        b'{"doc_id": "badutf", "text": "na\xefve \xff"}',
        json.dumps({"doc_id": "ctrl", "text": "nul\u0000"}).encode(),
        json.dumps({"doc_id": "surrogate", "text": "x\ud800"}).encode(),
        json.dumps({"doc_id": "missing"}).encode(),
        json.dumps({"doc_id": "ws", "text": "\n\t "}).encode(),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    df, result = _validate(path)
    _check_failures(result, len(df), {
        2: "text is null", 3: "text is not a string (int)", 4: "text is not a string (list)",
        5: "invalid UTF-8 at character 2", 6: "control character U+0000 at character 3",
        7: "lone surrogate U+D800", 8: "text is null", 9: "text is empty",
    })
    assert list(result.corpus["doc_id"]) == ["ok"]


def test_per_row_failures_parquet_int_text(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"doc_id": ["a", "b"], "text": pa.array([1, None], pa.int64())}), path)
    _, result = _validate(path)
    _check_failures(result, 2, {1: "text is not a string (int)", 2: "text is null"})


def test_parquet_binary_text_with_invalid_utf8(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"doc_id": ["a", "b"], "text": pa.array([b"ok bytes", b"\xff\xfe"], pa.binary())}), path)
    _, result = _validate(path)
    _check_failures(result, 2, {2: "invalid UTF-8 at byte 0"})
    assert result.corpus.loc[0, "text"] == "ok bytes"


def test_invalid_utf8_in_an_id_column_does_not_crash(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b"doc_id,text,author_id\nid\xff,hello,au\xfethor\n")
    _, result = _validate(path)
    assert result.corpus.loc[0, "doc_id"] == "id\ufffd"
    assert result.corpus.loc[0, "author_id"] == "au\ufffdthor"


def test_valid_table_types_and_level(tmp_path):
    df = pd.DataFrame({"doc_id": [1, 2, 3], "text": ["a", "b", "c"], "group_id": ["g", "g", None],
                       "author_id": ["u1", "u2", "u3"], "position": [1.0, 2.0, None], "attr_gender": ["f", "m", None]})
    result = validate_corpus(df, "memory")
    corpus = result.corpus
    assert list(corpus["doc_id"]) == ["1", "2", "3"]
    assert str(corpus["text"].dtype) == "string" and str(corpus["position"].dtype) == "Int64"
    assert "attr_gender" in corpus.columns and len(result.failures) == 0
    assert corpus_level(corpus) == "dialogue"


def test_text_problem_allows_tab_newline_cr():
    assert text_problem("a\tb\r\nc", 100) is None
    assert text_problem("\x85next line", 100) == "control character U+0085 at character 0"
