"""bleu_divergence and self_bleu against sacrebleu; char_jsd against scipy's jensenshannon."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sacrebleu
from scipy.spatial.distance import jensenshannon

from tasks.metrics.divergence import bleu_divergence, char_jsd, char_ngram_counts, self_bleu

PAIRS = [
    ("the cat sat on the mat", "the cat sat on the mat"),
    ("the cat sat on the mat", "a cat was sitting on the mat"),
    ("hello", "hello world"),
    ("", ""),
    ("something", ""),
    ("", "something"),
    ("   ", "."),
    ("I LOVE this place!!! best pizza in town :)", "i love this place, the best pizza in town"),
    ("Ünïcödé tëxt — with dashes", "Unicode text - with dashes"),
    ("lol", "totally unrelated words here"),
]


def test_equals_sacrebleu() -> None:
    sources, synthetic = zip(*PAIRS, strict=True)
    result = bleu_divergence(sources, synthetic)
    for (src, hyp), got in zip(PAIRS, result.scores["bleu_divergence"], strict=True):
        want = 1 - sacrebleu.sentence_bleu(hyp, [src]).score / 100
        assert abs(got - want) <= 1e-9
    assert abs(result.scores["bleu_divergence"][0]) < 1e-9  # a copy does not diverge
    assert result.scores["bleu_divergence"][9] == 1.0


def test_signature_carries_sacrebleu_fields() -> None:
    sig = bleu_divergence(["a"], ["a"]).signatures["bleu_divergence"]
    assert sig.startswith("metric:bleu_divergence|")
    for field in ("nrefs:1", "case:mixed", "eff:yes", "tok:13a", "smooth:exp", f"sacrebleu:{sacrebleu.__version__}"):
        assert field in sig


def test_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match=r"2 sources but 1 synthetic"):
        bleu_divergence(["a", "b"], ["a"])


# --- self-BLEU ------------------------------------------------------------------------------------------

OUTPUTS = [
    ["the cat sat on the mat", "a cat sat on a mat", "the cat is sitting on the mat"],
    ["hello", "hello"],
    ["one output only"],
    [],
    ["I LOVE pizza!!!", "i love pizza", "Pizza is what I love :)", ""],
]


def test_self_bleu_equals_sacrebleu_multi_reference() -> None:
    result = self_bleu(OUTPUTS)
    scores = result.scores
    assert list(scores["n_outputs"]) == [3, 2, 1, 0, 4]
    for i in (0, 1, 4):
        outs = OUTPUTS[i]
        want = np.mean([sacrebleu.sentence_bleu(h, outs[:j] + outs[j + 1:]).score for j, h in enumerate(outs)])
        assert abs(scores["self_bleu"][i] - want) <= 1e-9
        assert abs(scores["self_bleu_diversity"][i] - (1 - want / 100)) <= 1e-12
        assert scores["self_bleu_reason"][i] is None
    assert abs(scores["self_bleu"][1] - 100.0) <= 1e-9  # identical outputs: no diversity
    assert abs(scores["self_bleu_diversity"][1]) <= 1e-12
    for i in (2, 3):
        assert math.isnan(scores["self_bleu"][i]) and math.isnan(scores["self_bleu_diversity"][i])
        assert "at least 2 outputs" in scores["self_bleu_reason"][i]
    assert result.signatures["self_bleu"].startswith("metric:self_bleu|")
    assert "nrefs:k-1" in result.signatures["self_bleu_diversity"]


# --- character trigram JSD --------------------------------------------------------------------------------

REAL = ["The cat sat on the mat.", "I LOVE this place!!!", "  spaced\tout\n text  ", "ok"]
SYNTH = ["A cat was sitting on the mat.", "i love this place", "spaced out text", "okay then"]


def _scipy_jsd(real: list[str], synth: list[str], **kwargs: object) -> float:
    p, q = char_ngram_counts(real, 3, **kwargs), char_ngram_counts(synth, 3, **kwargs)
    vocab = sorted(p.keys() | q.keys())
    pv = np.array([p.get(g, 0) for g in vocab], dtype=float)
    qv = np.array([q.get(g, 0) for g in vocab], dtype=float)
    return float(jensenshannon(pv, qv, base=2) ** 2)


def test_char_jsd_equals_scipy() -> None:
    for kwargs in ({}, {"lowercase": True}, {"collapse_whitespace": False}):
        got = char_jsd(REAL, SYNTH, 3, **kwargs)
        assert abs(got.value - _scipy_jsd(REAL, SYNTH, **kwargs)) <= 1e-12
        assert got.reason is None
    assert char_jsd(REAL, SYNTH).value != char_jsd(REAL, SYNTH, lowercase=True).value


def test_char_jsd_properties_and_choices() -> None:
    assert char_jsd(REAL, list(reversed(REAL))).value == 0.0  # same multiset of trigrams
    assert abs(char_jsd(["aaaa"], ["bbbb"]).value - 1.0) <= 1e-12  # disjoint supports: 1 bit
    counts = char_ngram_counts(["  a  b\n"], 3)
    assert counts == {"a b": 1}  # stripped, whitespace run -> one space, no padding
    assert char_ngram_counts(["ab", "cd"], 3) == {}  # no n-gram crosses two texts
    empty = char_jsd(["ab"], ["some text"])
    assert math.isnan(empty.value) and "real set has no character 3-gram" in empty.reason
    sig = char_jsd(REAL, SYNTH).signature
    for field in ("metric:char_jsd", "n:3", "case:mixed", "ws:collapse", "base:2"):
        assert field in sig
