"""LLM paraphrasing: an instruct LLM asked for several stylistically diverse paraphrases in one answer.

The article (§4.1, Table 1, "LLM Paraphrasing") prompts LLaMA-2-13B-chat with "Write stylistically
diverse paraphrases." The model answers with several paraphrases per input; the article keeps the
first and the second (LLaMA-first, LLaMA-second), which drift further from the source the later they
come. This strategy does the same: one chat request per text asking for ``n_outputs`` paraphrases (the
default template starts with the article's instruction verbatim and asks for a numbered list so the
answer parses), then keeps the positions named in ``keep`` as variants (``first``, ``second``, ...).

Choices:

- Backend: :func:`~tasks.models.llm.llm_backend_for` for role ``llm``: the in-process SmolLM2 offline,
  vLLM's OpenAI-compatible server when ``SYNTHUGC_LLM_ENDPOINT_LLM`` is set. All requests of a batch go
  in one ``complete`` call; the backend batches (in-process) or runs them concurrently (HTTP).
- Sampling defaults: temperature 0.6, top_p 0.9 (LLaMA-2-chat's shipped generation config).
- Seeds: ``seed_mode="per_text"`` gives each request ``seed + stable_hash(text)``, so an output does not
  depend on how the corpus was sharded and the request cache hits across reshards (the in-process
  backend then generates request by request, since it batches only equal sampling params);
  ``per_batch`` uses the run seed for all (batched in process, reproducible per batch only).
- Parsing (:func:`parse_paraphrases`): numbered (``1.``, ``1)``, ``(1)``), bulleted (``-``, ``*``, ``•``)
  or labelled (``Paraphrase 1:``) lists, else blank-line-separated paragraphs; a preamble line ending
  with ``:`` ("Here are two paraphrases:") and surrounding quotes are dropped. An answer with fewer
  paraphrases than a kept position fails that variant's row, with the raw answer (one line) in the reason.
- Over-long inputs are cut to ``max_input_words`` words (meta ``truncated``), backend-agnostic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tasks.generate.base import (
    ORDINALS,
    TRUNCATED,
    Generated,
    Output,
    Strategy,
    register_strategy,
    stable_hash,
)
from tasks.models.llm import ChatRequest, ChatResult, LLMBackend, llm_backend_for, raise_if_unreachable

ARTICLE_INSTRUCTION = "Write stylistically diverse paraphrases."
DEFAULT_TEMPLATE = (ARTICLE_INSTRUCTION + " Write {n} paraphrases of the text below as a numbered list "
                    "(1., 2., ...), one per line, and nothing else.\n\nText: {text}")
RAW_IN_REASON = 200  # characters of the raw answer quoted in a failed row's reason

_ITEM = re.compile(r"^\s*(?:\(?\d{1,2}[.):\]]|[-*•]|(?:paraphrase|version|option|rewrite|variant)\s*#?\d{1,2}"
                   r"\s*[:.)-]?)\s*(?P<body>.*)$", re.IGNORECASE)
_QUOTES = "\"'“”‘’`"
_BOLD_LABEL = re.compile(r"^\s*\*\*[^*\n]{1,40}?:\s*\*\*\s*|^\s*\*\*[^*\n]{1,40}?\*\*\s*:\s*")
_BOLD_MARKER = re.compile(r"^(\s*)\*\*(\(?\d{1,2}[.):\]])\*\*")


class LLMParams(BaseModel):
    """Params of the ``llm`` strategy."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["llm"] = Field("llm", description="model role whose backend answers (llm_backend_for)")
    n_outputs: int = Field(2, ge=1, le=len(ORDINALS), description="paraphrases asked for per text")
    keep: list[int | str] = Field(default_factory=lambda: ["first", "second"],
                                  description="positions kept as variants: ordinal names or 1-based ints")
    template: str = Field(DEFAULT_TEMPLATE, description="user message; {text} and {n} are filled in")
    system: str | None = Field(None, description="optional system message")
    temperature: float = Field(0.6, ge=0.0)
    top_p: float = Field(0.9, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=1, description="new tokens per answer (all paraphrases together)")
    seed_mode: Literal["per_text", "per_batch"] = "per_text"
    max_input_words: int = Field(1000, ge=1, description="longer inputs are cut (meta truncated)")
    backend: dict[str, Any] = Field(default_factory=dict, description="llm_backend_for settings (endpoint, ...)")

    @field_validator("template")
    @classmethod
    def _has_text(cls, value: str) -> str:
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


def build_requests(texts: Sequence[str], params: Any, *, seed: int, n: int) -> tuple[list[ChatRequest], list[bool]]:
    """One chat request per text (``params`` has template, system, sampling fields) and the truncation flags."""
    requests, flags = [], []
    for text in texts:
        cut, truncated = truncate_words(str(text), params.max_input_words)
        messages = [{"role": "system", "content": params.system}] if params.system else []
        messages.append({"role": "user", "content": params.template.format(text=cut, n=n)})
        requests.append(ChatRequest(messages=messages, temperature=params.temperature, top_p=params.top_p,
                                    max_tokens=params.max_tokens, seed=request_seed(seed, str(text), params.seed_mode)))
        flags.append(truncated)
    return requests, flags


def outputs_from_answer(result: ChatResult, positions: Sequence[int], truncated: bool,
                        n_outputs: int) -> list[Output]:
    """One output per kept position from one backend result: a failed request fails every variant; a
    missing paraphrase fails its variant with the raw answer (one line) in the reason."""
    if not result.ok:
        return [RuntimeError(f"LLM request failed: {result.error}")] * len(positions)
    answer = (result.texts or [""])[0]
    found = parse_paraphrases(answer)
    meta = {TRUNCATED: True} if truncated else {}
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

    @property
    def variants(self) -> list[str]:
        return [variant_name(p) for p in self.positions]

    @property
    def variant(self) -> str:
        return self.variants[0]

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[list[Output]]:
        p = self.params
        requests, flags = build_requests(batch["text"].tolist(), p, seed=seed, n=p.n_outputs)
        results = self.backend.complete(requests)
        raise_if_unreachable(results)
        return [outputs_from_answer(r, self.positions, t, p.n_outputs) for r, t in zip(results, flags, strict=True)]
