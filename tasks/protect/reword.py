"""``reword``: the fewest edits that leave no run of its source in a text.

The verbatim bound asks for a change in every ``min_chars`` characters (a run that long is searchable). A whole
rewrite of a short sentence costs much of its meaning; a few edits cost little: a content word replaced by a
WordNet synonym of the same part of speech, inflected as the word was; a contraction made or spelt out ("was not"
<-> "wasn't"); a number below 100 or an ordinal written in words. Edits are chosen from the left: each is the farthest one the
unchanged stretch before it can reach while staying under ``min_chars``, so as few words as possible change; only
the runs the text still shares with its source need breaking, and a copy shorter than a run needs one edit. A word
of a named entity, a proper noun, an auxiliary, a word of a fixed expression WordNet lists ("turn a blind eye"), one
of the commonest verbs ("have", "want": their synonyms most often take another sense, "had to" -> "got to") and a
word with no single-word synonym are never swapped.

Which synonym: without a judge, the most frequent English word by ``wordfreq``; with one (protect's fluency LM), the
one that reads best in its context, and none where every one reads much worse than the word it replaces (a wrong
sense: "works hard" -> "works firmly"). A judged rewording may also use a noun's more general word, an adjective's
similar one, and the alternations of :mod:`tasks.protect.alternations` (the same words put another way); with a
sense check too, a swap must keep the replaced word's sense in its sentence (the LM judges how a swap reads, not
what it means: "opposed" -> "defended" reads well). ``senses`` 1 (the safest) takes synonyms of the word's most
frequent sense and leaves spaCy's stop words alone; more senses let more words change, function words among them
("but" -> "yet"). Where a stretch has nothing to edit the run stays, and the loop's next move tries.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tasks.metrics.verbatim import normalise, normalise_with_offsets
from tasks.parallel import resource_lock
from tasks.protect.alternations import alternations, particle
from tasks.protect.lexicon import (
    fixed_expressions,
    gerund_for_noun,
    in_use,
    indefinite_article,
    inflect_verb,
    load_pipeline,
    load_wordnet,
    plural,
)

#: Per text, a score of how well it reads (higher: better); a swap is judged on the words around it.
Judge = Callable[[Sequence[str]], np.ndarray]
#: Per (text, span, text with the swap, its span), how close the swapped word's sense in context is to the one it
#: replaced (:func:`tasks.metrics.meaning.span_similarity`).
Sense = Callable[[Sequence[tuple[str, tuple[int, int], str, tuple[int, int]]]], np.ndarray]
#: The most a word swap may cost the words around it (nats of LM log-probability less unigram log-probability: a
#: fitting synonym costs little or gains, a wrong sense or a broken idiom several nats), and the tokens of context
#: each side it is judged on.
MAX_SWAP_COST = 4.0
_CONTEXT = (4, 2)
#: The least contextual similarity a swapped word must keep to the word it replaced (:data:`Sense`), calibrated for
#: :func:`tasks.metrics.meaning.span_similarity`'s default encoder on the swaps labelled by hand in
#: ``tests/data/reword_swaps.jsonl`` (docs/protect.md gives what it keeps).
SENSE_FLOOR = 0.5
#: The replacements judged per place (the most frequent synonyms), those judged first, and the rounds of judging a
#: batch may take.
MAX_OPTIONS = 5
_FIRST_OPTIONS = 2
_MAX_PASSES = 12
#: How many of a replacement's commonest WordNet senses the one it shares with the word may be (:func:`read_in`);
#: of the hand-labelled swaps that pass the sense check, 36 of the 46 it keeps kept the sense (0.78), against 47 of
#: 65 without it (0.72).
_READ_SENSES = 2
#: How deep in WordNet's noun hierarchy a more general word must be (shallower ones are abstractions).
_BROADER_DEPTH = 6

#: Signs written onto a number ("#1", "+5", "10%").
_SIGNS = frozenset({"#", "+", "-", "±", "~", "<", ">", "=", "%", "‰"})
_POS = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}
#: Penn tags whose form the inflection helpers cannot make (comparatives, superlatives).
_SKIP_TAGS = frozenset({"JJR", "JJS", "RBR", "RBS", "NNP", "NNPS"})


def read_in(word: str, sense: Any) -> bool:
    """Whether a reader takes ``word`` in ``sense`` (a WordNet synset it names): ``sense`` is among the word's
    ``_READ_SENSES`` commonest senses of that part of speech. A word named by a sense only far down its list reads
    as its common sense ("sleeve" -> "arm", "called" -> "named")."""
    pos = "a" if sense.pos() == "s" else sense.pos()
    return sense in load_wordnet().synsets(word, pos)[:_READ_SENSES]


def _common_words(senses: Sequence[Any], lemma: str) -> tuple[str, ...]:
    """The single lower-case words naming ``senses`` (WordNet synsets), other than ``lemma``, that a reader takes in
    that sense (:func:`read_in`), the most frequent English word first, none rarer than Zipf 3 (rarer words read as
    odd)."""
    from wordfreq import zipf_frequency

    names = {n for sense in senses for n in sense.lemma_names()
             if n.isalpha() and n.islower() and n != lemma and read_in(n, sense)}
    ranked = sorted(sorted(names), key=lambda n: -zipf_frequency(n, "en"))
    return tuple(n for n in ranked if in_use(n))


@functools.cache
def synonyms(lemma: str, pos: str, senses: int = 1) -> tuple[str, ...]:
    """The single-word synonyms of ``lemma`` in its ``senses`` most frequent WordNet senses of ``pos`` (``n``, ``v``,
    ``a``, ``r``), the most frequent English word first (:func:`_common_words`)."""
    return _common_words(load_wordnet().synsets(lemma, pos)[:senses], lemma)


@functools.cache
def broader_words(lemma: str, pos: str) -> tuple[str, ...]:
    """Single words one step more general than ``lemma``'s most frequent WordNet sense of ``pos`` (a noun's hypernym
    at least ``_BROADER_DEPTH`` deep, "teacher" -> "educator" but not "education" -> "activity"; an adjective's
    similar senses), the most frequent first: they keep the sense and lose a detail, so only an LM-judged rewording
    offers them."""
    first = load_wordnet().synsets(lemma, pos)[:1]
    if pos == "n":
        return _common_words([h for sense in first for h in sense.hypernyms() if h.min_depth() >= _BROADER_DEPTH],
                             lemma)
    return _common_words([r for sense in first for r in sense.similar_tos()] if pos == "a" else [], lemma)


def _swaps(tok: Any, senses: int = 1, broader: bool = False) -> list[str]:
    """The words that may replace ``tok``, inflected and cased as it was, the most frequent synonyms first, then
    with ``broader`` the more general words (none where it cannot be swapped; with more ``senses``, a content word
    on spaCy's stop list may be swapped too, and a function word for its near-synonym); a number below 100 is
    written in words."""
    if tok.like_num and tok.is_digit and not (tok.ent_type_ in ("DATE", "TIME") and len(tok.text) > 2):
        words = _number_words(tok.text) if not _attached_symbol(tok) else None
        return [words] if words else []
    if (ordinal := _ORDINAL.fullmatch(tok.lower_)) and not _attached_symbol(tok):
        words = _number_words(ordinal.group(1), ordinal=True)
        return [words] if words else []
    if senses > 1 and tok.lower_ in _FUNCTION_SWAPS and tok.pos_ == _FUNCTION_SWAPS[tok.lower_][1]:
        found = _FUNCTION_SWAPS[tok.lower_][0]
        return [found[0].upper() + found[1:] if tok.text[0].isupper() else found]
    pos = _POS.get(tok.pos_)
    if pos is None or tok.ent_type_ or not tok.is_alpha or len(tok.text) < 3 or tok.tag_ in _SKIP_TAGS or \
            (tok.is_stop and senses == 1) or tok.lower_ in _FIXED or _phrasal(tok) or _bare_before_of(tok) or \
            _naming_of(tok) or _hyphenated(tok) or \
            (tok.pos_ == "VERB" and tok.lemma_.lower() in _LIGHT_VERBS) or \
            (tok.pos_ == "NOUN" and tok.dep_ == "dobj" and tok.head.lemma_.lower() in _SUPPORT_VERBS) or \
            (tok.pos_ == "NOUN" and tok.dep_ == "compound"):  # a noun-noun term ("job crisis": not "occupation")
        return []
    out = []
    lemma = tok.lemma_.lower()
    for found in synonyms(lemma, pos, senses) + (broader_words(lemma, pos) if broader else ()):
        if pos == "n" and gerund_for_noun(found, lemma):
            continue
        if tok.tag_ == "NNS":
            if found.endswith("s"):  # a plural-only synonym ("contemporaries")
                continue
            found = plural(found)
        elif tok.pos_ == "VERB":
            found = inflect_verb(found, tok.tag_)
        if not in_use(found):  # an inflected form English does not use ("schoolings", "informations")
            continue
        if tok.text[0].isupper():
            found = found[0].upper() + found[1:]
        if found.lower() != tok.lower_ and found not in out:
            out.append(found)
    return out


def _phrasal(tok: Any) -> bool:
    """Whether ``tok`` is a phrasal verb or its particle: a synonym of either part breaks the pair ("take away" ->
    "take off")."""
    return particle(tok) or (tok.pos_ == "VERB" and any(particle(c) for c in tok.children))


def _bare_before_of(tok: Any) -> bool:
    """Whether ``tok`` is a singular noun with no word of its own before it and "of" after ("be part of", "in front
    of", "on top of"): it makes an idiom with the "of", which a synonym breaks ("be piece of")."""
    after = tok.doc[tok.i + 1] if tok.i + 1 < len(tok.doc) else None
    return tok.tag_ == "NN" and after is not None and after.lower_ == "of" and not any(
        c.i < tok.i for c in tok.children)


def _naming_of(tok: Any) -> bool:
    """Whether ``tok`` is a noun that names a place or body with "of" and a name after it ("the great state of
    Michigan", "the city of Detroit"): the phrase is how the name is said, and generalize reads the noun there."""
    doc = tok.doc
    return tok.pos_ == "NOUN" and tok.i + 2 < len(doc) and doc[tok.i + 1].lower_ == "of" and \
        doc[tok.i + 2].ent_type_ in ("GPE", "LOC", "ORG", "FAC")


def _hyphenated(tok: Any) -> bool:
    """Whether ``tok`` is part of a hyphenated word ("middle-class", "well-known"): a synonym of one part breaks the
    compound ("middle-grade")."""
    doc, i = tok.doc, tok.i
    return (i > 0 and doc[i - 1].text == "-" and not doc[i - 1].whitespace_) or (
        i + 1 < len(doc) and doc[i + 1].text == "-" and not tok.whitespace_)


def _attached_symbol(tok: Any) -> bool:
    """Whether a symbol is written onto ``tok`` ("$10", "10%", "#1"): a number there stays in digits ("$ten")."""
    doc, i = tok.doc, tok.i
    before = i > 0 and not doc[i - 1].whitespace_ and (doc[i - 1].is_currency or doc[i - 1].pos_ == "SYM" or
                                                       doc[i - 1].text in _SIGNS)
    after = i + 1 < len(doc) and not tok.whitespace_ and (doc[i + 1].text in _SIGNS or doc[i + 1].is_alpha or
                                                          doc[i + 1].pos_ == "SYM")
    return bool(before or after)


#: Auxiliary + ``not`` and pronoun + auxiliary, contracted; and each contraction spelt out (spaCy splits
#: ``don't`` into ``do`` + ``n't``): the same words, so a stretch of function words can change too.
_CONTRACT = {("do", "not"): "don't", ("does", "not"): "doesn't", ("did", "not"): "didn't", ("is", "not"): "isn't",
             ("are", "not"): "aren't", ("was", "not"): "wasn't", ("were", "not"): "weren't",
             ("have", "not"): "haven't", ("has", "not"): "hasn't", ("had", "not"): "hadn't",
             ("would", "not"): "wouldn't", ("could", "not"): "couldn't", ("should", "not"): "shouldn't",
             ("will", "not"): "won't", ("can", "not"): "can't", ("it", "is"): "it's", ("that", "is"): "that's",
             ("we", "are"): "we're", ("they", "are"): "they're", ("you", "are"): "you're", ("i", "am"): "I'm",
             ("i", "will"): "I'll", ("we", "will"): "we'll", ("i", "have"): "I've", ("we", "have"): "we've",
             ("they", "will"): "they'll", ("you", "will"): "you'll", ("he", "will"): "he'll", ("she", "will"): "she'll",
             ("it", "will"): "it'll", ("they", "have"): "they've", ("you", "have"): "you've", ("he", "is"): "he's",
             ("she", "is"): "she's", ("there", "is"): "there's", ("what", "is"): "what's", ("who", "is"): "who's",
             ("i", "would"): "I'd", ("we", "would"): "we'd", ("they", "would"): "they'd", ("you", "would"): "you'd",
             ("he", "would"): "he'd", ("she", "would"): "she'd", ("let", "us"): "let's"}
#: Function words with a near-synonym of the same use, and the part of speech they must have (``though`` the adverb
#: is not ``although``), for stretches with no content word to swap.
_FUNCTION_SWAPS = {"but": ("yet", "CCONJ"), "although": ("though", "SCONJ"), "though": ("although", "SCONJ"),
                   "among": ("amongst", "ADP"), "toward": ("towards", "ADP"), "towards": ("toward", "ADP"),
                   "maybe": ("perhaps", "ADV"), "perhaps": ("maybe", "ADV"), "whilst": ("while", "SCONJ"),
                   "nearly": ("almost", "ADV"), "almost": ("nearly", "ADV"), "everyone": ("everybody", "PRON"),
                   "everybody": ("everyone", "PRON"), "someone": ("somebody", "PRON"), "somebody": ("someone", "PRON"),
                   "anyone": ("anybody", "PRON"), "anybody": ("anyone", "PRON"), "nobody": ("no one", "PRON")}
#: Words of fixed expressions whose WordNet synonyms break them ("each other", "of course", "a lot", "at least"), and
#: "always", whose synonyms say something else ("ever", "forever").
_FIXED = frozenset({"other", "course", "lot", "least", "most", "kind", "sort", "bit", "well", "even", "still", "just",
                    "only", "right", "sure", "long", "far", "ever", "much", "way", "thing", "things", "time",
                    "always"})
#: The commonest English verbs, which carry many senses: their WordNet synonyms most often take another one ("had
#: to" -> "got to", "want" -> "need", "come" -> "arrive"; 3 of the 7 hand-labelled swaps of them kept the sense).
_LIGHT_VERBS = frozenset({"have", "get", "make", "go", "come", "do", "take", "give", "put", "let", "keep", "want",
                          "need", "feel"})
#: The support verbs of English light-verb constructions, whose object noun carries the meaning and picks its verb
#: ("make a choice", "get results", "have work to do"): a synonym of that noun breaks the pairing ("make a new
#: option", "gets outcomes", "have employment to do").
_SUPPORT_VERBS = frozenset({"make", "take", "have", "get", "give", "do"})
_SMALL = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth",
             "twelve": "twelfth"}
#: An ordinal in digits ("29th").
_ORDINAL = re.compile(r"(\d{1,2})(?:st|nd|rd|th)")


def _number_words(digits: str, ordinal: bool = False) -> str | None:
    """A whole number below 100 written in words (``62`` -> ``sixty-two``; an ``ordinal`` ``29`` ->
    ``twenty-ninth``); None for anything else."""
    if not digits.isdigit() or len(digits) > 2 or (len(digits) == 2 and digits[0] == "0"):
        return None
    n = int(digits)
    if ordinal and n == 0:
        return None
    if n < 20:
        return _ORDINALS.get(_SMALL[n], _SMALL[n] + "th") if ordinal else _SMALL[n]
    if n % 10 == 0:
        return _TENS[n // 10][:-1] + "ieth" if ordinal else _TENS[n // 10]
    return f"{_TENS[n // 10]}-{_number_words(str(n % 10), ordinal)}"
_EXPAND = {"n't": "not", "'s": "is", "'re": "are", "'m": "am", "'ll": "will", "'ve": "have", "'d": "would"}
_IRREGULAR_NOT = {"ca": "can", "wo": "will", "sha": "shall"}
#: Contractions that stand for a form of "have" before a participle.
_HAVE_FORMS = {"'s": "has", "'d": "had"}


def _contraction(doc: Any, i: int) -> tuple[int, str] | None:
    """(end token, text) of the contraction or expansion that starts at token ``i``, or None."""
    tok = doc[i]
    if i + 1 >= len(doc) or (tok.whitespace_ and doc[i + 1].text.startswith("'")):
        return None
    nxt = doc[i + 1]
    if not tok.whitespace_ and nxt.lower_ in _EXPAND and (nxt.pos_ in ("AUX", "PART") or nxt.lower_ == "n't"):
        if nxt.lower_ == "'s" and nxt.pos_ != "AUX":  # a possessive
            return None
        word = _EXPAND[nxt.lower_]
        if nxt.lower_ in _HAVE_FORMS:  # "'s" is "has" and "'d" "had" before a participle ("he's lived")
            after = doc[i + 2] if i + 2 < len(doc) else None
            if after is not None and after.lower_ == "been":
                word = _HAVE_FORMS[nxt.lower_]
            elif after is not None and after.tag_ in ("VBN", "VBD"):
                return None  # "it's done" (is) or "he's lived" (has): the tagger does not tell them apart
        head = _IRREGULAR_NOT.get(tok.lower_, tok.text) if nxt.lower_ == "n't" else tok.text
        if head != tok.text and tok.text[0].isupper():
            head = head.capitalize()
        return i + 2, f"{head} {word}"
    pair = (tok.lower_, nxt.lower_)
    if pair in _CONTRACT and tok.whitespace_ and (tok.pos_ in ("AUX", "PRON") and
                                                  (nxt.pos_ in ("AUX", "PART") or nxt.lower_ == "not")):
        if nxt.lower_ != "not" and not _contractible(nxt):
            return None
        short = _CONTRACT[pair]
        if tok.text[0].isupper() and short[0].islower():
            short = short[0].upper() + short[1:]
        return i + 2, short
    return None


def _contractible(verb: Any) -> bool:
    """Whether a subject's verb may lose its vowel to a contraction: an auxiliary whose verb follows ("we are
    going", "I have graduated"), or a copula with its complement after it ("we are proud"); not one left at the end
    of its clause ("... not because we say we are, but" cannot be "we're") nor main-verb "have" ("I've a job" is
    not American English)."""
    if verb.dep_ in ("aux", "auxpass"):
        return verb.head.i > verb.i
    return verb.lower_ != "have" and any(c.i > verb.i and c.dep_ not in ("punct", "cc", "conj") for c in verb.children)


def _common(a: str, b: str) -> tuple[int, int]:
    """The lengths of the common prefix and suffix of ``a`` and ``b`` (a swap keeps those characters)."""
    a, b = a.lower(), b.lower()
    prefix = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    suffix = next((k for k, (x, y) in enumerate(zip(reversed(a), reversed(b), strict=False)) if x != y), min(len(a), len(b)))
    return prefix, min(suffix, min(len(a), len(b)) - prefix)


@dataclass(frozen=True)
class Edit:
    """One place a text can change: the replacements (preferred first), the token after each, whether the LM
    judges them in context (a word swap, an alternation) or they read the same either way (a contraction, a number
    in words), and how many of them, the first, put a word in another's place (a sense check reads those)."""

    ends: tuple[int, ...]
    options: tuple[str, ...]
    judged: bool
    swaps: int = 0

    @property
    def end(self) -> int:
        """The token after the preferred replacement."""
        return self.ends[0]


def edit_options(doc: Any, senses: int = 1, broader: bool = False) -> dict[int, Edit]:
    """Every edit ``doc`` allows, by the token it starts at (see the module; ``broader``: more general words too,
    and the alternations of :mod:`tasks.protect.alternations`, after a place's synonyms)."""
    edits: dict[int, Edit] = {}
    fixed = fixed_expressions(doc)
    for tok in doc:
        if (c := _contraction(doc, tok.i)) is not None:
            edits[tok.i] = Edit((c[0],), (c[1],), judged=False)
        elif tok.i not in fixed and (swaps := _swaps(tok, senses, broader)):
            swaps = swaps[:MAX_OPTIONS]
            edits[tok.i] = Edit((tok.i + 1,) * len(swaps), tuple(swaps), judged=tok.is_alpha, swaps=len(swaps))
    if broader:
        for i, found in alternations(doc, fixed).items():
            known = edits.get(i)
            if known is None:
                edits[i] = Edit(tuple(e for e, _ in found), tuple(t for _, t in found), judged=True)
            elif known.judged:
                edits[i] = Edit(known.ends + tuple(e for e, _ in found), known.options + tuple(t for _, t in found),
                                judged=True, swaps=known.swaps)
    return edits


def runs_of_source(text: str, source: str | None, min_chars: int) -> list[tuple[int, int]]:
    """The stretches of ``text`` (character offsets) an edit must break: those covered by runs of ``min_chars``
    characters it shares with ``source``, compared as the verbatim check compares them (case folded, whitespace
    collapsed), or the whole text where it is a copy of ``source`` shorter than a run; without a source, the whole
    text (itself taken as its source)."""
    low, where = normalise_with_offsets(text)
    if source is None or low == normalise(source):
        return [(0, len(text))] if text else []
    reference = normalise(source)
    grams = {reference[j:j + min_chars] for j in range(len(reference) - min_chars + 1)}
    covered = np.zeros(len(low) + 1, bool)
    for j in range(len(low) - min_chars + 1):
        if low[j:j + min_chars] in grams:
            covered[j:j + min_chars] = True
    edges = np.flatnonzero(np.diff(np.concatenate([[False], covered])))  # starts and ends, alternating
    return [(int(where[x]), int(where[y - 1]) + 1) for x, y in zip(edges[::2], edges[1::2], strict=True)]


def _choose(doc: Any, edits: dict[int, tuple[int, str]], min_chars: int,
            runs: list[tuple[int, int]] | None = None) -> dict[int, tuple[int, str]]:
    """Of ``edits`` (start token -> (end token, text)), the fewest that leave no unchanged stretch of ``min_chars``
    characters inside ``runs`` (:func:`runs_of_source`; None: the whole text) where an edit can break it, each the
    farthest the stretch before it can reach (the characters an edit keeps, a shared prefix or suffix, count as
    unchanged). A run shorter than ``min_chars`` is a short copy: one edit in it is enough."""
    runs = [(0, len(doc.text))] if runs is None else runs
    spans = {i: (doc[i].idx, doc[end - 1].idx + len(doc[end - 1].text)) for i, (end, _) in edits.items()}
    kept = {i: _common(doc.text[a:b], edits[i][1]) for i, (a, b) in spans.items()}
    chosen: dict[int, tuple[int, str]] = {}
    for start, stop in runs:
        order = sorted(i for i in edits if spans[i][0] < stop and spans[i][1] > start)
        if order and stop - start < min_chars:
            chosen[order[0]] = edits[order[0]]
            continue
        stretch, k = start, 0  # where the current unchanged stretch starts (a character offset)
        while k < len(order) and stop - stretch >= min_chars:
            reach = [i for i in order[k:] if spans[i][0] + kept[i][0] - stretch < min_chars - 1]
            i = reach[-1] if reach else order[k]  # the farthest within reach, else the next one (the run stays)
            chosen[i] = edits[i]
            stretch = spans[i][1] - kept[i][1]
            k = next((n for n, j in enumerate(order) if j >= edits[i][0]), len(order))
    return chosen


def _render(doc: Any, chosen: dict[int, tuple[int, str]]) -> str:
    """``doc``'s text with the ``chosen`` edits made (and a/an agreeing with a swapped word after it)."""
    words, skip = [], 0
    for t in doc:
        if t.i < skip:
            continue
        if t.i in chosen:
            end, text = chosen[t.i]
            words.append((text, doc[end - 1].whitespace_, True))
            skip = end
        else:
            words.append((t.text, t.whitespace_, False))
    for n, (text, ws, _) in enumerate(words[:-1]):  # a/an before a swapped word
        after, _, swapped = words[n + 1]
        if text.lower() in ("a", "an") and swapped:
            article = indefinite_article(after)
            words[n] = (article.capitalize() if text[0].isupper() else article, ws, False)
    return "".join(text + ws for text, ws, _ in words)


def reword_doc(doc: Any, min_chars: int, senses: int = 1, source: str | None = None) -> str:
    """``doc`` (a spaCy parse) with the fewest edits that leave no unchanged run of ``min_chars`` characters of
    ``source`` (None: of itself) where an edit can break it, each swap the most frequent synonym (no LM)."""
    edits = {i: (e.end, e.options[0]) for i, e in edit_options(doc, senses).items()}
    return _render(doc, _choose(doc, edits, min_chars, runs_of_source(doc.text, source, min_chars)))


def _window(doc: Any, i: int, end: int, text: str | None = None) -> str:
    """The words around the edit of tokens ``i:end`` (``_CONTEXT`` tokens each side), with ``text`` in its place
    (None: as written)."""
    a, b = max(0, i - _CONTEXT[0]), min(len(doc), end + _CONTEXT[1])
    lo, hi = doc[i].idx, doc[end - 1].idx + len(doc[end - 1].text)
    whole = doc.text
    return whole[doc[a].idx:lo] + (whole[lo:hi] if text is None else text) + \
        whole[hi:doc[b - 1].idx + len(doc[b - 1].text)]


def sense_scores(sense: Sense, pairs: Sequence[tuple[str, tuple[int, int], str, tuple[int, int]]]) -> np.ndarray:
    """``sense``'s similarity per pair, -1 where it has none (a span the encoder cut off): compared with
    ``SENSE_FLOOR``, such a swap is not made."""
    return np.nan_to_num(np.asarray(sense(pairs), float), nan=-1.0)


def sense_pair(doc: Any, i: int, end: int, text: str) -> tuple[str, tuple[int, int], str, tuple[int, int]]:
    """``doc``'s text and the span of tokens ``i:end``, and the text with ``text`` in that span and its span (what
    :data:`Sense` compares)."""
    lo, hi = doc[i].idx, doc[end - 1].idx + len(doc[end - 1].text)
    return doc.text, (lo, hi), doc.text[:lo] + text + doc.text[hi:], (lo, lo + len(text))


def judged_choices(docs: Sequence[Any], min_chars: int, senses: int, judge: Judge,
                   runs: Sequence[list[tuple[int, int]]], sense: Sense | None = None) -> list[dict[int, tuple[int, str]]]:
    """Per parse, the edits :func:`_choose` takes when each word swap it would take is first judged in context:
    ``judge`` scores the words around the swap as written and with its ``_FIRST_OPTIONS`` most frequent
    replacements (the rest only where none of those passes), the best is kept where it costs at most
    ``MAX_SWAP_COST`` nats, and a place with none is dropped (the chooser then reaches for another). Only the places
    the chooser takes are judged, all parses' at once, until none is left unjudged. ``runs``: per parse, the
    stretches to break (:func:`runs_of_source`). With ``sense``, a replacement must also keep ``SENSE_FLOOR`` of the
    word's sense in its sentence, and of those that do, the closest in sense is kept."""
    options = [edit_options(doc, senses, broader=True) for doc in docs]
    verdict: list[dict[int, int | None]] = [{} for _ in docs]  # a place's chosen option, or None where none fits
    tried: list[dict[int, int]] = [{} for _ in docs]  # how many of a place's options were judged
    written: dict[tuple[int, int, int], float] = {}  # a stretch's words as written, scored once

    def edits(k: int, tentative: bool) -> dict[int, tuple[int, str]]:
        out = {}
        for i, e in options[k].items():
            if not e.judged:
                n = 0
            elif i in verdict[k]:
                n = verdict[k][i]
            else:  # not judged yet: the next option to judge, while the chooser looks for places
                n = tried[k].get(i, 0) if tentative else None
            if n is not None:
                out[i] = (e.ends[n], e.options[n])
        return out

    for _ in range(_MAX_PASSES):
        asks = [(k, i) for k, doc in enumerate(docs) for i in _choose(doc, edits(k, True), min_chars, runs[k])
                if options[k][i].judged and i not in verdict[k]]
        if not asks:
            break
        windows, bounds, pairs, base = [], [], [], []
        for k, i in asks:
            e, done = options[k][i], tried[k].get(i, 0)
            last = min(_FIRST_OPTIONS, len(e.options)) if done < _FIRST_OPTIONS else len(e.options)
            batch = range(done, last)
            bounds.append((len(windows), len(windows) + len(batch)))
            windows += [_window(docs[k], i, e.ends[n], e.options[n]) for n in batch]
            pairs += [sense_pair(docs[k], i, e.ends[n], e.options[n]) if n < e.swaps else None for n in batch]
            base += [(k, i, e.ends[n]) for n in batch]
        unscored = list(dict.fromkeys(key for key in base if key not in written))
        scores = np.nan_to_num(np.asarray(judge(windows + [_window(docs[k], i, end) for k, i, end in unscored]),
                                          float), nan=-np.inf)
        written.update(zip(unscored, scores[len(windows):].tolist(), strict=True))
        reads_well = [[n for n in range(a, b) if scores[n] >= written[base[n]] - MAX_SWAP_COST] for a, b in bounds]
        close = np.ones(len(windows))  # the sense is read only where a word swap reads well
        if sense is not None and (at := [n for fluent in reads_well for n in fluent if pairs[n] is not None]):
            close[at] = sense_scores(sense, [pairs[n] for n in at])
        for (k, i), (a, b), fluent in zip(asks, bounds, reads_well, strict=True):
            done = tried[k].get(i, 0)
            tried[k][i] = done + b - a
            fits = [n for n in fluent if close[n] >= SENSE_FLOOR] if sense is not None else fluent
            if fits:
                verdict[k][i] = done + max(fits, key=lambda n: (close[n], scores[n])) - a
            elif tried[k][i] >= len(options[k][i].options):
                verdict[k][i] = None
    return [_choose(doc, edits(k, False), min_chars, runs[k]) for k, doc in enumerate(docs)]


def reword(texts: Sequence[str], *, min_chars: int, senses: int = 1, sources: Sequence[str] | None = None,
           nlp: Any = None, parses: dict[str, Any] | None = None, batch_size: int = 64,
           judge: Judge | None = None, sense: Sense | None = None) -> list[str]:
    """Each text with the fewest edits that break the runs of ``min_chars`` characters it shares with its source
    (``sources``; None: each text is its own source) (see the module); synonyms from the ``senses`` most frequent
    senses of a word (1: the safest; more: more words can be swapped). With ``judge`` (per text, its LM
    log-probability less its unigram one: :func:`tasks.metrics.fluency.slor_totals`) each swap is the synonym that
    reads best in its context, and one that reads much worse than the word it replaces is not made (and with
    ``sense`` too, :func:`judged_choices`, one that loses the word's sense in its sentence); without, the most
    frequent synonym. ``parses`` keeps each text's parse for the next call (a protect rung rewords the same
    texts with one and with more senses)."""
    nlp = nlp if nlp is not None else load_pipeline()
    parses = {} if parses is None else parses
    texts = [str(t) for t in texts]
    sources = [None] * len(texts) if sources is None else [str(t) for t in sources]
    runs = [runs_of_source(t, src, min_chars) for t, src in zip(texts, sources, strict=True)]
    need = [i for i, r in enumerate(runs) if r]  # a text sharing no run with its source is left as it is
    with resource_lock(nlp):
        todo = list(dict.fromkeys(texts[i] for i in need if texts[i] not in parses))
        parses.update(zip(todo, nlp.pipe(todo, batch_size=batch_size), strict=True))
    out = list(texts)
    if judge is None:
        for i in need:
            out[i] = reword_doc(parses[texts[i]], min_chars, senses, sources[i])
        return out
    chosen = judged_choices([parses[texts[i]] for i in need], min_chars, senses, judge, [runs[i] for i in need],
                            sense)
    for i, c in zip(need, chosen, strict=True):
        out[i] = _render(parses[texts[i]], c)
    return out
