"""Where an evidence feature (:data:`tasks.privacy.stylometric.evidence.EVIDENCE_COLUMNS`: a word or character
n-gram an attack names as what tied a timeline to its author) occurs in a text: the one rule the attacks' evidence
and protect's masking move (:func:`tasks.protect.moves.mask_evidence`) share, so an attack names only features a
move can mask."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np


def mark_run(core: str) -> bool:
    """Whether an n-gram is a run of one sentence mark (``...``, ``!!``): any run of that mark is its evidence."""
    return len(set(core)) == 1 and core[0] in ".!?"


def word_ngram(core: str, flags: int) -> re.Pattern[str]:
    """A word n-gram as whole words, any whitespace between them."""
    return re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, core.split())) + r"(?!\w)", flags)


_APART = "\x00"  # joins the texts :func:`carried_by` scans (texts holding it are scanned one by one)


def carried_by(texts: Sequence[str], feature: str, kind: str, *, lowercase: bool = False) -> np.ndarray:
    """Which of ``texts`` hold the evidence ``feature`` where :func:`tasks.protect.moves.mask_evidence` acts on it: a word n-gram
    as whole words, a run of one mark as any run of it, any other character n-gram as it is written (with
    ``lowercase``, one without capitals in any case). One scan of the texts joined (a timeline's documents):
    a protect round asks this for every caught document and every feature of its timeline."""
    out = np.zeros(len(texts), bool)
    core = feature.strip()
    if len(core) < 2 or not len(texts):
        return out
    texts = list(texts)
    if len(texts) > 1 and (_APART in core or any(_APART in t for t in texts)):  # a text holds the separator
        return np.array([carried_by([t], feature, kind, lowercase=lowercase)[0] for t in texts], bool)
    if kind != "word" and lowercase and not any(ch.isupper() for ch in core):
        core, texts = core.lower(), [t.lower() for t in texts]
    joined = _APART.join(texts)
    ends = np.cumsum([len(t) + 1 for t in texts])  # where each next text starts
    starts: list[int] = []
    if kind == "word":
        starts = [m.start() for m in word_ngram(core, re.IGNORECASE if lowercase else 0).finditer(joined)]
    else:
        needle = core[0] * 2 if mark_run(core) else core
        at = joined.find(needle)
        while at >= 0:  # the first occurrence in a text, then on from the next text
            starts.append(at)
            k = int(np.searchsorted(ends, at, side="right"))
            at = joined.find(needle, int(ends[k])) if k + 1 < len(texts) else -1
    out[np.searchsorted(ends, np.asarray(starts, np.int64), side="right")] = True
    return out
