"""`synthugc generate`: one strategy on a corpus without Prefect, one row per input, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

CLI = Path(sys.executable).parent / "synthugc"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=dict(os.environ), timeout=300)


@pytest.fixture()
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.csv"
    pd.DataFrame({"id": ["a", "b", "c"], "body": ["I CAN'T believe it!!!", "We will win.", ""],
                  "user": ["u1", "u2", "u1"]}).rename(columns={"id": "doc_id", "body": "text",
                                                              "user": "author_id"}).to_csv(path, index=False)
    return path


def test_generate_writes_one_row_per_valid_input(corpus, tmp_path):
    out = tmp_path / "out" / "synthetic.parquet"
    proc = _run("generate", "--corpus", str(corpus), "--strategy", "stymask", "--set", "intensity=1.0",
                "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "2 ok, 0 failed, 1 input rows failed validation" in proc.stdout
    synthetic = pd.read_parquet(out)
    assert list(synthetic["doc_id"]) == ["a", "b"]
    assert set(synthetic["strategy"]) == {"stymask"} and (synthetic["status"] == "ok").all()
    assert synthetic.loc[0, "text"] != "I CAN'T believe it!!!"  # repeated punctuation and caps are masked


@pytest.mark.parametrize(("args", "expected"), [
    (["--strategy", "nope"], "--strategy 'nope': unknown strategy"),
    (["--strategy", "stymask", "--set", "intensity=7"], "--set intensity: Input should be less than or equal to 1"),
    (["--strategy", "stymask", "--set", "intensity=true"], "--set intensity: Input should be a valid number (got True)"),
    (["--strategy", "dp", "--set", "epsilon=.inf"], "--set epsilon: Input should be a finite number (got inf)"),
    (["--strategy", "stymask", "--set", "intensity"], "expected key=value"),
])
def test_generate_bad_arguments_exit_2_with_one_line(corpus, tmp_path, args, expected):
    proc = _run("generate", "--corpus", str(corpus), "--out", str(tmp_path / "x.parquet"), *args)
    assert proc.returncode == 2
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.parquet").exists()
