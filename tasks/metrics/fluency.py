"""Fluency: how naturally a rewrite reads, against its own source.

A causal language model scores each text; SLOR (Lau, Clark and Lappin, "Grammaticality, Acceptability, and
Probability", Cognitive Science 2017) subtracts the text's unigram log-probability, so rare words are not punished
for being rare, and divides by its length in words:

    SLOR(s) = (log P_LM(s) - log P_unigram(s)) / |s|_words

The figure a run reports is ``fluency = SLOR(output) - SLOR(source)`` (nats per word): 0 reads as naturally as its
source, negative reads worse. Against its own source, so an informal source is not punished for being informal:
only what the rewrite did counts.

- LM: the ``fluency_lm`` role (offline default: SmolLM2-135M-Instruct, the causal LM that installs from a package
  here; no CoLA acceptability classifier or NLI model does). Each text is scored after the model's end-of-text
  token, as a document start; in bfloat16 where the CPU has bfloat16 instructions (or on an accelerator), else
  float32: the signature says which.
- unigrams: ``wordfreq``'s English frequencies of the text's words (its own tokenizer); a word it has never seen
  gets its floor, 1e-8.
- a text with no word (empty, punctuation only) has no SLOR: NaN with its reason.

Each text's LM log-probability is computed once per model and kept in the shared embedding cache.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from tasks.metrics.base import MetricResult, reason_column
from tasks.models.embeddings import EmbeddingCache, inference_batches, text_sha
from tasks.models.registry import ModelSpec, model_id, resolve_model
from tasks.signatures import make_signature

FLUENCY = "fluency"
#: A word wordfreq has never seen counts at this frequency.
UNIGRAM_FLOOR = 1e-8
#: Tokens of one text the LM reads at most (longer texts are cut: the rest of a long post adds little).
MAX_TOKENS = 256
NO_WORDS = "no words to score"
#: Padded tokens per forward batch (a small LM's batches fill 2 CPU cores better large: 2.8x the texts/s of 1,024
#: tokens with the whole vocabulary's log-softmax, measured on the conventions sentences).
SCORE_TOKEN_BUDGET = 4096
#: Positions whose vocabulary-wide logits are held at once (512 x 49k float32: about 100 MB).
_HEAD_CHUNK = 512


def fluency_spec(spec: ModelSpec | None = None) -> ModelSpec:
    """The fluency LM: ``spec`` or the ``fluency_lm`` role's default."""
    return spec if spec is not None else resolve_model("fluency_lm")


def _cpu_bfloat16() -> bool:
    try:
        with open("/proc/cpuinfo") as info:
            return any("avx512_bf16" in line or "amx_bf16" in line for line in info if line.startswith("flags"))
    except OSError:
        return False


def fluency_dtype(device: str) -> str:
    """``bfloat16`` on an accelerator or a CPU with bfloat16 instructions, else ``float32``. On 256 conventions
    sentences on 2 cores with bfloat16 instructions: 63 texts/s against 20, each text's log-probability within 0.1
    nat of float32's (under 0.01 nat per word)."""
    return "bfloat16" if device != "cpu" or _cpu_bfloat16() else "float32"


@lru_cache(maxsize=4)
def _scorer(spec: ModelSpec) -> tuple[Any, Any, str]:
    # deferred: loads torch and transformers only when a text is scored
    import torch

    from tasks.models.loaders import device, load_causal_lm

    tokenizer, model = load_causal_lm(spec)
    dtype = fluency_dtype(device())
    scored = model if dtype == "float32" else _copy_as(model, getattr(torch, dtype))
    return tokenizer, scored, dtype


def _copy_as(model: Any, dtype: Any) -> Any:
    """A copy of ``model`` in ``dtype`` (the loaded one is shared with the LLM roles, in float32)."""
    import copy

    return copy.deepcopy(model).to(dtype)


def cache_key(spec: ModelSpec) -> str:
    """The embedding cache's key for the LM log-probabilities of ``spec``."""
    dtype = _scorer(spec)[2]
    return f"fluency-logprob|{model_id(spec)}|{dtype}|max{MAX_TOKENS}"


def lm_log_probs(texts: Sequence[str], spec: ModelSpec | None = None,
                 cache: EmbeddingCache | None = None) -> np.ndarray:
    """Per text, its total log-probability (nats) under the fluency LM after an end-of-text token; each text
    computed once per model (``cache``)."""
    import torch

    spec = fluency_spec(spec)
    tokenizer, model, _ = _scorer(spec)
    key = cache_key(spec)
    shas = [text_sha(t) for t in texts]
    found = cache.get_many(key, shas) if cache is not None else {}
    todo = list(dict.fromkeys(t for t, s in zip(texts, shas, strict=True) if s not in found))
    if todo:
        start = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.bos_token_id
        ids = [[start, *tokenizer(t, add_special_tokens=False)["input_ids"][:MAX_TOKENS]] for t in todo]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start
        computed: list[tuple[str, np.ndarray]] = []
        for batch in inference_batches([len(r) for r in ids], SCORE_TOKEN_BUDGET):
            width = max(len(ids[i]) for i in batch)
            rows = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for j, i in enumerate(batch):
                rows[j, :len(ids[i])] = torch.tensor(ids[i])
                mask[j, :len(ids[i])] = 1
            totals = _batch_log_probs(model, rows.to(model.device), mask.to(model.device))
            computed += [(text_sha(todo[i]), np.array([totals[j]], np.float32)) for j, i in enumerate(batch)]
        found.update(dict(computed))
        if cache is not None:
            cache.put_many(key, computed)
    return np.array([float(found[s][0]) for s in shas])


def _batch_log_probs(model: Any, rows: Any, mask: Any) -> np.ndarray:
    """Per row, the summed log-probability of its tokens after the first: the decoder's states, then the output
    layer on the real (unpadded) positions only, a chunk at a time, as the target's logit less the log-sum-exp
    (no log-softmax over the whole vocabulary is kept: 2.5x faster on CPU, the same sums to 1e-3)."""
    import torch

    with torch.inference_mode():
        states = model.base_model(input_ids=rows, attention_mask=mask).last_hidden_state[:, :-1]
        real = mask[:, 1:].bool()
        packed, targets = states[real], rows[:, 1:][real]
        head = model.get_output_embeddings()
        picked = torch.empty(len(targets), dtype=torch.float32, device=rows.device)
        for start in range(0, len(targets), _HEAD_CHUNK):
            logits = head(packed[start:start + _HEAD_CHUNK]).float()
            part = targets[start:start + _HEAD_CHUNK, None]
            picked[start:start + _HEAD_CHUNK] = logits.gather(-1, part)[:, 0] - torch.logsumexp(logits, -1)
        sums = torch.zeros(real.shape, dtype=torch.float32, device=rows.device)
        sums[real] = picked
        return sums.sum(1).cpu().numpy()


@lru_cache(maxsize=200_000)
def _unigram(word: str) -> float:
    from wordfreq import word_frequency

    return math.log(max(word_frequency(word, "en"), UNIGRAM_FLOOR))


def unigram_log_prob(text: str) -> tuple[float, int]:
    """(the text's unigram log-probability in nats, its number of words), by wordfreq's English frequencies."""
    from wordfreq import tokenize

    words = tokenize(text, "en")
    return sum(_unigram(w) for w in words), len(words)


def _lm_less_unigram(texts: Sequence[str], spec: ModelSpec | None,
                     cache: EmbeddingCache | None) -> tuple[np.ndarray, np.ndarray]:
    """(per text, its LM log-probability less its unigram log-probability in nats, NaN with no word; its words)."""
    unigrams = [unigram_log_prob(t) for t in texts]
    words = np.array([n for _, n in unigrams], float)
    out = np.full(len(texts), np.nan)
    scored = [i for i, n in enumerate(words) if n > 0]
    if scored:
        out[scored] = lm_log_probs([texts[i] for i in scored], spec, cache) - np.array([unigrams[i][0] for i in scored])
    return out, words


def slor_totals(texts: Sequence[str], spec: ModelSpec | None = None,
                cache: EmbeddingCache | None = None) -> np.ndarray:
    """Per text, its LM log-probability less its unigram log-probability (nats, not per word: what a local edit
    changes; NaN for a text with no word)."""
    return _lm_less_unigram(texts, spec, cache)[0]


def slor(texts: Sequence[str], spec: ModelSpec | None = None, cache: EmbeddingCache | None = None) -> np.ndarray:
    """SLOR per text (nats per word; NaN for a text with no word)."""
    totals, words = _lm_less_unigram(texts, spec, cache)
    with np.errstate(invalid="ignore", divide="ignore"):
        return totals / np.where(words > 0, words, np.nan)


def fluency_signature(spec: ModelSpec | None = None) -> str:
    """The fluency figure's signature: the LM, its dtype, the unigram source and the unit."""
    import wordfreq

    spec = fluency_spec(spec)
    _, _, dtype = _scorer(spec)
    return make_signature(FLUENCY, model=model_id(spec), dtype=dtype, score="slor-delta",
                          unigram=f"wordfreq-{getattr(wordfreq, '__version__', 'en')}", unit="nats/word",
                          max_tokens=MAX_TOKENS)


def fluency(sources: Sequence[str], outputs: Sequence[str], spec: ModelSpec | None = None,
            cache: EmbeddingCache | None = None) -> MetricResult:
    """Per pair, ``SLOR(output) - SLOR(source)`` (column ``fluency``; NaN with its reason where either has no
    word)."""
    values = slor([*sources, *outputs], spec, cache)
    src, out = values[:len(sources)], values[len(sources):]
    delta = out - src
    reasons = [None if not math.isnan(d) else NO_WORDS for d in delta]
    scores = pd.DataFrame({FLUENCY: delta, reason_column(FLUENCY): pd.Series(reasons, dtype="object")})
    return MetricResult(scores, {FLUENCY: fluency_signature(spec)})


_DOUBLED = re.compile(r"\b(\w+)(?:\s+\1\b)+", re.IGNORECASE)


def doubled_words(text: str) -> Counter[str]:
    """The words written twice in a row in ``text`` ("and and", "the the"), lowercased, with their counts."""
    return Counter(m.group(1).lower() for m in _DOUBLED.finditer(text))


def adds_doubled_words(source: str, text: str) -> bool:
    """Whether ``text`` repeats a word back to back more often than its source does: a rewrite that leaves "and
    and" reads as broken whatever its score ("that that" in the source stays allowed)."""
    return bool(doubled_words(text) - doubled_words(source))


#: Terminal punctuation; a text's end when only closing quotes or brackets follow it.
_SENTENCE_MARK = r"[.!?…]+"
_SENTENCE_END = re.compile(_SENTENCE_MARK + r"[\"'”’)\]]*\s*$")
_SENTENCE_BREAK = re.compile(_SENTENCE_MARK + r"(?=\s|$)")


def sentence_ends(text: str) -> int:
    """How many sentences ``text`` ends by its punctuation (a mark followed by a space or the end)."""
    return len(_SENTENCE_BREAK.findall(text))


_LAST_WORD = re.compile(r"(\w+)\W*$")
#: Words no English sentence ends on: articles, possessive determiners, the infinitive's "to", prepositions that
#: take an object, conjunctions.
_NO_LAST_WORDS = frozenset({"the", "a", "an", "my", "our", "your", "his", "her", "their", "its", "to", "of", "from",
                            "with", "and", "or", "but", "nor", "than", "because", "very", "whose", "every", "each"})


def cut_short(source: str, text: str) -> bool:
    """Whether ``text`` stops where a sentence cannot: its source ends a sentence (".", "!", "?") and it does not,
    or it ends on a word no sentence ends on ("... too busy to", "... from my") that its source does not end on. A
    removal that takes a text's last words leaves a fragment the fluency LM reads as plausible ("he paid it")."""
    if _SENTENCE_END.search(source) and not _SENTENCE_END.search(text):
        return True
    last, source_last = _LAST_WORD.search(text), _LAST_WORD.search(source)
    word = last.group(1).lower() if last else ""
    return word in _NO_LAST_WORDS and (source_last is None or source_last.group(1).lower() != word)

