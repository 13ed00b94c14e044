"""Attribute profiling on a hand-made corpus where the attribute is given away by planted words; a
'synthetic' rewrite without those words must lose the profiling accuracy."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from tasks.errors import InputError
from tasks.privacy.profiling import BIN_EDGES, profile_attribute, word_bin_shares
from tasks.training.classifiers import LinearTextClassifier

CUES = {"f": ["husband", "hubby", "boyfriend"], "m": ["wife", "girlfriend", "buddy"]}
FILLER = ["we", "went", "to", "the", "store", "and", "had", "lunch", "then", "a", "movie", "it", "was", "nice",
          "late", "home", "good", "day"]


def make_corpus(n_train: int = 120, n_test: int = 60, seed: int = 0, posts_per_author: int = 3) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for split, n in (("train", n_train), ("test", n_test)):
        for i in range(n):
            author = f"{split}-a{i // posts_per_author}"
            gender = "f" if (i // posts_per_author) % 2 == 0 else "m"
            words = [*rng.choices(FILLER, k=6), rng.choice(CUES[gender])]
            rng.shuffle(words)
            rows.append({"doc_id": f"{split}-{i}", "text": " ".join(words), "author_id": author,
                         "group_id": author, "position": i % posts_per_author, "split": split,
                         "label": None, "attr_gender": gender})
    return pd.DataFrame(rows)


def rewrite(corpus: pd.DataFrame, strip: bool) -> pd.DataFrame:
    """Synthetic version of the test split: the planted words replaced by a neutral one (strip) or copied."""
    test = corpus[corpus["split"] == "test"]
    cues = {w for ws in CUES.values() for w in ws}
    texts = [" ".join("partner" if (strip and w in cues) else w for w in t.split()) for t in test["text"]]
    return pd.DataFrame({"doc_id": test["doc_id"].to_numpy(), "strategy": "x", "variant": "first", "text": texts,
                         "status": "ok", "reason": None})


@pytest.fixture(scope="module")
def corpus() -> pd.DataFrame:
    return make_corpus()


def test_stripped_cues_reduce_profiling_accuracy(corpus):
    res = profile_attribute(corpus, "gender", synthetic={"strip": rewrite(corpus, True),
                                                         "copy": rewrite(corpus, False)}, seed=0)
    s = res.scores.set_index("set")
    assert list(s.index) == ["original", "strip", "copy"]
    assert s.loc["original", "accuracy"] > 0.9
    assert s.loc["strip", "accuracy"] < 0.7
    assert s.loc["strip", "reduction"] > 0.25
    assert s.loc["strip", "reduction"] == pytest.approx(s.loc["original", "accuracy"] - s.loc["strip", "accuracy"])
    assert s.loc["copy", "reduction"] == 0 and s.loc["copy", "accuracy"] == s.loc["original", "accuracy"]
    assert s.loc["strip", "advantage_removed"] > 0.5
    # chance: majority-class rate on the test units (30 f / 30 m here, so 0.5), and 1/n_classes
    assert s.loc["original", "chance"] == 0.5 and s.loc["original", "uniform_rate"] == 0.5
    assert res.chance_definition.startswith("majority-class rate")
    assert (s["coverage"] == 1).all()

    # the original score equals a direct fit of the same classifier on the train split
    train, test = corpus[corpus["split"] == "train"], corpus[corpus["split"] == "test"]
    ref = LinearTextClassifier(seed=0).fit(train["text"], train["attr_gender"])
    assert s.loc["original", "accuracy"] == pytest.approx(np.mean(ref.predict(test["text"]) == test["attr_gender"]))

    from sklearn.metrics import f1_score
    p = res.predictions[res.predictions["set"] == "strip"]
    assert s.loc["strip", "macro_f1"] == pytest.approx(
        f1_score(p["y_true"].tolist(), p["y_pred"].tolist(), average="macro"))


def test_top_words_and_weight_bins(corpus):
    res = profile_attribute(corpus, "attr_gender", synthetic={"strip": rewrite(corpus, True)}, top_k=3)
    top = res.top_words
    assert set(top[top["class"] == "f"]["word"]) == set(CUES["f"])
    assert set(top[top["class"] == "m"]["word"]) == set(CUES["m"])
    bins = res.word_bins
    sums = bins.groupby(["set", "class"])["share"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0)
    assert list(bins[bins["set"] == "original"]["bin"]) == ["clear f", "slightly f", "neutral", "slightly m",
                                                            "clear m"]
    clear = bins[bins["bin"].str.startswith("clear")].groupby("set")["share"].sum()
    # one planted word (all in the clear bins) in every 7-word text; 'partner' is out of vocabulary (neutral)
    assert clear["original"] - clear["strip"] == pytest.approx(1 / 7)
    neutral = bins[bins["bin"] == "neutral"].set_index("set")["share"]
    assert neutral["strip"] - neutral["original"] == pytest.approx(1 / 7)


def test_weight_bins_are_right_closed():
    clf = LinearTextClassifier(seed=0).fit(["aa", "bb", "aa", "bb"], ["x", "y", "x", "y"])
    w = clf.word_weights()["y"]
    edges = (float(w["aa"]), 0.0, float(w["bb"]))  # each word sits exactly on an edge
    shares = word_bin_shares(clf, ["aa bb bb zz"], edges=edges)
    assert list(shares["n_words"]) == [1, 1, 2, 0]  # aa in (-inf, w_aa]; zz (weight 0) in (w_aa, 0]
    assert shares["lower"].iloc[0] == -np.inf and shares["upper"].iloc[-1] == np.inf
    assert len(BIN_EDGES) == 4


def test_counts_coverage_status_and_variants(corpus):
    c = corpus.copy()
    c.loc[[0, 1, 2], "attr_gender"] = None  # train docs without the attribute: skipped and counted
    c.loc[c.index[-1], "attr_gender"] = None  # one test doc too
    syn = rewrite(corpus, True)
    syn.loc[:9, "status"] = "failed"  # failed rows do not count
    second = rewrite(corpus, False).assign(variant="second")
    res = profile_attribute(c, "gender", synthetic={"s": pd.concat([syn, second])})
    assert res.counts["n_train_missing_attr"] == 3 and res.counts["n_test_missing_attr"] == 1
    assert res.counts["n_train_units"] == 117 and res.counts["n_test_units"] == 59
    s = res.scores.set_index("set")
    assert list(s.index) == ["original", "s/first", "s/second"]
    assert s.loc["s/first", "n_units"] == 49  # 60 - 10 failed - 1 without attribute
    assert s.loc["s/first", "coverage"] == pytest.approx(49 / 59)
    assert s.loc["s/second", "reduction"] == 0
    # the label of a synthetic row is the real document's, never a column of the synthetic table
    p = res.predictions[res.predictions["set"] == "s/first"].set_index("unit")
    assert (p["y_true"] == c.set_index("doc_id").loc[p.index, "attr_gender"]).all()


def test_author_level(corpus):
    res = profile_attribute(corpus, "gender", synthetic={"strip": rewrite(corpus, True)}, level="author")
    s = res.scores.set_index("set")
    assert res.counts["n_test_units"] == 20 and res.counts["n_train_units"] == 40
    assert s.loc["original", "accuracy"] == 1.0
    assert s.loc["strip", "reduction"] > 0.2
    assert set(res.predictions["unit"]) == {f"test-a{i}" for i in range(20)}


def test_errors(corpus):
    with pytest.raises(InputError, match="attr_age"):
        profile_attribute(corpus, "age")
    with pytest.raises(InputError, match="no test-split document"):
        profile_attribute(corpus.assign(split="train"), "gender")
    with pytest.raises(InputError, match="'text'"):
        profile_attribute(corpus, "gender", synthetic={"bad": pd.DataFrame({"doc_id": ["test-1"]})})
    with pytest.raises(ValueError, match="model"):
        profile_attribute(corpus, "gender", model="svm")
    # a synthetic set without any test document: NaN scores, not a crash
    res = profile_attribute(corpus, "gender", synthetic={"none": rewrite(corpus, True).iloc[:0]})
    assert res.scores.set_index("set").loc["none", "n_units"] == 0
    assert np.isnan(res.scores.set_index("set").loc["none", "accuracy"])


@pytest.mark.slow
def test_encoder_profiling(corpus):
    res = profile_attribute(corpus, "gender", synthetic={"strip": rewrite(corpus, True)}, model="encoder",
                            encoder_params=dict(epochs=2, batch_size=16, lr=1e-4, num_threads=1))
    s = res.scores.set_index("set")
    assert s.loc["original", "accuracy"] > 0.7
    assert s.loc["strip", "reduction"] > 0
    assert "finetuned:" in res.signature and not res.top_words.empty  # word tables from the linear model
