"""In-process batched generation (TransformersBackend, decode_batch) on the real offline SmolLM2-135M."""

from __future__ import annotations

import pytest
import torch

from tasks.models.llm import (
    ChatRequest,
    TransformersBackend,
    decode_batch,
    nucleus_probs,
    nucleus_scores,
    sample_next,
)
from tasks.models.registry import resolve_model

PROMPTS = ["Name a colour.", "Say hello to my friend from the city of Chicago, please.", "Count to three.",
           "Give one word for happy, and explain why in one short sentence."]


def greedy(prompt: str, max_tokens: int = 12, **kw: object) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": prompt}], temperature=0.0, max_tokens=max_tokens, **kw)


@pytest.fixture(scope="module")
def smollm2() -> tuple[object, object]:
    from tasks.models.loaders import load_causal_lm

    return load_causal_lm(resolve_model("llm"))


def test_nucleus_scores_match_transformers_warpers() -> None:
    """Temperature then top-p, as transformers' TemperatureLogitsWarper and TopPLogitsWarper (reference)."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(3)) * 3
    for temperature, top_p in [(0.6, 0.9), (1.0, 0.5), (1.3, 1.0), (0.7, 0.01)]:
        expected = TemperatureLogitsWarper(temperature)(None, logits.clone())
        if top_p < 1.0:
            expected = TopPLogitsWarper(top_p)(None, expected)
        got = nucleus_scores(logits, temperature=temperature, top_p=top_p)
        assert torch.equal(torch.isinf(got), torch.isinf(expected))
        assert torch.allclose(got[~torch.isinf(got)], expected[~torch.isinf(expected)])


def test_nucleus_probs_are_the_nucleus_distribution() -> None:
    """The sampler's sorted top-k nucleus is softmax(nucleus_scores), also when the nucleus is wider than the
    first top-k (a flat distribution over 5,000 tokens) and with no cut (top_p 1)."""
    peaked = torch.randn(5, 300, generator=torch.Generator().manual_seed(3)) * 3
    flat = torch.randn(3, 5000, generator=torch.Generator().manual_seed(4)) * 0.1
    for logits, temperature, top_p in [(peaked, 0.6, 0.9), (peaked, 1.0, 0.5), (peaked, 1.3, 1.0),
                                       (peaked, 0.7, 0.01), (flat, 1.0, 0.9)]:
        probs, tokens = nucleus_probs(logits, temperature=temperature, top_p=top_p)
        dense = torch.zeros_like(logits).scatter_(1, tokens, probs)
        expected = nucleus_scores(logits, temperature=temperature, top_p=top_p).softmax(dim=-1)
        assert torch.equal(dense > 0, expected > 0)
        assert torch.allclose(dense / dense.sum(dim=-1, keepdim=True), expected, atol=1e-6)
    assert (nucleus_probs(flat, temperature=1.0, top_p=0.9)[0] > 0).sum(dim=-1).min() > 256  # widened


def test_sampled_tokens_follow_the_nucleus_distribution() -> None:
    """40,000 draws from one row: token frequencies within 0.01 of softmax(nucleus_scores); each row's draw
    comes from its own generator."""
    logits = torch.randn(1, 20, generator=torch.Generator().manual_seed(5)) * 2
    g = torch.Generator().manual_seed(6)
    draws = sample_next(logits.expand(40_000, 20), temperature=0.8, top_p=0.9, generators=[g] * 40_000)
    freq = torch.bincount(draws, minlength=20).double() / 40_000
    expected = nucleus_scores(logits, temperature=0.8, top_p=0.9).softmax(dim=-1)[0].double()
    assert (freq - expected).abs().max() < 0.01 and torch.equal(freq > 0, expected > 0)
    one = [sample_next(logits, temperature=0.8, top_p=0.9, generators=[torch.Generator().manual_seed(s)]).item()
           for s in range(8)]
    two = sample_next(logits.expand(8, 20), temperature=0.8, top_p=0.9,
                      generators=[torch.Generator().manual_seed(s) for s in range(8)]).tolist()
    assert one == two


@pytest.mark.slow
def test_greedy_decode_equals_transformers_generate(smollm2: tuple[object, object]) -> None:
    """decode_batch's greedy tokens are model.generate's (do_sample=False), prompt by prompt."""
    tokenizer, model = smollm2
    for prompt in PROMPTS[:2]:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        enc = tokenizer([text], return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            ref = model.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            got = decode_batch(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=12,
                               eos_ids=[tokenizer.eos_token_id])
        expected = [t for t in ref[0, enc["input_ids"].shape[1]:].tolist() if t != tokenizer.eos_token_id]
        assert got == [expected]


@pytest.mark.slow
def test_roles_naming_one_model_share_its_one_load(smollm2: tuple[object, object]) -> None:
    """SmolLM2 is the offline llm, paraphraser and profiling_llm: every role gets the one loaded copy (the GGUF
    is dequantised once per process, not once per role)."""
    from tasks.models.loaders import load_causal_lm

    for role in ("paraphraser", "profiling_llm"):
        spec = resolve_model(role)
        assert spec.role == role and spec.path == resolve_model("llm").path
        tokenizer, model = load_causal_lm(spec)
        assert tokenizer is smollm2[0] and model is smollm2[1]


@pytest.mark.slow
def test_batched_greedy_equals_unbatched_in_request_order() -> None:
    """Prompts of different lengths in one left-padded, length-sorted batch give what each gives alone, in
    request order; one of them stops early on a stop string."""
    spec = resolve_model("llm")
    requests = [greedy(p) for p in PROMPTS] + [greedy(PROMPTS[1], stop=[","])]
    alone = TransformersBackend(spec, batch_size=1, num_threads=1).complete(requests)
    together_backend = TransformersBackend(spec, batch_size=8, num_threads=1)
    assert together_backend.batches(requests)[0] != list(range(4))  # sorted by length: order really changes
    together = together_backend.complete(requests)
    assert all(r.ok for r in alone + together)
    assert [r.texts for r in together] == [r.texts for r in alone]
    assert len({r.texts[0] for r in together[:4]}) == 4  # each answer belongs to its own prompt
    assert "," not in together[4].texts[0] and together[1].texts[0].startswith(together[4].texts[0])


@pytest.mark.slow
def test_sampled_text_does_not_depend_on_batch_neighbours() -> None:
    """Per-text seeds batch together: a seeded sampled request gives the same texts alone and in a batch,
    n=2 gives two texts per request, and another seed gives another text."""
    spec = resolve_model("llm")

    def sampled(prompt: str, seed: int) -> ChatRequest:
        return ChatRequest(messages=[{"role": "user", "content": prompt}], temperature=0.6, top_p=0.9,
                           max_tokens=10, n=2, seed=seed)

    requests = [sampled(p, 10 + i) for i, p in enumerate(PROMPTS[:3])]
    backend = TransformersBackend(spec, batch_size=6, num_threads=1)
    assert len(backend.batches(requests)) == 1
    together = backend.complete(requests)
    alone = [TransformersBackend(spec, batch_size=2, num_threads=1).complete([r])[0] for r in requests]
    assert [r.texts for r in together] == [r.texts for r in alone]
    assert all(len(r.texts) == 2 for r in together)
    outs = {tuple(r.texts) for r in backend.complete([sampled(PROMPTS[1], s) for s in range(100, 103)])}
    assert len(outs) > 1


@pytest.mark.slow
def test_failed_batch_records_its_reason_and_others_succeed() -> None:
    """A message whose content is not a string breaks the chat template for its whole batch: those results
    carry the reason, the batch with other sampling params succeeds, every request has one result in order."""
    spec = resolve_model("llm")
    bad = ChatRequest(messages=[{"role": "user", "content": 5}], temperature=0.0, max_tokens=6)  # type: ignore[dict-item]
    requests = [greedy(PROMPTS[0], 6), bad, greedy(PROMPTS[2], 8)]
    results = TransformersBackend(spec, batch_size=4, num_threads=1).complete(requests)
    assert len(results) == 3
    assert not results[0].ok and not results[1].ok and results[0].error == results[1].error
    assert "generation failed" in results[1].error and "\n" not in results[1].error
    assert results[2].ok and results[2].texts[0]


def test_a_long_prompt_is_not_padded_into_every_row() -> None:
    """Batches hold at most ``batch_size`` rows and BATCH_PADDED_CHARS padded characters: a prompt near the
    model's context gets a batch of its own, the short ones share theirs; every request is in one batch."""
    from tasks.models.llm import BATCH_PADDED_CHARS

    backend = TransformersBackend(resolve_model("llm"), batch_size=4)
    long = "word " * (BATCH_PADDED_CHARS // 5)
    requests = [greedy(p) for p in PROMPTS * 2] + [greedy(long)]
    batches = backend.batches(requests)
    assert sorted(i for b in batches for i in b) == list(range(len(requests)))
    assert [8] in batches and all(len(b) <= 4 for b in batches)
    assert all(len(b) * max(len(requests[i].messages[0]["content"]) for i in b) <= BATCH_PADDED_CHARS
               for b in batches if len(b) > 1)
