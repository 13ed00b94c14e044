"""The moves of the protect loop: what a still-caught document gets next.

A ladder is a list of moves tried in order, one rung per round for each document still caught:

- ``pseudonymize``: the consistent pseudonyms of :mod:`tasks.generate.pseudonymize` (direct identifiers);
- ``reword``: the fewest edits that leave no run of its source in the document (a content word swapped for its
  WordNet synonym, a contraction made or spelt out; :mod:`tasks.protect.reword`): a short text keeps its sense;
- ``mask-evidence``: the features the feedback attack says tied the document's timeline to its author
  (:meth:`tasks.privacy.attacks.Attack.evidence`) are removed or normalised where the document carries them
  (:func:`mask_evidence`);
- ``generalize``: named entities, identifiers, numbers, dates and the evidence's content words become generic
  phrases of the same category in the same grammatical role ("Ohio" -> "the state", "2011" -> "that year", a
  noun -> its WordNet hypernym), the same entity the same phrase within an author
  (:mod:`tasks.protect.generalize`);
- ``llm-anonymize``: an LLM is shown the document and the attacker's evidence and asked to generalise what
  gave the author away without inventing facts (Staab et al., ICLR 2025), through the client the ``llm``
  strategy uses (a served model on GPU workers; the small offline model on CPU, slower and weaker);
- any registered generation strategy (``stymask``, ``backtranslate``, ``syndiff``, ``llm``, ``dp``, ...) with
  its parameters, rewriting the document's current text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.errors import ConfigError, shown
from tasks.generate.base import available_strategies, validate_params
from tasks.privacy.evidence import mark_run, word_ngram

PSEUDONYMIZE, MASK_EVIDENCE, LLM_ANONYMIZE = "pseudonymize", "mask-evidence", "llm-anonymize"
GENERALIZE, REWORD = "generalize", "reword"
#: Moves that are not generation strategies.
OWN_MOVES: tuple[str, ...] = (PSEUDONYMIZE, REWORD, MASK_EVIDENCE, GENERALIZE, LLM_ANONYMIZE)
#: The moves that rewrite a text in any language: the pseudonymiser (its names only in English, its patterns in
#: any), evidence masking and style masking (they remove or recase what is there), and the LLM moves. Every other
#: move reads English (WordNet, the English parser, apertium's English pairs) and is not given a document langid
#: puts in another language: it made "E un placer estar deceit ustedes" of a Spanish sentence.
ANY_LANGUAGE: frozenset[str] = frozenset({PSEUDONYMIZE, MASK_EVIDENCE, "stymask", "llm", LLM_ANONYMIZE, "dp"})


@dataclass(frozen=True)
class Move:
    """One rung: a move's name and, for a strategy, its parameters."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How the ``move`` column names it: ``pseudonymize``, ``mask-evidence`` or ``strategy:<name>``."""
        return self.name if self.name in OWN_MOVES else f"strategy:{self.name}"

    def as_config(self) -> str | dict[str, Any]:
        return self.name if not self.params else {"name": self.name, "params": dict(self.params)}


#: The default escalation, weakest first: the fewest word edits that break the runs of the source, evidence masking, generalisation, then ever stronger rewrites (the far
#: pivot of back-translation, a syntax-guided paraphrase). The rungs that need an LLM (an LLM paraphrase, the LLM
#: anonymiser shown the evidence, DP rewriting at decreasing epsilon) join it only where an LLM is served
#: (:func:`default_ladder`): on CPU the small offline model took 956 s for one round of 825 conventions sentences
#: and paid for little of it; a user can still name them in ``--ladder``.
DEFAULT_LADDER: tuple[Move, ...] = (
    Move(REWORD), Move(MASK_EVIDENCE), Move(GENERALIZE), Move("stymask"), Move(MASK_EVIDENCE),
    Move("backtranslate", {"pivots": ["hbs"], "backend": "apertium"}), Move("syndiff"),
)
#: The rungs appended to the default ladder when an LLM endpoint is served.
LLM_RUNGS: tuple[Move, ...] = (Move("llm"), Move(LLM_ANONYMIZE), Move("dp", {"epsilon": 50.0}),
                               Move("dp", {"epsilon": 10.0}))


def default_ladder(llm_served: bool) -> tuple[Move, ...]:
    """The default ladder: with an LLM endpoint served, the LLM rungs after the CPU ones."""
    return DEFAULT_LADDER + (LLM_RUNGS if llm_served else ())


def parse_ladder(items: Iterable[str | Mapping[str, Any]], where: str) -> tuple[Move, ...]:
    """Moves from config/CLI items (a name, or ``{name, params}``); ConfigError naming ``where`` and the
    known moves for an unknown one, with the strategy's own validation of its parameters."""
    known = [*OWN_MOVES, *available_strategies()]
    moves = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if isinstance(item, str):
            name, params = item.strip(), {}
        elif isinstance(item, Mapping) and set(item) <= {"name", "params"} and isinstance(item.get("name"), str):
            name, params = item["name"], dict(item.get("params") or {})
        else:
            raise ConfigError(f"{at}: expected a move name or {{name, params}}; got {shown(item)}")
        if name not in known:
            raise ConfigError(f"{at}: unknown move {shown(name)} (known: {', '.join(known)})")
        if name in OWN_MOVES and params:
            raise ConfigError(f"{at}: the move {name} takes no params")
        if name not in OWN_MOVES:
            validate_params(name, params, root=f"{at}.params")
        moves.append(Move(name, params))
    if not moves:
        raise ConfigError(f"{where}: the ladder is empty; name at least one move (known: {', '.join(known)})")
    return tuple(moves)


_SPACES = re.compile(r"[ \t]{2,}")
_SPACE_BEFORE_PUNCT = re.compile(r"[ \t]+([,.;:!?])")


_DOUBLED_WORD = re.compile(r"\b(\w+)(\s+\1\b)+", re.IGNORECASE)


def _tidy(text: str, before: str) -> str:
    """``text`` with runs of spaces and spaces before punctuation gone, and a word that a removal left doubled
    ("that and and ridiculous") written once where ``before`` did not double it."""
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACES.sub(" ", text)).strip()
    kept = {m.group(0).lower() for m in _DOUBLED_WORD.finditer(before)}
    return _DOUBLED_WORD.sub(lambda m: m.group(0) if m.group(0).lower() in kept else m.group(1), text)


def _words_containing(core: str, lowercase: bool) -> re.Pattern[str]:
    flags = re.IGNORECASE if lowercase else 0
    return re.compile(r"\S*" + re.escape(core) + r"\S*", flags)


def mask_evidence(text: str, features: Sequence[tuple[str, str]], *, lowercase: bool = False) -> str:
    """``text`` without the evidence ``features`` ((feature, kind) pairs, kind ``char`` or ``word``):

    - a word n-gram is removed where it occurs as whole words;
    - a character n-gram of punctuation or symbols (a signature ending, ``..``, ``!!``, an emoticon) is
      removed, a run of one repeated mark (``...``, ``!!``) shortened to one;
    - a character n-gram with a capital letter lowercases the words that carry it (a casing habit);
    - a character n-gram of letters removes the words that carry it (a favourite word, a habitual
      misspelling): the meaning floor decides whether that is kept.

    N-grams shorter than two non-space characters are left alone (they are in nearly every word)."""
    flags = re.IGNORECASE if lowercase else 0
    before = text
    for feature, kind in features:
        core = feature.strip()
        if len(core) < 2:
            continue
        if kind == "word":
            text = word_ngram(core, flags).sub(" ", text)
        elif not any(ch.isalnum() for ch in core):
            if mark_run(core):  # shortened to one
                text = re.sub(re.escape(core[0]) + "{2,}", core[0], text)
            else:
                text = text.replace(core, "")
        elif any(ch.isupper() for ch in core):
            text = _words_containing(core, False).sub(lambda m: m.group(0).lower(), text)
        else:
            text = _words_containing(core, lowercase).sub(" ", text)
    return _tidy(text, before)


#: The anonymiser's instruction: generalise what the attacker used, keep the meaning, invent nothing.
ANONYMIZE_PROMPT = (
    "An attacker recognised the author of the text below from these features of its writing: {features}.\n"
    "Rewrite the text so that these features are generalised or removed and the author cannot be recognised. "
    "Keep its meaning; use plain, neutral wording; do not invent any fact. Answer with the rewritten text only.\n\n"
    "Text: {text}\n\nRewritten text:")


def anonymize_prompt(text: str, features: Sequence[tuple[str, str]], limit: int = 12) -> str:
    """The anonymiser's prompt for one document and its timeline's evidence (the first ``limit`` features)."""
    shown_features = ", ".join(repr(f.strip()) for f, _ in features[:limit] if f.strip()) or "its style"
    return ANONYMIZE_PROMPT.format(features=shown_features, text=text)


def llm_anonymize(texts: Sequence[str], features: Sequence[Sequence[tuple[str, str]]], backend: Any, *,
                  seed: int, max_tokens: int = 256) -> list[str | None]:
    """One rewrite per text (None where the request failed or the answer is empty)."""
    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
    from tasks.models.llm import ChatRequest

    requests = [ChatRequest(messages=[{"role": "user", "content": anonymize_prompt(t, f)}], temperature=0.3,
                            top_p=0.9, max_tokens=max_tokens, seed=seed)
                for t, f in zip(texts, features, strict=True)]
    out: list[str | None] = []
    for result in backend.complete(requests):
        answer = (result.texts or [""])[0].strip() if result.ok else ""
        answer = answer.removeprefix("Rewritten text:").strip().strip('"').strip()
        out.append(answer or None)
    return out
