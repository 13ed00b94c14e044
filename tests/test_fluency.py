"""The fluency figure (SLOR of the output against its source's, tasks/metrics/fluency.py) with the real offline LM:
it tells corrupted copies from their sentences, and ranks the protect moves as a reader graded them by hand."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from tasks.metrics.catalogue import lookup
from tasks.metrics.fluency import FLUENCY, fluency, slor, unigram_log_prob
from tasks.models.embeddings import EmbeddingCache

DATA = Path(__file__).parent / "data"
#: Agreement flips: a verb form swapped for the other number's.
AGREEMENT = {"is": "are", "are": "is", "was": "were", "were": "was", "has": "have", "have": "has",
             "does": "do", "do": "does"}
FUNCTION_WORDS = ("the", "and", "to", "of", "a", "that", "in", "for", "we", "is")


def corruptions(sentence: str, rng: random.Random, vocabulary: list[str]) -> dict[str, str]:
    """A dropped word, a doubled (function) word, swapped neighbours, a wrong agreement (where the sentence has a
    verb to flip) and a random word in place of one."""
    words = sentence.split()
    out = {}
    i = rng.randrange(1, len(words) - 1)
    out["drop"] = " ".join(words[:i] + words[i + 1:])
    function = [k for k, w in enumerate(words) if w.lower() in FUNCTION_WORDS]
    k = rng.choice(function) if function else i
    out["double"] = " ".join([*words[:k + 1], words[k], *words[k + 1:]])
    j = rng.randrange(0, len(words) - 2)
    swapped = words[:]
    swapped[j], swapped[j + 1] = swapped[j + 1], swapped[j]
    out["swap"] = " ".join(swapped)
    verbs = [k for k, w in enumerate(words) if w.lower() in AGREEMENT]
    if verbs:
        k = rng.choice(verbs)
        flipped = words[:]
        flipped[k] = AGREEMENT[flipped[k].lower()]
        out["agreement"] = " ".join(flipped)
    m = rng.randrange(1, len(words) - 1)
    replaced = words[:]
    replaced[m] = rng.choice(vocabulary)
    out["random"] = " ".join(replaced)
    return out


@pytest.fixture(scope="module")
def corrupted() -> list[tuple[str, str, str]]:
    sentences = (DATA / "fluency_sentences.txt").read_text().splitlines()
    vocabulary = sorted({w.strip(".,;:").lower() for s in sentences for w in s.split() if w.isalpha() and len(w) > 3})
    rng = random.Random(0)
    return [(kind, s, c) for s in sentences for kind, c in corruptions(s, rng, vocabulary).items()]


def test_fluency_tells_corrupted_copies_from_their_sentences(corrupted: list[tuple[str, str, str]],
                                                             tmp_path: Path) -> None:
    kinds = sorted({k for k, _, _ in corrupted})
    assert kinds == ["agreement", "double", "drop", "random", "swap"]
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        scores = fluency([s for _, s, _ in corrupted], [c for _, _, c in corrupted], cache=cache).scores[FLUENCY]
        # the same texts again: every log-probability comes from the cache, the same numbers
        again = fluency([s for _, s, _ in corrupted], [c for _, _, c in corrupted], cache=cache).scores[FLUENCY]
    np.testing.assert_allclose(again, scores, atol=1e-5)
    # paired AUC: the share of pairs where the corrupted copy reads worse than its sentence (ties count half)
    auc = float(np.mean(np.where(scores < 0, 1.0, np.where(scores == 0, 0.5, 0.0))))
    assert auc >= 0.9, auc
    for kind in kinds:  # every kind of corruption is told apart, not only the easy ones
        part = scores[[k == kind for k, _, _ in corrupted]]
        assert float(np.mean(part < 0)) >= 0.8, (kind, part.tolist())


def test_fluency_ranks_the_moves_as_a_reader_graded_them() -> None:
    rows = json.loads((DATA / "fluency_moves.json").read_text())["rows"]
    scores = fluency([r["source"] for r in rows], [r["output"] for r in rows]).scores[FLUENCY].to_numpy()
    grades = np.array([r["grade"] for r in rows])
    assert spearmanr(scores, grades).statistic >= 0.8
    moves = sorted({r["move"] for r in rows})
    assert moves == ["backtranslate", "generalize", "stymask", "syndiff"]
    by_move = {m: (scores[[r["move"] == m for r in rows]].mean(), grades[[r["move"] == m for r in rows]].mean())
               for m in moves}
    # every pair of moves the reader's grades tell apart by a point or more is ordered the same way
    for a in moves:
        for b in moves:
            if by_move[a][1] - by_move[b][1] >= 1.0:
                assert by_move[a][0] > by_move[b][0], (a, b, by_move)
    # an output equal to its source reads exactly as well
    same = [i for i, r in enumerate(rows) if r["output"] == r["source"]]
    assert same and np.all(scores[same] == 0.0)


def test_slor_is_defined_on_words_only() -> None:
    values = slor(["", "...", "The cat sat on the mat."])
    assert math.isnan(values[0]) and math.isnan(values[1]) and math.isfinite(values[2])
    logp, n = unigram_log_prob("The cat sat on the mat.")
    assert n == 6 and logp < 0
    result = fluency(["Fine words."], ["!!!"])
    assert math.isnan(result.scores[FLUENCY].iloc[0])
    assert result.scores[f"{FLUENCY}_reason"].iloc[0] == "no words to score"
    assert "score:slor-delta" in result.signatures[FLUENCY]


def test_fluency_is_a_registered_sample_metric() -> None:
    metric = lookup(FLUENCY)
    assert metric is not None and metric.level == "sample" and metric.aspect == "fluency" and metric.direction == 1
