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


def _write_bytes_table(path: Path, columns: dict[str, list[bytes]]) -> Path:
    """A table of raw byte values (some not UTF-8) written as a user's tool would: CSV and JSONL with the bytes
    as they are, parquet as a string column holding them (Arrow writes them unchecked)."""
    names = list(columns)
    records = list(zip(*columns.values(), strict=True))
    if path.suffix == ".csv":
        path.write_bytes(b"\n".join([",".join(names).encode(), *(b",".join(r) for r in records)]) + b"\n")
    elif path.suffix == ".jsonl":
        path.write_bytes(b"".join(b"{" + b",".join(b'"%s": "%s"' % (n.encode(), v) for n, v in zip(names, r, strict=True))
                                  + b"}\n" for r in records))
    else:
        pq.write_table(pa.table({n: pa.array(v, pa.binary()).cast(pa.string(), safe=False)
                                 for n, v in columns.items()}), path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("column", ["doc_id", "author_id", "group_id", "label", "attr_gender"])
def test_invalid_utf8_in_an_identifying_column_is_refused_not_merged(tmp_path, fmt, column):
    """u\\xff1 and u\\xfe1 used to become one value u\\ufffd1 (3 authors read as 2, exit 0): refused instead,
    naming the column and the first bad row, whatever the format."""
    values = [b"u0", b"u\xff1", b"u\xfe1"]
    columns = {"doc_id": [b"a", b"b", b"c"], "text": [b"one", b"two", b"three"], column: values}
    path = _write_bytes_table(tmp_path / f"c.{fmt}", columns)
    where = "byte 1" if fmt == "parquet" else "character 1"
    _assert_fatal(path, column, 2, f"invalid UTF-8 (byte 0xFF at {where}); identifying values are kept exactly")


def test_a_lone_surrogate_in_a_jsonl_author_is_refused(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"doc_id": "a", "text": "x", "author_id": "u\\ud800"}\n'
                    '{"doc_id": "b", "text": "y", "author_id": "u\\ud801"}\n')
    _assert_fatal(path, "author_id", 1, "lone surrogate U+D800 at character 1")


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_invalid_utf8_in_the_text_column_stays_a_per_row_failure(tmp_path, fmt):
    path = _write_bytes_table(tmp_path / f"c.{fmt}", {"doc_id": [b"a", b"b"], "text": [b"fine", b"caf\xe9"],
                                                      "author_id": [b"u1", b"u2"]})
    _, result = _validate(path)
    assert list(result.corpus["doc_id"]) == ["a"]
    assert result.failures["row"].tolist() == [2] and "invalid UTF-8" in result.failures["reason"].iloc[0]


def test_jsonl_duplicate_id_of_different_types_says_so(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"doc_id": 1, "text": "x"}\n{"doc_id": "1", "text": "y"}\n')
    _assert_fatal(path, "doc_id", 2, "duplicate doc_id '1': the ids have different types (integer and string)")


def test_duplicate_id_of_one_type_does_not_mention_types(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"doc_id": "1", "text": "x"}\n{"doc_id": "1", "text": "y"}\n')
    df, rows = read_table(path)
    with pytest.raises(InputError, match=r"duplicate doc_id '1'$"):
        validate_corpus(df, str(path), rows=rows)


@pytest.mark.parametrize("later", [False, True])
@pytest.mark.parametrize(("record", "fragment"), [
    ("g1,hello, world", "line {line} has 3 fields but the header has 2 (a ',' in an unquoted value?)"),
    ('g1,"hello', "line {line}: a quote opened in this record is never closed (the file ends inside it)"),
    ('g1,"hello" world', "line {line}: ',' expected after '\"'"),
])
def test_a_malformed_csv_record_is_refused_first_row_or_later(tmp_path, later, record, fragment):
    """The first data row gets the later rows' treatment: pandas took `g1,hello, world` after an `id,body`
    header as an index column and shifted every column (one document, doc_id 'hello', exit 0)."""
    rows = ["g0,fine", record, "g2,second"] if later else [record, "g2,second", "g3,third"]
    path = _write_csv(tmp_path / "c.csv", "id,body\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputError) as info:
        read_table(path)
    row = 2 if later else 1
    assert info.value.row == row and info.value.file == str(path)
    assert str(info.value) == f"file {path}, row {row}: " + fragment.format(line=row + 1)


def test_a_tsv_record_with_an_extra_field_is_refused(tmp_path):
    path = _write_csv(tmp_path / "c.tsv", "id\tbody\ng1\thello\tworld\n")
    with pytest.raises(InputError, match="line 2 has 3 fields but the header has 2 \\(a tab in an unquoted value"):
        read_table(path)


def test_a_multi_line_quoted_value_counts_as_one_row(tmp_path):
    path = _write_csv(tmp_path / "c.csv", 'id,body\ng1,"two\nlines, one value"\ng2,x\n')
    df, rows = read_table(path)
    assert df["body"].tolist() == ["two\nlines, one value", "x"] and rows.tolist() == [1, 2]


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    path = _write_csv(tmp_path / "c.csv", "id,body,body\ng1,a,b\n")
    with pytest.raises(InputError, match="the header names column 'body' twice"):
        read_table(path)


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
