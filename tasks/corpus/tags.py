"""The per-word segment tags of a dialogue corpus (its ``seg_tags`` column): ``I`` inside a segment, the segment's
label on its last word. The importers write them and the dialogue task metrics read them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

INSIDE = "I"  #: tag of a word that does not end a segment


def segment_tags(n_words: Sequence[int], labels: Sequence[Any]) -> list[str]:
    """Per-word tags of consecutive segments of ``n_words[i]`` words labelled ``labels[i]``.

    An empty segment (0 words) has no word to carry its tag and is dropped."""
    tags: list[str] = []
    for n, lab in zip(n_words, labels, strict=True):
        if n > 0:
            tags.extend([INSIDE] * (n - 1) + [str(lab)])
    return tags
