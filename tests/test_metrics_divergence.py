"""bleu_divergence against sacrebleu's sentence_bleu."""

from __future__ import annotations

import pytest
import sacrebleu

from tasks.metrics.divergence import bleu_divergence

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
