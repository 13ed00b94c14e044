"""`synthugc reidentify` and `synthugc profile` on small real files: outputs, numbers, clear errors."""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from tasks.layout import read_stage_tables
from tasks.scores import validate_scores

CLI = Path(sys.executable).parent / "synthugc"
WORDS = {"blue": "sky sea ocean navy azure cobalt", "red": "fire blood rose ruby crimson cherry"}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, env=dict(os.environ), timeout=300)


@pytest.fixture()
def files(tmp_path) -> dict[str, Path]:
    rng = random.Random(7)
    filler = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9))) for _ in range(400)]
    rows = []
    for user in range(6):
        colour = "blue" if user % 2 else "red"
        for post in range(8):
            words = WORDS[colour].split()
            text = f"{words[post % 6]} {' '.join(rng.sample(filler, 12))} {words[(post + 2) % 6]}"
            rows.append({"doc_id": f"u{user}-{post}", "text": text, "author_id": f"u{user}", "group_id": f"g{user}",
                         "split": "test" if post >= 6 else "train", "attr_colour": colour})
    corpus = pd.DataFrame(rows)
    synthetic = corpus.assign(strategy="copy", variant="first", status="ok")[
        ["doc_id", "strategy", "variant", "text", "author_id", "group_id", "split", "status"]]
    paths = {"corpus": tmp_path / "corpus.parquet", "histories": tmp_path / "histories.parquet",
             "synthetic": tmp_path / "synthetic.parquet"}
    corpus.to_parquet(paths["corpus"])
    corpus[["author_id", "text"]].to_parquet(paths["histories"])
    synthetic.to_parquet(paths["synthetic"])
    return paths


def test_reidentify_copies_attributes_every_timeline(files, tmp_path):
    proc = _run("reidentify", "--histories", str(files["histories"]), "--synthetic", str(files["synthetic"]),
                "--out", str(tmp_path / "reid"), "--attack", "minhash")
    assert proc.returncode == 0, proc.stderr
    [summary] = json.loads((tmp_path / "reid" / "summary.json").read_text())
    assert summary["accuracy"] == 1.0 and summary["n_timelines"] == 6
    assert summary["chance"] == pytest.approx(1 / 6)
    ref = stats.binomtest(6, 6).proportion_ci(0.95, method="wilson")  # 6 of 6 timelines: [0.61, 1]
    assert (summary["accuracy_at_1_ci_low"], summary["accuracy_at_1_ci_high"]) == pytest.approx((ref.low, ref.high))
    assert "n=6 timelines, accuracy@1 1.0000 [0.6097, 1.0000]" in proc.stdout and "residual risk over chance" in proc.stdout
    assert len(pd.read_parquet(tmp_path / "reid" / "reidentification.parquet")) == 6

    released = tmp_path / "released.parquet"  # the test-split posts only: the others stay the adversary's
    synth = pd.read_parquet(files["synthetic"])
    synth[synth["split"] == "test"].to_parquet(released)
    proc = _run("reidentify", "--histories", str(files["corpus"]), "--synthetic", str(released),
                "--out", str(tmp_path / "all"), "--attack", "all", "--adversary", "both", "--set", "stylometric.mode=exact")
    assert proc.returncode == 0, proc.stderr
    tables = read_stage_tables(tmp_path / "all", "reidentify")  # the flow's file names and long score table
    scores = tables["scores"]
    validate_scores(scores)
    accuracy = scores[scores["metric"] == "reid_accuracy"]
    assert set(zip(accuracy["attack"], accuracy["adversary"], strict=True)) >= {
        ("minhash", "full"), ("minhash", "disjoint"), ("stylometric", "full"), ("stylometric", "disjoint")}
    by = accuracy[accuracy["strategy"] == "copy"].set_index(["attack", "adversary"])["value"]
    assert by[("embedding", "full")] != by[("embedding", "full")]  # left out on CPU here: a row without a value
    reasons = scores.loc[(scores["attack"] == "embedding") & (scores["strategy"] == "copy"), "reason"]
    assert reasons.str.startswith("not run: ").all() and "attack left out: embedding" in proc.stderr
    by = by.dropna()
    chance = accuracy.loc[accuracy["strategy"] == "chance", "value"]
    assert chance.tolist() == pytest.approx([1 / 6] * len(by))
    assert by[("minhash", "full")] == 1.0 and by[("stylometric", "full")] == 1.0
    assert by[("minhash", "disjoint")] < 1.0  # the copies are no longer in the history
    mine = scores[(scores["strategy"] == "copy") & scores["value"].notna()]
    for row in mine[mine["metric"].isin(["reid_accuracy", "reid_accuracy_at_10"])].itertuples():
        ref = stats.binomtest(round(row.value * row.n), row.n).proportion_ci(0.95, method="wilson")
        assert (row.ci_low, row.ci_high) == pytest.approx((ref.low, ref.high), abs=1e-9)
    mrr = mine[mine["metric"] == "reid_mrr"]
    assert ((mrr["ci_low"] <= mrr["value"]) & (mrr["value"] <= mrr["ci_high"])).all()
    risk = mine[mine["metric"] == "reid_residual_risk"].set_index(["attack", "adversary"])
    assert risk.loc[("minhash", "full"), "value"] > 0  # every copy found: far above chance
    assert scores.loc[scores["attack"] == "stylometric", "signature"].str.contains("mode:exact").all()
    per = tables["per_timeline"]
    assert len(per) == 6 * len(by) and {"attack", "adversary", "rank", "reciprocal_rank"} <= set(per.columns)

    proc = _run("reidentify", "--histories", str(files["histories"]), "--synthetic", str(files["synthetic"]),
                "--out", str(tmp_path / "runs"), "--timeline-posts", "3", "--attack", "minhash")
    assert proc.returncode == 0, proc.stderr
    [runs] = json.loads((tmp_path / "runs" / "summary.json").read_text())
    assert runs["n_timelines"] == 6 * 3  # 8 posts per timeline: runs of 3, 3 and 2
    per = pd.read_parquet(tmp_path / "runs" / "reidentification.parquet")
    assert sorted(per.loc[per["author_id"] == "u0", "n_posts"]) == [2, 3, 3]

    proc = _run("reidentify", "--histories", str(tmp_path / "missing.parquet"), "--synthetic",
                str(files["synthetic"]), "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "missing.parquet" in proc.stderr and "Traceback" not in proc.stderr
    proc = _run("reidentify", "--histories", str(files["histories"]), "--synthetic", str(files["synthetic"]),
                "--out", str(tmp_path / "x"), "--adversary", "disjoint", "--attack", "minhash")
    assert proc.returncode == 2 and "doc_id" in proc.stderr and "Traceback" not in proc.stderr
    proc = _run("reidentify", "--histories", str(files["histories"]), "--synthetic", str(files["synthetic"]),
                "--out", str(tmp_path / "x"), "--attack", "ngram")
    assert proc.returncode == 2 and "attack must be one of" in proc.stderr
    proc = _run("reidentify", "--histories", str(files["histories"]), "--synthetic", str(files["synthetic"]),
                "--out", str(tmp_path / "x"), "--set", "minhash.kk=3")
    assert proc.returncode == 2 and "--set minhash.kk: unknown parameter" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()


def test_profile_scores_original_and_synthetic(files, tmp_path):
    proc = _run("profile", "--corpus", str(files["corpus"]), "--attr", "colour", "--synthetic",
                str(files["synthetic"]), "--out", str(tmp_path / "prof"))
    assert proc.returncode == 0, proc.stderr
    scores = pd.read_parquet(tmp_path / "prof" / "scores.parquet").set_index("set")
    assert scores.loc["original", "accuracy"] >= scores.loc["original", "chance"] + 0.3  # colour words leak it
    assert scores.loc["copy", "reduction"] == 0.0  # a verbatim copy protects nothing
    for row in scores.itertuples():
        ref = stats.binomtest(int(row.n_correct), int(row.n_units)).proportion_ci(0.95, method="wilson")
        assert (row.accuracy_ci_low, row.accuracy_ci_high) == pytest.approx((ref.low, ref.high), abs=1e-9)
        assert row.macro_f1_ci_low <= row.macro_f1 <= row.macro_f1_ci_high
    assert "accuracy_ci_low" in proc.stdout and "advantage" in proc.stdout
    top = pd.read_parquet(tmp_path / "prof" / "top_words.parquet")
    assert set(top["word"].head(40)) & set(WORDS["blue"].split() + WORDS["red"].split())

    proc = _run("profile", "--corpus", str(files["corpus"]), "--attr", "age", "--out", str(tmp_path / "y"))
    assert proc.returncode == 2 and "age" in proc.stderr and "Traceback" not in proc.stderr


def test_utility_command_writes_runs_and_tables(files, tmp_path):
    proc = _run("utility", "--corpus", str(files["corpus"]), "--synthetic", str(files["synthetic"]),
                "--out", str(tmp_path / "util"), "--label", "attr_colour", "--seeds", "0,1", "--fractions", "0.5,1.0")
    assert proc.returncode == 0, proc.stderr
    runs = pd.read_parquet(tmp_path / "util" / "utility_runs.parquet")
    assert set(runs["setting"]) == {"baseline", "substitution", "augmentation"}
    assert len(runs) == 2 * (2 + 1 + 2)  # seeds x (baseline at 2 fractions, substitution, augmentation at 2)
    ok = runs[runs["status"] == "ok"]
    assert len(ok) == len(runs) and ok["macro_f1"].between(0, 1).all()
    # a verbatim copy trains exactly the real model: substitution equals the full baseline
    full = ok[(ok["setting"] == "baseline") & (ok["fraction"] == 1.0)].sort_values("seed")["macro_f1"].to_numpy()
    copy = ok[ok["setting"] == "substitution"].sort_values("seed")["macro_f1"].to_numpy()
    assert full == pytest.approx(copy)

    proc = _run("utility", "--corpus", str(files["corpus"]), "--synthetic", str(files["synthetic"]),
                "--out", str(tmp_path / "x"), "--task", "nope")
    assert proc.returncode == 2 and "--task" in proc.stderr
