"""``reword``: the fewest edits that leave no run of its source in a text.

The verbatim bound asks for a change in every ``min_chars`` characters (a run that long is searchable). A whole
rewrite of a short sentence costs much of its meaning; a few edits cost little: a content word replaced by a
WordNet synonym of the same part of speech, inflected as the word was; a contraction made or spelt out ("was not"
<-> "wasn't"); a number below 100 written in words. Edits are chosen from the left: each is the farthest one the
unchanged stretch before it can reach while staying under ``min_chars``, so as few words as possible change. A
word of a named entity, a proper noun, an auxiliary and a word with no single-word synonym are never swapped; among
a word's synonyms the most frequent English word by ``wordfreq`` is taken, so the swap reads naturally (the
fluency floor checks the whole sentence). ``senses`` 1 (the safest) takes synonyms of the word's most frequent
sense and leaves spaCy's stop words alone; more senses let more words change, function words among them ("but" ->
"yet"). Where a stretch has nothing to edit the run stays, and the loop's next move tries.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from tasks.parallel import resource_lock
from tasks.protect.lexicon import inflect_verb, load_pipeline, load_wordnet, plural

_POS = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}
#: Penn tags whose form the inflection helpers cannot make (comparatives, superlatives).
_SKIP_TAGS = frozenset({"JJR", "JJS", "RBR", "RBS", "NNP", "NNPS"})


@functools.cache
def synonym(lemma: str, pos: str, senses: int = 1) -> str | None:
    """The most frequent single-word synonym of ``lemma`` in its ``senses`` most frequent WordNet senses of ``pos``
    (``n``, ``v``, ``a``, ``r``), or None."""
    from wordfreq import zipf_frequency

    wn = load_wordnet()
    names: set[str] = set()
    for sense in wn.synsets(lemma, pos)[:senses]:
        names.update(n for n in sense.lemma_names() if n.isalpha() and n.islower() and n != lemma)
    if not names:
        return None
    best = max(sorted(names), key=lambda n: zipf_frequency(n, "en"))
    return best if zipf_frequency(best, "en") >= 3.0 else None  # rarer words read as odd


def _swap(tok: Any, senses: int = 1) -> str | None:
    """The word replacing ``tok``, inflected and cased as it was, or None where it cannot be swapped (with more
    ``senses``, a content word on spaCy's stop list may be swapped too, and a function word for its near-synonym);
    a number below 100 is written in words."""
    if tok.like_num and tok.is_digit and not (tok.ent_type_ in ("DATE", "TIME") and len(tok.text) > 2):
        return _number_words(tok.text)
    if senses > 1 and tok.lower_ in _FUNCTION_SWAPS and tok.pos_ == _FUNCTION_SWAPS[tok.lower_][1]:
        found = _FUNCTION_SWAPS[tok.lower_][0]
        return found[0].upper() + found[1:] if tok.text[0].isupper() else found
    pos = _POS.get(tok.pos_)
    if pos is None or tok.ent_type_ or not tok.is_alpha or len(tok.text) < 3 or tok.tag_ in _SKIP_TAGS or \
            (tok.is_stop and senses == 1) or tok.lower_ in _FIXED:
        return None
    found = synonym(tok.lemma_.lower(), pos, senses)
    if found is None:
        return None
    if tok.tag_ == "NNS":
        if found.endswith("s"):  # a plural-only synonym ("contemporaries")
            return None
        found = plural(found)
    elif tok.pos_ == "VERB":
        found = inflect_verb(found, tok.tag_)
    if tok.text[0].isupper():
        found = found[0].upper() + found[1:]
    return found if found.lower() != tok.lower_ else None


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
#: Words of fixed expressions whose WordNet synonyms break them ("each other", "of course", "a lot", "at least").
_FIXED = frozenset({"other", "course", "lot", "least", "most", "kind", "sort", "bit", "well", "even", "still", "just",
                    "only", "right", "sure", "long", "far", "ever", "much", "way", "thing", "things", "time"})
_SMALL = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def _number_words(digits: str) -> str | None:
    """A whole number below 100 written in words (``62`` -> ``sixty-two``); None for anything else."""
    if not digits.isdigit() or len(digits) > 2 or (len(digits) == 2 and digits[0] == "0"):
        return None
    n = int(digits)
    if n < 20:
        return _SMALL[n]
    return _TENS[n // 10] + ("" if n % 10 == 0 else f"-{_SMALL[n % 10]}")
_EXPAND = {"n't": "not", "'s": "is", "'re": "are", "'m": "am", "'ll": "will", "'ve": "have", "'d": "would"}
_IRREGULAR_NOT = {"ca": "can", "wo": "will", "sha": "shall"}


def _contraction(doc: Any, i: int) -> tuple[int, str] | None:
    """(end token, text) of the contraction or expansion that starts at token ``i``, or None."""
    tok = doc[i]
    if i + 1 >= len(doc) or (tok.whitespace_ and doc[i + 1].text.startswith("'")):
        return None
    nxt = doc[i + 1]
    if not tok.whitespace_ and nxt.lower_ in _EXPAND and (nxt.pos_ in ("AUX", "PART") or nxt.lower_ == "n't"):
        if nxt.lower_ == "'s" and nxt.pos_ != "AUX":  # a possessive
            return None
        head = _IRREGULAR_NOT.get(tok.lower_, tok.text) if nxt.lower_ == "n't" else tok.text
        if head != tok.text and tok.text[0].isupper():
            head = head.capitalize()
        return i + 2, f"{head} {_EXPAND[nxt.lower_]}"
    pair = (tok.lower_, nxt.lower_)
    if pair in _CONTRACT and tok.whitespace_ and (tok.pos_ in ("AUX", "PRON") and
                                                  (nxt.pos_ in ("AUX", "PART") or nxt.lower_ == "not")):
        short = _CONTRACT[pair]
        if tok.text[0].isupper() and short[0].islower():
            short = short[0].upper() + short[1:]
        return i + 2, short
    return None


def _common(a: str, b: str) -> tuple[int, int]:
    """The lengths of the common prefix and suffix of ``a`` and ``b`` (a swap keeps those characters)."""
    a, b = a.lower(), b.lower()
    prefix = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    suffix = next((k for k, (x, y) in enumerate(zip(reversed(a), reversed(b), strict=False)) if x != y), min(len(a), len(b)))
    return prefix, min(suffix, min(len(a), len(b)) - prefix)


def reword_doc(doc: Any, min_chars: int, senses: int = 1) -> str:
    """``doc`` (a spaCy parse) with the fewest edits (a synonym swap, a contraction made or spelt out) that leave
    no unchanged stretch of ``min_chars`` characters where an edit can break it (the characters an edit keeps, a
    shared prefix or suffix, count as unchanged)."""
    edits: dict[int, tuple[int, str]] = {}
    for tok in doc:
        if (c := _contraction(doc, tok.i)) is not None:
            edits[tok.i] = c
        elif (s := _swap(tok, senses)) is not None:
            edits[tok.i] = (tok.i + 1, s)
    spans = {i: (doc[i].idx, doc[end - 1].idx + len(doc[end - 1].text)) for i, (end, _) in edits.items()}
    kept = {i: _common(doc.text[a:b], edits[i][1]) for i, (a, b) in spans.items()}
    chosen: dict[int, tuple[int, str]] = {}
    stretch = 0  # where the current unchanged stretch starts (a character offset)
    order = sorted(edits)
    k = 0
    while k < len(order) and len(doc.text) - stretch >= min_chars:
        reach = [i for i in order[k:] if spans[i][0] + kept[i][0] - stretch < min_chars - 1]
        i = reach[-1] if reach else order[k]  # the farthest within reach, else the next one (the run stays)
        chosen[i] = edits[i]
        stretch = spans[i][1] - kept[i][1]
        k = next((n for n, j in enumerate(order) if j >= edits[i][0]), len(order))
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
            article = "an" if after[0].lower() in "aeiou" else "a"
            words[n] = (article.capitalize() if text[0].isupper() else article, ws, False)
    return "".join(text + ws for text, ws, _ in words)


def reword(texts: Sequence[str], *, min_chars: int, senses: int = 1, nlp: Any = None,
           parses: dict[str, Any] | None = None, batch_size: int = 64) -> list[str]:
    """Each text with the fewest edits that break its runs of ``min_chars`` characters (see the module); synonyms
    from the ``senses`` most frequent senses of a word (1: the safest; more: more words can be swapped). ``parses``
    keeps each text's parse for the next call (a protect rung rewords the same texts with one and with more
    senses)."""
    nlp = nlp if nlp is not None else load_pipeline()
    parses = {} if parses is None else parses
    texts = [str(t) for t in texts]
    with resource_lock(nlp):
        todo = list(dict.fromkeys(t for t in texts if t not in parses))
        parses.update(zip(todo, nlp.pipe(todo, batch_size=batch_size), strict=True))
        return [reword_doc(parses[t], min_chars, senses) for t in texts]
