"""StyMask: rule-based style masking that edits each text toward the corpus-wide stylometric average.

In the spirit of Karadzhov et al. (2017), the best system of the PAN 2016 authorship obfuscation
task: measure a few stylometric features per text and for the corpus, then apply local edits that
move each text's features toward the corpus average. No model, no download; deterministic given the
seed (every random choice uses ``random.Random(seed + stable_hash(text))``).

Features (:func:`style_features`): mean sentence length in words, punctuation marks per word,
uppercase share of letters, and contraction rate (contractions / (contractions + their expansions)).

Rules (each can be switched off; ``intensity`` in [0, 1] scales how far a text moves):

- ``punctuation``: collapse repeated marks (``!!!`` -> ``!``, ``?!?`` -> ``?``, ``....`` -> ``...``,
  ``,,`` -> ``,``); when the text uses less punctuation than the corpus, end unterminated lines with a period.
- ``casing``: lower-case shouted words (all-caps words of 4+ letters, and all-caps runs of 2+ words;
  short lone acronyms like USA stay); when the text has fewer capitals than the corpus, capitalise
  sentence starts and a lone ``i``.
- ``contractions``: expand (``don't`` -> ``do not``) or contract (``do not`` -> ``don't``) each
  candidate with the probability that brings the text's expected contraction rate to the corpus rate (a verb
  that ends its clause, or main-verb "have", is not contracted).
- ``lexical``: swap frequent function and discourse words from :data:`SYNONYMS` (a small built-in
  table: ``maybe`` -> ``perhaps``, ``cuz`` -> ``because``, ``very`` -> ``really``/``quite``, ...) with
  probability ``intensity * lexical_rate``.
- ``sentences``: when the text's sentences are longer than the corpus mean, split each over-long
  sentence where two full sentences result (a semicolon, ", and", ", but", ", so", ", yet") nearest its
  middle; when shorter, merge adjacent short
  sentences with a comma (only when the second starts with a common word, so names keep their capital).

A text whose feature lies within ``tolerance`` (relative) of the corpus value is left alone for that
feature. Corpus statistics come from the batch itself, or from ``stats`` in the params (compute them
once with :func:`corpus_stats` on the whole corpus so results do not depend on how it was sharded).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Iterable
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from tasks.errors import STRICT_INPUT
from tasks.generate.base import Strategy, register_strategy, stable_hash
from tasks.limits import MAX_RELATIVE_GAP, MAX_TOKENS

RuleName = Literal["punctuation", "casing", "contractions", "lexical", "sentences"]
ALL_RULES: tuple[RuleName, ...] = ("punctuation", "casing", "contractions", "lexical", "sentences")

#: Contraction -> expansion (lower case; the apostrophe may be ' or ’ in the text).
CONTRACTIONS: dict[str, str] = {
    "don't": "do not", "doesn't": "does not", "didn't": "did not", "can't": "cannot", "won't": "will not",
    "isn't": "is not", "aren't": "are not", "wasn't": "was not", "weren't": "were not",
    "haven't": "have not", "hasn't": "has not", "hadn't": "had not", "wouldn't": "would not",
    "couldn't": "could not", "shouldn't": "should not", "i'm": "i am", "i've": "i have", "i'll": "i will",
    "you're": "you are", "you've": "you have", "you'll": "you will", "we're": "we are", "we've": "we have",
    "we'll": "we will", "they're": "they are", "they've": "they have", "they'll": "they will",
    "it's": "it is", "that's": "that is", "there's": "there is", "he's": "he is", "she's": "she is",
    "what's": "what is",
}
EXPANSIONS: dict[str, str] = {v: k for k, v in CONTRACTIONS.items()}

#: Function / discourse word -> replacements. Small on purpose: only words whose swap keeps
#: grammar and meaning in nearly every context (no verbs that inflect, no words with several senses).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "maybe": ("perhaps",), "perhaps": ("maybe",), "because": ("since", "as"), "cuz": ("because",),
    "coz": ("because",), "cos": ("because",), "very": ("really", "quite"), "really": ("truly",),
    "almost": ("nearly",), "nearly": ("almost",), "although": ("though",), "therefore": ("thus", "hence"),
    "thus": ("therefore",), "hence": ("therefore",), "however": ("nevertheless",), "actually": ("in fact",),
    "basically": ("essentially",), "especially": ("particularly",), "usually": ("typically",),
    "probably": ("likely",), "definitely": ("certainly",), "certainly": ("surely",),
    "obviously": ("clearly",), "clearly": ("evidently",), "totally": ("completely",),
    "completely": ("entirely",), "often": ("frequently",), "frequently": ("often",),
    "sometimes": ("at times",), "anyway": ("anyhow",), "yeah": ("yes",), "yep": ("yes",),
    "okay": ("all right",), "ok": ("all right",), "gonna": ("going to",), "wanna": ("want to",),
    "gotta": ("have to",), "u": ("you",), "ur": ("your",), "pls": ("please",), "plz": ("please",),
    "thx": ("thanks",), "big": ("large",), "large": ("big",), "quickly": ("rapidly",),
}

#: Words that keep a capital when a merge puts them mid-sentence: only these lower-case safely.
_LOWERABLE_WORDS = (
    "a an the this that these those it its he she we they you there here and but or so yes no not "
    "well now then also still yet just only maybe perhaps sure right okay ok totally exactly indeed "
    "absolutely really thanks thank what why how when where who which my our your his her their"
)
_LOWERABLE = frozenset(_LOWERABLE_WORDS.split())
_ABBREVIATIONS = ("mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "prof", "sen", "gov", "u.s")

_WORD = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)*")
_PUNCT = re.compile(r"[.,;:!?\"()\-–—…]")
_SENT_END = re.compile(r"(?<=[.!?…])[\"')\]]*\s+(?=\S)")
_REPEAT_BANG = re.compile(r"[!?]*[!?]{2,}[!?]*")
_REPEAT_DOTS = re.compile(r"\.{4,}|…+")
_REPEAT_COMMA = re.compile(r"([,;:])\1+")
#: Where a sentence may be split in two full ones: a semicolon, ", and" (dropped), ", but", ", so" and ", yet" (kept to
#: open the second: "But ..."). Not a bare comma ("this message, I thought, would not" left "I believed. Wouldn't
#: go well"), nor a subordinating word ("because", "while": the second part would lose why or when).
_SPLIT_POINT = re.compile(r"\s*;\s+|,\s+and\s+|,\s+(?=(?:but|so|yet)\s)", re.IGNORECASE)
_CONTRACTION_RE = re.compile(r"\b(" + "|".join(re.escape(c).replace("'", "['’]") for c in CONTRACTIONS)
                             + r")\b", re.IGNORECASE)
_EXPANSION_RE = re.compile(r"\b(" + "|".join(re.escape(e) for e in sorted(EXPANSIONS, key=len, reverse=True))
                           + r")\b", re.IGNORECASE)
#: What may follow an expansion that is contracted: not the end of its clause ("not because we say we are, but"
#: cannot read "we're, but"), and after "have" a participle ("I have a job" is not "I've a job"; "I have always
#: been" is "I've always been").
_CLAUSE_END = re.compile(r"\s*(?:[^\w\s'’]|$)|\s+(?:and|but|or|nor|so|because|if|then|too|either)\b", re.IGNORECASE)
_NEXT_VERB = re.compile(r"\s+(?:(?:always|never|just|already|ever|not|also|really|all|since)\s+)?([a-z]+)", re.IGNORECASE)
_SYNONYM_RE = re.compile(r"\b(" + "|".join(re.escape(w) for w in sorted(SYNONYMS, key=len, reverse=True))
                         + r")\b", re.IGNORECASE)


class StyleStats(BaseModel):
    """Stylometric averages of a corpus (or the features of one text)."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    sentence_length: float = Field(description="mean words per sentence")
    punctuation_rate: float = Field(description="punctuation marks per word")
    uppercase_ratio: float = Field(description="uppercase letters / letters")
    contraction_rate: float = Field(description="contractions / (contractions + expanded forms)")


class StyMaskParams(BaseModel):
    """Params of the ``stymask`` strategy."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    rules: list[RuleName] = Field(default_factory=lambda: list(ALL_RULES), description="rules to apply, in order")
    intensity: float = Field(1.0, ge=0.0, le=1.0,
                             description="0 leaves texts as they are (except collapsing repeated punctuation), "
                                         "1 moves them all the way to the corpus average")
    tolerance: float = Field(0.25, ge=0.0, le=MAX_RELATIVE_GAP, description="relative gap to the corpus value left alone")
    lexical_rate: float = Field(0.5, ge=0.0, le=1.0, description="chance a listed word is swapped at intensity 1")
    min_split_words: int = Field(6, ge=2, le=MAX_TOKENS, description="each part of a split sentence has at least this many words")
    stats: StyleStats | None = Field(None, description="corpus averages to aim at (default: computed from the batch)")


def _sentences(line: str) -> list[str]:
    """Split one line into sentences (a regex; abbreviations like Mr. do not end a sentence)."""
    parts, start = [], 0
    for m in _SENT_END.finditer(line):
        before = line[start:m.start()].rstrip("\"')]").lower()
        if before.endswith(tuple(f" {a}." for a in _ABBREVIATIONS)) or before in {f"{a}." for a in _ABBREVIATIONS}:
            continue
        parts.append(line[start:m.start()])
        start = m.end()
    parts.append(line[start:])
    return [p for p in parts if p.strip()]


def style_features(text: str) -> StyleStats:
    """The four stylometric features of one text."""
    words = _WORD.findall(text)
    n_words = max(len(words), 1)
    sents = [s for line in text.splitlines() for s in _sentences(line)]
    sent_len = len(words) / max(len(sents), 1)
    letters = [c for c in text if c.isalpha()]
    upper = sum(c.isupper() for c in letters) / max(len(letters), 1)
    n_con = len(_CONTRACTION_RE.findall(text))
    n_exp = len(_EXPANSION_RE.findall(text))
    return StyleStats(sentence_length=sent_len, punctuation_rate=len(_PUNCT.findall(text)) / n_words,
                      uppercase_ratio=upper, contraction_rate=n_con / (n_con + n_exp) if n_con + n_exp else 0.0)


def corpus_stats(texts: Iterable[str]) -> StyleStats:
    """Corpus averages: the mean of each feature over texts (contraction rate over texts that have any)."""
    valid = [t for t in texts if isinstance(t, str) and t.strip()]
    if not valid:
        return StyleStats(sentence_length=0.0, punctuation_rate=0.0, uppercase_ratio=0.0, contraction_rate=0.0)
    feats = [style_features(t) for t in valid]
    n = len(feats)
    con = [f.contraction_rate for t, f in zip(valid, feats, strict=True)
           if _CONTRACTION_RE.search(t) or _EXPANSION_RE.search(t)]
    return StyleStats(sentence_length=sum(f.sentence_length for f in feats) / n,
                      punctuation_rate=sum(f.punctuation_rate for f in feats) / n,
                      uppercase_ratio=sum(f.uppercase_ratio for f in feats) / n,
                      contraction_rate=sum(con) / len(con) if con else 0.0)


def _direction(value: float, target: float, tolerance: float) -> int:
    """+1 when value is below the target band, -1 when above, 0 inside it."""
    if target == 0 and value == 0:
        return 0
    if value > target * (1 + tolerance):
        return -1
    if value < target * (1 - tolerance):
        return 1
    return 0


def _match_case(template: str, word: str) -> str:
    if template.isupper() and len(template) > 1:
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


# --- rules: each takes a line and returns the edited line -------------------------------------------------


def rule_punctuation(line: str, *, add_periods: bool) -> str:
    """Collapse repeated punctuation; with add_periods, end an unterminated line with a period."""
    line = _REPEAT_BANG.sub(lambda m: "?" if "?" in m.group() else "!", line)
    line = _REPEAT_DOTS.sub("...", line)
    line = _REPEAT_COMMA.sub(r"\1", line)
    stripped = line.rstrip()
    if add_periods and stripped and stripped[-1].isalnum():
        line = stripped + "." + line[len(stripped):]
    return line


_SHOUT_RUN = re.compile(r"\b[A-Z]{2,}(?:['’][A-Z]+)?(?:[\s,]+[A-Z]{2,}(?:['’][A-Z]+)?)+\b|\b[A-Z]{4,}\b")
_SENT_START = re.compile(r"(^|[.!?]\s+)([a-z])")


def rule_casing(line: str, *, raise_case: bool) -> str:
    """Lower shouted words; with raise_case, capitalise sentence starts and a lone 'i'."""
    line = _SHOUT_RUN.sub(lambda m: m.group().lower(), line)
    line = re.sub(r"\bi\b(?=['’]|\s|$)", "I", line)  # the lowered shout may leave a lone i
    if raise_case:
        line = _SENT_START.sub(lambda m: m.group(1) + m.group(2).upper(), line)
    return line


def rule_contractions(line: str, rng: random.Random, *, expand_p: float, contract_p: float) -> str:
    """Expand each contraction with probability expand_p, contract each expansion with contract_p."""
    if expand_p > 0:
        def expand(m: re.Match[str]) -> str:
            word = m.group()
            if rng.random() >= expand_p:
                return word
            return _match_case(word, CONTRACTIONS[word.lower().replace("’", "'")])
        line = _CONTRACTION_RE.sub(expand, line)
    if contract_p > 0:
        def contract(m: re.Match[str]) -> str:
            phrase = m.group()
            if rng.random() >= contract_p or not _contractible(phrase, m.string[m.end():]):
                return phrase
            return _match_case(phrase, EXPANSIONS[" ".join(phrase.lower().split())])
        line = _EXPANSION_RE.sub(contract, line)
    return re.sub(r"\bi(?=['’](?:m|ve|ll|d)\b| am\b| have\b| will\b)", "I", line)


def _contractible(phrase: str, after: str) -> bool:
    """Whether ``phrase`` (an expansion) may be contracted before the text ``after`` it (:data:`_CLAUSE_END`)."""
    if phrase.lower().endswith(" not"):
        return True  # "do not" -> "don't" reads at a clause's end too
    if _CLAUSE_END.match(after):
        return False
    if not phrase.lower().endswith("have"):
        return True
    verb = _NEXT_VERB.match(after)
    return verb is not None and (verb.group(1).lower() in _participles() or verb.group(1).lower().endswith("ed"))


@functools.cache
def _participles() -> frozenset[str]:
    """The irregular past participles (the syntax strategies' table; imported here, as that package imports this
    module) and "been"."""
    from tasks.generate.syntax.morphology import IRREGULAR

    return frozenset(p for _, p in IRREGULAR.values()) | {"been"}


def rule_lexical(line: str, rng: random.Random, *, p: float) -> str:
    """Swap words listed in SYNONYMS with probability p each."""
    def swap(m: re.Match[str]) -> str:
        word = m.group()
        if rng.random() >= p:
            return word
        return _match_case(word, rng.choice(SYNONYMS[word.lower()]))
    return _SYNONYM_RE.sub(swap, line) if p > 0 else line


def _n_words(s: str) -> int:
    return len(_WORD.findall(s))


def _split_sentence(sent: str, min_words: int) -> list[str]:
    """Split at the split point (:data:`_SPLIT_POINT`) nearest the middle whose both sides have min_words words."""
    total = _n_words(sent)
    best, best_gap = None, None
    for m in _SPLIT_POINT.finditer(sent):
        left, right = sent[:m.start()], sent[m.end():]
        if _n_words(left) < min_words or _n_words(right) < min_words:
            continue
        gap = abs(_n_words(left) - total / 2)
        if best_gap is None or gap < best_gap:
            best, best_gap = m, gap
    if best is None:
        return [sent]
    left, right = sent[:best.start()].rstrip(), sent[best.end():].lstrip()
    left = left if left[-1:] in ".!?" else left + "."
    return [left, right[:1].upper() + right[1:]]


def _mergeable_start(s: str) -> str | None:
    """The sentence with its first word lower-cased for a merge, or None when that is not safe
    (a word that may be a name keeps its capital, so the sentence is not merged)."""
    first = _WORD.match(s)
    if first is None:
        return None
    word = first.group()
    if word == "I" or re.fullmatch(r"I['’][a-z]+", word):
        return s
    if word.lower() in _LOWERABLE and not (word.isupper() and len(word) > 1):
        return s[:1].lower() + s[1:]
    return None


def rule_sentences(line: str, rng: random.Random, *, target: float, direction: int, tolerance: float,
                   min_words: int, p: float) -> str:
    """Split over-long sentences (direction -1) or merge short neighbours (direction +1) toward target."""
    sents = _sentences(line)
    if not sents or direction == 0 or p <= 0:
        return line
    out: list[str] = []
    if direction < 0:
        for s in sents:
            if _n_words(s) > target * (1 + tolerance) and rng.random() < p:
                out.extend(_split_sentence(s, min_words))
            else:
                out.append(s)
    else:
        for s in sents:
            prev = out[-1] if out else None
            merged = _mergeable_start(s) if prev is not None else None
            if (prev is not None and merged is not None and prev.rstrip().endswith(".")
                    and not prev.rstrip().endswith("..")
                    and _n_words(prev) + _n_words(s) <= target * (1 + tolerance) and rng.random() < p):
                out[-1] = prev.rstrip()[:-1] + ", " + merged
            else:
                out.append(s)
    lead = line[:len(line) - len(line.lstrip())]
    return lead + " ".join(out)


def mask_text(text: str, stats: StyleStats, params: StyMaskParams, rng: random.Random) -> str:
    """Apply the enabled rules to one text, line by line, toward the corpus stats."""
    feats = style_features(text)
    k, tol = params.intensity, params.tolerance
    lines = text.split("\n")
    for rule in params.rules:
        if rule == "punctuation":
            add = k > 0 and _direction(feats.punctuation_rate, stats.punctuation_rate, tol) > 0
            lines = [rule_punctuation(x, add_periods=add) for x in lines]
        elif rule == "casing":
            raise_case = k > 0 and _direction(feats.uppercase_ratio, stats.uppercase_ratio, tol) > 0
            lines = [rule_casing(x, raise_case=raise_case) for x in lines]
        elif rule == "contractions":
            d = _direction(feats.contraction_rate, stats.contraction_rate, tol)
            rate, goal = feats.contraction_rate, stats.contraction_rate
            expand_p = k * (rate - goal) / rate if d < 0 and rate > 0 else 0.0
            has_expansions = _EXPANSION_RE.search(text) is not None
            contract_p = k * (goal - rate) / (1 - rate) if d > 0 and rate < 1 and has_expansions else 0.0
            lines = [rule_contractions(x, rng, expand_p=expand_p, contract_p=contract_p) for x in lines]
        elif rule == "lexical":
            lines = [rule_lexical(x, rng, p=k * params.lexical_rate) for x in lines]
        elif rule == "sentences":
            d = _direction(feats.sentence_length, stats.sentence_length, tol)
            lines = [rule_sentences(x, rng, target=stats.sentence_length, direction=d, tolerance=tol,
                                    min_words=params.min_split_words, p=k) for x in lines]
    return "\n".join(lines)


@register_strategy("stymask", params=StyMaskParams)
class StyMask(Strategy):
    """Rule-based style masking toward the corpus stylometric average (Karadzhov et al. 2017)."""

    params: StyMaskParams

    def fit(self, corpus: pd.DataFrame) -> StyMask:
        """Aim at the whole corpus's averages (unless the params give them)."""
        self._fitted_stats = corpus_stats(t for t in corpus["text"].tolist() if isinstance(t, str))
        return self

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[str | Exception]:
        texts = batch["text"].tolist()
        stats = (self.params.stats or getattr(self, "_fitted_stats", None)
                 or corpus_stats(t for t in texts if isinstance(t, str)))
        out: list[str | Exception] = []
        for text in texts:
            if not isinstance(text, str):
                out.append(TypeError(f"text is not a string ({type(text).__name__})"))
                continue
            rng = random.Random(seed + stable_hash(text))
            out.append(mask_text(text, stats, self.params, rng))
        return out
