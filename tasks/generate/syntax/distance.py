"""Syntactic distances between parsed texts: Zhang-Shasha tree edit distance over dependency trees
(``dep|UPOS`` nodes, compiled with numba) normalised by the token count, and the UPOS Levenshtein
alternative."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numba as nb
import numpy as np

Tree = tuple[str, tuple["Tree", ...]]
ROOT_LABEL = "TEXT"


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
