"""Syntax-guided rewriting: SynSim, SynDiff, SynOrig and SynTr of the article (Table 1, §4.1).

The article uses AESOP (Sun, Ma and Peng 2021): a retrieval step samples parse templates, a BART
model rewrites the source under a template. It compares the candidate whose template has the
smallest (SynSim) or largest (SynDiff) constituency tree edit distance to the source's parse, the
source's own parse as template (SynOrig), and the source's parse transformed in voice and
prepositional-phrase position with the rule-based heuristics of Lyu et al. (2021) (SynTr).

Here (offline, no AESOP checkpoint):

- **Distance** (:func:`syntactic_distance`): Zhang-Shasha tree edit distance between *dependency*
  trees whose node labels are ``dep|UPOS`` (no words: syntax only), unit costs, the sentences of a
  text joined under one virtual root, normalised by the total token count of both texts
  (``TED / (n_a + n_b)``, in [0, 1]: deleting every node and inserting every node costs exactly
  that, and the virtual roots always match); a text longer than ``MAX_DISTANCE_TOKENS`` (256) is
  compared on its first 256 tokens, since the exact distance is too slow there. Dependency rather
  than constituency trees because spaCy parses dependencies; the tree distance rather than the POS
  edit distance by default because it sees structure (voice, PP attachment and position) and not
  only the tag order. The POS alternative (``distance: pos``) is Levenshtein over UPOS tags
  normalised by the longer sequence.
- **Candidates** (:class:`CandidateGenerator`): ``generator: rules`` (default) pools the rule-based
  transforms below and their compositions, lexical swaps (StyMask's synonym table) and apertium
  back-translation (eng -> pivot -> eng through each of ``pivots``, backtranslate's measured close
  and far pivots by default, when apertium is installed) of the source and of each transformed text,
  so a text no rule applies to still gets rewrites; ``k`` of them are sampled with a seeded RNG. ``generator: llm`` asks the ``llm``
  role's backend (vLLM or in-process) for ``k`` paraphrases instead.
- **SynSim / SynDiff**: the sampled candidate with the smallest / largest distance to the source.
- **SynOrig**: the original's parse is the template, so the output is a paraphrase that keeps the
  source's syntax: only *lexical* candidates are pooled (back-translation, lexical swaps; with the
  LLM, paraphrases prompted to keep the sentence structure), never the syntactic transforms, and the
  one closest in syntax wins; ties go to the one that differs most in words (token Jaccard), so the
  output is a rewrite and not a copy.
- **SynTr**: the source's parse transformed consistently per author. The transformed text is the
  output itself (AESOP would rewrite *under* the transformed template; the rules here rewrite the
  sentence directly). Each author draws one direction per family once (voice: to_passive or
  to_active; PP: front_pp or back_pp) with ``Random(seed + stable_hash(author_id))``, so every text of
  a timeline gets the same transforms: a stable user-level style. A text where nothing applies keeps
  its own parse as template, so it is rewritten as SynOrig rewrites (lexical swaps and back-translations
  through ``pivots``, the one closest in syntax; ``on_no_transform: synorig``, default): measured on 100
  debate turns, no transform applied to 91% of them, which came back verbatim before. ``keep`` returns
  such a text as is (flagged ``unchanged``).

Transforms (:data:`TRANSFORMS`) work sentence by sentence on spaCy parses and return None when they
do not apply to any sentence: ``to_passive`` (finite main verb in simple past/present, one subject,
one direct object, no auxiliary, negation, particle or clausal complement), ``to_active`` (``was/
were/is/are/am`` + participle with a ``by`` agent; anything with another auxiliary is left alone),
``front_pp`` (a sentence-final PP attached to the main verb moves to the front with a comma),
``back_pp`` (the reverse). Questions and sentences with inner line breaks are left alone.

Registered names: ``synsim``, ``syndiff``, ``synorig`` (params :class:`SynParams`) and ``syntr``
(params :class:`SynTrParams`), four names sharing one implementation, so a config reads like the
article's table (``- name: synsim``) and the table's ``strategy`` column names the row.
"""

from __future__ import annotations

import random
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numba as nb
import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from tasks.errors import STRICT_INPUT, ModelUnavailable
from tasks.generate.backtranslate import DEFAULT_PIVOTS
from tasks.generate.base import Strategy, build_strategy, register_strategy, stable_hash
from tasks.limits import MAX_BATCH, MAX_REPEATS, MAX_TEMPERATURE, MAX_TOKENS
from tasks.models import loaders
from tasks.parallel import resource_lock

Tree = tuple[str, tuple["Tree", ...]]
TransformName = Literal["to_passive", "to_active", "front_pp", "back_pp"]
Family = Literal["voice", "pp"]
FAMILIES: dict[str, tuple[TransformName, TransformName]] = {
    "voice": ("to_passive", "to_active"), "pp": ("front_pp", "back_pp")}
ROOT_LABEL = "TEXT"

# ---------------------------------------------------------------- distances


def tree_size(tree: Tree) -> int:
    """Number of nodes of a (label, children) tree."""
    n, stack = 0, [tree]
    while stack:
        _, kids = stack.pop()
        n += 1
        stack.extend(kids)
    return n


def _postorder(tree: Tree) -> tuple[list[str], list[int], list[int]]:
    """Labels in postorder, leftmost-leaf index of each node, and the keyroots (ascending)."""
    labels: list[str] = []
    lml: list[int] = []
    stack: list[tuple[Tree, int, int]] = [(tree, 0, -1)]  # node, next child, leftmost leaf so far
    while stack:
        node, k, left = stack.pop()
        kids = node[1]
        if k < len(kids):
            stack.append((node, k + 1, left))
            stack.append((kids[k], 0, -1))
            continue
        idx = len(labels)
        labels.append(node[0])
        lml.append(idx if not kids else left)
        if stack:  # tell the parent its first child's leftmost leaf
            p_node, p_k, _ = stack[-1]
            if p_k == 1:
                stack[-1] = (p_node, p_k, lml[idx])
    last: dict[int, int] = {}
    for i, leaf in enumerate(lml):
        last[leaf] = i
    return labels, lml, sorted(last.values())


def tree_edit_distance(a: Tree, b: Tree) -> int:
    """Zhang-Shasha (1989) ordered tree edit distance with unit insert/delete/relabel costs."""
    la, l1, k1 = _postorder(a)
    lb, l2, k2 = _postorder(b)
    codes: dict[str, int] = {}
    ca = np.array([codes.setdefault(x, len(codes)) for x in la], dtype=np.int64)
    cb = np.array([codes.setdefault(x, len(codes)) for x in lb], dtype=np.int64)
    return int(_zhang_shasha(ca, np.array(l1, dtype=np.int64), np.array(k1, dtype=np.int64),
                             cb, np.array(l2, dtype=np.int64), np.array(k2, dtype=np.int64)))


@nb.njit(cache=True, nogil=True)
def _zhang_shasha(la: np.ndarray, l1: np.ndarray, k1: np.ndarray,
                  lb: np.ndarray, l2: np.ndarray, k2: np.ndarray) -> int:  # pragma: no cover - compiled
    """The Zhang-Shasha recurrences on postorder label codes, leftmost leaves and keyroots (compiled: the
    pure-Python loops took 21 s of a 34 s SynSim shard of debate turns)."""
    n, m = la.shape[0], lb.shape[0]
    td = np.zeros((n, m), dtype=np.int64)
    fd = np.zeros((n + 1, m + 1), dtype=np.int64)
    for i in k1:
        li = l1[i]
        rows = i - li + 2
        for j in k2:
            lj = l2[j]
            cols = j - lj + 2
            for y in range(cols):
                fd[0, y] = y
            for x in range(1, rows):
                i1 = li + x - 1
                fd[x, 0] = x
                whole_i = l1[i1] == li
                for y in range(1, cols):
                    j1 = lj + y - 1
                    best = min(fd[x - 1, y], fd[x, y - 1]) + 1
                    if whole_i and l2[j1] == lj:
                        sub = fd[x - 1, y - 1] + (1 if la[i1] != lb[j1] else 0)
                        v = min(sub, best)
                        fd[x, y] = v
                        td[i1, j1] = v
                    else:
                        fd[x, y] = min(fd[l1[i1] - li, l2[j1] - lj] + td[i1, j1], best)
    return td[n - 1, m - 1]


def levenshtein(a: Sequence[str], b: Sequence[str]) -> int:
    """Edit distance between two sequences (unit insert/delete/substitute)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def dependency_tree(doc: Any) -> Tree:
    """A parsed text as one tree: a virtual root over its sentences' roots; nodes are ``dep|UPOS``
    (whitespace tokens dropped; a token whose head was dropped hangs from the virtual root)."""
    keep = [t for t in doc if not t.is_space]
    kept = {t.i for t in keep}
    children: dict[int, list[int]] = {t.i: [] for t in keep}
    roots: list[int] = []
    for t in keep:
        h = t.head.i
        if h == t.i or h not in kept:
            roots.append(t.i)
        else:
            children[h].append(t.i)
    labels = {t.i: f"{t.dep_}|{t.pos_}" for t in keep}
    built: dict[int, Tree] = {}
    for t in sorted(keep, key=_depth_key(doc), reverse=True):  # deepest first
        built[t.i] = (labels[t.i], tuple(built[c] for c in children[t.i]))
    return (ROOT_LABEL, tuple(built[r] for r in roots))


def _depth_key(doc: Any) -> Callable[[Any], int]:
    depth: dict[int, int] = {}

    def key(tok: Any) -> int:
        if tok.i not in depth:
            d, t, seen = 0, tok, set()
            while t.head.i != t.i and t.i not in seen:
                seen.add(t.i)
                d += 1
                t = t.head
            depth[tok.i] = d
        return depth[tok.i]

    return key


#: Tokens of each text the distances look at: Zhang-Shasha is super-quadratic (two 20k-character texts took
#: minutes in pure Python), so a longer text is compared on its first MAX_DISTANCE_TOKENS tokens (its output is whole).
MAX_DISTANCE_TOKENS = 256


def _head(doc: Any) -> Any:
    """The first MAX_DISTANCE_TOKENS tokens of a parsed text (the Doc itself when it is shorter)."""
    return doc[:MAX_DISTANCE_TOKENS] if len(doc) > MAX_DISTANCE_TOKENS else doc


def tree_distance(a: Any, b: Any) -> float:
    """Normalised tree edit distance between two parsed texts: TED / (tokens of a + tokens of b), on at most
    MAX_DISTANCE_TOKENS tokens of each."""
    ta, tb = dependency_tree(_head(a)), dependency_tree(_head(b))
    total = tree_size(ta) + tree_size(tb) - 2  # virtual roots not counted; they always match
    return tree_edit_distance(ta, tb) / total if total else 0.0


def pos_distance(a: Any, b: Any) -> float:
    """Levenshtein distance between the UPOS sequences of two parsed texts / the longer length (on at most
    MAX_DISTANCE_TOKENS tokens of each)."""
    pa = [t.pos_ for t in _head(a) if not t.is_space]
    pb = [t.pos_ for t in _head(b) if not t.is_space]
    longest = max(len(pa), len(pb))
    return levenshtein(pa, pb) / longest if longest else 0.0


DISTANCES: dict[str, Callable[[Any, Any], float]] = {"tree": tree_distance, "pos": pos_distance}


def syntactic_distance(a: Any, b: Any, kind: Literal["tree", "pos"] = "tree") -> float:
    """The syntactic distance of two parsed texts (spaCy Docs): ``tree`` (default) or ``pos``."""
    return DISTANCES[kind](a, b)


# ---------------------------------------------------------------- spaCy


@loaders.cache
def load_parser(model: str | None = None) -> Any:
    """The full spaCy pipeline of the ``pos_tagger`` role (parser and lemmatizer included, NER off)."""
    from tasks.models.registry import resolve_model

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


# ---------------------------------------------------------------- verb morphology

_IRREGULAR_SRC = (
    "arise arose arisen|awake awoke awoken|be was been|bear bore borne|beat beat beaten|become became become|"
    "begin began begun|bend bent bent|bet bet bet|bid bid bid|bind bound bound|bite bit bitten|bleed bled bled|"
    "blow blew blown|break broke broken|breed bred bred|bring brought brought|broadcast broadcast broadcast|"
    "build built built|buy bought bought|cast cast cast|catch caught caught|choose chose chosen|"
    "cling clung clung|come came come|cost cost cost|creep crept crept|cut cut cut|deal dealt dealt|"
    "dig dug dug|do did done|draw drew drawn|drink drank drunk|drive drove driven|eat ate eaten|"
    "fall fell fallen|feed fed fed|feel felt felt|fight fought fought|find found found|flee fled fled|"
    "fling flung flung|fly flew flown|forbid forbade forbidden|forecast forecast forecast|"
    "forget forgot forgotten|forgive forgave forgiven|freeze froze frozen|get got gotten|give gave given|"
    "go went gone|grind ground ground|grow grew grown|hang hung hung|have had had|hear heard heard|"
    "hide hid hidden|hit hit hit|hold held held|hurt hurt hurt|keep kept kept|know knew known|lay laid laid|"
    "lead led led|leave left left|lend lent lent|let let let|light lit lit|lose lost lost|make made made|"
    "mean meant meant|meet met met|mislead misled misled|mistake mistook mistaken|overcome overcame overcome|"
    "override overrode overridden|overtake overtook overtaken|pay paid paid|put put put|quit quit quit|"
    "read read read|rewrite rewrote rewritten|ride rode ridden|ring rang rung|rise rose risen|run ran run|"
    "say said said|see saw seen|seek sought sought|sell sold sold|send sent sent|set set set|"
    "shake shook shaken|shed shed shed|shoot shot shot|show showed shown|shut shut shut|sing sang sung|"
    "sink sank sunk|sit sat sat|sleep slept slept|slide slid slid|speak spoke spoken|spend spent spent|"
    "spin spun spun|split split split|spread spread spread|stand stood stood|steal stole stolen|"
    "stick stuck stuck|sting stung stung|strike struck struck|swear swore sworn|sweep swept swept|"
    "swim swam swum|swing swung swung|take took taken|teach taught taught|tear tore torn|tell told told|"
    "think thought thought|throw threw thrown|understand understood understood|undertake undertook undertaken|"
    "undo undid undone|upset upset upset|wake woke woken|wear wore worn|weave wove woven|win won won|"
    "wind wound wound|withdraw withdrew withdrawn|withhold withheld withheld|write wrote written"
)
#: lemma -> (simple past, past participle) for irregular verbs.
IRREGULAR: dict[str, tuple[str, str]] = {
    w[0]: (w[1], w[2]) for w in (entry.split() for entry in _IRREGULAR_SRC.split("|"))}
_DOUBLING = {"admit", "commit", "permit", "submit", "omit", "prefer", "refer", "occur", "control", "regret",
             "transfer", "equip", "compel", "expel", "propel", "patrol", "confer", "deter", "incur"}
_CVC = re.compile(r"^[^aeiou]*[aeiou][bdgklmnprt]$")


def regular_participle(lemma: str) -> str:
    """``-ed`` form of a regular verb (approve -> approved, carry -> carried, stop -> stopped)."""
    w = lemma.lower()
    if w.endswith("e"):
        return w + "d"
    if len(w) > 1 and w.endswith("y") and w[-2] not in "aeiou":
        return w[:-1] + "ied"
    if w in _DOUBLING or _CVC.match(w):
        return w + w[-1] + "ed"
    return w + "ed"


def third_singular(lemma: str) -> str:
    """Present 3rd person singular (approve -> approves, watch -> watches, carry -> carries)."""
    w = lemma.lower()
    if w in ("have", "do", "go"):
        return {"have": "has", "do": "does", "go": "goes"}[w]
    if w.endswith(("s", "x", "z", "ch", "sh")):
        return w + "es"
    if len(w) > 1 and w.endswith("y") and w[-2] not in "aeiou":
        return w[:-1] + "ies"
    return w + "s"


# ---------------------------------------------------------------- transforms

_NOM_TO_ACC = {"i": "me", "he": "him", "she": "her", "we": "us", "they": "them", "you": "you", "it": "it"}
_ACC_TO_NOM = {"me": "I", "him": "he", "her": "she", "us": "we", "them": "they", "you": "you", "it": "it"}
_NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", ")", "]", "}", "%", "...", "n't", "'s", "’s", "'re", "'ve",
                    "'ll", "'d", "'m"}
_WH = {"who", "whom", "what", "which", "that", "whoever", "whatever", "there"}
_REFLEXIVE = re.compile(r"(self|selves)$|^each other$|^one another$", re.I)
#: Verbs whose passive reads wrong (stative or light verbs).
_NO_PASSIVE = {"have", "get", "want", "need", "cost", "weigh", "lack", "resemble", "fit", "suit", "become",
               "let", "be", "mean", "equal", "marry"}
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


# ---------------------------------------------------------------- candidates


@dataclass
class Candidate:
    """One candidate rewrite of a source text, with where it came from and its distance to the source."""

    text: str
    origin: str  # e.g. "to_passive", "to_passive+front_pp", "bt", "bt(front_pp)", "lexical", "llm"
    distance: float = float("nan")
    lexical_difference: float = float("nan")


_WORD = re.compile(r"\w+", re.UNICODE)


def lexical_difference(a: str, b: str) -> float:
    """1 - Jaccard similarity of the two texts' lower-cased word sets."""
    sa, sb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    union = sa | sb
    return 1.0 - len(sa & sb) / len(union) if union else 0.0


def select_candidate(candidates: Sequence[Candidate], mode: Literal["synsim", "syndiff", "synorig"]) -> int | None:
    """Index of the candidate to keep: smallest distance (synsim), largest (syndiff), smallest with
    ties broken by the largest lexical difference (synorig); None when there is none."""
    if not candidates:
        return None
    idx = range(len(candidates))
    if mode == "synsim":
        return min(idx, key=lambda i: candidates[i].distance)
    if mode == "syndiff":
        return max(idx, key=lambda i: candidates[i].distance)
    return min(idx, key=lambda i: (round(candidates[i].distance, 9), -candidates[i].lexical_difference))


_COMPOSITIONS: tuple[tuple[str, ...], ...] = (
    ("to_passive",), ("to_active",), ("front_pp",), ("back_pp",),
    ("to_passive", "front_pp"), ("to_passive", "back_pp"), ("to_active", "front_pp"), ("to_active", "back_pp"),
)

PARAPHRASE_PROMPT = ("Paraphrase the following text. Keep its meaning. {how} Reply with the paraphrase only.\n\n"
                     "Text: {text}")
_HOW = {"synorig": "Keep exactly the same sentence structure; change the words.",
        "synsim": "You may change the sentence structure.", "syndiff": "You may change the sentence structure."}


class SynParams(BaseModel):
    """Params of ``synsim``, ``syndiff`` and ``synorig``."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    k: int = Field(8, ge=1, le=MAX_REPEATS, description="candidates sampled per text (the article samples parse templates)")
    distance: Literal["tree", "pos"] = Field(
        "tree", description="tree: dependency tree edit distance / total tokens; pos: UPOS Levenshtein / longer")
    generator: Literal["rules", "llm"] = Field(
        "rules", description="rules: transforms + lexical swaps + apertium back-translation; llm: k paraphrases "
                             "from the llm role's backend")
    max_steps: int = Field(2, ge=1, le=2, description="rules: most transforms composed per candidate")
    backtranslate: bool = Field(True, description="rules: add apertium back-translations when apertium is installed")
    pivots: list[str] = Field(default_factory=lambda: list(DEFAULT_PIVOTS),
                              description="rules: apertium pivots whose back-translations join the candidates "
                                          "(backtranslate's close and far pivots by default)")
    lexical: bool = Field(True, description="rules: add StyMask synonym swaps of the source and of the transforms")
    llm: dict[str, Any] = Field(default_factory=dict, description="llm: settings for llm_backend_for('llm', ...)")
    temperature: float = Field(0.9, ge=0, le=MAX_TEMPERATURE, description="llm: sampling temperature")
    max_tokens: int = Field(256, ge=1, le=MAX_TOKENS, description="llm: most tokens per paraphrase")
    on_no_candidate: Literal["keep", "fail"] = Field(
        "keep", description="when a text has no candidate: keep the source text, or fail the row")
    model: str | None = Field(None, description="spaCy pipeline (role pos_tagger) override")
    batch_size: int = Field(64, ge=1, le=MAX_BATCH, description="texts per nlp.pipe batch")


class SynTrParams(BaseModel):
    """Params of ``syntr``."""

    model_config = ConfigDict(extra="forbid", **STRICT_INPUT)

    families: list[Family] = Field(default_factory=lambda: ["voice", "pp"],
                                   description="transform families; each author draws one direction per family")
    consistency: Literal["author", "text"] = Field(
        "author", description="author: one draw per author (seed + stable_hash(author_id)); text: one per text "
                              "(the stochastic ablation)")
    model: str | None = Field(None, description="spaCy pipeline (role pos_tagger) override")
    batch_size: int = Field(64, ge=1, le=MAX_BATCH, description="texts per nlp.pipe batch")
    on_no_transform: Literal["synorig", "keep"] = Field(
        "synorig", description="a text none of its author's transforms applies to: synorig = rewritten as SynOrig "
                               "does (AESOP paraphrases under the unchanged template), keep = returned as is")
    pivots: list[str] = Field(default_factory=lambda: list(DEFAULT_PIVOTS),
                              description="on_no_transform synorig: back-translation pivots of its candidates")


def author_plan(author: str, seed: int, families: Sequence[str] = ("voice", "pp")) -> list[str]:
    """The transforms one author's texts get: one direction per family, drawn from
    ``Random(seed + stable_hash(author))``, in family order (voice before PP)."""
    rng = random.Random(seed + stable_hash(author))
    return [rng.choice(FAMILIES[f]) for f in families]


def _author_keys(batch: pd.DataFrame) -> list[str]:
    """Who a text's style belongs to: its author_id; without one, ``group:<group_id>``, then
    ``doc:<doc_id>``, then ``row:<i>`` (a text with no author is its own author)."""
    keys: list[str] = []
    for i in range(len(batch)):
        key = None
        for col, prefix in (("author_id", ""), ("group_id", "group:"), ("doc_id", "doc:")):
            if col in batch.columns:
                v = batch[col].iloc[i]
                if v is not None and not pd.isna(v) and str(v) != "":
                    key = f"{prefix}{v}"
                    break
        keys.append(key if key is not None else f"row:{i}")
    return keys


class _SyntaxBase(Strategy):
    """Shared machinery: the spaCy pipeline, input checks."""

    llm_settings_field = "llm"

    @classmethod
    def uses_llm(cls, params: Any) -> bool:
        return getattr(params, "generator", "rules") == "llm"

    def _nlp(self) -> Any:
        return load_parser(self.params.model)  # type: ignore[attr-defined]

    @staticmethod
    def _texts(batch: pd.DataFrame) -> tuple[list[str], list[Exception | None]]:
        texts, errors = [], []
        for t in batch["text"].tolist():
            if isinstance(t, str):
                texts.append(t)
                errors.append(None)
            else:
                texts.append("")
                errors.append(TypeError(f"text is not a string ({type(t).__name__})"))
        return texts, errors


class _SynCandidates(_SyntaxBase):
    """SynSim / SynDiff / SynOrig: generate candidates, keep one by syntactic distance."""

    mode: Literal["synsim", "syndiff", "synorig"]
    params: SynParams

    def __init__(self, params: SynParams, *, llm: Any = None) -> None:
        super().__init__(params)
        self._llm = llm
        self._bt: Strategy | None = None
        if params.generator == "rules" and params.backtranslate and shutil.which("apertium"):
            try:
                self._bt = build_strategy("backtranslate", {"pivots": params.pivots})
            except ModelUnavailable:
                self._bt = None
        self._nlp()  # a missing parser is a setup problem: fail at construction

    def _backend(self) -> Any:
        if self._llm is None:
            from tasks.models.llm import llm_backend_for

            self._llm = llm_backend_for("llm", self.params.llm)
        return self._llm

    def _backtranslate(self, texts: list[str]) -> list[list[str]]:
        """Per text, its back-translations through each pivot (the failed or empty ones left out)."""
        if self._bt is None or not texts:
            return [[] for _ in texts]
        out = self._bt.generate(pd.DataFrame({"text": texts}), seed=0)
        return [[o for o in outs if isinstance(o, str) and o.strip()] for outs in out]

    def _rule_pools(self, texts: list[str], docs: list[Any], seed: int) -> list[list[Candidate]]:
        from tasks.generate.stymask import rule_lexical

        p = self.params
        plans = [c for c in _COMPOSITIONS if len(c) <= p.max_steps]
        syntactic = self.mode != "synorig"
        pools: list[list[Candidate]] = [[] for _ in texts]
        if syntactic:
            flat_texts, flat_plans, flat_docs, owner = [], [], [], []
            for i, (t, d) in enumerate(zip(texts, docs, strict=True)):
                for plan in plans:
                    flat_texts.append(t)
                    flat_plans.append(plan)
                    flat_docs.append(d)
                    owner.append(i)
            results = apply_transforms(self._nlp(), flat_texts, flat_plans, flat_docs)
            for i, plan, (out, applied) in zip(owner, flat_plans, results, strict=True):
                if list(applied) == list(plan):  # only full compositions: partial ones repeat a shorter plan
                    pools[i].append(Candidate(out, "+".join(plan)))
        if p.lexical:
            for i, t in enumerate(texts):
                rng = random.Random(seed + stable_hash(t))
                for base in [Candidate(t, "source"), *(pools[i] if syntactic else [])]:
                    new = rule_lexical(base.text, rng, p=1.0)
                    if new != base.text:
                        origin = "lexical" if base.origin == "source" else f"lexical({base.origin})"
                        pools[i].append(Candidate(new, origin))
        if self._bt is not None:
            bt_in, bt_owner, bt_origin = [], [], []
            for i, t in enumerate(texts):
                bases = [Candidate(t, "source")] + ([c for c in pools[i] if "lexical" not in c.origin]
                                                    if syntactic else [])
                for base in bases:
                    bt_in.append(base.text)
                    bt_owner.append(i)
                    bt_origin.append("bt" if base.origin == "source" else f"bt({base.origin})")
            for i, origin, outs in zip(bt_owner, bt_origin, self._backtranslate(bt_in), strict=True):
                pools[i].extend(Candidate(out, origin) for out in outs)
        return pools

    def _llm_pools(self, texts: list[str], seed: int) -> list[list[Candidate]]:
        from tasks.models.llm import ChatRequest

        p = self.params
        requests = [ChatRequest(
            messages=[{"role": "user", "content": PARAPHRASE_PROMPT.format(how=_HOW[self.mode], text=t)}],
            temperature=p.temperature, max_tokens=p.max_tokens, n=p.k, seed=seed) for t in texts]
        results = self._backend().complete(requests)
        pools: list[list[Candidate]] = []
        for r in results:
            pools.append([Candidate(" ".join(x.split()) if "\n" not in x else x.strip(), "llm")
                          for x in (r.texts or []) if isinstance(x, str) and x.strip()] if r.ok else [])
        return pools

    def candidates(self, texts: Sequence[str], *, seed: int) -> list[list[Candidate]]:
        """Per text: the sampled candidates (at most ``k``, never the source itself, no duplicates),
        each with its distance to the source and lexical difference."""
        p = self.params
        texts = list(texts)
        nlp = self._nlp()
        docs = parse(nlp, texts, p.batch_size)
        pools = self._rule_pools(texts, docs, seed) if p.generator == "rules" else self._llm_pools(texts, seed)
        sampled: list[list[Candidate]] = []
        for i, (t, pool) in enumerate(zip(texts, pools, strict=True)):
            seen = {t.strip()}
            uniq = []
            for c in pool:
                if c.text.strip() and c.text.strip() not in seen:
                    seen.add(c.text.strip())
                    uniq.append(c)
            rng = random.Random(seed * 1_000_003 + stable_hash(f"{i}:{t}"))
            sampled.append(rng.sample(uniq, p.k) if len(uniq) > p.k else uniq)
        flat = [c for cands in sampled for c in cands]
        cand_docs = parse(nlp, [c.text for c in flat], p.batch_size)
        dist = DISTANCES[p.distance]
        k = 0
        for i, cands in enumerate(sampled):
            for c in cands:
                c.distance = dist(docs[i], cand_docs[k])
                c.lexical_difference = lexical_difference(texts[i], c.text)
                k += 1
        return sampled

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[str | Exception]:
        """One kept candidate per text (or the source / a failure when there is none)."""
        texts, errors = self._texts(batch)
        todo = [i for i, e in enumerate(errors) if e is None]
        out: list[str | Exception] = [e if e is not None else "" for e in errors]
        cands = self.candidates([texts[i] for i in todo], seed=seed)
        for i, cs in zip(todo, cands, strict=True):
            j = select_candidate(cs, self.mode)
            if j is not None:
                out[i] = cs[j].text
            elif self.params.on_no_candidate == "keep":
                out[i] = texts[i]
            else:
                out[i] = ValueError("no candidate rewrite for this text")
        return out


@register_strategy("synsim", params=SynParams)
class SynSim(_SynCandidates):
    """The candidate syntactically closest to the source."""

    mode = "synsim"


@register_strategy("syndiff", params=SynParams)
class SynDiff(_SynCandidates):
    """The candidate syntactically farthest from the source."""

    mode = "syndiff"


@register_strategy("synorig", params=SynParams)
class SynOrig(_SynCandidates):
    """A lexical paraphrase that keeps the source's parse (closest in syntax, most different in words)."""

    mode = "synorig"


@register_strategy("syntr", params=SynTrParams)
class SynTr(_SyntaxBase):
    """Rule-based voice / PP-position transforms, the same choice for every text of an author."""

    params: SynTrParams

    def __init__(self, params: SynTrParams) -> None:
        super().__init__(params)
        self._nlp()
        self._fallback: Strategy | None = None
        if params.on_no_transform == "synorig":
            self._fallback = build_strategy("synorig", {"pivots": params.pivots, "model": params.model,
                                                        "batch_size": params.batch_size})

    def plans(self, batch: pd.DataFrame, *, seed: int) -> list[list[str]]:
        """Each row's transform plan: its author's (consistency=author) or its own draw (=text)."""
        p = self.params
        if p.consistency == "author":
            keys = _author_keys(batch)
        else:
            keys = [f"text:{i}:{t}" for i, t in enumerate(batch["text"].astype(str).tolist())]
        return [author_plan(k, seed, p.families) for k in keys]

    def generate(self, batch: pd.DataFrame, *, seed: int) -> list[str | Exception]:
        """Apply each row's plan; a text where nothing applies is rewritten as SynOrig does
        (``on_no_transform: synorig``, the default) or comes back unchanged (``keep``, flagged ``unchanged``)."""
        texts, errors = self._texts(batch)
        todo = [i for i, e in enumerate(errors) if e is None]
        plans = self.plans(batch, seed=seed)
        results = apply_transforms(self._nlp(), [texts[i] for i in todo], [plans[i] for i in todo])
        out: list[str | Exception] = [e if e is not None else "" for e in errors]
        untouched = []
        for i, (text, applied) in zip(todo, results, strict=True):
            out[i] = text
            if not applied:
                untouched.append(i)
        if self._fallback is not None and untouched:
            rewritten = self._fallback.generate(pd.DataFrame({"text": [texts[i] for i in untouched]}), seed=seed)
            for i, new in zip(untouched, rewritten, strict=True):
                if isinstance(new, str) and new.strip():
                    out[i] = new
        return out
