"""Differentially private rewriting with an explicit epsilon: DP-Prompt (default) and DP-BART.

**DP-Prompt** (Utpala, Hooker and Chen 2023): an LLM paraphrases the document ("Document: ...
Paraphrase of the document:") while every next token is sampled from ``softmax(clip(logits)/T)`` over
the whole vocabulary, logits clamped to ``[b_min, b_max]``. Each token is the exponential mechanism with
utility = logit and sensitivity ``b_max - b_min``, so it is ``epsilon_token = 2 (b_max - b_min) / T``
-DP. The configured ``epsilon`` is the per-document budget, for DP-Prompt as for DP-BART: it is split
over the token budget, ``epsilon_token = epsilon / max_tokens`` (meta column ``epsilon_token``), and
``T = 2 (b_max - b_min) / epsilon_token``. A text of k sampled tokens (EOS included, k <= max_tokens)
composes sequentially to ``epsilon_doc = k * epsilon_token <= epsilon`` (meta ``epsilon_doc``, what was
spent); ``epsilon_doc_bound = max_tokens * epsilon_token = epsilon`` is the figure that holds whatever the
stopping point. So ``epsilon: 50`` with 64 tokens samples each token at epsilon 0.78 (T = 51 with the
default clip), not at epsilon 50 per token (T = 0.8, 3,200 per text). No top-p/top-k: truncating the support would break the bound.
Sampling runs in process (:func:`dp_prompt_generate`: own decoding loop with KV cache, one seeded
``torch.Generator`` per text); an OpenAI-compatible server cannot clamp logits, so a configured
endpoint is a ConfigError (a vLLM logits processor is future work). Defaults ``b_min=5, b_max=25`` come
from SmolLM2-135M-Instruct's next-token logits on a paraphrase prompt (1st-99th percentile 7.6-22.8);
recalibrate them for another model.

**DP-BART** (Igamberdiev and Habernal 2023; the article's DP-BART-PR): encode the text with a BART-style
encoder-decoder, clip the encoder output, add noise calibrated to ``epsilon`` (per document), decode
(greedy; post-processing costs no privacy). The input is padded/cut to exactly ``max_input_tokens = n``
positions and the decoder attends to all of them, so the released representation has a fixed shape
(n x d) and its length leaks nothing. Clipping (:func:`clip_representation`):

- ``value`` (default; DP-BART's clipping by value, the article's "dimension-wise clipping"): every entry
  to ``[-C, C]``; L2 sensitivity ``2C sqrt(n d)``, L1 sensitivity ``2C n d``;
- ``norm``: every token vector to L2 norm <= C; L2 sensitivity ``2C sqrt(n)``, L1 ``2C sqrt(d) n``.

Mechanisms (:func:`noise_scale`): ``gaussian`` = the analytic Gaussian mechanism (Balle and Wang 2018,
as DP-BART uses; valid for any epsilon, unlike the classical bound that needs epsilon < 1), ``(epsilon,
delta)``-DP with sigma from the L2 sensitivity; ``laplace`` = pure epsilon-DP, scale ``L1 / epsilon``.
Without trained weights (DP-BART fine-tunes and prunes the model to decode noisy representations), a
plain BART decodes noise; no such weights install offline, so with none configured the strategy raises
ModelUnavailable (one line).

Caveat (article, note 2, on DP-BART*): "Due to the complexity of dynamic DP-composition in multi-length
multi-document settings, when generating from arbitrarily long document sequences by the same person
(e.g., TalkLife in Section 5.3), we treat each text as an individual data point. In doing so, less noise
is added than what is formally required to satisfy (ϵ, δ)-DP." The same holds here for both methods:
Every row also carries the configured ``epsilon`` (the budget the variant is named after), which the score
tables copy into their ``epsilon`` column. ``epsilon_doc`` is per text; :func:`privacy_spent` composes an author's texts (basic composition: the
epsilons, and deltas, add up). Every row carries this in its ``caveat`` column.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tasks.corpus.schema import STATUS_OK
from tasks.errors import STRICT_INPUT, ConfigError, ModelUnavailable
from tasks.generate.base import TRUNCATED, Generated, Output, Strategy, register_strategy, truncate_tokens
from tasks.generate.llm import request_seed
from tasks.limits import MAX_BATCH, MAX_EPSILON, MAX_LOGIT, MAX_TOKENS
from tasks.models.llm import ENDPOINT_ENV, TransformersBackend, llm_backend_for
from tasks.models.loaders import load_seq2seq
from tasks.models.registry import ModelSpec, production_models, resolve_model

DP_PROMPT_TEMPLATE = "Document: {text}\nParaphrase of the document:"
CAVEAT = ("epsilon_doc is per text: each text is treated as an individual data point, so an author's texts "
          "compose (privacy_spent sums them) and per author less noise is added than formally required "
          "(the article's DP-BART* caveat, note 2)")


class DPParams(BaseModel):
    """Params of the ``dp`` strategy. ``epsilon`` has no default: say what you spend."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    method: Literal["dp-prompt", "dp-bart"] = "dp-prompt"
    epsilon: float = Field(gt=0, le=MAX_EPSILON, description="per-document budget (both methods); dp-prompt spends "
                                             "epsilon / max_tokens per generated token")
    model: str | None = Field(None, description="dp-prompt: an llm (default smollm2); dp-bart: a BART-style "
                                                "seq2seq folder/hub id (default: the paraphraser's production model)")
    # DP-Prompt
    b_min: float = Field(5.0, ge=-MAX_LOGIT, le=MAX_LOGIT, description="logit clip lower bound (dp-prompt)")
    b_max: float = Field(25.0, ge=-MAX_LOGIT, le=MAX_LOGIT, description="logit clip upper bound (dp-prompt)")
    template: str = Field(DP_PROMPT_TEMPLATE, description="dp-prompt user message; {text} is filled in")
    chat: bool = Field(True, description="wrap the prompt in the model's chat template (instruct models)")
    max_tokens: int = Field(64, ge=1, le=MAX_TOKENS, description="new tokens per text")
    batch_size: int = Field(8, ge=1, le=MAX_BATCH, description="texts decoded together")
    # DP-BART
    clip: float = Field(0.2, gt=0, le=MAX_LOGIT, description="C: value bound or per-token norm bound (dp-bart)")
    clipping: Literal["value", "norm"] = "value"
    mechanism: Literal["gaussian", "laplace"] = "gaussian"
    delta: float = Field(1e-5, gt=0, lt=1, description="delta of the analytic Gaussian mechanism")
    max_input_tokens: int = Field(128, ge=4, le=MAX_TOKENS, description="dp-prompt: inputs cut to this; dp-bart: the fixed n")
    seed_mode: Literal["per_text", "per_batch"] = "per_text"
    backend: dict[str, Any] = Field(default_factory=dict, description="llm_backend_for settings (dp-prompt)")

    @model_validator(mode="after")
    def _bounds(self) -> DPParams:
        if self.b_max <= self.b_min:
            raise ValueError(f"b_max ({self.b_max}) must exceed b_min ({self.b_min})")
        if "{text}" not in self.template:
            raise ValueError("template must contain {text}")
        return self


# ---------------------------------------------------------------- DP-Prompt


def dp_prompt_epsilon_token(epsilon_doc: float, max_tokens: int) -> float:
    """Per-token epsilon of DP-Prompt for a per-document budget: split evenly over the ``max_tokens`` that
    may be sampled (sequential composition), so any stopping point stays within ``epsilon_doc``."""
    return epsilon_doc / max_tokens


def dp_prompt_temperature(epsilon_token: float, b_min: float, b_max: float) -> float:
    """T such that clipped-logit sampling is ``epsilon_token``-DP per token: ``2 (b_max - b_min) / epsilon``."""
    return 2.0 * (b_max - b_min) / epsilon_token


def dp_prompt_epsilon(temperature: float, b_min: float, b_max: float) -> float:
    """Per-token epsilon of clipped-logit sampling at ``temperature``: ``2 (b_max - b_min) / T``."""
    return 2.0 * (b_max - b_min) / temperature


def clamp_processor(b_min: float, b_max: float) -> Any:
    """A transformers LogitsProcessor that clamps every logit to ``[b_min, b_max]``."""
    from transformers import LogitsProcessor

    class ClampLogitsProcessor(LogitsProcessor):
        def __init__(self) -> None:
            self.b_min, self.b_max = float(b_min), float(b_max)

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            return scores.clamp(min=self.b_min, max=self.b_max)

    return ClampLogitsProcessor()


def dp_prompt_distribution(logits: Any, b_min: float, b_max: float, temperature: float) -> Any:
    """The DP-Prompt next-token distribution: ``softmax(clip(logits, b_min, b_max) / T)`` (float64)."""
    import torch

    clipped = clamp_processor(b_min, b_max)(None, logits.double())
    return torch.softmax(clipped / temperature, dim=-1)


#: A DP-Prompt next-token distribution: (logits, b_min, b_max, temperature) -> probabilities. The mechanism is
#: :func:`dp_prompt_distribution`; the audit (tasks/privacy/dp_audit.py) takes another to plant a broken one.
Distribution = Callable[[Any, float, float, float], Any]


def eos_token_ids(tokenizer: Any, model: Any) -> set[int]:
    """The tokens that end a DP-Prompt output: the tokenizer's EOS and the model's generation-config EOS ids."""
    eos = {tokenizer.eos_token_id}
    cfg_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos |= set(cfg_eos) if isinstance(cfg_eos, (list, tuple)) else {cfg_eos}
    eos.discard(None)
    return eos


def dp_prompt_sample(tokenizer: Any, model: Any, prompts: Sequence[str], *, b_min: float, b_max: float,
                     temperature: float, max_tokens: int, seeds: Sequence[int],
                     distribution: Distribution = dp_prompt_distribution) -> list[list[int]]:
    """The sampled token ids (EOS included) per prompt, every token drawn from ``distribution`` (the mechanism:
    softmax(clip(logits)/T)).

    Left-padded batch, KV cache, explicit position ids; prompt i draws from its own
    ``torch.Generator(seed_i)``, so its output does not depend on the other prompts' draws."""
    import torch

    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, padding_side="left",
                    add_special_tokens=False).to(model.device)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    n = len(prompts)
    gens = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
    eos = eos_token_ids(tokenizer, model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)
    tokens: list[list[int]] = [[] for _ in range(n)]
    done = [False] * n
    past = None
    step_ids, step_pos = ids, positions
    with torch.inference_mode():
        for _ in range(max_tokens):
            out = model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                        past_key_values=past, use_cache=True)
            past = out.past_key_values
            probs = distribution(out.logits[:, -1, :], b_min, b_max, temperature).cpu()
            nxt = []
            for i in range(n):
                tok = int(torch.multinomial(probs[i], 1, generator=gens[i])) if not done[i] else pad
                if not done[i]:
                    tokens[i].append(tok)
                    done[i] = tok in eos
                nxt.append(tok)
            if all(done):
                break
            step_ids = torch.tensor(nxt, device=model.device).unsqueeze(-1)
            mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=mask.device)], dim=-1)
            step_pos = step_pos[:, -1:] + 1
    return tokens


def dp_prompt_generate(tokenizer: Any, model: Any, prompts: Sequence[str], *, b_min: float, b_max: float,
                       temperature: float, max_tokens: int, seeds: Sequence[int]) -> list[tuple[str, int]]:
    """(text, sampled tokens incl. EOS) per prompt, sampling every token from softmax(clip(logits)/T)
    (:func:`dp_prompt_sample`)."""
    tokens = dp_prompt_sample(tokenizer, model, prompts, b_min=b_min, b_max=b_max, temperature=temperature,
                              max_tokens=max_tokens, seeds=seeds)
    eos = eos_token_ids(tokenizer, model)
    texts = tokenizer.batch_decode([[t for t in toks if t not in eos] for toks in tokens], skip_special_tokens=True)
    return [(text.strip(), len(toks)) for text, toks in zip(texts, tokens, strict=True)]


# ---------------------------------------------------------------- DP-BART


def clip_representation(hidden: Any, clip: float, clipping: str = "value") -> Any:
    """``value``: every entry to [-C, C]; ``norm``: every token vector (last dim) to L2 norm <= C."""
    if clipping == "value":
        return hidden.clamp(min=-clip, max=clip)
    if clipping == "norm":
        norms = hidden.norm(dim=-1, keepdim=True)
        return hidden * (clip / norms.clamp(min=clip))
    raise ValueError(f"clipping must be 'value' or 'norm', not {clipping!r}")


def sensitivity(clip: float, n: int, d: int, clipping: str, norm: Literal["l1", "l2"]) -> float:
    """Global sensitivity of an n x d clipped representation (any two texts are neighbours, local DP)."""
    if clipping == "value":
        return 2 * clip * (math.sqrt(n * d) if norm == "l2" else n * d)
    if clipping == "norm":
        return 2 * clip * (math.sqrt(n) if norm == "l2" else math.sqrt(d) * n)
    raise ValueError(f"clipping must be 'value' or 'norm', not {clipping!r}")


def analytic_gaussian_delta(sigma: float, epsilon: float, l2_sensitivity: float) -> float:
    """delta achieved by Gaussian noise sigma (Balle and Wang 2018, Thm 8), computed in log space."""
    from scipy.special import log_ndtr

    a, b = l2_sensitivity / (2 * sigma), epsilon * sigma / l2_sensitivity
    return float(math.exp(log_ndtr(a - b)) - math.exp(epsilon + log_ndtr(-a - b)))


def analytic_gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float) -> float:
    """Smallest sigma whose Gaussian mechanism is (epsilon, delta)-DP (bisection on log sigma)."""
    lo, hi = 1e-12 * l2_sensitivity, 1e6 * l2_sensitivity
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if analytic_gaussian_delta(mid, epsilon, l2_sensitivity) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def noise_scale(epsilon: float, *, clip: float, n: int, d: int, clipping: str = "value",
                mechanism: str = "gaussian", delta: float = 1e-5) -> float:
    """Laplace scale ``b = L1 / epsilon`` or analytic-Gaussian sigma for (epsilon, delta) and the L2 sensitivity."""
    if mechanism == "laplace":
        return sensitivity(clip, n, d, clipping, "l1") / epsilon
    if mechanism == "gaussian":
        return analytic_gaussian_sigma(epsilon, delta, sensitivity(clip, n, d, clipping, "l2"))
    raise ValueError(f"mechanism must be 'gaussian' or 'laplace', not {mechanism!r}")


def privatize_representation(hidden: Any, *, epsilon: float, clip: float, clipping: str = "value",
                             mechanism: str = "gaussian", delta: float = 1e-5, generator: Any = None) -> tuple[Any, float]:
    """Clip an (n, d) representation and add noise for epsilon; returns (noised, noise scale)."""
    import torch

    n, d = hidden.shape[-2], hidden.shape[-1]
    clipped = clip_representation(hidden, clip, clipping)
    scale = noise_scale(epsilon, clip=clip, n=n, d=d, clipping=clipping, mechanism=mechanism, delta=delta)
    if mechanism == "gaussian":
        noise = torch.randn(clipped.shape, generator=generator, dtype=torch.float64) * scale
    else:  # Laplace by inverse CDF from a seeded uniform draw in (-1/2, 1/2)
        u = torch.rand(clipped.shape, generator=generator, dtype=torch.float64) - 0.5
        noise = -scale * torch.sign(u) * torch.log1p(-2 * u.abs())
    return (clipped.double() + noise.to(clipped.device)).to(hidden.dtype), scale


def dp_bart_rewrite(spec: ModelSpec, texts: Sequence[str], params: DPParams, *, seeds: Sequence[int]) -> list[Output]:
    """Encode (fixed n positions), clip + noise each representation, decode greedily; one output per text."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    tokenizer, model = load_seq2seq(spec)
    n = min(params.max_input_tokens, getattr(model.config, "max_position_embeddings", None) or 10**9)
    outs: list[Output] = []
    for text, seed in zip(texts, seeds, strict=True):
        truncated = len(tokenizer(text)["input_ids"]) > n
        enc = tokenizer([text], return_tensors="pt", padding="max_length", truncation=True, max_length=n).to(model.device)
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        with torch.inference_mode():
            hidden = model.get_encoder()(**enc).last_hidden_state[0].cpu()
            noised, scale = privatize_representation(hidden, epsilon=params.epsilon, clip=params.clip,
                                                     clipping=params.clipping, mechanism=params.mechanism,
                                                     delta=params.delta, generator=gen)
            full = torch.ones((1, n), dtype=enc["attention_mask"].dtype, device=model.device)
            ids = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=noised.unsqueeze(0).to(model.device)),
                                 attention_mask=full, do_sample=False, num_beams=1, max_new_tokens=params.max_tokens)
        meta: dict[str, Any] = {"epsilon_doc": params.epsilon, "epsilon_doc_bound": params.epsilon,
                                "noise_scale": scale, "caveat": CAVEAT}
        if params.mechanism == "gaussian":
            meta["delta_doc"] = params.delta
        if truncated:
            meta[TRUNCATED] = True
        outs.append(Generated(tokenizer.decode(ids[0], skip_special_tokens=True).strip(), meta))
    return outs


# ---------------------------------------------------------------- the strategy


@register_strategy("dp", params=DPParams)
class DPStrategy(Strategy):
    """Rewriting under local differential privacy: DP-Prompt (in-process LLM) or DP-BART (seq2seq)."""

    params: DPParams
    llm_settings_field = "backend"

    @classmethod
    def uses_llm(cls, params: DPParams) -> bool:  # type: ignore[override]
        return params.method == "dp-prompt"

    def __init__(self, params: DPParams) -> None:
        super().__init__(params)
        self.epsilon_token = dp_prompt_epsilon_token(params.epsilon, params.max_tokens)  # dp-prompt only
        self.temperature = dp_prompt_temperature(self.epsilon_token, params.b_min, params.b_max)
        if params.method == "dp-prompt":
            endpoint = params.backend.get("endpoint") or os.environ.get(ENDPOINT_ENV.format(role="LLM"))
            backend = None if endpoint else llm_backend_for("llm", {**({"model": params.model} if params.model else {}),
                                                                    **params.backend})
            if not isinstance(backend, TransformersBackend):
                raise ConfigError("strategies.dp.method: DP-Prompt clamps logits inside the model, which an "
                                  "OpenAI-compatible server (vLLM) does not expose; it needs the in-process "
                                  f"backend: unset {ENDPOINT_ENV.format(role='LLM')} and strategies.dp.backend.endpoint "
                                  "(a vLLM logits processor is future work)")
            self.spec = backend.spec
        else:
            name = params.model or production_models()["paraphraser"]
            self.spec = resolve_model("paraphraser", name)  # ModelUnavailable (one line) without weights
            if self.spec.kind != "hf-seq2seq":
                raise ModelUnavailable(f"model for role 'paraphraser': DP-BART needs an encoder-decoder (BART) "
                                       f"model, {name} is {self.spec.kind}; give a local folder via "
                                       f"strategies.dp.model: /path")

    @property
    def epsilon_doc_bound(self) -> float:
        """The per-document epsilon the strategy states (meta ``epsilon_doc_bound``): dp-prompt's per-token
        epsilon over the whole token budget, whatever the stopping point; dp-bart's configured epsilon."""
        if self.params.method == "dp-bart":
            return self.params.epsilon
        return self.epsilon_token * self.params.max_tokens

    @property
    def variant(self) -> str:
        """``<method>-eps<epsilon>``: epsilon is the per-document budget for both methods."""
        return f"{self.params.method}-eps{self.params.epsilon:g}"

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[Output]:
        texts = [str(t) for t in batch["text"].tolist()]
        seeds = self.seeds(texts, seed)
        if self.params.method == "dp-bart":
            return dp_bart_rewrite(self.spec, texts, self.params, seeds=seeds)
        return self._dp_prompt(texts, seeds)

    def prompts(self, tokenizer: Any, texts: Sequence[str]) -> tuple[list[str], list[bool]]:
        """DP-Prompt's model input per text (cut to ``max_input_tokens``, templated, chat-wrapped) and whether
        the text was cut; the audit teacher-forces outputs under exactly these."""
        p = self.params
        prompts, flags = [], []
        for text in texts:
            cut, truncated = truncate_tokens(tokenizer, text, p.max_input_tokens)
            content = p.template.format(text=cut)
            if p.chat:
                content = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                        add_generation_prompt=True)
            prompts.append(content)
            flags.append(truncated)
        return prompts, flags

    def seeds(self, texts: Sequence[str], seed: int) -> list[int]:
        """The sampling seed of each text (``seed_mode``): the audit replays the strategy's own draws."""
        return [request_seed(seed, t, self.params.seed_mode) + (0 if self.params.seed_mode == "per_text" else i)
                for i, t in enumerate(texts)]

    def _dp_prompt(self, texts: list[str], seeds: list[int]) -> list[Output]:
        # deferred: looked up at call time, so a replaced loader is the one used
        from tasks.models.loaders import load_causal_lm

        p = self.params
        tokenizer, model = load_causal_lm(self.spec)
        prompts, flags = self.prompts(tokenizer, texts)
        eps_token = self.epsilon_token
        outs: list[Output] = []
        for start in range(0, len(texts), p.batch_size):
            chunk = slice(start, start + p.batch_size)
            try:
                results = dp_prompt_generate(tokenizer, model, prompts[chunk], b_min=p.b_min, b_max=p.b_max,
                                             temperature=self.temperature, max_tokens=p.max_tokens, seeds=seeds[chunk])
            except Exception as exc:  # one bad chunk fails its rows, not the batch
                outs.extend([exc] * len(prompts[chunk]))
                continue
            for (text, k), truncated in zip(results, flags[chunk], strict=True):
                meta: dict[str, Any] = {"epsilon_token": eps_token, "n_tokens": float(k), "epsilon_doc": eps_token * k,
                                        "epsilon_doc_bound": self.epsilon_doc_bound, "temperature": self.temperature,
                                        "caveat": CAVEAT}
                if truncated:
                    meta[TRUNCATED] = True
                outs.append(Generated(text, meta))
        return outs


def privacy_spent(synthetic: pd.DataFrame) -> pd.DataFrame:
    """Privacy spent per author over the released (ok) rows that carry ``epsilon_doc``.

    Basic sequential composition: an author's epsilons add up (``epsilon`` = sum of ``epsilon_doc``; also
    ``epsilon_bound`` from ``epsilon_doc_bound`` and ``delta`` from ``delta_doc`` where present), across
    every document, strategy and variant in the table, since each release is a separate mechanism run on
    that author's data. Rows without an author (null ``author_id``) count as their own individual, keyed
    ``doc:<doc_id>``. Columns: author_id, n_docs, epsilon, epsilon_max_doc, [epsilon_bound], [delta]."""
    if "epsilon_doc" not in synthetic.columns:
        raise ValueError("no epsilon_doc column: the table was not generated by a DP strategy")
    rows = synthetic[(synthetic["status"] == STATUS_OK) & synthetic["epsilon_doc"].notna()].copy()
    author = rows["author_id"].astype("string") if "author_id" in rows.columns else pd.Series(pd.NA, index=rows.index)
    rows["_who"] = author.fillna("doc:" + rows["doc_id"].astype("string"))
    rows["_eps"] = rows["epsilon_doc"].astype("float64")
    agg: dict[str, tuple[str, str]] = {"n_docs": ("_eps", "size"), "epsilon": ("_eps", "sum"),
                                       "epsilon_max_doc": ("_eps", "max")}
    for src, dst in (("epsilon_doc_bound", "epsilon_bound"), ("delta_doc", "delta")):
        if src in rows.columns:
            rows[src] = rows[src].astype("float64")
            agg[dst] = (src, "sum")
    out = rows.groupby("_who", sort=True).agg(**agg).reset_index().rename(columns={"_who": "author_id"})
    out["author_id"] = out["author_id"].astype("string")
    out["n_docs"] = out["n_docs"].astype("int64")
    return out
