"""Shared text classifiers: the linear TF-IDF model against a direct scikit-learn pipeline, input
validation, readable weights, and fine-tuning the MiniLM backbone on a toy task (slow)."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from tasks.training.classifiers import EncoderClassifier, LinearTextClassifier, TrainingDataError

POS = ["great", "wonderful", "lovely", "excellent", "amazing", "fantastic"]
NEG = ["terrible", "awful", "horrible", "dreadful", "disgusting", "miserable"]
FILLER = ["the", "movie", "meal", "day", "trip", "show", "book", "was", "really", "quite", "today", "our"]


def toy(n: int, seed: int, noise_words: int = 4) -> tuple[list[str], list[str]]:
    """Sentiment-like texts: one cue word from the class's list among random filler words."""
    rng = random.Random(seed)
    texts, labels = [], []
    for i in range(n):
        label = "pos" if i % 2 else "neg"
        words = [*rng.choices(FILLER, k=noise_words), rng.choice(POS if label == "pos" else NEG)]
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def test_linear_learns_and_equals_sklearn_pipeline():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    x, y = toy(200, 0)
    xt, yt = toy(100, 1)
    clf = LinearTextClassifier(C=3.0, seed=0).fit(x, y)
    pred = clf.predict(xt)
    assert np.mean(pred == np.asarray(yt)) > 0.9  # chance is 0.5
    ref = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b"),
                        LogisticRegression(C=3.0, max_iter=1000, random_state=0)).fit(x, y)
    assert list(pred) == list(ref.predict(xt))
    np.testing.assert_allclose(clf.predict_proba(xt), ref.predict_proba(xt), rtol=1e-9, atol=1e-12)
    assert list(clf.classes_) == ["neg", "pos"]


def test_linear_top_words_binary_and_multiclass():
    x, y = toy(200, 0)
    clf = LinearTextClassifier(seed=0).fit(x, y)
    top = clf.top_weighted_words(6)
    assert set(top.columns) == {"class", "rank", "word", "weight"}
    assert set(top[top["class"] == "pos"]["word"]) == set(POS)
    assert set(top[top["class"] == "neg"]["word"]) == set(NEG)
    assert (top.groupby("class")["weight"].apply(lambda w: w.is_monotonic_decreasing)).all()
    weights = clf.word_weights()
    np.testing.assert_allclose(weights["neg"], -weights["pos"])  # binary: one coefficient row, mirrored
    assert not weights.index.str.contains(" ").any()  # unigrams only by default

    # multiclass: each class's own coefficient row
    texts = [f"{w} filler {i}" for i in range(60) for w in ("apple", "banana", "cherry")][:150]
    labels = [t.split()[0] for t in texts]
    multi = LinearTextClassifier(seed=0).fit(texts, labels)
    top3 = multi.top_weighted_words(1)
    assert dict(zip(top3["class"], top3["word"], strict=True)) == {"apple": "apple", "banana": "banana",
                                                                   "cherry": "cherry"}


def test_missing_labels_skipped_and_counted():
    x, y = toy(40, 0)
    labels = pd.Series(y, dtype=object)
    labels.iloc[[0, 3, 5]] = [None, np.nan, pd.NA]
    clf = LinearTextClassifier().fit(x, labels)
    assert clf.n_skipped_ == 3 and clf.n_train_ == 37
    full = LinearTextClassifier().fit([t for i, t in enumerate(x) if i not in (0, 3, 5)],
                                      [v for i, v in enumerate(y) if i not in (0, 3, 5)])
    assert list(clf.predict(x)) == list(full.predict(x))


@pytest.mark.parametrize(
    ("texts", "labels", "message"),
    [
        (["a", "b"], ["x"], "differ in length"),
        (["a", 3.0, "c"], ["x", "y", "x"], r"texts\[1\] is float"),
        (["a", "b"], ["x", "x"], "at least two classes"),
        (["a", "b", "c"], ["x", None, None], "at least two classes"),
        ("one string", ["x"], "single str"),
    ],
)
def test_input_validation_names_the_problem(texts, labels, message):
    with pytest.raises(TrainingDataError, match=message):
        LinearTextClassifier().fit(texts, labels)
    with pytest.raises(ValueError, match=message):  # sklearn-style: a ValueError
        LinearTextClassifier().fit(texts, labels)


def test_not_fitted_and_bad_params():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        LinearTextClassifier().predict(["a"])
    with pytest.raises(NotFittedError):
        EncoderClassifier().predict(["a"])
    with pytest.raises(ValueError, match="epochs"):
        EncoderClassifier(epochs=0)
    with pytest.raises(ValueError, match="lr"):
        EncoderClassifier(lr=0)


@pytest.mark.slow
def test_encoder_finetunes_and_is_deterministic():
    x, y = toy(80, 0, noise_words=2)
    xt, yt = toy(40, 1, noise_words=2)
    params = dict(epochs=2, batch_size=16, lr=1e-4, seed=3, num_threads=1)
    a = EncoderClassifier(**params).fit(x, y)
    acc = np.mean(a.predict(xt) == np.asarray(yt))
    assert acc >= 0.75, acc  # chance 0.5
    assert a.history_[-1] < a.history_[0]
    b = EncoderClassifier(**params).fit(x, y)
    np.testing.assert_array_equal(a.predict_proba(xt), b.predict_proba(xt))
    assert list(a.classes_) == ["neg", "pos"] and a.predict_proba(xt).shape == (40, 2)
    c = EncoderClassifier(**{**params, "seed": 4}).fit(x, y)
    assert not np.array_equal(a.predict_proba(xt), c.predict_proba(xt))
