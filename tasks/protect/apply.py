"""A ladder's move applied to a protect point's documents: the pseudonymiser, evidence masking, generalize, the
LLM anonymiser or a generation strategy run on their current texts, each output remembered for the whole run (the
points of a frontier ask for the same ones). Apart from :mod:`tasks.protect.moves`, which names the moves and is
light (the settings and the CLI's help import it): this module loads what runs them."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from tasks.corpus.schema import STATUS_OK
from tasks.generate.base import build_strategy, generate_synthetic, is_unchanged
from tasks.generate.pseudonymize import pseudonymize_corpus, scope_keys
from tasks.metrics.fluency import slor_totals
from tasks.metrics.meaning import span_similarity
from tasks.protect.components import Components, english_sources
from tasks.protect.generalize import generalize
from tasks.protect.moves import (
    ANY_LANGUAGE,
    GENERALIZE,
    LLM_ANONYMIZE,
    MASK_EVIDENCE,
    PSEUDONYMIZE,
    REWORD,
    Move,
    llm_anonymize,
    mask_evidence,
)
from tasks.protect.reword import reword
from tasks.store import fingerprint_config


def apply_move(p: Components, move: Move, idx: np.ndarray, texts: pd.Series, evidence: pd.DataFrame,
               round_: int) -> list[str | None]:
    """The move's output for each document ``idx`` (None where it failed or changed nothing, or where the move reads
    English and the document's source is in another language: :data:`tasks.protect.moves.ANY_LANGUAGE`). An output is
    remembered for the whole run by what it depends on (the move, the round's seed, the document, its text and
    its timeline's evidence): the points of a frontier ask for the same ones, and only their floors differ."""
    english = english_sources(p)[idx]
    if move.name not in ANY_LANGUAGE and not english.all():  # run only on the documents the move can read
        out: list[str | None] = [None] * len(idx)
        at = np.flatnonzero(english)
        for j, o in zip(at, apply_move(p, move, idx[at], texts, evidence, round_) if len(at) else [], strict=True):
            out[j] = o
        return out
    rows = p.corpus.iloc[idx].assign(text=texts.iloc[idx].to_numpy())
    features: list[list[tuple[str, str]]] = [[] for _ in range(len(rows))]
    if move.name in (MASK_EVIDENCE, GENERALIZE, LLM_ANONYMIZE):
        by_group = {g: list(zip(f["feature"], f["kind"], strict=True))
                    for g, f in evidence.groupby("group_id", sort=False)} if len(evidence) else {}
        features = [by_group.get(p.doc_timeline.get(d), []) for d in rows["doc_id"]]
    if move.name == PSEUDONYMIZE:  # round 0 only (shared by the points), and it records the mapping
        out = _apply_now(p, move, rows, features, round_)
    else:
        done = p.shared.outputs
        head = fingerprint_config([move.as_config(), p.settings.seed + round_])
        keys = [(head, d, t, tuple(f)) for d, t, f in zip(rows["doc_id"], rows["text"].astype(str), features,
                                                           strict=True)]
        todo = [i for i, k in enumerate(keys) if k not in done]
        if todo:
            fresh = _apply_now(p, move, rows.iloc[todo], [features[i] for i in todo], round_)
            done.update({keys[i]: o for i, o in zip(todo, fresh, strict=True)})
        out = [done[k] for k in keys]

    return [o if isinstance(o, str) and o.strip() and not is_unchanged(t, o) else None
            for o, t in zip(out, rows["text"].astype(str), strict=True)]


def _pseudonyms(p: Components, rows: pd.DataFrame) -> list[set[str]]:
    """Per row, the surrogates the pseudonymiser put in within the row's scope (its author's, by default)."""
    by_scope: dict[str, set[str]] = {}
    for mapping in p.mappings:
        for key, surrogate in zip(mapping["scope_key"].astype(str), mapping["surrogate"].astype(str), strict=True):
            by_scope.setdefault(key, set()).add(surrogate)
    return [by_scope.get(key, set()) for key in scope_keys(rows, p.settings.pii_scope)]


def _apply_now(p: Components, move: Move, rows: pd.DataFrame, features: list[list[tuple[str, str]]],
               round_: int) -> list[str | None]:
    """The move run on ``rows`` (their current texts), each with its timeline's evidence ``features``."""
    if move.name == PSEUDONYMIZE:
        detected = p.detector().detect(rows["text"].astype(str).tolist(), cache=p.embeddings())
        replaced, mapping = pseudonymize_corpus(rows, scope=p.settings.pii_scope, seed=p.settings.seed,
                                                detected=detected)
        p.mappings.append(mapping)
        return replaced["text"].astype(str).tolist()
    judged = p.settings.fluency_floor is not None  # the fluency LM and the sense check judge word swaps
    sense = span_similarity if judged else None
    if move.name == REWORD:
        return reword(rows["text"].astype(str).tolist(), min_chars=p.settings.verbatim_chars,
                      senses=int(move.params.get("senses", 1)), sources=p.sources.loc[rows.index].tolist(),
                      parses=p.shared.parses, judge=functools.partial(slor_totals, cache=p.embeddings()) if judged
                      else None, sense=sense)
    if move.name == MASK_EVIDENCE:
        return [mask_evidence(t, f) for t, f in zip(rows["text"].astype(str), features, strict=True)]
    if move.name == GENERALIZE:
        return generalize(rows["text"].astype(str).tolist(), rows["author_id"].astype(str).tolist(), features,
                          surrogates=p.shared.surrogates, sense=sense, pseudonyms=_pseudonyms(p, rows))
    if move.name == LLM_ANONYMIZE:
        return llm_anonymize(rows["text"].astype(str).tolist(), features, p.llm(),
                             seed=p.settings.seed + round_)

    key = fingerprint_config(move.as_config())
    strategies = p.shared.strategies
    if key not in strategies:
        strategies[key] = build_strategy(move.name, dict(move.params),
                                         root=f"protect.ladder.{move.name}").fit(p.corpus)
    table = generate_synthetic(strategies[key], rows, seed=p.settings.seed + round_)
    first = table.drop_duplicates("doc_id", keep="first").set_index("doc_id").reindex(rows["doc_id"])
    return [t if s == STATUS_OK else None for t, s in zip(first["text"], first["status"], strict=True)]
