"""Syntactic alternations: edits that keep a sentence's words and its sense and change how it is put.

English lets many things be said two ways with the same words, give or take a function word: the optional "that" of
a clause after a verb ("we know (that) he cares") or of a relative clause whose object it is ("the care (that) she
needs"), the particle of a phrasal verb before or after its object ("shut our plant down" / "shut down our plant"),
"help" with or without "to", two coordinated words in either order ("Iraq and Afghanistan"), "all (of) the", "in
order to" / "to", "each other" / "one another", "a lot of" / "lots of", "whether" / "if", a spoken sentence without
its opening filler ("Well, ...") and a word without the adverb that only strengthens it ("so proud").
:mod:`tasks.protect.reword` offers them where no synonym fits a stretch that must change; the LM judges how each
reads in context, and no sense check is needed, since no word of the sentence takes another's place.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from tasks.protect.lexicon import fixed_expressions

#: Tags of a wh-word, which opens a clause that takes no "that" ("understands what it takes").
_WH_TAGS = frozenset({"WDT", "WP", "WP$", "WRB"})
#: Tags of a tensed verb or modal.
FINITE_TAGS = frozenset({"VBD", "VBZ", "VBP", "MD"})
#: Adverbs that make a phrasal verb with the verb before them (spaCy tags "take away" as an adverb, not a particle).
PARTICLES = frozenset({"away", "up", "down", "off", "out", "back", "over", "on", "in", "around", "through"})
#: Word sequences said another way (lower case, as whole words): each is offered for the one before it ("to" is not
#: offered as "in order to").
_PHRASES = ((("each", "other"), ("one", "another")), (("one", "another"), ("each", "other")),
            (("a", "lot", "of"), ("lots", "of")), (("lots", "of"), ("a", "lot", "of")),
            (("in", "order", "to"), ("to",)))
#: Determiners after which "all of" may lose its "of" ("all of the men" -> "all the men").
_ALL_OF = frozenset({"the", "our", "my", "your", "his", "her", "their", "these", "those", "this", "that", "its"})
#: Fillers that open a spoken sentence before a comma and say nothing of their own.
_FILLERS = frozenset({"well", "now", "you know", "look", "see", "listen", "oh", "okay", "ok"})
#: The forms of "help", which takes an infinitive with or without "to".
_HELP = frozenset({"help", "helps", "helped", "helping"})
#: Adverbs that add only emphasis or degree to the word after them ("so proud", "really want", "just a piece of
#: paper", "right here", "both X and Y"): the sentence says the same without them.
_EMPHASIS = frozenset({"really", "very", "truly", "actually", "certainly", "simply", "absolutely", "literally",
                       "definitely", "so", "just", "right", "both"})
#: Words after which an emphasis adverb carries the sense ("not just the rich", "not very good").
_NEGATIONS = frozenset({"not", "n't", "never", "no"})
#: Coordinations English says in one order only ("ladies and gentlemen", not "gentlemen and ladies"), beside those
#: WordNet lists as one expression ("bread and butter").
_FIXED_ORDER = frozenset({("ladies", "gentlemen"), ("law", "order"), ("pros", "cons"), ("ups", "downs"),
                          ("salt", "pepper"), ("peace", "quiet"), ("trial", "error"), ("wear", "tear"),
                          ("odds", "ends"), ("life", "death"), ("sooner", "later")})
#: The longest conjunct or object (in tokens) an alternation moves: a longer one reads as a heavy phrase moved.
_MOST_MOVED = 4

Edits = dict[int, list[tuple[int, str]]]


def _add(out: Edits, start: int, end: int, text: str) -> None:
    out.setdefault(start, []).append((end, text))


def finite(verb: Any) -> bool:
    """Whether ``verb`` heads a finite clause (a tensed verb or a tensed auxiliary), which "that" may open: not
    "help others achieve it" (a bare infinitive)."""
    return verb.tag_ in FINITE_TAGS or any(c.dep_ in ("aux", "auxpass") and c.tag_ in FINITE_TAGS
                                            for c in verb.children)


def particle(tok: Any) -> bool:
    """Whether ``tok`` is the particle of a phrasal verb ("take away", "gave up")."""
    return tok.head.pos_ == "VERB" and tok.head.i < tok.i and (
        tok.dep_ == "prt" or (tok.dep_ == "advmod" and tok.lower_ in PARTICLES))


def _complementizers(doc: Any, out: Edits) -> None:
    """The optional "that" of a clause after a verb ("I know (that) he understands"): dropped or put in."""
    for tok in doc:
        if tok.dep_ != "ccomp" or tok.head.pos_ != "VERB" or tok.head.i > tok.i:
            continue
        marks = [c for c in tok.children if c.dep_ == "mark"]
        first = tok.left_edge
        before = doc[first.i - 1] if first.i else None  # the verb, or its object ("told me (that) there ...")
        if before is None or not before.whitespace_ or not (before == tok.head or (
                before.head == tok.head and before.dep_ in ("dobj", "dative", "iobj"))):
            continue
        if marks and marks[0].lower_ == "that" and marks[0] == first and first.i + 1 < len(doc):
            _add(out, first.i, first.i + 2, doc[first.i + 1].text)  # "know that their" -> "know their"
        elif not marks and first.tag_ not in _WH_TAGS and finite(tok) and any(
                c.dep_ in ("nsubj", "expl") and c.left_edge == first for c in tok.children):
            # the clause opens on its subject: "said (that) we come", not "said no, we come" (speech, quoted)
            _add(out, first.i, first.i + 1, f"that {first.text}")  # "know he understands" -> "know that he ..."


def _relativizers(doc: Any, out: Edits) -> None:
    """The optional "that" of a relative clause whose object it is: "the things (that) we prioritized"."""
    for verb in doc:
        if verb.dep_ != "relcl" or not finite(verb) or not any(c.dep_ == "nsubj" for c in verb.children):
            continue
        first = verb.left_edge
        if first.i == 0 or doc[first.i - 1] != verb.head or not doc[first.i - 1].whitespace_:
            continue
        if first.lower_ in ("that", "which") and first.dep_ in ("dobj", "pobj") and first.head.i > first.i and \
                first.i + 1 < len(doc) and first.whitespace_:
            _add(out, first.i, first.i + 2, doc[first.i + 1].text)  # "the things that we" -> "the things we"
        elif first.dep_ == "nsubj" and first.tag_ not in _WH_TAGS and first.pos_ in ("PRON", "PROPN", "NOUN"):
            _add(out, first.i, first.i + 1, f"that {first.text}")  # "the care she needs" -> "the care that she"


def _particle_shifts(doc: Any, out: Edits) -> None:
    """A phrasal verb's particle moved past its object or back: "shut our plant down" <-> "shut down our plant"
    (a noun object of a few words; a pronoun object takes the particle after it only)."""
    for verb in doc:
        parts = [c for c in verb.children if particle(c)]
        objects = [c for c in verb.children if c.dep_ == "dobj" and c.pos_ in ("NOUN", "PROPN")]
        if verb.pos_ != "VERB" or len(parts) != 1 or len(objects) != 1:
            continue
        p, o = parts[0], objects[0]
        a, b = o.left_edge.i, o.right_edge.i + 1
        if b - a > _MOST_MOVED:
            continue
        obj = doc[a:b].text
        if p.i == verb.i + 1 and a == p.i + 1:  # "take away our rights" -> "take our rights away"
            _add(out, p.i, b, f"{obj} {p.text}")
        elif a == verb.i + 1 and p.i == b:  # "shut our plant down" -> "shut down our plant"
            _add(out, a, p.i + 1, f"{p.text} {obj}")


def _help_to(doc: Any, out: Edits) -> None:
    """"help (to) do": the "to" put in or dropped (after the verb or its object: "help others (to) achieve")."""
    for verb in doc:
        if verb.tag_ != "VB" or verb.i < 2:
            continue
        before = doc[verb.i - 1]
        helped = before.lower_ in _HELP or (verb.head.lemma_ == "help" and verb.dep_ in ("xcomp", "ccomp") and
                                            verb.head.i < verb.i)
        if before.lower_ == "to" and doc[verb.i - 2].lower_ in _HELP:
            _add(out, before.i, verb.i + 1, verb.text)  # "helped to make" -> "helped make"
        elif helped and before.whitespace_ and before.lower_ != "to":
            _add(out, verb.i, verb.i + 1, f"to {verb.text}")  # "help others achieve" -> "help others to achieve"


def _bare(tok: Any) -> bool:
    """Whether ``tok`` has no determiner or possessive of its own (so it may trade places with another such word)."""
    return not any(c.dep_ in ("det", "poss", "predet", "nummod") for c in tok.children)


def _coordinations(doc: Any, out: Edits, fixed: set[int]) -> None:
    """Two coordinated nouns or adjectives (a few words each, neither with a determiner of its own) in the other
    order: "Iraq and Afghanistan" -> "Afghanistan and Iraq"; not a pair said in one order only ("ladies and
    gentlemen", a word of a fixed expression of WordNet's, ``fixed``)."""
    for a in doc:
        conj = [c for c in a.children if c.dep_ == "conj"]
        ccs = [c for c in a.children if c.dep_ == "cc" and c.lower_ in ("and", "or")]
        if len(conj) != 1 or len(ccs) != 1 or a.pos_ not in ("NOUN", "PROPN", "ADJ"):
            continue
        b, cc = conj[0], ccs[0]
        if (a.lower_, b.lower_) in _FIXED_ORDER or a.i in fixed or b.i in fixed:
            continue
        if b.tag_ != a.tag_ or not (a.i < cc.i < b.i) or not _bare(a) or not _bare(b) or \
                any(c.dep_ == "preconj" for c in a.children):  # "both X and Y" keeps its order
            continue
        first = [t for t in a.subtree if t.i < cc.i]
        start, stop = first[0].i, b.right_edge.i + 1
        if start == 0 or cc.i != first[-1].i + 1 or stop - start > 2 * _MOST_MOVED + 1 or \
                any(t.is_punct or t.pos_ == "ADV" for t in doc[start:stop]) or b.left_edge.i != cc.i + 1:
            continue
        left, right = doc[start:cc.i].text, doc[cc.i + 1:stop].text
        _add(out, start, stop, f"{right} {cc.text} {left}")


def _phrases(doc: Any, out: Edits) -> None:
    """The word sequences of ``_PHRASES`` said the other way; "all of the" <-> "all the"; "whether" -> "if"."""
    low = [t.lower_ for t in doc]
    for i in range(len(doc)):
        for this, that in _PHRASES:
            n = len(this)
            if tuple(low[i:i + n]) == this and all(t.whitespace_ for t in doc[i:i + n - 1]):
                text = " ".join(that)
                _add(out, i, i + n, text[0].upper() + text[1:] if doc[i].text[0].isupper() else text)
        if low[i] == "all" and i + 2 < len(doc) and low[i + 1] == "of" and low[i + 2] in _ALL_OF and \
                doc[i + 2].pos_ in ("DET", "PRON") and doc[i + 2].head.i > i + 2:
            _add(out, i, i + 2, doc[i].text)  # "all of the men" -> "all the men"
        elif low[i] == "all" and doc[i].dep_ == "predet" and i + 1 < len(doc) and low[i + 1] in _ALL_OF and \
                doc[i].whitespace_:
            _add(out, i, i + 1, f"{doc[i].text} of")  # "all the men" -> "all of the men"
        if low[i] == "whether" and doc[i].dep_ == "mark" and not any(
                t.lower_ == "or" for t in doc[i + 1:doc[i].head.right_edge.i + 1]):
            _add(out, i, i + 1, "If" if doc[i].text[0].isupper() else "if")  # "asked whether we" -> "asked if we"


def _fillers(doc: Any, out: Edits) -> None:
    """A sentence's opening filler left out: "Well, we did it." -> "We did it." (it says nothing of its own)."""
    for sent in doc.sents:
        first = sent[0]
        n = 2 if first.lower_ == "you" and first.i + 1 < len(doc) and doc[first.i + 1].lower_ == "know" else 1
        comma, after = first.i + n, first.i + n + 1
        if " ".join(t.lower_ for t in doc[first.i:comma]) in _FILLERS and after < sent.end and \
                doc[comma].text == "," and doc[after].is_alpha:
            word = doc[after].text
            _add(out, first.i, after + 1, word[0].upper() + word[1:])


def _emphasis(doc: Any, out: Edits) -> None:
    """An adverb of ``_EMPHASIS`` left out before the word it strengthens: "I'm so proud" -> "I'm proud" ("both"
    before a coordination, "right" before "here", "there" or "now"); not after a negation ("not just the rich")."""
    for tok in doc[:-1]:
        after = doc[tok.i + 1]
        if tok.lower_ not in _EMPHASIS or not tok.whitespace_ or not after.is_alpha or \
                (tok.i and doc[tok.i - 1].lower_ in _NEGATIONS):
            continue
        if tok.lower_ == "both":
            if tok.dep_ != "preconj":
                continue
        elif tok.pos_ != "ADV" or tok.dep_ != "advmod" or (tok.lower_ == "so" and tok.head != after) or \
                (tok.lower_ == "right" and after.lower_ not in ("here", "there", "now")):
            continue
        word = after.text
        _add(out, tok.i, tok.i + 2, word[0].upper() + word[1:] if tok.is_sent_start else word)


def alternations(doc: Any, fixed: set[int] | None = None) -> Edits:
    """Every alternation ``doc`` allows, by the token it starts at: (end token, text) pairs (see the module).
    ``fixed``: the tokens of its fixed expressions (:func:`tasks.protect.lexicon.fixed_expressions`, found when
    None), whose order stays."""
    out: Edits = {}
    coordinations = partial(_coordinations, fixed=fixed_expressions(doc) if fixed is None else fixed)
    for find in (_complementizers, _relativizers, _particle_shifts, _help_to, coordinations, _phrases, _fillers,
                 _emphasis):
        find(doc, out)
    return out
