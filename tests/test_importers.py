"""Importing CSV, JSONL and parquet files with a column mapping, and writing the result atomically."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tasks.corpus.importers import import_corpus, read_table, write_corpus
from tasks.corpus.schema import CORPUS_COLUMNS, SPLITS
from tasks.errors import InputError

ROWS = [
    {"id": "m1", "body": "hello there", "user": "u1", "thread": "t1", "turn": "1", "tag": "pos", "sex": "f", "yrs": "30"},
    {"id": "m2", "body": "hi back", "user": "u2", "thread": "t1", "turn": "2", "tag": "neg", "sex": "m", "yrs": "41"},
    {"id": "m3", "body": "", "user": "u3", "thread": "t2", "turn": "1", "tag": "pos", "sex": "", "yrs": "22"},
    {"id": "m4", "body": "solo post", "user": "u1", "thread": "", "turn": "", "tag": "neg", "sex": "f", "yrs": ""},
]
MAPPING = dict(text_col="body", author_col="user", group_col="thread", position_col="turn", label_col="tag",
               attrs={"gender": "sex", "age": "yrs"})


def _write(tmp_path, fmt: str):
    df = pd.DataFrame(ROWS)
    path = tmp_path / f"posts.{fmt}"
    if fmt == "csv":
        df.to_csv(path, index=False)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    else:
        df.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_import_with_mapping(tmp_path, fmt):
    path = _write(tmp_path, fmt)
    result = import_corpus(path, id_col="id", **MAPPING)
    corpus = result.corpus
    assert list(corpus.columns) == [*CORPUS_COLUMNS[:2], "author_id", "group_id", "label", "position", "split",
                                    "attr_gender", "attr_age"]
    assert list(corpus["doc_id"]) == ["m1", "m2", "m4"]
    assert corpus.set_index("doc_id").loc["m2", ["author_id", "group_id", "position", "label", "attr_gender",
                                                  "attr_age"]].tolist() == ["u2", "t1", 2, "neg", "m", "41"]
    m4 = corpus.set_index("doc_id").loc["m4"]
    assert pd.isna(m4["group_id"]) and pd.isna(m4["position"]) and pd.isna(m4["attr_age"])
    assert set(corpus["split"]) <= set(SPLITS) and corpus["split"].notna().all()
    assert result.failures[["row", "doc_id", "reason"]].values.tolist() == [[3, "m3", "text is empty"]]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_generated_ids_use_stem_and_row(tmp_path, fmt):
    path = _write(tmp_path, fmt)
    result = import_corpus(path, text_col="body")
    assert list(result.corpus["doc_id"]) == ["posts-000001", "posts-000002", "posts-000004"]
    assert list(result.failures["doc_id"]) == ["posts-000003"]
    again = import_corpus(path, text_col="body")
    pd.testing.assert_frame_equal(result.corpus, again.corpus)


def test_missing_mapped_column_is_fatal(tmp_path):
    path = _write(tmp_path, "csv")
    with pytest.raises(InputError) as info:
        import_corpus(path, text_col="body", attrs={"gender": "gender_col"})
    assert info.value.file == str(path) and info.value.column == "gender_col"
    assert "attr_gender" in str(info.value) and "columns present: id, body" in str(info.value)


def test_invalid_json_line_is_fatal(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"body": "ok"}\n{"body": "unterminated\n', encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_table(path)
    assert info.value.file == str(path) and info.value.row == 2
    assert "line 2 is not valid JSON" in str(info.value)


def test_json_line_that_is_not_an_object_is_fatal(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"body": "ok"}\n["a list"]\n', encoding="utf-8")
    with pytest.raises(InputError, match="line 2 is a JSON list"):
        read_table(path)


def test_unknown_extension_needs_format(tmp_path):
    path = tmp_path / "posts.txt"
    path.write_text("body\nhello\n", encoding="utf-8")
    with pytest.raises(InputError, match="cannot tell the format"):
        read_table(path)
    df, rows = read_table(path, fmt="csv")
    assert df["body"].tolist() == ["hello"] and rows.tolist() == [1]


def test_given_splits_are_kept_and_groups_follow_them(tmp_path):
    path = tmp_path / "s.csv"
    pd.DataFrame({"t": ["a", "b", "c", "d"], "g": ["x", "x", "y", ""], "s": ["test", "", "", "val"]}).to_csv(
        path, index=False)
    corpus = import_corpus(path, text_col="t", group_col="g", split_col="s").corpus
    assert corpus["split"].tolist()[:2] == ["test", "test"]  # the null split of group x follows its given one
    assert corpus["split"].tolist()[3] == "val"


def test_write_corpus_is_atomic_and_round_trips(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b"text\nfine\n\xff\xfe bad\n")
    result = import_corpus(path, text_col="text")
    out = tmp_path / "out" / "corpus.parquet"
    corpus_path, fail_path = write_corpus(result, out)
    assert corpus_path == out and fail_path == tmp_path / "out" / "corpus.failures.parquet"
    assert sorted(p.name for p in out.parent.iterdir()) == ["corpus.failures.parquet", "corpus.parquet"]
    back = pq.read_table(corpus_path).to_pandas()
    assert back["text"].tolist() == ["fine"] and back["split"].notna().all()
    failures = pq.read_table(fail_path).to_pandas()
    assert failures["reason"].tolist() == ["invalid UTF-8 at character 0"] and failures["row"].tolist() == [2]
