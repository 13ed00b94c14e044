"""Shared text classifiers: the linear TF-IDF model against a direct scikit-learn pipeline (and its choice
of C / class weighting against a hand-run grid), input validation, readable weights, and fine-tuning the
MiniLM backbone on a toy task with early stopping (slow)."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from tasks.training.classifiers import (
    C_GRID,
    CLASS_WEIGHT_GRID,
    EncoderClassifier,
    LinearTextClassifier,
    TrainingDataError,
)

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


def skewed_toy(n: int, seed: int, share: float = 0.15) -> tuple[list[str], list[str]]:
    """A rare class ("spam", ``share`` of rows) with weak, overlapping cues: regularisation and class
    weighting matter here (the toy() task is solved at any C)."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        label = "spam" if rng.random() < share else "ham"
        cue = POS if label == "spam" else NEG
        words = [*rng.choices(FILLER, k=6), *rng.choices(cue + POS[:2], k=2)]
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_auto_C_and_class_weight_equal_a_hand_run_grid_on_the_validation_split(loss):
    """C='auto' picks the (C, class_weight) of best validation macro-F1 (first in grid order on ties) and
    predicts as a direct scikit-learn fit with them; the grid is re-run here with sklearn's f1_score."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import LinearSVC

    x, y = skewed_toy(300, 0)
    xv, yv = skewed_toy(100, 1)
    xt, _ = skewed_toy(100, 2)

    def model(c, w):
        if loss == "hinge":
            return LinearSVC(C=c, class_weight=w, max_iter=1000, random_state=0)
        return LogisticRegression(C=c, class_weight=w, max_iter=1000, random_state=0)

    def pipe(c, w):
        return make_pipeline(TfidfVectorizer(ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b"), model(c, w))

    grid = [(c, w) for c in C_GRID for w in CLASS_WEIGHT_GRID]
    scores = [f1_score(yv, pipe(c, w).fit(x, y).predict(xv), average="macro") for c, w in grid]
    best = grid[int(np.argmax(scores))]
    clf = LinearTextClassifier(C="auto", class_weight="auto", loss=loss).fit(x, y, val_texts=xv, val_labels=yv)
    assert (clf.C_, clf.class_weight_, clf.selected_by_) == (*best, "validation")
    np.testing.assert_allclose(clf.selection_["macro_f1"].to_numpy(), scores, atol=1e-12)
    assert list(clf.predict(xt)) == list(pipe(*best).fit(x, y).predict(xt))
    assert len(set(np.round(scores, 6))) > 1  # the grid matters on this task


def test_auto_without_a_usable_validation_split_cross_validates():
    x, y = skewed_toy(200, 0)
    one_class = LinearTextClassifier(C="auto").fit(x, y, val_texts=["a b", "c d"], val_labels=["ham", "ham"])
    assert one_class.selected_by_ == "cross-validation" and one_class.C_ in C_GRID
    assert one_class.class_weight_ is None  # class_weight was not 'auto': fixed
    fixed = LinearTextClassifier(C=2.0).fit(x, y, val_texts=x[:20], val_labels=y[:20])
    assert (fixed.C_, fixed.selected_by_) == (2.0, "fixed")
    tiny = LinearTextClassifier(C="auto").fit(["a b", "c d", "a c"], ["x", "y", "x"])
    assert (tiny.C_, tiny.selected_by_) == (1.0, "default")  # a class of one row: nothing to validate on
    with pytest.raises(AttributeError, match="logistic"):
        LinearTextClassifier(loss="hinge").fit(x, y).predict_proba(x[:2])
    with pytest.raises(ValueError, match="loss"):
        LinearTextClassifier(loss="squared")
    with pytest.raises(ValueError, match="auto"):
        LinearTextClassifier(C="best")


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


@pytest.mark.slow
def test_encoder_early_stopping_keeps_the_best_validation_epoch():
    from sklearn.metrics import f1_score

    x, y = toy(64, 0, noise_words=2)
    xv, yv = toy(32, 5, noise_words=2)
    clf = EncoderClassifier(epochs=3, batch_size=16, lr=1e-4, seed=3, num_threads=1, patience=1).fit(
        x, y, val_texts=xv, val_labels=yv)
    scores = clf.val_history_
    assert 1 <= len(scores) <= 3 and len(clf.history_) == len(scores)
    assert clf.best_epoch_ == int(np.argmax(scores)) + 1  # first best epoch
    # the weights kept are the best epoch's: the final model scores the best validation macro-F1
    assert f1_score(yv, clf.predict(xv), average="macro") == pytest.approx(max(scores))
    if len(scores) < 3:  # stopped early: the last epoch did not improve on the best
        assert scores[-1] <= max(scores[:-1])
    with pytest.raises(ValueError, match="patience"):
        EncoderClassifier(patience=0)
