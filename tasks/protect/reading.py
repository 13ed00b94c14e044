"""Whether a protect candidate still reads as language: its fluency against its source (:mod:`tasks.metrics.fluency`)
at or above the point's fluency floor, no word repeated back to back that its source did not repeat, no sentence
cut short (:func:`tasks.metrics.fluency.cut_short`) and no phrase split off to stand alone (:func:`splits_off`). Each
(candidate, source) pair is scored once for the whole frontier (:class:`tasks.protect.components.Shared`), and each
text's LM pass is kept in the point's embedding cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tasks.metrics.fluency import FLUENCY, adds_doubled_words, cut_short, fluency, sentence_ends
from tasks.parallel import resource_lock
from tasks.protect.alternations import FINITE_TAGS
from tasks.protect.components import Components
from tasks.protect.lexicon import load_pipeline


def fluency_against_sources(p: Components, candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per candidate, its fluency against its source (0 for a text equal to it)."""
    known = p.shared.fluencies
    out = np.zeros(len(candidates))
    pairs = list(zip(candidates, references, strict=True))
    todo = [i for i, (c, r) in enumerate(pairs) if c != r and (c, r) not in known]
    if todo:
        scores = fluency([references[i] for i in todo], [candidates[i] for i in todo],
                         cache=p.embeddings()).scores[FLUENCY].to_numpy(float)
        known.update({pairs[i]: float(v) for i, v in zip(todo, scores, strict=True)})
    for i, (c, r) in enumerate(pairs):
        if c != r:
            out[i] = known[(c, r)]
    return out


def _verbless(docs: Sequence[Any]) -> list[int]:
    """Per parse, its sentences with no tensed verb or modal."""
    return [sum(not any(t.tag_ in FINITE_TAGS for t in sent) for sent in doc.sents) for doc in docs]


def splits_off(sources: Sequence[str], candidates: Sequence[str], parses: dict[str, Any] | None = None
               ) -> np.ndarray:
    """Per candidate, whether it has more sentences than its source and more of them without a tensed verb: a split
    that left a phrase standing alone ("... tired of a president. His cronies in Congress being all too willing to
    ..."). A candidate with no more sentences is not parsed ("Thank you." -> "Thanks." stays). ``parses`` keeps each
    text's parse across calls (protect's, which reword fills with the same pipeline)."""
    out = np.zeros(len(candidates), bool)
    at = [i for i, (s, c) in enumerate(zip(sources, candidates, strict=True)) if sentence_ends(c) > sentence_ends(s)]
    if at:
        parses = {} if parses is None else parses
        nlp = load_pipeline()
        texts = [*(sources[i] for i in at), *(candidates[i] for i in at)]
        with resource_lock(nlp):
            todo = list(dict.fromkeys(t for t in texts if t not in parses))
            parses.update(zip(todo, nlp.pipe(todo), strict=True))
        counts = _verbless([parses[t] for t in texts])
        out[at] = np.array(counts[len(at):]) > np.array(counts[:len(at)])
    return out


def reads_well(p: Components, candidates: Sequence[str], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(whether each candidate for documents ``idx`` passes, its fluency): a text a reader would not accept as
    language is rejected as one under the meaning floor is. A candidate without words to score (NaN) is judged by
    the rules of form alone."""
    sources = p.sources.iloc[idx].tolist()
    clean = np.array([not adds_doubled_words(s, c) and not cut_short(s, c)
                      for s, c in zip(sources, candidates, strict=True)], bool) & \
        ~splits_off(sources, candidates, p.shared.parses)
    floor = p.settings.fluency_floor
    scores = np.full(len(candidates), np.nan)
    if floor is None:
        return clean, scores
    at = np.flatnonzero(clean)
    if len(at):
        scores[at] = fluency_against_sources(p, [candidates[i] for i in at], [sources[i] for i in at])
    return clean & (np.nan_to_num(scores, nan=floor) >= floor), scores
