"""LLM paraphrasing: an instruct LLM asked for stylistically diverse paraphrases in one answer.

The article (§4.1, Table 1, "LLM Paraphrasing") prompts LLaMA-2-13B-chat with "Write stylistically
diverse paraphrases." and the text; "by default, the model produces multiple paraphrases for the same
input", and the article keeps the first and the second (LLaMA-first, LLaMA-second), which drift further
from the source the later they come. This strategy does the same: one chat request per text, the outputs
split from the model's own list (:func:`parse_paraphrases`), the positions named in ``keep`` kept as
variants (``first``, ``second``, ...).

Prompt (:func:`prompt_template`): the article's, verbatim (:data:`ARTICLE_TEMPLATE`: the instruction, a
blank line, the text), unless ``ask_n`` is set: then the instruction is followed by a request for
``n_outputs`` paraphrases as a numbered list (:data:`ASK_N_TEMPLATE`), for models that otherwise give a
single paraphrase. ``ask_n`` default (None): asked only of the in-process model (the offline default SmolLM2-135M,
too small to volunteer a list: given the article's prompt alone, its answers held two or more
paraphrases for 2 of 12 debate sentences, measured); never of a served model (vLLM: LLaMA, Mixtral), which answers the
article's prompt with several paraphrases as the article describes. Each row's
``generation_signature`` column says which prompt was used (``prompt:article`` or ``prompt:article+n|n:2``, or
``prompt:custom-<sha>`` for a configured ``template``), with the model and sampling parameters.

Choices:

- Backend: :func:`~tasks.models.llm.llm_backend_for` for role ``llm``: the in-process SmolLM2 offline,
  vLLM's OpenAI-compatible server when ``SYNTHUGC_LLM_ENDPOINT_LLM`` is set. All requests of a batch go
  in one ``complete`` call; the backend batches (in-process) or runs them concurrently (HTTP).
- Sampling defaults: temperature 0.6, top_p 0.9 (LLaMA-2-chat's shipped generation config).
- Seeds: ``seed_mode="per_text"`` gives each request ``seed + stable_hash(text)``, so an output does not
  depend on how the corpus was sharded and the request cache hits across reshards (the in-process
  backend still batches them: each row samples with its own seeded generator);
  ``per_batch`` uses the run seed for all.
- Parsing (:func:`parse_paraphrases`): numbered (``1.``, ``1)``, ``(1)``), bulleted (``-``, ``*``, ``•``)
  or labelled (``Paraphrase 1:``) lists, else blank-line-separated paragraphs; a preamble line ending
  with ``:`` ("Here are two paraphrases:") and surrounding quotes are dropped. An answer with fewer
  paraphrases than a kept position fails that variant's row, with the raw answer (one line) in the reason.
- Over-long inputs are cut to ``max_input_words`` words (meta ``truncated``), backend-agnostic.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tasks.errors import STRICT_INPUT
from tasks.generate.base import (
    ORDINALS,
    TRUNCATED,
    Generated,
    Output,
    Strategy,
    register_strategy,
    stable_hash,
)
from tasks.limits import MAX_TEMPERATURE, MAX_TOKENS
from tasks.models.llm import (
    ChatRequest,
    ChatResult,
    LLMBackend,
    TransformersBackend,
    llm_backend_for,
    raise_if_unreachable,
)
from tasks.signatures import make_signature

ARTICLE_INSTRUCTION = "Write stylistically diverse paraphrases."
#: §4.1's prompt: the instruction and the text, nothing else.
ARTICLE_TEMPLATE = ARTICLE_INSTRUCTION + "\n\n{text}"
#: The instruction, then n asked for as a numbered list (for models that give one paraphrase otherwise).
ASK_N_TEMPLATE = (ARTICLE_INSTRUCTION + " Write {n} paraphrases of the text below as a numbered list "
                  "(1., 2., ...), one per line, and nothing else.\n\nText: {text}")
DEFAULT_TEMPLATE = ASK_N_TEMPLATE  # kept name: the template used when n is asked for
RAW_IN_REASON = 200  # characters of the raw answer quoted in a failed row's reason

_ITEM = re.compile(r"^\s*(?:\(?\d{1,2}[.):\]]|[-*•]|(?:paraphrase|version|option|rewrite|variant)\s*#?\d{1,2}"
                   r"\s*[:.)-]?)\s*(?P<body>.*)$", re.IGNORECASE)
_QUOTES = "\"'“”‘’`"
_BOLD_LABEL = re.compile(r"^\s*\*\*[^*\n]{1,40}?:\s*\*\*\s*|^\s*\*\*[^*\n]{1,40}?\*\*\s*:\s*")
_BOLD_MARKER = re.compile(r"^(\s*)\*\*(\(?\d{1,2}[.):\]])\*\*")


class LLMParams(BaseModel):
    """Params of the ``llm`` strategy."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    role: Literal["llm"] = Field("llm", description="model role whose backend answers (llm_backend_for)")
    n_outputs: int = Field(2, ge=1, le=len(ORDINALS), description="paraphrases asked for per text")
    keep: list[int | str] = Field(default_factory=lambda: ["first", "second"],
                                  description="positions kept as variants: ordinal names or 1-based ints")
    ask_n: bool | None = Field(None, description="ask for n_outputs paraphrases as a numbered list (default: "
                                                 "only of the offline in-process model; the article's prompt else)")
    template: str | None = Field(None, description="user message replacing the prompt; {text} and {n} are filled in")
    system: str | None = Field(None, description="optional system message")
    temperature: float = Field(0.6, ge=0.0, le=MAX_TEMPERATURE)
    top_p: float = Field(0.9, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=1, le=MAX_TOKENS, description="new tokens per answer (all paraphrases together)")
    seed_mode: Literal["per_text", "per_batch"] = "per_text"
    max_input_words: int = Field(1000, ge=1, le=MAX_TOKENS, description="longer inputs are cut (meta truncated)")
    backend: dict[str, Any] = Field(default_factory=dict, description="llm_backend_for settings (endpoint, ...)")

    @field_validator("template")
    @classmethod
    def _has_text(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if "{text}" not in value:
            raise ValueError("template must contain {text}")
        try:
            value.format(text="", n=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"template has a placeholder other than {{text}} and {{n}} ({exc})") from None
        return value

    @field_validator("keep")
    @classmethod
    def _positions(cls, value: list[int | str]) -> list[int | str]:
        if not value:
            raise ValueError("keep at least one position")
        for item in value:
            position(item)
        if len({position(i) for i in value}) != len(value):
            raise ValueError("keep names a position twice")
        return value

    @model_validator(mode="after")
    def _within_n(self) -> LLMParams:
        too_far = [k for k in self.keep if position(k) > self.n_outputs]
        if too_far:
            raise ValueError(f"keep {too_far} beyond n_outputs={self.n_outputs}")
        return self


def position(item: int | str) -> int:
    """1-based position of a keep entry: ``first`` -> 1, ``2`` -> 2."""
    if isinstance(item, int):
        if item < 1:
            raise ValueError(f"keep positions are 1-based, got {item}")
        return item
    name = str(item).strip().lower()
    if name.isdigit():
        return position(int(name))
    if name not in ORDINALS:
        raise ValueError(f"unknown position {item!r} (use {', '.join(ORDINALS[:3])}, ... or 1-based ints)")
    return ORDINALS.index(name) + 1


def variant_name(pos: int) -> str:
    return ORDINALS[pos - 1] if pos <= len(ORDINALS) else f"output-{pos}"


def one_line_text(text: str, limit: int = RAW_IN_REASON) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def _clean(item: str) -> str:
    item = _BOLD_LABEL.sub("", item.strip()).replace("**", "").strip()
    if len(item) >= 2 and item[0] in _QUOTES and item[-1] in _QUOTES:
        item = item[1:-1].strip()
    return item


def parse_paraphrases(answer: str) -> list[str]:
    """The paraphrases in an LLM answer, in order (possibly none).

    A list (numbered, bulleted or ``Paraphrase N:`` labelled) wins: each item with its continuation
    lines; text after a blank line that ends the list (a closing remark) is dropped. Without list markers,
    the blank-line-separated paragraphs are the paraphrases. A first line ending with ``:`` is a preamble;
    markdown bold and a bold label (``**Casual:**``) are removed."""
    lines = [_BOLD_MARKER.sub(r"\1\2", line) for line in answer.strip().splitlines()]
    if lines and lines[0].rstrip().endswith(":") and not _ITEM.match(lines[0]):
        lines = lines[1:]
    items: list[list[str]] = []
    in_item = False
    for line in lines:
        m = _ITEM.match(line)
        if m:
            items.append([m.group("body")])
            in_item = True
        elif not line.strip():
            in_item = False
        elif in_item and items:
            items[-1].append(line.strip())
    if items:
        found = [_clean(" ".join(part for part in item if part.strip())) for item in items]
        return [f for f in found if f]
    paragraphs = re.split(r"\n\s*\n", "\n".join(lines).strip())
    return [p for p in (_clean(" ".join(par.split())) for par in paragraphs) if p]


def truncate_words(text: str, max_words: int) -> tuple[str, bool]:
    """``text`` cut to ``max_words`` whitespace-separated words, and whether it was cut."""
    words = text.split()
    if len(words) <= max_words:
        return text, False
    return " ".join(words[:max_words]), True


def request_seed(seed: int, text: str, mode: str) -> int:
    """The sampling seed of one request (31 bits: what every backend accepts)."""
    return (seed + (stable_hash(text) if mode == "per_text" else 0)) % (2**31 - 1)


def prompt_template(template: str | None, ask_n: bool) -> tuple[str, str]:
    """(template, its signature label): a configured template (``custom-<sha8>``), else the article's
    (``article``) or, when n is asked for, :data:`ASK_N_TEMPLATE` (``article+n``)."""
    if template is not None:
        return template, "custom-" + hashlib.sha256(template.encode()).hexdigest()[:8]
    return (ASK_N_TEMPLATE, "article+n") if ask_n else (ARTICLE_TEMPLATE, "article")


def asks_n(ask_n: bool | None, backend: LLMBackend) -> bool:
    """Whether to ask for n: as configured, else only of the offline in-process model (see module doc)."""
    return isinstance(backend, TransformersBackend) if ask_n is None else ask_n


def build_requests(texts: Sequence[str], params: Any, *, seed: int, n: int,
                   template: str | None = None) -> tuple[list[ChatRequest], list[bool]]:
    """One chat request per text (``params`` has template, system, sampling fields; ``template`` overrides
    ``params.template``) and the truncation flags."""
    template = template if template is not None else params.template
    requests, flags = [], []
    for text in texts:
        cut, truncated = truncate_words(str(text), params.max_input_words)
        messages = [{"role": "system", "content": params.system}] if params.system else []
        messages.append({"role": "user", "content": template.format(text=cut, n=n)})
        requests.append(ChatRequest(messages=messages, temperature=params.temperature, top_p=params.top_p,
                                    max_tokens=params.max_tokens, seed=request_seed(seed, str(text), params.seed_mode)))
        flags.append(truncated)
    return requests, flags


def outputs_from_answer(result: ChatResult, positions: Sequence[int], truncated: bool,
                        n_outputs: int, signature: str | None = None) -> list[Output]:
    """One output per kept position from one backend result: a failed request fails every variant; a
    missing paraphrase fails its variant with the raw answer (one line) in the reason. ``signature``
    (how the text was generated) goes into each output's meta."""
    if not result.ok:
        return [RuntimeError(f"LLM request failed: {result.error}")] * len(positions)
    answer = (result.texts or [""])[0]
    found = parse_paraphrases(answer)
    meta: dict[str, Any] = {TRUNCATED: True} if truncated else {}
    if signature is not None:
        meta["generation_signature"] = signature
    outs: list[Output] = []
    for pos in positions:
        if pos <= len(found):
            outs.append(Generated(found[pos - 1], meta))
        else:
            outs.append(ValueError(f"answer has {len(found)} paraphrase(s), variant '{variant_name(pos)}' needs "
                                   f"{pos} of {n_outputs}; answer: {one_line_text(answer) or '(empty)'}"))
    return outs


@register_strategy("llm", params=LLMParams)
class LLMStrategy(Strategy):
    """Several stylistically diverse paraphrases per text from one LLM answer (LLaMA-first/-second)."""

    params: LLMParams
    llm_settings_field = "backend"

    def __init__(self, params: LLMParams, backend: LLMBackend | None = None) -> None:
        super().__init__(params)
        self.positions = [position(k) for k in params.keep]
        self.backend = backend if backend is not None else llm_backend_for(params.role, params.backend)
        self.ask_n = asks_n(params.ask_n, self.backend)
        self.template, prompt = prompt_template(params.template, self.ask_n)
        self.signature = make_signature("llm_paraphrase", model=self.backend.model, prompt=prompt,
                                        n=params.n_outputs if self.ask_n else None, temperature=params.temperature,
                                        top_p=params.top_p, max_tokens=params.max_tokens, seed_mode=params.seed_mode)

    @property
    def variants(self) -> list[str]:
        return [variant_name(p) for p in self.positions]

    @property
    def variant(self) -> str:
        return self.variants[0]

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[list[Output]]:
        p = self.params
        requests, flags = build_requests(batch["text"].tolist(), p, seed=seed, n=p.n_outputs, template=self.template)
        results = self.backend.complete(requests)
        raise_if_unreachable(results)
        return [outputs_from_answer(r, self.positions, t, p.n_outputs, self.signature)
                for r, t in zip(results, flags, strict=True)]
