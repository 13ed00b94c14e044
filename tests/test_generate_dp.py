"""DP strategy: DP-Prompt's clipped-logit sampling (processor, realised distribution, epsilon bookkeeping),
privacy_spent composition, DP-BART's clipping and noise and its decode path on a tiny random BART saved to
tmp (no download), the seq2seq paraphrase path on the same model, and one real DP-Prompt run (slow)."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import chisquare

from tasks.corpus.schema import STATUS_FAILED, STATUS_OK
from tasks.errors import ConfigError, ModelUnavailable
from tasks.generate import build_strategy, generate_synthetic
from tasks.generate.dp import (
    CAVEAT,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    clamp_processor,
    clip_representation,
    dp_prompt_distribution,
    dp_prompt_epsilon,
    dp_prompt_generate,
    dp_prompt_temperature,
    noise_scale,
    privacy_spent,
    privatize_representation,
    sensitivity,
)

TEXTS = ["I've been down to a dealer and driven them.", "lol cant believe the bus was late AGAIN today",
         "The new cafe on Main St makes great coffee."]


def corpus(texts: list[str], authors: list[str | None] | None = None) -> pd.DataFrame:
    n = len(texts)
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "text": texts,
                         "author_id": authors or [f"a{i % 2}" for i in range(n)]})


# --- DP-Prompt: clamping and the realised distribution ---------------------------------------------------------


def test_clamp_processor_really_clamps():
    from transformers import LogitsProcessor

    proc = clamp_processor(-2.0, 3.0)
    assert isinstance(proc, LogitsProcessor)
    scores = torch.randn(4, 1000) * 50
    out = proc(torch.zeros((4, 1), dtype=torch.long), scores)
    assert out.min() >= -2.0 and out.max() <= 3.0
    inside = (scores > -2) & (scores < 3)
    assert torch.equal(out[inside], scores[inside])


def test_temperature_epsilon_roundtrip():
    assert dp_prompt_temperature(5.0, 0.0, 25.0) == pytest.approx(10.0)
    assert dp_prompt_epsilon(10.0, 0.0, 25.0) == pytest.approx(5.0)


def test_configured_epsilon_bounds_the_privacy_loss_of_a_whole_document():
    """The exponential-mechanism definition, measured: for any two inputs (any two logit vectors) and any
    output of up to max_tokens tokens, log P(out | a) - log P(out | b) <= the configured (per-document) epsilon."""
    epsilon, max_tokens, b_min, b_max = 50.0, 64, 5.0, 25.0
    strategy = build_strategy("dp", {"epsilon": epsilon, "max_tokens": max_tokens, "b_min": b_min, "b_max": b_max})
    assert strategy.variant == "dp-prompt-eps50"
    assert strategy.epsilon_token == pytest.approx(epsilon / max_tokens)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(200):
        a, b = (torch.tensor(rng.uniform(-10, 40, size=50)) for _ in range(2))
        pa = dp_prompt_distribution(a, b_min, b_max, strategy.temperature)
        pb = dp_prompt_distribution(b, b_min, b_max, strategy.temperature)
        worst = max(worst, float((pa.log() - pb.log()).abs().max()))
    assert worst <= strategy.epsilon_token + 1e-9
    assert worst * max_tokens <= epsilon + 1e-6  # a whole document composes to at most the configured budget
    # the old per-token reading would sample at T = 0.8, spending 3,200 on a 64-token text
    assert strategy.temperature == pytest.approx(2 * (b_max - b_min) * max_tokens / epsilon)


class FixedLogitsLM(torch.nn.Module):
    """A 'model' whose next-token logits are always the same vector (records the calls it gets)."""

    def __init__(self, logits: list[float]) -> None:
        super().__init__()
        self.logits = torch.tensor(logits)
        self.device = torch.device("cpu")
        self.generation_config = SimpleNamespace(eos_token_id=None)
        self.calls: list[dict] = []

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache):
        self.calls.append({"ids": input_ids.shape, "mask": attention_mask.shape, "pos": position_ids.clone()})
        b, t = input_ids.shape
        return SimpleNamespace(logits=self.logits.expand(b, t, -1).clone(), past_key_values=("kv",))


class CharTokenizer:
    """Prompts are strings of digits (one token each); left padding with 9; eos = ``eos``."""

    pad_token_id = 9

    def __init__(self, eos: int | None = None) -> None:
        self.eos_token_id = eos

    def __call__(self, prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False):
        from transformers import BatchEncoding

        width = max(len(p) for p in prompts)
        ids = [[9] * (width - len(p)) + [int(c) for c in p] for p in prompts]
        mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
        return BatchEncoding({"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)})

    def batch_decode(self, seqs, skip_special_tokens=True):
        return [" ".join(str(t) for t in s) for s in seqs]


def test_realised_sampling_distribution_is_softmax_of_clipped_logits():
    logits = [-10.0, 0.0, 3.0, 8.0, 30.0, 26.0]  # 30 and 26 both clip to 25: equally likely after clipping
    b_min, b_max, eps = 0.0, 25.0, 5.0
    temperature = dp_prompt_temperature(eps, b_min, b_max)
    expected = dp_prompt_distribution(torch.tensor(logits), b_min, b_max, temperature).numpy()
    clipped = np.clip(logits, b_min, b_max) / temperature
    assert np.allclose(expected, np.exp(clipped) / np.exp(clipped).sum())
    model, n = FixedLogitsLM(logits), 4000
    out = dp_prompt_generate(CharTokenizer(), model, ["12", "3"] * (n // 2), b_min=b_min, b_max=b_max,
                             temperature=temperature, max_tokens=1, seeds=range(n))
    counts = np.bincount([int(text) for text, k in out], minlength=len(logits))
    assert all(k == 1 for _, k in out)
    assert chisquare(counts, expected * n).pvalue > 1e-3
    assert abs(counts[4] - counts[5]) < 5 * math.sqrt(n * expected[4])  # the clamp, not the raw logits, decides
    # left padding: positions count real tokens only
    assert model.calls[0]["pos"][1].tolist() == [0, 0]


def test_generation_stops_at_eos_and_counts_tokens_and_is_seeded():
    logits = [0.0, 5.0, 5.0]  # token 0 is EOS
    tok = CharTokenizer(eos=0)
    kwargs = {"b_min": 0.0, "b_max": 5.0, "temperature": 2.0, "max_tokens": 50, "seeds": [1, 2, 3]}
    first = dp_prompt_generate(tok, FixedLogitsLM(logits), ["1", "2", "12"], **kwargs)
    again = dp_prompt_generate(tok, FixedLogitsLM(logits), ["1", "2", "12"], **kwargs)
    assert first == again
    for text, k in first:
        assert 1 <= k <= 50
        assert len(text.split()) == k - 1 or (k == 50 and len(text.split()) == 50)


# --- DP-Prompt strategy: bookkeeping, config errors -------------------------------------------------------------


def test_epsilon_is_required_and_bounds_checked():
    with pytest.raises(ConfigError, match=r"^strategies\.dp\.epsilon: Field required"):
        build_strategy("dp", {})
    with pytest.raises(ConfigError, match="b_max"):
        build_strategy("dp", {"epsilon": 1, "b_min": 3, "b_max": 3})


def test_dp_prompt_refuses_an_openai_endpoint(monkeypatch):
    monkeypatch.setenv("SYNTHUGC_LLM_ENDPOINT_LLM", "http://gpu1:8000/v1")
    with pytest.raises(ConfigError, match=r"DP-Prompt .* in-process backend"):
        build_strategy("dp", {"epsilon": 10})


def test_dp_prompt_epsilon_bookkeeping(monkeypatch):
    import tasks.generate.dp as dp
    import tasks.models.loaders as loaders

    class Tok:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": list(range(len(text.split())))}

        def decode(self, ids, skip_special_tokens=True):
            return " ".join("w" for _ in ids)

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
            return "<user>" + messages[0]["content"]

    seen = {}

    def fake_generate(tokenizer, model, prompts, *, b_min, b_max, temperature, max_tokens, seeds):
        seen.update(prompts=list(prompts), temperature=temperature, seeds=list(seeds))
        return [("private text", 7), ("", 3), ("other", 20)][:len(prompts)]

    monkeypatch.setattr(loaders, "load_causal_lm", lambda spec: (Tok(), None))
    monkeypatch.setattr(dp, "dp_prompt_generate", fake_generate)
    strategy = build_strategy("dp", {"epsilon": 2.0, "b_min": 0, "b_max": 10, "max_tokens": 20,
                                     "max_input_tokens": 5})
    assert strategy.variant == "dp-prompt-eps2"
    table = generate_synthetic(strategy, corpus(["one two", "three", "a b c d e f g"]), seed=1)
    # epsilon is per document: 2.0 over a 20-token budget is 0.1 per token, T = 2 * (10 - 0) / 0.1
    assert seen["temperature"] == pytest.approx(200.0)
    assert seen["prompts"][0] == "<user>Document: one two\nParaphrase of the document:"
    assert len(set(seen["seeds"])) == 3
    assert table["epsilon_token"].tolist() == pytest.approx([0.1] * 3)
    assert table["epsilon_doc"].tolist() == pytest.approx([0.7, 0.3, 2.0])  # epsilon_token x sampled tokens
    assert table["epsilon_doc_bound"].tolist() == pytest.approx([2.0] * 3)  # the configured budget
    assert (table["epsilon_doc"] <= 2.0 + 1e-12).all()
    assert table.loc[1, "status"] == STATUS_FAILED and table.loc[1, "reason"] == "empty output"
    assert table["truncated"].tolist()[2] is True and table.loc[0, "truncated"] == False  # noqa: E712
    assert (table["caveat"] == CAVEAT).all()


def test_privacy_spent_composes_per_author():
    synthetic = pd.DataFrame({
        "doc_id": ["d0", "d1", "d2", "d3", "d4", "d0"],
        "author_id": pd.array(["a", "a", "b", "b", None, "a"], dtype="string"),
        "status": [STATUS_OK, STATUS_OK, STATUS_OK, STATUS_FAILED, STATUS_OK, STATUS_OK],
        "epsilon_doc": pd.array([3.0, 4.0, 5.0, 9.0, 1.0, 0.5], dtype="Float64"),
        "epsilon_doc_bound": pd.array([10.0, 10.0, 10.0, 10.0, 10.0, 10.0], dtype="Float64"),
    })
    spent = privacy_spent(synthetic).set_index("author_id")
    assert spent.loc["a", "epsilon"] == pytest.approx(7.5)  # two docs plus a second release of d0
    assert spent.loc["a", "n_docs"] == 3 and spent.loc["a", "epsilon_max_doc"] == 4.0
    assert spent.loc["b", "epsilon"] == 5.0  # the failed row released nothing
    assert spent.loc["doc:d4", "epsilon"] == 1.0
    assert spent.loc["a", "epsilon_bound"] == 30.0
    with pytest.raises(ValueError, match="epsilon_doc"):
        privacy_spent(synthetic.drop(columns=["epsilon_doc"]))


# --- DP-BART: clipping, noise -----------------------------------------------------------------------------------


def test_clipping_bounds_values_and_norms():
    h = torch.randn(12, 16) * 3
    h[0] = 0.01  # a vector already inside the ball stays as it is
    v = clip_representation(h, 0.5, "value")
    assert v.abs().max() <= 0.5
    nrm = clip_representation(h, 2.0, "norm")
    assert (nrm.norm(dim=-1) <= 2.0 + 1e-5).all()
    assert torch.allclose(nrm[0], h[0])
    assert torch.allclose(nrm[1] / nrm[1].norm(), h[1] / h[1].norm(), atol=1e-6)  # direction kept
    with pytest.raises(ValueError):
        clip_representation(h, 1.0, "other")


def test_sensitivities_and_noise_scales():
    c, n, d = 0.2, 8, 16
    assert sensitivity(c, n, d, "value", "l2") == pytest.approx(2 * c * math.sqrt(n * d))
    assert sensitivity(c, n, d, "value", "l1") == pytest.approx(2 * c * n * d)
    assert sensitivity(c, n, d, "norm", "l2") == pytest.approx(2 * c * math.sqrt(n))
    assert sensitivity(c, n, d, "norm", "l1") == pytest.approx(2 * c * math.sqrt(d) * n)
    assert noise_scale(50, clip=c, n=n, d=d, mechanism="laplace") == pytest.approx(2 * c * n * d / 50)
    l2 = sensitivity(c, n, d, "value", "l2")
    for eps in (0.5, 1.0, 50.0, 250.0):
        sigma = noise_scale(eps, clip=c, n=n, d=d, mechanism="gaussian", delta=1e-5)
        assert analytic_gaussian_delta(sigma, eps, l2) == pytest.approx(1e-5, rel=1e-3)
        assert analytic_gaussian_delta(sigma * 0.99, eps, l2) > 1e-5  # the smallest such sigma
    classic = l2 * math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5
    assert analytic_gaussian_sigma(0.5, 1e-5, l2) < classic  # tighter than the classical bound
    assert noise_scale(50, clip=c, n=n, d=d) > noise_scale(250, clip=c, n=n, d=d)


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_privatize_adds_noise_of_the_stated_scale(mechanism):
    h = torch.zeros(64, 128)
    gen = torch.Generator().manual_seed(0)
    noised, scale = privatize_representation(h, epsilon=5000.0, clip=1.0, clipping="norm", mechanism=mechanism,
                                             generator=gen)
    std = noised.double().std().item()
    expected = scale if mechanism == "gaussian" else scale * math.sqrt(2)
    assert std == pytest.approx(expected, rel=0.05)
    again, _ = privatize_representation(h, epsilon=5000.0, clip=1.0, clipping="norm", mechanism=mechanism,
                                        generator=torch.Generator().manual_seed(0))
    assert torch.equal(noised, again)


# --- DP-BART decode path and seq2seq paraphrase on a tiny random BART (no download) -----------------------------


@pytest.fixture(scope="module")
def tiny_bart(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BartConfig, BartForConditionalGeneration, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-bart")
    words = sorted({w.lower() for t in TEXTS for w in t.split()} | {"a", "the", "car", "good", "day"})
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", *words])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.save_pretrained(folder)
    config = BartConfig(vocab_size=len(vocab), d_model=16, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                        max_position_embeddings=64, bos_token_id=0, pad_token_id=1, eos_token_id=2,
                        decoder_start_token_id=2, forced_bos_token_id=None, forced_eos_token_id=None)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(config)
    model.final_logits_bias[0, :4] = -100.0  # never decode special tokens: every output has words
    model.save_pretrained(folder)
    return str(folder)


def test_dp_bart_without_weights_is_one_line():
    with pytest.raises(ModelUnavailable) as info:
        build_strategy("dp", {"method": "dp-bart", "epsilon": 50})
    assert "\n" not in str(info.value) and "paraphraser" in str(info.value)


def test_dp_bart_decodes_on_a_tiny_random_bart(tiny_bart):
    params = {"method": "dp-bart", "epsilon": 50, "model": tiny_bart, "max_input_tokens": 10, "max_tokens": 6,
              "clip": 0.2}
    strategy = build_strategy("dp", params)
    assert strategy.variant == "dp-bart-eps50"
    t0 = time.perf_counter()
    table = generate_synthetic(strategy, corpus(TEXTS), seed=0)
    print(f"dp-bart (tiny): {len(TEXTS) / (time.perf_counter() - t0):.1f} texts/s")
    assert len(table) == 3 and (table["status"] == STATUS_OK).all()
    assert table["epsilon_doc"].tolist() == [50.0] * 3 and table["delta_doc"].tolist() == [1e-5] * 3
    assert table["noise_scale"].tolist() == pytest.approx([noise_scale(50, clip=0.2, n=10, d=16)] * 3)
    assert table["truncated"].tolist() == [True, False, False]  # word-level pieces: 12, 9, 10 (limit 10)
    assert (table["caveat"] == CAVEAT).all() and "DP-BART*" in CAVEAT
    again = generate_synthetic(build_strategy("dp", params), corpus(TEXTS), seed=0)
    assert again["text"].equals(table["text"])  # seeded noise


def test_seq2seq_paraphrase_on_a_tiny_random_bart(tiny_bart):
    strategy = build_strategy("paraphrase", {"model": tiny_bart, "max_tokens": 6, "max_input_tokens": 12})
    table = generate_synthetic(strategy, corpus(TEXTS), seed=0)
    assert len(table) == 3 and (table["status"] == STATUS_OK).all()
    assert table["truncated"].tolist() == [True, False, False]  # 12 pieces > 12 - 2 (room for BOS/EOS)
    assert all(len(t.split()) <= 6 for t in table["text"])
    again = generate_synthetic(strategy, corpus(TEXTS), seed=0)
    assert again["text"].equals(table["text"])


# --- real DP-Prompt with SmolLM2 (slow) -------------------------------------------------------------------------


@pytest.mark.slow
def test_dp_prompt_with_smollm2():
    strategy = build_strategy("dp", {"epsilon": 20.0, "max_tokens": 20, "backend": {"num_threads": 1}})
    t0 = time.perf_counter()
    table = generate_synthetic(strategy, corpus(TEXTS[:2]), seed=0)
    print(f"dp-prompt: {2 / (time.perf_counter() - t0):.3f} texts/s")
    assert len(table) == 2 and set(table["status"]) <= {STATUS_OK, STATUS_FAILED}
    assert table["epsilon_token"].tolist() == pytest.approx([1.0, 1.0])  # 20 per document over 20 tokens
    assert (table["epsilon_doc"] <= 20.0 + 1e-9).all()
    assert (table["n_tokens"] >= 1).all() and (table["n_tokens"] <= 20).all()
    assert (table["epsilon_doc"] == table["epsilon_token"] * table["n_tokens"]).all()
    assert privacy_spent(table)["epsilon"].sum() == pytest.approx(table.loc[table["status"] == STATUS_OK,
                                                                            "epsilon_doc"].sum())
