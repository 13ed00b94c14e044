"""The spaCy pipeline of the ``pos_tagger`` role (with its dependency parser) and batched parsing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasks.errors import ModelUnavailable
from tasks.models import loaders
from tasks.models.registry import resolve_model
from tasks.parallel import resource_lock


@loaders.cache
def load_parser(model: str | None = None) -> Any:
    """The full spaCy pipeline of the ``pos_tagger`` role (parser and lemmatizer included, NER off)."""
    spec = resolve_model("pos_tagger", model)
    try:
        import spacy

        nlp = spacy.load(spec.path, exclude=["ner"])
    except (OSError, ValueError, ImportError) as exc:
        raise ModelUnavailable(f"syntax: cannot load spaCy pipeline {spec.name} for role 'pos_tagger': "
                               f"{' '.join(str(exc).split())[:200]}") from None
    if "parser" not in nlp.pipe_names:
        raise ModelUnavailable(f"syntax: spaCy pipeline {spec.name} has no dependency parser; give one with "
                               "a parser via config models.pos_tagger: /path")
    return nlp


def parse(nlp: Any, texts: Sequence[str], batch_size: int = 64) -> list[Any]:
    """Parse texts in one batched ``nlp.pipe`` call (one thread at a time per shared pipeline)."""
    with resource_lock(nlp):
        return list(nlp.pipe(texts, batch_size=batch_size))

