"""The protect loop's ``profiling`` budget figure on simulated timelines (tasks/corpus/simulate.py) whose authors
fall in two regions, each writing its own handful of words: the judge classifier infers the region at round 0
(its advantage over the majority class well above 0, equal to the residual risk computed by hand from its
predictions, which an independently trained classifier reproduces); masking the feedback classifier's words
brings its accuracy down; histories without the attribute exit 2 naming the column."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tasks.budgets import PROTECT_FIGURES, parse_budget
from tasks.corpus.importers import read_corpus
from tasks.corpus.simulate import simulate_histories, simulate_synthetic
from tasks.errors import ConfigError
from tasks.intervals import residual_risk
from tasks.privacy.audit import attack_timelines
from tasks.privacy.history_split import split_histories_by_author
from tasks.protect.files import PROFILING_ATTACK
from tasks.protect.loop import ProtectSettings, protect_corpus
from tasks.protect.moves import MASK_EVIDENCE, Move
from tasks.training.classifiers import LinearTextClassifier

pytestmark = pytest.mark.slow
REGION_WORDS = {"coast": ["surfing", "beach", "waves", "harbour", "tide"],
                "alps": ["skiing", "snow", "glacier", "chalet", "summit"]}
ATTACK = PROFILING_ATTACK + "region"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """60 simulated users, every other one from the coast; 60% of a user's posts carry one of its region's words."""
    root = tmp_path_factory.mktemp("protect-profiling")
    raw = pd.read_parquet(simulate_histories(60, 3600, seed=1, out_path=root / "raw.parquet"))
    region = {a: ("coast", "alps")[i % 2] for i, a in enumerate(sorted(raw["author_id"].unique()))}
    rng = np.random.default_rng(3)

    def mark(text: str, author: str) -> str:
        words = text.split(" ")
        if rng.random() < 0.6:
            words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(REGION_WORDS[region[author]])))
        return " ".join(words)

    histories = raw.assign(text=[mark(t, a) for t, a in zip(raw["text"], raw["author_id"], strict=True)],
                           attr_region=raw["author_id"].map(region))
    histories.to_parquet(root / "histories.parquet", index=False)
    histories.drop(columns="attr_region").to_parquet(root / "histories-no-attr.parquet", index=False)
    corpus = simulate_synthetic(histories, n_timelines=30, n_posts=180, rewrite_strength=0.0, seed=2)
    corpus.assign(attr_region=corpus["author_id"].map(region)).to_parquet(root / "corpus.parquet", index=False)
    return {"root": root, "histories": root / "histories.parquet", "no_attr": root / "histories-no-attr.parquet",
            "corpus": root / "corpus.parquet"}


def _protect(world: dict[str, Path], max_rounds: int, on_fail: str = "drop"):
    # round 0 starts with mask-evidence (no evidence yet: nothing changes), sparing the pseudonymiser's NER model;
    # a round masks every document of a caught timeline (the default docs_per_round); the simulated posts are word
    # lists, not sentences, so neither the verbatim bound nor the fluency floor is what this run is about
    settings = ProtectSettings(budget="profiling<=0.05,verbatim<=1", start=MASK_EVIDENCE,
                               ladder=(Move(MASK_EVIDENCE),) * 2, max_rounds=max_rounds, meaning_floors=(0.5,),
                               fluency_floor=None, decide_on="point", on_fail=on_fail)
    return protect_corpus(read_corpus(world["corpus"]).corpus, str(world["histories"]), settings,
                          cache_dir=world["root"] / "cache", corpus_fingerprint="corpus",
                          histories_fingerprint="histories")


def _region_words(texts: pd.Series) -> int:
    words = {w for ws in REGION_WORDS.values() for w in ws}
    return sum(w in words for t in texts for w in t.split())


def test_the_judge_infers_the_region_at_round_0_and_the_figure_is_its_residual_risk_over_the_majority(world):
    result = _protect(world, max_rounds=0, on_fail="keep")  # every timeline kept: the judge's figure is round 0's
    figure = result.summary["judge_figures"]["profiling"]
    assert figure["attack"] == ATTACK and figure["value"] > 0.6 and figure["ci_low"] > 0.3, figure
    assert not result.met and "profiling" in result.summary["verdict"]

    attacks = pd.read_parquet(next((world["root"] / "cache").glob("*/round-000.attacks.parquet")))
    judge = attacks[(attacks["role"] == "judge") & (attacks["attack"] == ATTACK)]
    assert len(judge) == figure["n"] == 30  # one row per protected timeline
    y, pred = judge["y_true"].to_numpy(str), judge["y_pred"].to_numpy(str)
    by_hand = residual_risk(int((y == pred).sum()), len(y), int(pd.Series(y).value_counts().max()), len(y))
    assert (figure["value"], figure["ci_low"], figure["ci_high"]) == pytest.approx(
        (by_hand.value, by_hand.ci_low, by_hand.ci_high))
    assert figure["accuracy"] == pytest.approx((y == pred).mean())

    # the same predictions from a classifier trained here on the judge's half, the corpus's documents left out
    first, second = world["root"] / "first.parquet", world["root"] / "second.parquet"
    split_histories_by_author(world["histories"], first, second, seed=0)
    corpus = pd.read_parquet(world["corpus"])
    half = pd.read_parquet(second)
    half = half[~half["doc_id"].isin(corpus["doc_id"])]
    units = half.groupby("author_id", sort=True).agg(text=("text", "\n".join), y=("attr_region", "first"))
    model = LinearTextClassifier(seed=0, **ProtectSettings().profiling_judge).fit(units["text"], units["y"])
    timelines = attack_timelines(corpus.assign(status="ok")).groupby("group_id", sort=False)["text"].agg("\n".join)
    expected = pd.Series(model.predict(timelines.tolist()), index=timelines.index)
    assert (expected.reindex(judge["group_id"]).to_numpy(str) == pred).all()

    # the certificate: the judge's model trained on the full histories (both halves, the corpus left out), which
    # is what decides the verdict and what a release states
    certified = result.summary["figures"]["profiling"]
    certificate = result.rounds[(result.rounds["role"] == "certificate") & (result.rounds["attack"] == ATTACK)]
    assert certified["attack"] == ATTACK and len(certificate) == 1 and certified["n"] == 30
    full = pd.read_parquet(world["histories"])
    full = full[~full["doc_id"].isin(corpus["doc_id"])]
    units = full.groupby("author_id", sort=True).agg(text=("text", "\n".join), y=("attr_region", "first"))
    model = LinearTextClassifier(seed=0, **ProtectSettings().profiling_judge).fit(units["text"], units["y"])
    y_true = corpus.groupby("author_id")["attr_region"].first()
    authors = attack_timelines(corpus.assign(status="ok")).groupby("group_id", sort=False)["author_id"].first()
    right = model.predict(timelines.tolist()) == y_true.reindex(authors.reindex(timelines.index)).to_numpy(str)
    assert certificate["accuracy_at_1"].iloc[0] == pytest.approx(right.mean())


def test_masking_the_feedback_classifiers_words_brings_its_accuracy_down(world):
    result = _protect(world, max_rounds=1)
    rounds = result.rounds[result.rounds["attack"] == ATTACK].set_index(["role", "round"])["accuracy_at_1"]
    assert rounds["feedback", 0] > 0.9 and rounds["feedback", 1] < 0.5, rounds
    assert rounds["judge", 1] < rounds["judge", 0], rounds
    # the judge's other model is not fooled as much as the classifier the masking followed, and the verdict says so
    assert rounds["judge", 1] - rounds["feedback", 1] > 0.2, rounds
    assert "the judge classifier infers region far more often" in result.summary["verdict"]
    corpus = pd.read_parquet(world["corpus"])
    moved = result.table[result.table["round"] == 1]
    sources = corpus.set_index("doc_id").loc[moved["doc_id"], "text"]
    assert len(moved) and _region_words(moved["text"]) < _region_words(sources) / 4  # the evidence was masked
    assert set(result.summary["figures"]) == {"reidentification", "reidentification_risk", "profiling", "verbatim"}


def test_a_profiling_bound_on_histories_without_the_attribute_exits_2_naming_the_column(world):
    out = world["root"] / "no-attr" / "P.parquet"
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "protect", "--corpus", str(world["corpus"]),
                           "--histories", str(world["no_attr"]), "--out", str(out), "--budget",
                           "reidentification<=0.10,profiling<=0.05"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "SYNTHUGC_CACHE_DIR": str(world["root"] / "c2")})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"synthugc: error: file {world['no_attr']}, column 'attr_region': a profiling bound trains its classifiers "
        f"on the histories' values of the corpus's attribute, and the histories lack the column"), proc.stderr
    assert not out.exists()


def test_a_profiling_bound_on_a_corpus_without_attributes_is_refused(world):
    corpus = read_corpus(world["corpus"]).corpus.drop(columns="attr_region")
    with pytest.raises(ConfigError, match=r"profiling bound needs the corpus's sensitive attributes"):
        protect_corpus(corpus, str(world["histories"]), ProtectSettings(budget="profiling<=0.05"),
                       cache_dir=world["root"] / "c3", corpus_fingerprint="x", histories_fingerprint="y")


def test_an_unknown_figure_lists_profiling_among_the_known():
    assert "profiling" in PROTECT_FIGURES
    with pytest.raises(ConfigError) as caught:
        parse_budget("profile<=0.05", "--budget", protect=True)
    assert str(caught.value) == f"--budget: unknown budget figure 'profile'; known: {', '.join(PROTECT_FIGURES)}"
    assert [(b.column, b.limit) for b in parse_budget("reidentification<=0.10,profiling<=0.05", "--budget", protect=True)] == [
        ("reidentification", 0.10), ("profiling", 0.05)]
