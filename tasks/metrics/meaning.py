"""Meaning preservation: BERTScore between synthetic candidates and their source references.

Re-implemented on top of the shared token-embedding cache (so the source texts are embedded once for every
strategy and metric) and checked against ``bert_score.score`` to 1e-4 in the tests. Choices, all
bert_score's unless said:

- tokens: ``bert_score_encode`` (stripped text, special tokens, truncation to ``model_max_length``);
  embeddings: ``hidden_states[layer]``, the same as bert_score's model cut to ``num_layers`` layers;
- greedy matching of L2-normalised token vectors; special tokens take part in the max but weigh 0;
- weights: 1 (and 0 for the [CLS]/[SEP] ids) or, with ``idf=True``, ``log((N+1)/(df+1))`` over the
  reference sentences (or ``idf_sentences``), ``log(N+1)`` for unseen ids;
- F1 = 2PR/(P+R) with nan -> 0; a candidate or reference of special tokens only (empty text) gets P=R=0;
- ``baseline_path``: a CSV in bert_score's format (columns LAYER,P,R,F); P, R and F are each rescaled
  ``(x - b) / (1 - b)`` with the row of ``layer``.
- bert_score's padding quirk: it pads each batch of ``batch_size`` consecutive pairs and multiplies the
  similarity matrix by the padding mask, so padded positions add similarities of 0 to the max: a token whose
  best cosine is negative scores 0 when the other side is shorter than the longest one in its batch. MiniLM
  has negative token cosines, so this moves scores by up to ~1e-3. ``bert_score_padding=True`` (default)
  reproduces it (same batches as bert_score for the same ``batch_size``, 64 by default) so numbers match
  published bert_score ones; ``False`` takes the max over real tokens only (batch-independent). The
  signature records which (``greedy:bert_score-b64`` or ``greedy:exact``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.metrics.base import MetricResult
from tasks.models.embeddings import EmbeddingCache, bert_score_encode, token_embeddings
from tasks.models.loaders import device, load_model_config, load_tokenizer
from tasks.models.registry import ModelSpec, model_id, resolve_model
from tasks.parallel import resource_lock
from tasks.signatures import make_signature
from tasks.store import sha256_bytes

_PAIR_CHUNK = 2048  # pairs whose embeddings are held in memory at once


def idf_weights(sentences: Sequence[str], tokenizer: object) -> tuple[dict[int, float], float]:
    """bert_score's idf: ``log((N+1)/(df+1))`` per token id over ``sentences`` (df counts sentences), and
    ``log(N+1)`` for ids never seen (returned as the default)."""
    counts: Counter[int] = Counter()
    for ids in bert_score_encode(tokenizer, sentences):
        counts.update(set(ids))
    n = len(sentences)
    return {i: math.log((n + 1) / (c + 1)) for i, c in counts.items()}, math.log(n + 1)


def _load_baseline(path: str | Path, layer: int) -> np.ndarray:
    table = pd.read_csv(path)
    if "LAYER" in table.columns and (table["LAYER"] == layer).any():
        row = table.loc[table["LAYER"] == layer].iloc[0]
    else:
        row = table.iloc[layer]  # bert_score reads the row by position
    return row[["P", "R", "F"]].to_numpy(dtype=np.float64)


def _greedy(cand: list[np.ndarray], ref: list[np.ndarray], wc: list[np.ndarray], wr: list[np.ndarray],
            bert_score_padding: bool) -> tuple[np.ndarray, np.ndarray]:
    """Weighted greedy-matching P and R for a batch of pairs (padded, one bmm)."""
    import torch

    b = len(cand)
    lc = max(len(c) for c in cand)
    lr = max(len(r) for r in ref)
    d = cand[0].shape[1]
    c_pad = np.zeros((b, lc, d), dtype=np.float32)
    r_pad = np.zeros((b, lr, d), dtype=np.float32)
    c_mask = np.zeros((b, lc), dtype=bool)
    r_mask = np.zeros((b, lr), dtype=bool)
    wc_pad = np.zeros((b, lc), dtype=np.float64)
    wr_pad = np.zeros((b, lr), dtype=np.float64)
    for i in range(b):
        c_pad[i, :len(cand[i])] = cand[i] / np.linalg.norm(cand[i], axis=-1, keepdims=True)
        r_pad[i, :len(ref[i])] = ref[i] / np.linalg.norm(ref[i], axis=-1, keepdims=True)
        c_mask[i, :len(cand[i])] = True
        r_mask[i, :len(ref[i])] = True
        wc_pad[i, :len(cand[i])] = wc[i]
        wr_pad[i, :len(ref[i])] = wr[i]
    dev = device()  # on a GPU the batch's similarities are one kernel there, as bert_score's
    sim = torch.bmm(torch.from_numpy(c_pad).to(dev), torch.from_numpy(r_pad).to(dev).transpose(1, 2)).cpu().numpy()
    valid = c_mask[:, :, None] & r_mask[:, None, :]
    sim = np.where(valid, sim, -np.inf)
    word_p = np.where(c_mask, sim.max(axis=2), 0.0)
    word_r = np.where(r_mask, sim.max(axis=1), 0.0)
    if bert_score_padding:  # padded positions count as similarity 0 in bert_score's max
        r_padded = np.array([len(x) < lr for x in ref])[:, None]
        c_padded = np.array([len(x) < lc for x in cand])[:, None]
        word_p = np.where(r_padded, np.maximum(word_p, 0.0), word_p)
        word_r = np.where(c_padded, np.maximum(word_r, 0.0), word_r)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = (word_p * wc_pad).sum(axis=1) / wc_pad.sum(axis=1)
        r = (word_r * wr_pad).sum(axis=1) / wr_pad.sum(axis=1)
    return p, r


def bertscore_layer(spec: ModelSpec, layer: int | None = None) -> int:
    """The hidden layer BERTScore reads: ``layer``, else the spec's (bert_score's per-model default), else the
    model's last (read from its config; the weights are not loaded)."""
    if layer is None:
        layer = spec.layer
    if layer is None:
        layer = int(load_model_config(spec).num_hidden_layers)
    return layer


def bertscore(candidates: Sequence[str], references: Sequence[str], *, spec: ModelSpec | None = None,
              layer: int | None = None, idf: bool = False, idf_sentences: Sequence[str] | None = None,
              baseline_path: str | Path | None = None, cache: EmbeddingCache | None = None,
              batch_size: int = 64, bert_score_padding: bool = True, cache_candidates: bool = True) -> MetricResult:
    """BERTScore P/R/F1 of each candidate against its reference (columns bertscore_p, bertscore_r,
    bertscore_f1); see the module docstring for every choice. ``spec`` defaults to the token encoder
    role's default and ``layer`` to ``spec.layer`` or the model's last layer. ``cache_candidates`` False keeps
    only the references' embeddings in ``cache`` (candidates that are scored once)."""
    candidates, references = list(candidates), list(references)
    if len(candidates) != len(references):
        raise ValueError(f"bertscore: {len(candidates)} candidates but {len(references)} references")
    spec = spec or resolve_model("token_encoder")

    tokenizer = load_tokenizer(spec)
    layer = bertscore_layer(spec, layer)

    special = {tokenizer.cls_token_id, tokenizer.sep_token_id} - {None}
    if idf:
        idf_dict, idf_default = idf_weights(references if idf_sentences is None else list(idf_sentences),
                                            tokenizer)
    else:
        idf_dict, idf_default = dict.fromkeys(special, 0.0), 1.0

    def weights(texts: Sequence[str]) -> list[tuple[np.ndarray, int]]:
        return [(np.array([idf_dict.get(i, idf_default) for i in ids], dtype=np.float64), len(ids))
                for ids in bert_score_encode(tokenizer, texts)]

    n = len(candidates)
    p_all, r_all = np.zeros(n), np.zeros(n)
    c_empty, r_empty = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    chunk = batch_size * max(1, _PAIR_CHUNK // batch_size)  # whole batches, aligned as bert_score's
    for start in range(0, n, chunk):
        cands = candidates[start:start + chunk]
        refs = references[start:start + chunk]
        if cache_candidates:
            embs = token_embeddings(cands + refs, spec, layer, cache=cache)  # forward batches by token budget
        else:  # candidates scored once (the protect loop's): only the references are worth keeping
            embs = list(token_embeddings(cands, spec, layer)) + list(token_embeddings(refs, spec, layer, cache=cache))
        c_emb, r_emb = embs[:len(cands)], embs[len(cands):]
        c_w = weights(cands)
        r_w = weights(refs)
        for b in range(0, len(cands), batch_size):
            sl = slice(b, b + batch_size)
            p, r = _greedy(c_emb[sl], r_emb[sl], [w for w, _ in c_w[sl]], [w for w, _ in r_w[sl]],
                          bert_score_padding)
            p_all[start + b:start + b + len(p)] = p
            r_all[start + b:start + b + len(r)] = r
        c_empty[start:start + len(cands)] = [k == 2 for _, k in c_w]  # bert_score's "special tokens only"
        r_empty[start:start + len(refs)] = [k == 2 for _, k in r_w]

    with np.errstate(invalid="ignore", divide="ignore"):
        f_all = 2 * p_all * r_all / (p_all + r_all)
    empty = c_empty | r_empty
    p_all[empty] = 0.0
    r_all[empty] = 0.0
    f_all = np.nan_to_num(f_all, nan=0.0, posinf=np.inf, neginf=-np.inf)

    rescaled = baseline_path is not None
    baseline_id = None
    if rescaled:
        base = _load_baseline(baseline_path, layer)
        p_all, r_all, f_all = ((x - b) / (1 - b) for x, b in zip((p_all, r_all, f_all), base, strict=True))
        baseline_id = sha256_bytes(Path(baseline_path).read_bytes())[:12]

    scores = pd.DataFrame({"bertscore_p": p_all, "bertscore_r": r_all, "bertscore_f1": f_all})
    signature = make_signature(
        "bertscore", model=model_id(spec), layer=layer, idf=idf,
        idf_corpus=("refs" if idf_sentences is None else "custom") if idf else None,
        rescaled=rescaled, baseline=baseline_id,
        greedy=f"bert_score-b{batch_size}" if bert_score_padding else "exact",
        tokenizer=f"{type(tokenizer).__name__}+bert_score-encode",
    )
    return MetricResult(scores=scores, signatures={col: signature.replace("metric:bertscore", f"metric:{col}", 1)
                                                   for col in scores.columns})


#: Words each side of a span that :func:`span_similarity` reads (the rest of a long sentence barely moves the
#: span's vector, and costs the encoder most of its time).
SPAN_CONTEXT_WORDS = 8


def _around(text: str, span: tuple[int, int], words: int) -> tuple[str, tuple[int, int]]:
    """The part of ``text`` from ``words`` words before ``span`` to ``words`` after it, and the span in that part."""
    gaps = [m.start() for m in re.finditer(r"\s+", text)]
    before = [g for g in gaps if g < span[0]]
    after = [g for g in gaps if g >= span[1]]
    lo = before[-words - 1] + 1 if len(before) > words else 0
    hi = after[words] if len(after) > words else len(text)
    return text[lo:hi], (span[0] - lo, span[1] - lo)


def span_similarity(pairs: Sequence[tuple[str, tuple[int, int], str, tuple[int, int]]], *,
                    spec: ModelSpec | None = None, layer: int | None = None,
                    context_words: int = SPAN_CONTEXT_WORDS) -> np.ndarray:
    """Per (text, span, rewritten text, span), the cosine of the span's contextual vector in each (the mean of the
    BERTScore layer's vectors of the tokens the character span overlaps, ``context_words`` words each side read):
    whether a swapped word keeps the sense of the one it replaced in this sentence (as in Zhou et al., "BERT-based
    Lexical Substitution", ACL 2019), which a sentence-level score barely sees ("They even opposed our right" ->
    "defended"). NaN where a span has no token (cut by the model's length)."""
    spec = spec or resolve_model("token_encoder")
    layer = bertscore_layer(spec, layer)
    tokenizer = load_tokenizer(spec)
    sides = [_around(text, span, context_words) for a, span_a, b, span_b in pairs
             for text, span in ((a, span_a), (b, span_b))]
    texts = list(dict.fromkeys(text for text, _ in sides))
    vectors = dict(zip(texts, token_embeddings(texts, spec, layer), strict=True))
    with resource_lock(tokenizer):  # a fast tokenizer shared by threads ("Already borrowed"); stripped as encoded
        mapped = tokenizer([t.strip() for t in texts], add_special_tokens=True, max_length=tokenizer.model_max_length,
                           truncation=True, return_offsets_mapping=True)["offset_mapping"]
    offsets = {}
    for text, found in zip(texts, mapped, strict=True):
        lead = len(text) - len(text.lstrip())
        offsets[text] = np.array([(a + lead, b + lead) if b > a else (-1, -1) for a, b in found])

    def vector(text: str, span: tuple[int, int]) -> np.ndarray | None:
        at = offsets[text]
        rows = np.flatnonzero((at[:, 1] > span[0]) & (at[:, 0] < span[1]) & (at[:, 0] >= 0))
        return vectors[text][rows].mean(0) if len(rows) else None

    out = np.full(len(pairs), np.nan)
    for n in range(len(pairs)):
        u, v = vector(*sides[2 * n]), vector(*sides[2 * n + 1])
        if u is not None and v is not None:
            out[n] = float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))
    return out
