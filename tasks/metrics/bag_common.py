"""What every family of bag metrics shares (:mod:`tasks.metrics.bags` holds the overview and the
DataFrame entry point): the error of an undefined case, the ``word-punct-lc`` tokeniser, the check that
both bags hold texts, row normalisation and the default sentence-vector function. Kept apart so each
family module imports it without importing the others."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from tasks.models.registry import resolve_model

Embed = Callable[[Sequence[str]], np.ndarray]

_WORD = re.compile(r"\w+|[^\w\s]")


class DegenerateBag(ValueError):
    """A bag-level metric is undefined for these bags; the message is the reason."""


def word_tokens(text: str) -> list[str]:
    """``word-punct-lc``: lowercased runs of word characters and single punctuation marks."""
    return _WORD.findall(text.lower())


def _check_bags(reference: Sequence[str], generated: Sequence[str]) -> None:
    if len(reference) == 0:
        raise DegenerateBag("empty reference bag")
    if len(generated) == 0:
        raise DegenerateBag("empty generated bag")


def _unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def default_embed(spec: object | None = None, cache: object | None = None) -> Embed:
    """Sentence vectors of the registry's ``sentence_encoder`` (or ``spec``) through the embedding cache."""
    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
    from tasks.models.embeddings import sentence_embeddings

    resolved = spec or resolve_model("sentence_encoder")
    return lambda texts: sentence_embeddings(texts, resolved, cache)  # type: ignore[arg-type]

