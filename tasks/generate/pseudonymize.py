"""Consistent pseudonyms for direct identifiers, before any rewriting strategy.

Each identifier :class:`~tasks.models.pii.PiiDetector` finds is replaced by a surrogate of the same type:
a person's name by names from :data:`FIRST_NAMES` / :data:`LAST_NAMES` (token by token, so "Jane Doe" and
a later "Doe" stay the same person; a lone word is a first name only where the name lists know it as one, so
"President Obama" keeps a surname; a first name the name lists give one sex,
:func:`tasks.models.given_names.given_name_sex`, by a name of that sex or of either, so "his son, Jason" stays a
son's name), an e-mail by ``first.last@example.com``, a @handle by another handle, a URL by an ``example.com``
address, an IP address by one of the documentation ranges (RFC 5737 / RFC 3849), and every other type (phone,
credit card, IBAN, SSN, ...) by the same shape with other digits and letters (``(555) 123-4567`` ->
``(803) 619-2240``).

Names only where there are names: besides the detector's own checks (:func:`tasks.models.pii.names_only`), a
one-word name the corpus itself writes in lower case more often than with a capital inside a sentence is an
ordinary word the NER model took for a name because it was capitalised ("Mom", "Dad", a sentence-initial
"Wildfires"): it is not replaced, unless a title comes right before it ("Senator Hunt") or it is listed with
a name ("Jack and Grace"), and it is never propagated to other occurrences (:func:`ordinary_words`).

The same value (compared without case and whitespace) gets the same surrogate within a scope: one
document, one group (a conversation or a timeline) or one author; two different values of a scope never
share one. Surrogates are drawn from a hash of (seed, scope, type, value), so a run is deterministic given
the seed. The mapping (original -> surrogate) is returned separately: it re-identifies people, so it is
written only to a private folder and never to a report.
"""

from __future__ import annotations

import hashlib
import ipaddress
import random
import re
import string
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from tasks.models.given_names import EITHER, FEMALE, MALE, given_name_sex, is_given_name
from tasks.models.pii import DEFAULT_ENTITIES, SOCIAL_HANDLE, DetectedText, PiiDetector, PiiSpan, normalise

#: Where the consistency of surrogates holds: the corpus column that names the scope.
SCOPE_COLUMNS: dict[str, str] = {"document": "doc_id", "group": "group_id", "author": "author_id"}
MAPPING_COLUMNS = ["scope", "scope_key", "entity", "original", "surrogate", "count"]
#: Columns added to the pseudonymised corpus: spans replaced, and whether names were searched (English).
REPLACED_COLUMN = "pii_replaced"
NAMES_SEARCHED_COLUMN = "pii_names_searched"

#: Surrogate first names by the sex they are given to (female, male, either), for an original first name of that
#: sex (or of either, or of none the name lists know: then all of them).
_FEMALE_FIRST_NAMES = """
Aaliyah Aiko Amara Ana Anika Ava Bianca Chloe Elena Emma Farah Grace Hana Ines Julia Lara Lina Maya Mei Mila
Nadia Nina Priya Rosa Sara Sofia Tess Uma Vera Yara Zoe
"""
_MALE_FIRST_NAMES = """
Adam Andrei Arjun Ben Carlos Daniel Diego Emeka Felix Hugo Isaac Jamal Kofi Leo Luca Marco Musa Noah Omar Rafael
Sean Tariq Theo Tomas Yusuf
"""
_EITHER_FIRST_NAMES = """
Alex Chen Dara Eli Jin Robin Sam
"""
_LAST_NAMES = """
Abbott Adeyemi Alvarez Baker Becker Bianchi Brooks Castro Cohen Costa Dubois Ellis Evans Fischer Flores
Garcia Gupta Haddad Hansen Ito Jensen Kaur Keller Kim Kowalski Larsen Lopez Mahler Martin Meyer Moreau
Murphy Nakamura Nguyen Novak Okafor Olsen Patel Perez Quinn Reyes Rossi Santos Schmidt Silva Singh Sato
Tanaka Torres Varga Vogel Walsh Weber Wright Yamamoto Young Zhang Ziegler
"""
_FEMALE, _MALE, _EITHER = (tuple(names.split()) for names in (_FEMALE_FIRST_NAMES, _MALE_FIRST_NAMES,
                                                                _EITHER_FIRST_NAMES))
#: First names for an original of each sex (:func:`tasks.models.given_names.given_name_sex`), of either ("his
#: sons Charlie and Sam": a name of either sex), and of none the lists know (all of them).
FIRST_NAMES_BY_SEX: dict[str | None, tuple[str, ...]] = {FEMALE: _FEMALE + _EITHER, MALE: _MALE + _EITHER,
                                                         EITHER: _EITHER, None: _FEMALE + _MALE + _EITHER}
FIRST_NAMES: tuple[str, ...] = FIRST_NAMES_BY_SEX[None]
LAST_NAMES: tuple[str, ...] = tuple(_LAST_NAMES.split())
#: Words kept as they are inside a name span (titles): "Dr. Jane Doe" -> "Dr. Maya Keller".
_TITLES = frozenset({"mr", "mr.", "mrs", "mrs.", "ms", "ms.", "dr", "dr.", "prof", "prof.", "sir", "madam"})
#: Lower-case name particles kept inside a name: "Osama bin Laden" -> "Anika bin Silva".
_PARTICLES = frozenset({"bin", "bint", "ibn", "al", "el", "van", "von", "der", "den", "de", "da", "di", "du", "del",
                        "la", "le"})
_ATTEMPTS = 50
#: Words right before a name that make it one, whatever the corpus writes otherwise ("Senator Hunt").
_HONORIFICS = _TITLES | frozenset({"president", "governor", "senator", "secretary", "congressman", "congresswoman",
                                   "mayor", "judge", "justice", "speaker", "general", "rev", "rev.", "reverend",
                                   "miss", "lady", "lord", "saint", "st", "st."})
_LETTERS = re.compile(r"[^\W\d_]+")
#: E-mail addresses, URLs, handles and file names, whose words are not counted as words.
_ADDRESSES = re.compile(r"\S*[@/]\S*|\S+\.[^\W\d_]+\.?\S*")
#: What joins two names in a list.
_JOINED = re.compile(r"\s*(?:,|,?\s*(?:and|or|&))\s*")
#: What may come between a sentence's end and its first word: spaces, opening quotes and brackets.
_OPENING = " \t\r\n\"'“‘([{"


def check_scope(scope: str) -> str:
    """The scope, validated (ValueError naming the known ones)."""
    if scope not in SCOPE_COLUMNS:
        raise ValueError(f"unknown pseudonymisation scope '{scope}'; known: {', '.join(SCOPE_COLUMNS)}")
    return scope


def _rng(seed: int, *parts: object) -> random.Random:
    digest = hashlib.sha256("\x1f".join(map(str, (seed, *parts))).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _same_case(surrogate: str, original: str) -> str:
    if original.isupper() and len(original) > 1:
        return surrogate.upper()
    if original.islower():
        return surrogate.lower()
    return surrogate


def _shape(value: str, rng: random.Random) -> str:
    """Same shape, other characters: digits by digits, letters by letters of the same case."""
    out = []
    for ch in value:
        if ch.isdigit():
            out.append(rng.choice(string.digits))
        elif ch.isalpha() and ch.isascii():
            out.append(rng.choice(string.ascii_uppercase if ch.isupper() else string.ascii_lowercase))
        else:
            out.append(ch)
    return "".join(out)


def _ip(value: str, rng: random.Random) -> str:
    try:
        version = ipaddress.ip_address(value.strip("[]")).version
    except ValueError:
        return _shape(value, rng)
    if version == 6:
        return f"2001:db8::{rng.randrange(1, 0xFFFF):x}:{rng.randrange(1, 0xFFFF):x}"
    return f"{rng.choice(('192.0.2', '198.51.100', '203.0.113'))}.{rng.randrange(1, 255)}"


def _url(value: str, rng: random.Random) -> str:
    lower = value.lower()
    prefix = next((p for p in ("https://www.", "http://www.", "https://", "http://", "www.") if lower.startswith(p)), "")
    path = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(6))
    return f"{value[:len(prefix)]}example.com/{path}"


@dataclass
class _Scope:
    """Surrogates given out in one scope: per (type, value), per name token, and all of them (no sharing)."""

    by_value: dict[tuple[str, str], str] = field(default_factory=dict)
    name_tokens: dict[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    originals: dict[tuple[str, str], str] = field(default_factory=dict)


class Pseudonymizer:
    """Type-consistent surrogates, the same for the same value within a scope, deterministic given the seed."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._scopes: dict[str, _Scope] = {}

    def _draw(self, state: _Scope, key: str, entity: str, value: str, make) -> str:
        for attempt in range(_ATTEMPTS):
            candidate = make(_rng(self.seed, key, entity, normalise(value), attempt))
            if normalise(candidate) != normalise(value) and normalise(candidate) not in state.used:
                break
        state.used.add(normalise(candidate))
        return candidate

    def _name_token(self, state: _Scope, key: str, token: str, first: bool) -> str:
        norm = normalise(token)
        if norm in _TITLES or not any(c.isalpha() for c in token) or (token in _PARTICLES and not first):
            return token
        if norm not in state.name_tokens:
            names = FIRST_NAMES_BY_SEX[given_name_sex(token)] if first else LAST_NAMES
            state.name_tokens[norm] = self._draw(state, key, "PERSON", token, lambda r: r.choice(names))
        return _same_case(state.name_tokens[norm], token)

    def _person(self, state: _Scope, key: str, value: str) -> str:
        """A name's surrogate: a first name for its first word, a surname for the others; a name of one word is a
        first name only where the name lists know it as one ("Michelle"; "President Obama", "Dr. King" take
        surnames)."""
        tokens = value.split()
        named = [t for t in tokens if normalise(t) not in _TITLES]
        out, seen = [], 0
        for token in tokens:
            is_name = normalise(token) not in _TITLES
            first = (seen == 0 and len(named) > 1) or (len(named) == 1 and is_given_name(token))
            out.append(self._name_token(state, key, token, first=first))
            seen += is_name
        return " ".join(out)

    def _make(self, entity: str, value: str):
        if entity == "EMAIL_ADDRESS":
            return lambda r: f"{r.choice(FIRST_NAMES)}.{r.choice(LAST_NAMES)}@example.com".lower()
        if entity == SOCIAL_HANDLE:
            return lambda r: f"@{r.choice(FIRST_NAMES)}_{r.choice(LAST_NAMES)}{r.randrange(10, 100)}".lower()
        if entity == "URL":
            return lambda r: _url(value, r)
        if entity == "IP_ADDRESS":
            return lambda r: _ip(value, r)
        return lambda r: _shape(value, r)

    def surrogate(self, span: PiiSpan, scope_key: str) -> str:
        """The surrogate of one span in the scope ``scope_key`` (remembered for the rest of the scope)."""
        state = self._scopes.setdefault(scope_key, _Scope())
        ident = (span.entity, normalise(span.text))
        state.counts[ident] = state.counts.get(ident, 0) + 1
        if ident not in state.by_value:
            state.originals[ident] = span.text
            if span.entity == "PERSON":
                state.by_value[ident] = self._person(state, scope_key, span.text)
            else:
                state.by_value[ident] = self._draw(state, scope_key, span.entity, span.text,
                                                   self._make(span.entity, span.text))
        return state.by_value[ident]

    def replace(self, text: str, spans: Sequence[PiiSpan], scope_key: str) -> str:
        """``text`` with every (non-overlapping) span replaced by its surrogate."""
        out, last = [], 0
        for span in sorted(spans, key=lambda s: s.start):
            out += [text[last:span.start], self.surrogate(span, scope_key)]
            last = span.end
        return "".join([*out, text[last:]])

    def mapping(self, scope: str) -> pd.DataFrame:
        """Original -> surrogate per scope (MAPPING_COLUMNS). Private: it undoes the pseudonymisation."""
        rows = [{"scope": scope, "scope_key": key, "entity": entity, "original": state.originals[(entity, norm)],
                 "surrogate": surrogate, "count": state.counts[(entity, norm)]}
                for key, state in self._scopes.items() for (entity, norm), surrogate in state.by_value.items()]
        return pd.DataFrame(rows, columns=MAPPING_COLUMNS)


def scope_keys(df: pd.DataFrame, scope: str) -> list[str]:
    """The scope of every row: its doc_id, group_id or author_id (its own document when that is null)."""
    column = SCOPE_COLUMNS[check_scope(scope)]
    doc_ids = df["doc_id"].astype(str).tolist()
    if column not in df.columns:
        return [f"doc_id={d}" for d in doc_ids]
    values = df[column].astype("string")
    return [f"doc_id={d}" if pd.isna(v) else f"{column}={v}" for d, v in zip(doc_ids, values, strict=True)]


def _pattern(words: set[str]) -> re.Pattern[str] | None:
    if not words:
        return None
    alternation = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternation})(?!\w)")


def _sentence_start(text: str, start: int) -> bool:
    """Whether the word at ``start`` begins ``text`` or a sentence (after . ! ? : or a line break)."""
    before = text[:start]
    stripped = before.rstrip(_OPENING)
    return not stripped or stripped[-1] in ".!?:…" or "\n" in before[len(stripped):]


def _after_honorific(text: str, start: int) -> bool:
    words = text[:start].split()
    return bool(words) and normalise(words[-1]) in _HONORIFICS


def ordinary_words(texts: Sequence[str], words: Iterable[str]) -> frozenset[str]:
    """Those of the capitalised ``words`` that ``texts`` write in lower case more often than capitalised inside
    a sentence: ordinary words ("Mom" beside "my mom"; "Wildfires" only sentence-initial), not names. A name
    is rarely written in lower case and is capitalised wherever it comes, so it stays ("Trump", "Mitt")."""
    words = {w for w in words if w[:1].isupper()}
    lowered = {w.lower() for w in words}
    lower: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    for text in texts:
        text = _ADDRESSES.sub(" ", text)  # jane.doe@x.org, example.com/jane: a name in lower case, not a word
        for match in _LETTERS.finditer(text):
            word = match.group()
            if word in lowered:
                lower[word] += 1
            elif word in words and not _sentence_start(text, match.start()):
                inside[word] += 1
    return frozenset(w for w in words if lower[w.lower()] > inside[w])


def _listed_with_a_name(text: str, spans: Sequence[PiiSpan], i: int, ordinary: Collection[str]) -> bool:
    """Whether span ``i`` and a PERSON span next to it that is no ordinary word are joined by a comma, "and" or
    "or" ("Jack and Grace", "Matt and Mark": both names; "Mom and Dad": neither)."""
    for j in (i - 1, i + 1):
        if 0 <= j < len(spans) and spans[j].entity == "PERSON" and spans[j].text not in ordinary:
            a, b = sorted((spans[i], spans[j]), key=lambda s: s.start)
            if _JOINED.fullmatch(text[a.end:b.start]):
                return True
    return False


def _names_in_corpus(texts: Sequence[str], detected: Sequence[DetectedText]) -> tuple[list[DetectedText],
                                                                                     frozenset[str]]:
    """The detections less the one-word PERSON spans that are ordinary words (:func:`ordinary_words`), unless a
    title comes before one or it is listed with a name; and those ordinary words (also tokens of longer names)."""
    words = {t for d in detected for s in d.spans if s.entity == "PERSON" for t in s.text.split()}
    ordinary = ordinary_words(texts, words)
    kept = [DetectedText(tuple(s for i, s in enumerate(d.spans) if not (
        s.entity == "PERSON" and s.text in ordinary and not _after_honorific(text, s.start)
        and not _listed_with_a_name(text, d.spans, i, ordinary))), english=d.english)
        for text, d in zip(texts, detected, strict=True)]
    return kept, ordinary


def propagate_spans(texts: Sequence[str], detected: Sequence[DetectedText],
                    keys: Sequence[str], ordinary: Collection[str] = ()) -> list[DetectedText]:
    """Detections completed within each scope: a value found once is replaced wherever it recurs in the scope
    (the NER model finds "Jane Doe" in one post and misses "Jane" in the next), and so is each token of a
    detected name when it recurs capitalised on its own ("Doe said ..."). Added spans score 0. A name that is
    one of the ``ordinary`` words, or a token of a name that is, is not propagated ("Will Smith" leaves
    "Will you ..." alone)."""
    values: dict[str, dict[str, str]] = {}
    tokens: dict[str, set[str]] = {}
    for d, key in zip(detected, keys, strict=True):
        for span in d.spans:
            if span.entity == "PERSON" and span.text in ordinary:
                continue
            values.setdefault(key, {})[normalise(span.text)] = span.entity
            if span.entity == "PERSON":
                tokens.setdefault(key, set()).update(
                    t for t in span.text.split()
                    if len(t) > 1 and t[0].isupper() and normalise(t) not in _TITLES and t not in ordinary)
    patterns = {key: (_pattern(set(values.get(key, {}))), _pattern(tokens.get(key, set()))) for key in values}
    out = []
    for text, d, key in zip(texts, detected, keys, strict=True):
        exact, names = patterns.get(key, (None, None))
        spans = list(d.spans)
        for pattern, case_blind in ((exact, True), (names, False)):
            if pattern is None:
                continue
            haystack = text.casefold() if case_blind else text
            for match in pattern.finditer(haystack):
                start, end = match.span()
                if len(haystack) != len(text) or any(start < s.end and end > s.start for s in spans):
                    continue  # casefold changed the length (ß -> ss): offsets would not hold
                entity = values[key].get(normalise(text[start:end]), "PERSON")
                spans.append(PiiSpan(entity, start, end, text[start:end], 0.0))
        out.append(DetectedText(tuple(sorted(spans, key=lambda s: s.start)), english=d.english))
    return out


def spans_to_replace(df: pd.DataFrame, entities: Sequence[str] = DEFAULT_ENTITIES, scope: str = "document", *,
                     detector: PiiDetector | None = None,
                     detected: Sequence[DetectedText] | None = None) -> list[DetectedText]:
    """The spans :func:`pseudonymize_corpus` replaces in each row of ``df``: the detector's less the ordinary
    words the corpus shows (:func:`ordinary_words`), then completed within each scope (:func:`propagate_spans`)."""
    texts = df["text"].astype(str).tolist()
    found = list(detected) if detected is not None else (detector or PiiDetector(entities)).detect(texts)
    if len(found) != len(texts):
        raise ValueError(f"{len(found)} detections for {len(texts)} texts")
    found, ordinary = _names_in_corpus(texts, found)
    return propagate_spans(texts, found, scope_keys(df, check_scope(scope)), ordinary)


def pseudonymize_corpus(df: pd.DataFrame, entities: Sequence[str] = DEFAULT_ENTITIES, scope: str = "document",
                        seed: int = 0, *, detector: PiiDetector | None = None,
                        detected: Sequence[DetectedText] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A corpus with its identifiers replaced by consistent surrogates, and the private mapping.

    Every row comes back (same order, same columns, ``text`` rewritten) with REPLACED_COLUMN (spans
    replaced) and NAMES_SEARCHED_COLUMN (False for a non-English text: only pattern types were looked
    for there). ``detected`` reuses a detection of ``df['text']`` already made."""
    scope = check_scope(scope)
    texts = df["text"].astype(str).tolist()
    keys = scope_keys(df, scope)
    found = spans_to_replace(df, entities, scope, detector=detector, detected=detected)
    pseudonymizer = Pseudonymizer(seed)
    out = df.copy()
    out["text"] = pd.Series([pseudonymizer.replace(text, d.spans, key) for text, d, key in
                             zip(texts, found, keys, strict=True)], index=df.index, dtype="string")
    out[REPLACED_COLUMN] = pd.Series([len(d.spans) for d in found], index=df.index, dtype="Int64")
    out[NAMES_SEARCHED_COLUMN] = pd.Series([d.english for d in found], index=df.index, dtype="boolean")
    return out, pseudonymizer.mapping(scope)
