"""STI (EMD against scipy, hand-worked signs and percentages), CPS (real MiniLM) and style masking."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from tasks.errors import ModelUnavailable
from tasks.metrics.transfer import (
    HFSequenceClassifier,
    SubjectivityClassifier,
    VaderClassifier,
    class_positions,
    cps,
    emd_1d,
    mask_style,
    select_style_words,
    sti,
    style_attributions,
)


class TableClassifier:
    """A style classifier that looks each text up in a table (hand-worked distributions)."""

    def __init__(self, table: dict[str, Sequence[float]], classes: tuple[str, ...]) -> None:
        self.table = table
        self.classes = classes
        self.id = "table"

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.table[t] for t in texts], dtype=np.float64).reshape(-1, len(self.classes))


# ------------------------------------------------------------------------------------------ EMD
@pytest.mark.parametrize(("p", "q", "expected"), [
    ([0.9, 0.1], [0.2, 0.8], 0.7),  # two classes: |p[1] - q[1]|
    ([1, 0, 0], [0, 0, 1], 1.0),  # all mass across the whole span
    ([0.5, 0.5, 0], [0, 0.5, 0.5], 0.5),  # 0.5 moved by two half-steps
    ([0.2, 0.3, 0.5], [0.2, 0.3, 0.5], 0.0),
    ([0.25, 0.25, 0.25, 0.25], [1, 0, 0, 0], 0.5),  # (1/3 + 2/3 + 3/3) / 4
])
def test_emd_matches_hand_and_scipy(p, q, expected) -> None:
    pos = class_positions(len(p))
    got = float(emd_1d(np.array(p, float), np.array(q, float), pos)[0])
    assert got == pytest.approx(expected, abs=1e-12)
    assert got == pytest.approx(wasserstein_distance(pos, pos, p, q), abs=1e-12)


def test_emd_custom_positions_match_scipy() -> None:
    rng = np.random.default_rng(3)
    pos = np.array([0.0, 0.3, 2.0, 2.5])
    p = rng.dirichlet(np.ones(4), size=20)
    q = rng.dirichlet(np.ones(4), size=20)
    ours = emd_1d(p, q, pos)
    ref = [wasserstein_distance(pos, pos, a, b) for a, b in zip(p, q, strict=True)]
    np.testing.assert_allclose(ours, ref, atol=1e-12)


# ------------------------------------------------------------------------------------------ STI
def test_sti_sign_and_percentage_two_classes() -> None:
    clf = TableClassifier({
        "src_a": [0.1, 0.9], "out_a": [0.5, 0.5],  # toward target 0: +0.4 of a possible 0.9
        "src_b": [0.6, 0.4], "out_b": [0.3, 0.7],  # away: -0.3 of a possible 0.6 (to onehot class 1)
        "src_c": [1.0, 0.0], "out_c": [1.0, 0.0],  # already at target: pct undefined
        "src_d": [0.1, 0.9], "out_d": [1.0, 0.0],  # full gain
    }, ("neutral", "subjective"))
    res = sti(["src_a", "src_b", "src_c", "src_d"], ["out_a", "out_b", "out_c", "out_d"], classifier=clf,
              target_class="neutral")
    s = res.scores
    np.testing.assert_allclose(s["sti"], [0.4, -0.3, 0.0, 0.9], atol=1e-12)
    assert s["sti_pct"][0] == pytest.approx(100 * 0.4 / 0.9)
    assert s["sti_pct"][1] == pytest.approx(-50.0)
    assert math.isnan(s["sti_pct"][2]) and "already at the target" in s["sti_pct_reason"][2]
    assert s["sti_pct"][3] == pytest.approx(100.0)
    assert s["sti_pct_reason"][[0, 1, 3]].isna().all()
    assert "target:neutral" in res.signatures["sti"] and "ground:ordinal-unit" in res.signatures["sti"]
    assert "away:subjective" in res.signatures["sti_pct"]
    # same by index as by name
    by_index = sti(["src_a"], ["out_a"], classifier=clf, target_class=0).scores
    assert by_index["sti"][0] == pytest.approx(0.4)


def test_sti_three_ordinal_classes_against_scipy() -> None:
    classes = ("negative", "neutral", "positive")
    table = {"s": [0.6, 0.3, 0.1], "o1": [0.2, 0.3, 0.5], "o2": [0.9, 0.1, 0.0]}
    clf = TableClassifier(table, classes)
    res = sti(["s", "s"], ["o1", "o2"], classifier=clf, target_class="positive").scores
    pos = np.array([0.0, 0.5, 1.0])
    e1 = wasserstein_distance(pos, pos, table["s"], table["o1"])
    e2 = wasserstein_distance(pos, pos, table["s"], table["o2"])
    assert res["sti"][0] == pytest.approx(e1) and res["sti"][1] == pytest.approx(-e2)
    gain = wasserstein_distance(pos, pos, table["s"], [0, 0, 1])
    loss = wasserstein_distance(pos, pos, table["s"], [1, 0, 0])  # away class: farthest from positive
    assert res["sti_pct"][0] == pytest.approx(100 * e1 / gain)
    assert res["sti_pct"][1] == pytest.approx(-100 * e2 / loss)


def test_sti_validates_inputs() -> None:
    clf = TableClassifier({"a": [0.5, 0.5]}, ("x", "y"))
    with pytest.raises(ValueError, match="not one of"):
        sti(["a"], ["a"], classifier=clf, target_class="z")
    with pytest.raises(ValueError, match="sources but"):
        sti(["a"], [], classifier=clf, target_class="x")
    with pytest.raises(ValueError, match="strictly increasing"):
        sti(["a"], ["a"], classifier=clf, target_class="x", positions=[1, 0])


def test_sti_with_subjectivity_classifier() -> None:
    clf = SubjectivityClassifier()
    res = sti(["This is an absolutely wonderful and elegant movie."], ["This is a movie."], classifier=clf,
              target_class="objective").scores
    assert res["sti"][0] > 0.5
    back = sti(["This is a movie."], ["This is an absolutely wonderful and elegant movie."], classifier=clf,
               target_class="objective").scores
    assert back["sti"][0] == pytest.approx(-res["sti"][0])


# ------------------------------------------------------------------------------------------ classifiers
def test_lexicon_classifiers_give_distributions() -> None:
    texts = ["I love this, it is wonderful!", "I hate this awful thing.", "The bus leaves at 9.", ""]
    v = VaderClassifier().predict_proba(texts)
    assert v.shape == (4, 3)
    np.testing.assert_allclose(v.sum(axis=1), 1.0)
    assert v[0].argmax() == 2 and v[1, 0] > v[1, 2]
    np.testing.assert_allclose(v[3], [0, 1, 0])
    s = SubjectivityClassifier().predict_proba(texts)
    assert s.shape == (4, 2)
    np.testing.assert_allclose(s.sum(axis=1), 1.0)
    assert s[0, 1] > s[2, 1]
    np.testing.assert_allclose(s[3], [1, 0])


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory) -> str:
    """A randomly initialised 2-layer BERT classifier with MiniLM's tokenizer, saved locally (no download)."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from tasks.models.registry import resolve_model

    folder = tmp_path_factory.mktemp("tiny-clf")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("sentence_encoder").path, local_files_only=True)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=2, id2label={0: "neutral", 1: "subjective"},
                        label2id={"neutral": 0, "subjective": 1})
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_hf_sequence_classifier(tiny_classifier: str) -> None:
    clf = HFSequenceClassifier(tiny_classifier, batch_size=2)
    assert clf.classes == ("neutral", "subjective")
    texts = ["short", "a somewhat longer text to make padding matter here", "mid length text"]
    probs = clf.predict_proba(texts)
    assert probs.shape == (3, 2)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    # batching and length-sorting do not change a text's row
    np.testing.assert_allclose(probs[1], clf.predict_proba([texts[1]])[0], atol=1e-5)
    res = sti(texts, texts[::-1], classifier=clf, target_class="neutral")
    assert res.scores["sti"][1] == pytest.approx(0.0, abs=1e-6)
    assert "local/" in res.signatures["sti"]


def test_hf_sequence_classifier_missing_is_one_line(tmp_path) -> None:
    with pytest.raises(ModelUnavailable) as info:
        HFSequenceClassifier(str(tmp_path / "nope"))
    assert "\n" not in str(info.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelUnavailable) as info:
        HFSequenceClassifier(str(empty))
    assert "\n" not in str(info.value) and "style classifier" in str(info.value)


# ------------------------------------------------------------------------------------------ masking
def test_select_style_words_cumulative_threshold() -> None:
    a = np.array([0.1, 0.5, 0.2, 0.2])  # shares 0.1, 0.5, 0.2, 0.2
    assert select_style_words(a, 0.3).tolist() == [1]  # 0.5 crosses 0.3
    assert select_style_words(a, 0.6).tolist() == [1, 2]  # 0.5 + 0.2 (first of the tie)
    assert select_style_words(a, 0.5).tolist() == [1]  # exactly reaching counts
    assert select_style_words(a, 1.0).tolist() == [0, 1, 2, 3]
    assert select_style_words(np.zeros(3), 0.3).tolist() == []  # no style, nothing masked
    assert select_style_words(np.array([-0.6, 0.4]), 0.3).tolist() == [0]  # by absolute value


def test_mask_style_vader_lexicon_hand_checked() -> None:
    texts = ["The wonderful movie was shown on Monday.", "I hate this stupid phone, but the screen is big.",
             "The bus leaves at nine."]
    # VADER valences: wonderful 2.7; hate -2.7, stupid -2.4 (shares .53 and .47); nothing in the third
    removed = mask_style(texts, mode="remove", threshold=0.5, attribution="vader-lexicon")
    assert removed == ["The movie was shown on Monday.", "I this stupid phone, but the screen is big.",
                       "The bus leaves at nine."]
    both = mask_style(texts, mode="pad", threshold=0.9, attribution="vader-lexicon")
    assert both[1] == "I [PAD] this [PAD] phone, but the screen is big."
    assert both[0] == "The [PAD] movie was shown on Monday."


def test_occlusion_attributions_find_style_words() -> None:
    text = "This is an absolutely wonderful and elegant movie."
    att = style_attributions([text, "The bus leaves at nine."])
    words = ["This", "is", "an", "absolutely", "wonderful", "and", "elegant", "movie"]
    assert len(att[0]) == len(words)
    top = {words[i] for i in np.argsort(-att[0])[:3]}
    assert top == {"absolutely", "wonderful", "elegant"}
    assert np.all(att[0][[0, 1, 2, 5, 7]] == 0)
    assert np.all(att[1] == 0)
    masked = mask_style([text], mode="remove", threshold=0.9)[0]
    assert masked == "This is an and movie."


# ------------------------------------------------------------------------------------------ CPS
def test_cps_identical_is_one_and_masking_changes_it(tmp_path) -> None:
    from tasks.models.embeddings import EmbeddingCache

    src = ["The wonderful movie was shown on Monday.", "The bus leaves at nine.", "I love my cat."]
    out = ["The wonderful movie was shown on Monday.", "Quantum computing uses qubits.", "wonderful"]
    with EmbeddingCache(tmp_path / "emb.sqlite") as cache:
        res = cps(src, out, cache=cache)
        again = cps(src, out, cache=cache)
    s = res.scores
    assert s["cps"][0] == pytest.approx(1.0, abs=1e-5)
    assert s["cps"][1] < 0.5
    np.testing.assert_allclose(again.scores["cps"], s["cps"])
    assert "mask:none" in res.signatures["cps"] and "all-MiniLM-L6-v2" in res.signatures["cps"]
    masked = cps(src, out, mask="remove", threshold=0.5, attribution="vader-lexicon")
    assert masked.scores["cps"][0] == pytest.approx(1.0, abs=1e-5)
    # "wonderful" alone is masked to nothing: undefined, with a reason
    assert math.isnan(masked.scores["cps"][2]) and "empty" in masked.scores["cps_reason"][2]
    sig = masked.signatures["cps"]
    assert "mask:remove" in sig and "threshold:0.5" in sig and "attribution:vader-lexicon" in sig
