"""BERTScore against the reference bert_score package, with the real MiniLM model (layer 6)."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.metrics.meaning import bertscore
from tasks.models.embeddings import EmbeddingCache
from tasks.models.registry import resolve_model

CANDS = [
    "the cat sat on the mat",
    "hello there",
    "I LOVE this place!!! best pizza in town :)",
    "no",
    "ok so basically what happened was my landlord refused to fix the heating for three weeks",
    "The meeting has been moved to Thursday afternoon.",
    "lol same",
    "We went to the beach and it rained the whole time, typical.",
    "Quantum computers use qubits.",
    "the the the the",
    "Can u send me the link pls",
    "Paris is the capital of France.",
    "He didn't like the movie at all.",
    "   leading and trailing spaces   ",
    "Emoji 😀 and ünïcödé",
    "Short.",
    "My doctor said I should rest more and drink water.",
    "the cat sat on the mat",
    "Numbers 12345 and 3.14",
    "A completely unrelated sentence about trains.",
]
REFS = [
    "a cat was sitting on the mat",
    "hi",
    "Terrible service, never coming back.",
    "yes",
    "no",
    "The meeting was rescheduled to Thursday afternoon.",
    "haha me too",
    "Our beach trip was ruined by rain, as usual.",
    "Qubits are used by quantum computers.",
    "the",
    "Could you send me the link please?",
    "France's capital is Paris.",
    "He hated the film.",
    "leading and trailing spaces",
    "Emoji and unicode",
    "This is a considerably longer reference sentence than its candidate.",
    "The doctor told me to rest and stay hydrated.",
    "the cat sat on the mat",
    "Numbers 12345 and 3.14159",
    "Stock markets fell sharply on Monday.",
]


@pytest.fixture(scope="module")
def spec():
    return resolve_model("token_encoder")


def _reference(spec, cands, refs, **kwargs) -> np.ndarray:
    import bert_score

    p, r, f = bert_score.score(cands, refs, model_type=spec.path, num_layers=6, **kwargs)
    return np.stack([p.numpy(), r.numpy(), f.numpy()], axis=1).astype(np.float64)


@pytest.mark.parametrize("idf", [False, True])
def test_equals_bert_score(spec, idf: bool) -> None:
    got = bertscore(CANDS, REFS, spec=spec, idf=idf).scores.to_numpy()
    want = _reference(spec, CANDS, REFS, idf=idf)
    assert np.abs(got - want).max() < 1e-4


def test_equals_bert_score_with_small_batches(spec) -> None:
    got = bertscore(CANDS, REFS, spec=spec, batch_size=3).scores.to_numpy()
    want = _reference(spec, CANDS, REFS, batch_size=3)
    assert np.abs(got - want).max() < 1e-4


def test_baseline_rescaling_equals_bert_score(spec, tmp_path) -> None:
    path = tmp_path / "baseline.tsv"  # bert_score's format: comma-separated despite the .tsv name
    rows = ["LAYER,P,R,F"] + [f"{layer},{0.3 + 0.05 * layer},{0.31 + 0.05 * layer},{0.305 + 0.05 * layer}"
                              for layer in range(7)]
    path.write_text("\n".join(rows) + "\n")
    result = bertscore(CANDS, REFS, spec=spec, baseline_path=path)
    want = _reference(spec, CANDS, REFS, lang="en", rescale_with_baseline=True, baseline_path=str(path))
    assert np.abs(result.scores.to_numpy() - want).max() < 1e-4
    assert "rescaled:yes" in result.signatures["bertscore_f1"]


def test_empty_strings_equal_bert_score(spec, monkeypatch: pytest.MonkeyPatch) -> None:
    # bert_score 0.3.13 calls tokenizer.build_inputs_with_special_tokens([]) for an empty text, which
    # transformers 5 removed; restore BERT's definition on the tokenizer class for the reference only.
    from transformers import BertTokenizer

    monkeypatch.setattr(BertTokenizer, "build_inputs_with_special_tokens",
                        lambda self, ids: [self.cls_token_id, *ids, self.sep_token_id], raising=False)
    cands, refs = ["", "something", "  ", "fine"], ["something", "", "x", "fine"]
    got = bertscore(cands, refs, spec=spec).scores.to_numpy()
    want = _reference(spec, cands, refs)
    assert np.abs(got - want).max() < 1e-4
    assert (got[:3] == 0).all()


def test_batched_token_ids_equal_bert_score_sent_encode(spec, monkeypatch: pytest.MonkeyPatch) -> None:
    # One batched tokenizer call must give each text the ids bert_score's per-text sent_encode gives: empty and
    # blank texts between full ones (they switch the tokenizer's truncation off), and a text longer than
    # model_max_length (truncated).
    from bert_score.utils import sent_encode
    from transformers import BertTokenizer

    from tasks.models.embeddings import bert_score_encode
    from tasks.models.loaders import load_tokenizer

    monkeypatch.setattr(BertTokenizer, "build_inputs_with_special_tokens",
                        lambda self, ids: [self.cls_token_id, *ids, self.sep_token_id], raising=False)
    tokenizer = load_tokenizer(spec)
    long_text = " ".join(["word"] * (tokenizer.model_max_length + 50))
    texts = ["", *CANDS[:3], "   ", long_text, *REFS[:3], ""]
    got = bert_score_encode(tokenizer, texts)
    assert got == [list(sent_encode(tokenizer, t)) for t in texts]
    assert len(got[texts.index(long_text)]) == tokenizer.model_max_length
    assert got[0] == got[-1] == [tokenizer.cls_token_id, tokenizer.sep_token_id]


def test_hand_checkable_properties(spec, tmp_path) -> None:
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    result = bertscore(["the same words", "rain"], ["the same words", "The stock market fell."], spec=spec,
                       cache=cache)
    f1 = result.scores["bertscore_f1"].to_numpy()
    assert f1[0] == pytest.approx(1.0, abs=1e-5)
    assert f1[1] < 0.6
    assert list(result.scores.columns) == ["bertscore_p", "bertscore_r", "bertscore_f1"]
    sig = result.signatures["bertscore_f1"]
    assert sig.startswith("metric:bertscore_f1|model:sentence-transformers/all-MiniLM-L6-v2@")
    assert "|layer:6|idf:no|" in sig
    misses = cache.misses
    bertscore(["the same words"], ["rain"], spec=spec, cache=cache)
    assert cache.misses == misses  # every text came from the shared cache


def test_layer_changes_scores_and_signature(spec) -> None:
    six = bertscore(CANDS[:3], REFS[:3], spec=spec)
    three = bertscore(CANDS[:3], REFS[:3], spec=spec, layer=3)
    assert not np.allclose(six.scores.to_numpy(), three.scores.to_numpy())
    assert "|layer:3|" in three.signatures["bertscore_p"]


def test_mismatched_lengths(spec) -> None:
    with pytest.raises(ValueError, match="2 candidates but 1 references"):
        bertscore(["a", "b"], ["a"], spec=spec)
