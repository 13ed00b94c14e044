"""STRAP-style diverse paraphrasing: one paraphrase per text by nucleus sampling from a paraphrase model.

The article's STRAP (Krishna, Wieting and Iyyer 2020) is a GPT-2 paraphraser trained on paraphrase pairs
filtered for lexical and syntactic diversity, decoded with nucleus sampling; it strips stylistic
attributes (low style preservation). The trained STRAP weights do not install offline, so:

- production: a configured seq2seq paraphraser (``model`` or config ``models.paraphraser``: a local folder
  or, with downloads allowed, a hub id such as the registry's ``eugenesiow/bart-paraphrase``), loaded with
  :func:`~tasks.models.loaders.load_seq2seq` and decoded with ``do_sample=True, top_p, temperature``;
- offline default (the paraphraser role's default ``smollm2``): the instruct LLM asked for a plain
  paraphrase, same nucleus sampling, through :func:`~tasks.models.llm.llm_backend_for` (vLLM when an
  endpoint is configured for ``llm``).

A missing model raises ModelUnavailable (one line naming role, model and fix). Inputs longer than the
model's context are cut (``max_input_tokens`` for seq2seq, ``max_input_words`` for the LLM) and flagged
with meta ``truncated``. Seeds follow :mod:`tasks.generate.llm` (``per_text`` by default).
"""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.errors import STRICT_INPUT, ConfigError
from tasks.generate.base import TRUNCATED, Generated, Output, Strategy, register_strategy, truncate_tokens
from tasks.generate.llm import build_requests, one_line_text, parse_paraphrases, request_seed
from tasks.limits import MAX_BATCH, MAX_TEMPERATURE, MAX_TOKENS
from tasks.models.llm import LLMBackend, llm_backend_for, raise_if_unreachable
from tasks.models.loaders import TORCH_RNG_LOCK, load_seq2seq
from tasks.models.registry import ModelSpec, default_models, resolve_model

PARAPHRASE_TEMPLATE = "Paraphrase the text below. Reply with the paraphrase only.\n\nText: {text}"
CAUSAL_KINDS = ("hf-causal-lm", "gguf-causal-lm")


class ParaphraseParams(BaseModel):
    """Params of the ``paraphrase`` strategy."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    model: str | None = Field(None, description="paraphraser: short name, local folder or hub id "
                                                "(default: the paraphraser role's offline default, smollm2)")
    top_p: float = Field(0.9, gt=0.0, le=1.0, description="nucleus sampling mass (STRAP-style diversity)")
    temperature: float = Field(1.0, gt=0.0, le=MAX_TEMPERATURE)
    max_tokens: int = Field(128, ge=1, le=MAX_TOKENS, description="new tokens per paraphrase")
    max_input_tokens: int = Field(512, ge=8, le=MAX_TOKENS, description="seq2seq inputs are cut to this many tokens")
    max_input_words: int = Field(1000, ge=1, le=MAX_TOKENS, description="LLM inputs are cut to this many words")
    template: str = Field(PARAPHRASE_TEMPLATE, description="LLM user message; {text} is filled in")
    system: str | None = None
    seed_mode: Literal["per_text", "per_batch"] = "per_text"
    batch_size: int = Field(8, ge=1, le=MAX_BATCH, description="seq2seq texts per generate call (per_batch seeds)")
    backend: dict[str, Any] = Field(default_factory=dict, description="llm_backend_for settings (LLM path)")

    @field_validator("template")
    @classmethod
    def _has_text(cls, value: str) -> str:
        if "{text}" not in value:
            raise ValueError("template must contain {text}")
        return value


def seq2seq_paraphrase(spec: ModelSpec, texts: list[str], params: ParaphraseParams, *, seed: int) -> list[Output]:
    """Nucleus-sampled paraphrases from a seq2seq model, one per text (truncated inputs flagged)."""
    import torch

    tokenizer, model = load_seq2seq(spec)
    limit = min(params.max_input_tokens, getattr(model.config, "max_position_embeddings", None) or 10**9)
    cut = [truncate_tokens(tokenizer, t, limit - 2) for t in texts]  # room for BOS/EOS
    if params.seed_mode == "per_text":
        chunks = [[i] for i in range(len(texts))]
    else:
        chunks = [list(range(s, min(s + params.batch_size, len(texts)))) for s in range(0, len(texts), params.batch_size)]
    outs: list[Output] = [RuntimeError("not generated")] * len(texts)
    for k, chunk in enumerate(chunks):
        chunk_seed = request_seed(seed, texts[chunk[0]], "per_text") if params.seed_mode == "per_text" else seed + k
        enc = tokenizer([cut[i][0] for i in chunk], return_tensors="pt", padding=True, truncation=True,
                        max_length=limit).to(model.device)
        try:
            with TORCH_RNG_LOCK, torch.inference_mode():
                torch.manual_seed(chunk_seed)
                ids = model.generate(**enc, do_sample=True, top_p=params.top_p, top_k=0,
                                     temperature=params.temperature, max_new_tokens=params.max_tokens)
        except Exception as exc:  # one bad chunk fails its rows
            for i in chunk:
                outs[i] = exc
            continue
        for i, text in zip(chunk, tokenizer.batch_decode(ids, skip_special_tokens=True), strict=True):
            outs[i] = Generated(text.strip(), {TRUNCATED: True} if cut[i][1] else {})
    return outs


@register_strategy("paraphrase", params=ParaphraseParams)
class ParaphraseStrategy(Strategy):
    """One diverse paraphrase per text (nucleus sampling), from a seq2seq paraphraser or the instruct LLM."""

    params: ParaphraseParams
    llm_settings_field = "backend"

    @classmethod
    def uses_llm(cls, params: ParaphraseParams) -> bool:  # type: ignore[override]
        """The LLM path unless ``model`` names a seq2seq paraphraser."""
        if params.model is None:
            return resolve_model("paraphraser", default_models()["paraphraser"]).kind in CAUSAL_KINDS
        try:
            return resolve_model("paraphraser", params.model).kind in CAUSAL_KINDS
        except Exception:  # a model that is not here: the stage fails later with its own clear line
            return False

    def __init__(self, params: ParaphraseParams, backend: LLMBackend | None = None) -> None:
        super().__init__(params)
        name = params.model or default_models()["paraphraser"]
        self.spec = resolve_model("paraphraser", name)  # ModelUnavailable (one line) when it is not here
        self.backend: LLMBackend | None = None
        if self.spec.kind in CAUSAL_KINDS:
            settings = {**({"model": params.model} if params.model else {}), **params.backend}
            self.backend = backend if backend is not None else llm_backend_for("llm", settings)
        elif self.spec.kind != "hf-seq2seq":
            raise ConfigError(f"strategies.paraphrase.model: {name} is a {self.spec.kind} model; "
                              f"a paraphraser is a seq2seq model or an instruct LLM")

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[Output]:
        texts = [str(t) for t in batch["text"].tolist()]
        if self.backend is None:
            return seq2seq_paraphrase(self.spec, texts, self.params, seed=seed)
        requests, flags = build_requests(texts, self.params, seed=seed, n=1)
        outs: list[Output] = []
        results = self.backend.complete(requests)
        raise_if_unreachable(results)
        for result, truncated in zip(results, flags, strict=True):
            if not result.ok:
                outs.append(RuntimeError(f"LLM request failed: {result.error}"))
                continue
            answer = (result.texts or [""])[0]
            found = parse_paraphrases(answer)
            if not found:
                outs.append(ValueError(f"no paraphrase in answer: {one_line_text(answer) or '(empty)'}"))
            else:
                outs.append(Generated(found[0], {TRUNCATED: True} if truncated else {}))
        return outs
