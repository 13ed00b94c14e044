"""The rule-based rewrites of Lyu et al. (2021) on spaCy parses, sentence by sentence: voice
(``to_passive``, ``to_active``) and prepositional-phrase position (``front_pp``, ``back_pp``); each
returns None when it applies to no sentence."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tasks.generate.syntax.morphology import IRREGULAR, regular_participle, third_singular
from tasks.generate.syntax.parsing import parse

TransformName = Literal["to_passive", "to_active", "front_pp", "back_pp"]
Family = Literal["voice", "pp"]
FAMILIES: dict[str, tuple[TransformName, TransformName]] = {
    "voice": ("to_passive", "to_active"), "pp": ("front_pp", "back_pp")}

_NOM_TO_ACC = {"i": "me", "he": "him", "she": "her", "we": "us", "they": "them", "you": "you", "it": "it"}
_ACC_TO_NOM = {"me": "I", "him": "he", "her": "she", "us": "we", "them": "they", "you": "you", "it": "it"}
_NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", ")", "]", "}", "%", "...", "n't", "'s", "’s", "'re", "'ve",
                    "'ll", "'d", "'m"}
_WH = {"who", "whom", "what", "which", "that", "whoever", "whatever", "there"}
_REFLEXIVE = re.compile(r"(self|selves)$|^each other$|^one another$", re.I)
#: Verbs whose passive reads wrong (stative or light verbs).
_NO_PASSIVE = {"have", "get", "want", "need", "cost", "weigh", "lack", "resemble", "fit", "suit", "become",
               "let", "be", "mean", "equal", "marry"}
#: Words a parser may take for a number's modifier right after a verb they are the preposition of ("writes about
#: two kinds of people"): such an object is not passivised.
_PREPOSITION_LIKE = frozenset({"about", "around", "over", "under", "like"})
_ACTIVE_OK = {"nsubj", "dobj", "advmod", "prep", "npadvmod", "punct", "advcl"}
_PASSIVE_OK = {"nsubjpass", "auxpass", "agent", "advmod", "prep", "npadvmod", "punct", "advcl"}

Piece = tuple[str, int | None]  # text, index of the source token it came from (None: new word)


@dataclass
class _Sentence:
    """A sentence without its leading/trailing whitespace tokens."""

    doc: Any
    start: int  # first core token
    end: int  # one past the last core token

    @property
    def tokens(self) -> list[Any]:
        return [self.doc[i] for i in range(self.start, self.end)]

    @property
    def root(self) -> Any:
        return self.doc[self.start:self.end].root


def _span(tok: Any) -> tuple[int, int]:
    """A token's subtree as [left, right] token indices."""
    return tok.left_edge.i, tok.right_edge.i


def _pieces(sent: _Sentence, lo: int, hi: int) -> list[Piece]:
    return [(sent.doc[i].text, i) for i in range(lo, hi + 1)]


def _np_pieces(sent: _Sentence, tok: Any, case: dict[str, str] | None) -> list[Piece]:
    lo, hi = _span(tok)
    if case is not None and lo == hi and tok.pos_ == "PRON" and tok.lower_ in case:
        return [(case[tok.lower_], None)]
    return _pieces(sent, lo, hi)


def _is_plural(tok: Any) -> bool:
    """Number of an NP headed by ``tok`` (pronouns by person, nouns by tag, coordination = plural)."""
    if any(c.dep_ == "conj" for c in tok.children):
        return True
    if tok.pos_ == "PRON":
        return tok.lower_ in ("we", "they", "you", "us", "them", "these", "those")
    return tok.tag_ in ("NNS", "NNPS")


def _render(sent: _Sentence, pieces: list[Piece]) -> str:
    """Join pieces with the source's spacing where neighbours were adjacent, else one space; fix case."""
    doc = sent.doc
    words: list[str] = []
    for k, (text, idx) in enumerate(pieces):
        if k == 0:
            pass
        else:
            prev_idx = pieces[k - 1][1]
            if prev_idx is not None and idx is not None and idx == prev_idx + 1:
                words.append(doc[prev_idx].whitespace_)
            elif text in _NO_SPACE_BEFORE or text.lower() in _NO_SPACE_BEFORE:
                words.append("")
            else:
                words.append(" ")
        if idx == sent.start and k > 0 and text != "I" and doc[idx].pos_ != "PROPN" and not (
                len(text) > 1 and text.isupper()):
            text = text[:1].lower() + text[1:]
        if k == 0:
            text = text[:1].upper() + text[1:]
        words.append(text)
    return "".join(words)


def _clause_ok(sent: _Sentence) -> bool:
    toks = sent.tokens
    return bool(toks) and toks[-1].text != "?" and not any(t.is_space for t in toks)


def _passivise(sent: _Sentence) -> list[Piece] | None:
    root = sent.root
    if not _clause_ok(sent) or root.pos_ != "VERB" or root.tag_ not in ("VBD", "VBZ", "VBP"):
        return None
    if root.lemma_.lower() in _NO_PASSIVE:
        return None
    kids = list(root.children)
    if any(c.dep_ not in _ACTIVE_OK for c in kids):
        return None
    subjs = [c for c in kids if c.dep_ == "nsubj"]
    objs = [c for c in kids if c.dep_ == "dobj"]
    if len(subjs) != 1 or len(objs) != 1:
        return None
    subj, obj = subjs[0], objs[0]
    (s_lo, s_hi), (o_lo, o_hi) = _span(subj), _span(obj)
    if not (s_hi < root.i < o_lo):
        return None
    for phrase in (subj, obj):
        if phrase.lower_ in _WH or _REFLEXIVE.search(phrase.text) or (phrase.pos_ == "PRON" and phrase.tag_ == "WP"):
            return None
    if any(t.tag_ in ("WDT", "WP", "WP$") for t in sent.doc[o_lo:o_hi + 1]) and o_lo == o_hi:
        return None
    opening = sent.doc[o_lo]
    if o_lo == root.i + 1 and opening.lower_ in _PREPOSITION_LIKE and opening.dep_ in ("quantmod", "advmod"):
        return None  # "writes about two kinds": a preposition the parser took for "about" = "roughly"
    lemma = root.lemma_.lower()
    if lemma in IRREGULAR:
        participle = IRREGULAR[lemma][1]
    elif root.tag_ == "VBD" and root.lower_.endswith("ed"):
        participle = root.lower_
    else:
        participle = regular_participle(lemma)
    new_subj = obj.lower_ if obj.pos_ == "PRON" else ""
    new_subj = _ACC_TO_NOM.get(new_subj, new_subj).lower()
    if new_subj == "i":
        aux = "was" if root.tag_ == "VBD" else "am"
    elif _is_plural(obj) or new_subj in ("we", "they", "you"):
        aux = "were" if root.tag_ == "VBD" else "are"
    else:
        aux = "was" if root.tag_ == "VBD" else "is"
    return [*_pieces(sent, sent.start, s_lo - 1), *_np_pieces(sent, obj, _ACC_TO_NOM), (aux, None),
            *_pieces(sent, s_hi + 1, root.i - 1), (participle, None), *_pieces(sent, root.i + 1, o_lo - 1),
            ("by", None), *_np_pieces(sent, subj, _NOM_TO_ACC), *_pieces(sent, o_hi + 1, sent.end - 1)]


def _activise(sent: _Sentence) -> list[Piece] | None:
    root = sent.root
    if not _clause_ok(sent) or root.tag_ != "VBN":
        return None
    kids = list(root.children)
    if any(c.dep_ not in _PASSIVE_OK for c in kids):
        return None
    subjs = [c for c in kids if c.dep_ == "nsubjpass"]
    auxes = [c for c in kids if c.dep_ == "auxpass"]
    agents = [c for c in kids if c.dep_ == "agent" and c.lower_ == "by"]
    if len(subjs) != 1 or len(auxes) != 1 or len(agents) != 1:
        return None
    subj, aux, agent = subjs[0], auxes[0], agents[0]
    if aux.lower_ not in ("was", "were", "is", "are", "am"):
        return None
    objs = [c for c in agent.children if c.dep_ == "pobj"]
    if len(objs) != 1 or list(agent.children) != objs:
        return None
    by_np = objs[0]
    (s_lo, s_hi), (a_lo, a_hi) = _span(subj), _span(agent)
    if not (s_hi < aux.i < root.i < a_lo) or by_np.lower_ in _WH or subj.lower_ in _WH:
        return None
    lemma = root.lemma_.lower()
    if aux.lower_ in ("was", "were"):
        verb = IRREGULAR[lemma][0] if lemma in IRREGULAR else root.lower_
    else:
        new = by_np.lower_ if by_np.pos_ == "PRON" else ""
        new = _ACC_TO_NOM.get(new, new).lower()
        plural = new in ("i", "we", "they", "you") or (not new and _is_plural(by_np))
        verb = lemma if plural else third_singular(lemma)
    return [*_pieces(sent, sent.start, s_lo - 1), *_np_pieces(sent, by_np, _ACC_TO_NOM),
            *_pieces(sent, s_hi + 1, aux.i - 1), *_pieces(sent, aux.i + 1, root.i - 1), (verb, None),
            *_pieces(sent, root.i + 1, a_lo - 1), *_np_pieces(sent, subj, _NOM_TO_ACC),
            *_pieces(sent, a_hi + 1, sent.end - 1)]


def _final_punct(sent: _Sentence) -> int:
    """Index one past the last non-punctuation token of the sentence."""
    end = sent.end
    while end > sent.start and sent.doc[end - 1].is_punct:
        end -= 1
    return end


def _front_pp(sent: _Sentence) -> list[Piece] | None:
    root = sent.root
    if not _clause_ok(sent) or root.pos_ not in ("VERB", "AUX"):
        return None
    kids = list(root.children)
    if not any(c.dep_ in ("nsubj", "nsubjpass") and c.i < root.i for c in kids):
        return None
    if any(c.dep_ == "prep" and c.i == sent.start for c in kids):
        return None
    core_end = _final_punct(sent)
    pps = [c for c in kids if c.dep_ == "prep" and c.i > root.i and c.right_edge.i == core_end - 1
           and c.lower_ != "of" and any(g.dep_ in ("pobj", "pcomp") for g in c.children)]
    if not pps:
        return None
    pp = pps[-1]
    lo, hi = _span(pp)
    cut = lo - 1 if lo - 1 > root.i and sent.doc[lo - 1].text == "," else lo
    if cut <= sent.start + 1:
        return None
    return [*_pieces(sent, lo, hi), (",", None), *_pieces(sent, sent.start, cut - 1),
            *_pieces(sent, core_end, sent.end - 1)]


def _back_pp(sent: _Sentence) -> list[Piece] | None:
    root = sent.root
    if not _clause_ok(sent):
        return None
    first = sent.doc[sent.start]
    if first.dep_ != "prep" or first.head.i != root.i or first.lower_ == "of":
        return None
    lo, hi = _span(first)
    if lo != sent.start or hi >= root.i:
        return None
    rest = hi + 1
    if rest < sent.end and sent.doc[rest].text == ",":
        rest += 1
    core_end = _final_punct(sent)
    if core_end - rest < 2:
        return None
    pp = _pieces(sent, lo, hi)
    if first.pos_ != "PROPN" and not (len(first.text) > 1 and first.text.isupper()):
        pp[0] = (first.text[:1].lower() + first.text[1:], None)
    rest_pieces = _pieces(sent, rest, core_end - 1)
    return [*rest_pieces, *pp, *_pieces(sent, core_end, sent.end - 1)]


def _sentences(doc: Any) -> list[tuple[int, int, int, int]]:
    """Per sentence: (span start, core start, core end, span end) token indices."""
    out = []
    for s in doc.sents:
        lo, hi = s.start, s.end
        while lo < hi and doc[lo].is_space:
            lo += 1
        while hi > lo and doc[hi - 1].is_space:
            hi -= 1
        out.append((s.start, lo, hi, s.end))
    return out


def _per_sentence(rule: Callable[[_Sentence], list[Piece] | None]) -> Callable[[Any], str | None]:
    """Apply a sentence rule to every sentence of a Doc; None if it changed none."""

    def transform(doc: Any) -> str | None:
        parts: list[tuple[int, int, str]] = []
        changed = False
        for _s_lo, lo, hi, _s_hi in _sentences(doc):
            if lo == hi:
                continue
            pieces = rule(_Sentence(doc, lo, hi))
            start_char = doc[lo].idx
            end_char = doc[hi - 1].idx + len(doc[hi - 1])
            if pieces is None:
                continue
            new = _render(_Sentence(doc, lo, hi), pieces)
            if new != doc.text[start_char:end_char]:
                parts.append((start_char, end_char, new))
                changed = True
        if not changed:
            return None
        text: list[str] = []
        pos = 0
        for start_char, end_char, new in parts:
            text.append(doc.text[pos:start_char])
            text.append(new)
            pos = end_char
        text.append(doc.text[pos:])
        return "".join(text)

    transform.__doc__ = rule.__doc__
    return transform


to_passive = _per_sentence(_passivise)
to_active = _per_sentence(_activise)
front_pp = _per_sentence(_front_pp)
back_pp = _per_sentence(_back_pp)
to_passive.__doc__ = "Active -> passive voice in every sentence where it applies (None if none)."
to_active.__doc__ = "Passive (with a by-agent) -> active voice in every sentence where it applies (None if none)."
front_pp.__doc__ = "Move a sentence-final PP of the main verb to the front, with a comma (None if none)."
back_pp.__doc__ = "Move a sentence-initial PP of the main verb to the end (None if none)."

#: name -> transform(Doc) -> new text or None when it does not apply.
TRANSFORMS: dict[str, Callable[[Any], str | None]] = {
    "to_passive": to_passive, "to_active": to_active, "front_pp": front_pp, "back_pp": back_pp}


def apply_transforms(nlp: Any, texts: Sequence[str], plans: Sequence[Sequence[str]],
                     docs: Sequence[Any] | None = None) -> list[tuple[str, list[str]]]:
    """Apply each text's plan (transform names, in order), re-parsing between steps (batched).

    Returns per text the resulting text and the names that applied (a step that does not apply is
    skipped). ``docs`` are the texts' parses when the caller has them."""
    current = list(texts)
    applied: list[list[str]] = [[] for _ in texts]
    parsed = list(docs) if docs is not None else None
    steps = max((len(p) for p in plans), default=0)
    for step in range(steps):
        todo = [i for i, p in enumerate(plans) if step < len(p)]
        if not todo:
            break
        if parsed is None:
            parsed = [None] * len(current)
        need = [i for i in todo if parsed[i] is None]
        for i, doc in zip(need, parse(nlp, [current[i] for i in need]), strict=True):
            parsed[i] = doc
        for i in todo:
            out = TRANSFORMS[plans[i][step]](parsed[i])
            if out is not None:
                current[i] = out
                applied[i].append(plans[i][step])
                parsed[i] = None
    return list(zip(current, applied, strict=True))

