"""Utility settings (seed 000 §5): the training sets of each setting, failure isolation, summaries laid out
like Tables 5 and 7, and macro F1 against a direct scikit-learn fit."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import f1_score

from tasks.corpus.splits import undersample
from tasks.errors import ConfigError
from tasks.training.classifiers import LinearTextClassifier
from tasks.training.utility import (
    ORIGINAL,
    design,
    run_post_utility,
    run_utility,
    summarize_utility,
    synthetic_view,
    utility_tables,
)

POS = ["great", "wonderful", "lovely", "excellent"]
NEG = ["terrible", "awful", "horrible", "dreadful"]
FILLER = ["the", "movie", "meal", "day", "trip", "was", "really", "quite", "today", "our"]


def make_corpus(n: int = 120, seed: int = 0) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = "pos" if i % 2 else "neg"
        words = [*rng.choices(FILLER, k=4), rng.choice(POS if label == "pos" else NEG)]
        rng.shuffle(words)
        split = "train" if i < 0.7 * n else ("val" if i < 0.8 * n else "test")
        rows.append({"doc_id": f"d{i}", "text": " ".join(words), "author_id": f"u{i % 7}", "group_id": None,
                     "position": None, "split": split, "label": label})
    return pd.DataFrame(rows)


def synthetic(corpus: pd.DataFrame, strategy: str, transform, status=None) -> pd.DataFrame:
    rng = random.Random(1)
    return pd.DataFrame({
        "doc_id": corpus["doc_id"], "strategy": strategy, "variant": "first",
        "text": [transform(t, rng) for t in corpus["text"]],
        "status": status if status is not None else "ok", "reason": None,
    })


@pytest.fixture(scope="module")
def corpus() -> pd.DataFrame:
    return make_corpus()


@pytest.fixture(scope="module")
def syn(corpus) -> dict[str, pd.DataFrame]:
    noise = synthetic(corpus, "noise", lambda t, rng: " ".join(rng.choices(FILLER, k=5)))
    # "broken": generation failed for every positive row: substitution trains on one class and fails
    broken = synthetic(corpus, "broken", lambda t, rng: t,
                       status=np.where(corpus["label"] == "pos", "failed", "ok"))
    return {"copy": synthetic(corpus, "copy", lambda t, rng: t), "noise": noise, "broken": broken}


def test_synthetic_view_keeps_ok_rows_one_variant_and_source_columns(corpus):
    table = pd.concat([synthetic(corpus, "s", lambda t, rng: "A " + t),
                       synthetic(corpus, "s", lambda t, rng: "B " + t).assign(variant="second")])
    table.loc[table["doc_id"].eq("d0"), "status"] = "failed"  # d0 fails in both variants
    table["label"] = "tampered"  # carried columns come from the corpus, not the synthetic table
    view = synthetic_view(corpus, table)
    assert len(view) == len(corpus) - 1 and "d0" not in set(view["doc_id"])
    assert view["text"].str.startswith("A ").all()  # first variant in sorted order
    assert (view.set_index("doc_id")["label"] == corpus.set_index("doc_id")["label"].drop("d0")).all()
    assert synthetic_view(corpus, table, variant="second")["text"].str.startswith("B ").all()


def test_design_training_sets(corpus, syn):
    runs = list(design(corpus, {"copy": syn["copy"]}, fractions=(0.1, 0.5, 1.0), seeds=(0, 1)))
    by = {(r.setting, r.fraction, r.strategy, r.seed): r for r in runs}
    assert len(runs) == 3 * 2 + 2 + 3 * 2  # baseline, substitution (100% only), augmentation
    n_train = (corpus["split"] == "train").sum()
    sub = by[("substitution", 1.0, "copy", 0)]
    assert len(sub.train) == n_train and (sub.train["origin"] == "synthetic").all()
    assert (sub.val["origin"] == "synthetic").all() and len(sub.val) == (corpus["split"] == "val").sum()
    for fraction in (0.1, 0.5):
        base = by[("baseline", fraction, ORIGINAL, 1)]
        aug = by[("augmentation", fraction, "copy", 1)]
        expected = _ids(undersample(corpus, fraction, seed=1))
        assert set(base.train["doc_id"]) == expected
        real = aug.train[aug.train["origin"] == "real"]
        fake = aug.train[aug.train["origin"] == "synthetic"]
        assert set(real["doc_id"]) == expected
        assert set(fake["doc_id"].str.removesuffix("|syn")) == expected  # one synthetic per kept real row
        assert (aug.val["origin"] == "real").all()
    small, half = (set(by[("baseline", f, ORIGINAL, 0)].train["doc_id"]) for f in (0.1, 0.5))
    assert small < half  # nested undersampling


def _ids(df: pd.DataFrame) -> set[str]:
    return set(df[df["split"] == "train"]["doc_id"])


def test_run_post_utility_settings_and_failure_isolation(corpus, syn):
    results = run_post_utility(corpus, syn, fractions=(0.5, 1.0), seeds=(0, 1))
    assert len(results) == 2 * 2 + 3 * (2 + 2 * 2)
    failed = results[results["status"] == "failed"]
    assert set(failed["strategy"]) == {"broken"} and set(failed["setting"]) == {"substitution"}
    assert failed["reason"].str.contains("TrainingDataError").all() and failed["macro_f1"].isna().all()
    ok = results[results["status"] == "ok"]
    assert ok["macro_f1"].notna().all() and (ok["n_test"] == (corpus["split"] == "test").sum()).all()

    def f1(setting, strategy, fraction=1.0, seed=0):
        sel = results[(results["setting"] == setting) & (results["strategy"] == strategy)
                      & (results["fraction"] == fraction) & (results["seed"] == seed)]
        return float(sel["macro_f1"].iloc[0])

    # a verbatim copy is the original data: same model, same F1
    assert f1("substitution", "copy") == pytest.approx(f1("baseline", ORIGINAL))
    assert f1("substitution", "noise") < f1("substitution", "copy") - 0.2  # noise carries no label signal
    # the baseline's F1 against a direct fit scored by sklearn
    train, test = corpus[corpus["split"] == "train"], corpus[corpus["split"] == "test"]
    pred = LinearTextClassifier(seed=0).fit(train["text"], train["label"]).predict(test["text"])
    assert f1("baseline", ORIGINAL) == pytest.approx(f1_score(test["label"], pred, average="macro"))


def test_summary_and_tables(corpus, syn):
    results = run_post_utility(corpus, {"copy": syn["copy"], "noise": syn["noise"]}, fractions=(0.5, 1.0),
                               seeds=(0, 1, 2))
    summary = summarize_utility(results)
    aug = results[(results["setting"] == "augmentation") & (results["strategy"] == "noise")
                  & (results["fraction"] == 0.5)]["macro_f1"]
    row = summary[(summary["setting"] == "augmentation") & (summary["strategy"] == "noise")
                  & (summary["fraction"] == 0.5)].iloc[0]
    assert row["macro_f1_mean"] == pytest.approx(aug.mean())
    assert row["macro_f1_std"] == pytest.approx(np.std(aug.to_numpy(), ddof=1))
    assert (row["n_ok"], row["n_failed"]) == (3, 0)
    tables = utility_tables(results)
    assert list(tables["substitution"].index) == ["copy", "noise", ORIGINAL]
    assert list(tables["substitution"].columns) == ["macro_f1"]
    table7 = tables["augmentation"]
    assert list(table7.index) == ["copy", "noise", ORIGINAL]
    assert list(table7.columns) == [("macro_f1", 50), ("macro_f1", 100)]
    assert table7.loc["noise", ("macro_f1", 50)] == pytest.approx(aug.mean())


def test_evaluator_sees_real_test_rows_and_bad_config(corpus, syn):
    seen = []

    def spy(train, val, test, seed):
        seen.append(test)
        return {"n": float(len(train))}

    results = run_utility(corpus, {"copy": syn["copy"]}, spy, settings=("substitution",), fractions=(1.0,),
                          seeds=(0,))
    assert list(results["setting"]) == ["baseline", "substitution"]
    assert all(list(t["text"]) == list(corpus[corpus["split"] == "test"]["text"]) for t in seen)
    with pytest.raises(ConfigError):
        run_utility(corpus, None, spy, settings=("swap",))
    with pytest.raises(ConfigError):
        run_utility(corpus, None, spy, label_col="attr_x")

    def boom(train, val, test, seed):
        raise RuntimeError("out of memory")

    other = run_post_utility(corpus.assign(attr_tone=corpus["label"], label=None), None, fractions=(1.0,),
                             seeds=(0,), label_col="attr_tone")
    assert other["macro_f1"].iloc[0] > 0.8  # trained and scored on attr_tone

    failed = run_utility(corpus, None, boom, fractions=(1.0,), seeds=(0, 1))
    assert (failed["status"] == "failed").all() and failed["reason"].str.contains("out of memory").all()


@pytest.mark.slow
def test_post_utility_with_the_encoder(corpus, syn):
    small = corpus.groupby("split", group_keys=False).head(16)
    results = run_post_utility(small, {"copy": syn["copy"]}, settings=("substitution",), fractions=(1.0,),
                               seeds=(0,), model="encoder", model_kwargs={"epochs": 1, "batch_size": 8})
    assert (results["status"] == "ok").all(), results["reason"].tolist()
    assert results["macro_f1"].between(0, 1).all()


def test_every_run_failing_still_gives_summary_rows_with_the_reason(corpus, syn):
    from tasks.training.utility import utility_summary_rows

    no_test = corpus.assign(split=corpus["split"].replace({"test": "train"}))
    results = run_post_utility(no_test, {"noise": syn["noise"]}, seeds=(0,), fractions=(1.0,))
    assert (results["status"] == "failed").all()
    rows = utility_summary_rows(results, "sig")
    assert set(rows["strategy"]) == {"original", "noise"}
    assert rows["value"].isna().all()
    assert rows["reason"].str.contains("no labelled test rows").all()
