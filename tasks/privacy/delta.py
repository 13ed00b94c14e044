"""Burrows' Delta re-identification: z-scored relative frequencies of the histories' most frequent words,
compared with each synthetic timeline's.

Burrows 2002 ("'Delta': a Measure of Stylistic Difference and a Guide to Likely Authorship"): the frequent
function words an author uses more or less than others are a habit that survives a change of topic; Evert
et al. 2017 ("Understanding and explaining Delta measures for authorship attribution") found the cosine of
the z-score vectors ("Cosine Delta") the most reliable variant, so it is the default. Its features are
words only, a family apart from the stylometric attack's character n-grams and TF-IDF: a judge that
attack's feedback never saw.

Definition (the test compares it with ``CountVectorizer`` + numpy + ``scipy.spatial.distance``):

- tokens: scikit-learn's default (``CountVectorizer()``: lowercase, then ``(?u)\\b\\w\\w+\\b``, runs of two or
  more word characters). Punctuation is not a token. Arrow lowercases (utf8proc's mapping: it agrees with
  Python on every code point of Unicode 14 except 76 case mappings, e.g. ``İ``; measured over all code points
  with Python 3.11) and the stylometric kernels split (their word tokens: Python's ``\\w``, one flag per code
  point) and key each token by a 64-bit hash of its code points;
- the MFW: the ``mfw`` most frequent tokens of the adversary's histories (without the held-out documents),
  ties broken by code-point order of the token;
- an author's relative frequencies: its count of each MFW over all its history posts divided by its total
  token count (every token, not only the MFW); the mean and the standard deviation (ddof 0) of each word's
  relative frequency over the authors; z = (frequency - mean) / std (0 for a word whose std is 0);
- a timeline's z-vector likewise over its posts, with the authors' mean and std;
- score: the cosine of the two z-vectors (``cosine``, 0 where either is all zero), or minus their
  Manhattan distance divided by the number of MFW (``classic``, Burrows' Delta negated so that higher is
  closer). Attribution follows :mod:`tasks.privacy.attribution`.

Scale: two streaming passes over the history parquet in batches, in numba: pass 1 counts every token's key in
an open-addressing table (grown when half full), pass 2 counts each author's tokens and its count of the words
that can be among the MFW (the ``mfw`` highest counts and every word tied with the lowest), and names each of
them by the first post holding it (Python's regex on that post, the word whose key matches); their code-point
order then breaks the tie. A timeline is counted by the same kernel. Memory: 16 B per distinct token, one
batch (:data:`CHUNK_ROWS`) and authors x MFW x 8 B (91 MB at 37.9k authors and 300 words).
"""

from __future__ import annotations

import queue
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.limits import MAX_MFW, check_range
from tasks.parallel import kernel_threads
from tasks.privacy.attribution import (
    Setting,
    attack_summary,
    attribute_scores,
    check_timelines,
    timeline_codes,
)
from tasks.privacy.reidentify import HistorySource, ReidResult
from tasks.privacy.stylometric.features import normalize_texts
from tasks.privacy.stylometric.kernels import _doc_ngrams, _scratch, _views, character_classes
from tasks.privacy.stylometric.profiles import author_batches, author_codes, ordered_authors
from tasks.signatures import make_signature

Variant = Literal["cosine", "classic"]
T = TypeVar("T")
S = TypeVar("S")
#: Posts per batch read and counted at a time (its text and a lowercased copy are held).
CHUNK_ROWS = 250_000
#: What the reference (``CountVectorizer``'s default ``token_pattern``) calls a token.
TOKEN_PATTERN = r"(?u)\b\w\w+\b"


@dataclass(frozen=True)
class DeltaParams:
    """How many most frequent words are profiled and which Delta compares the profiles."""

    mfw: int = 300
    variant: Variant = "cosine"

    def __post_init__(self) -> None:
        check_range("mfw", self.mfw, 1, MAX_MFW)
        if self.variant not in ("cosine", "classic"):
            raise ValueError(f"variant must be 'cosine' or 'classic'; got {self.variant!r}")

    @property
    def signature(self) -> str:
        return make_signature("reid_delta", tokens="sklearn-word", lowercase=True, mfw=self.mfw,
                              z="authors-ddof0", delta=self.variant)


@dataclass
class DeltaProfiles:
    """The adversary's side: the MFW, each author's z-vector over them, and the authors' mean and std."""

    params: DeltaParams
    authors: np.ndarray   # object ids, one per row of ``z``
    words: pa.Array       # the MFW, most frequent first
    mean: np.ndarray      # per word, over the authors' relative frequencies
    std: np.ndarray
    z: np.ndarray         # float64 (authors x words)
    n_posts: int


@nb.njit
def _doc_words(data, start, end, classes, cps, tok, out) -> int:
    """The doc's tokens as 64-bit keys in ``out`` (the stylometric kernels' word 1-gram keys: runs of two or more
    ``\\w`` characters; 0 is moved to 1, the tables' free mark); returns their count."""
    g = _doc_ngrams(data, start, end, 1, 0, 1, 1, classes, cps, tok, out)
    for j in range(g):
        if out[j] == 0:
            out[j] = 1
    return g


@nb.njit
def _word_scratch(offsets):
    """The kernels' per-batch buffers (code points, word bounds, keys) for word 1-grams."""
    cps, tok, buf = _scratch(offsets, 1, 0, 1, 1)[:3]
    return cps, tok, buf


@nb.njit
def _slot(keys, key) -> int:
    """Where ``key`` is in an open-addressing table of keys (0 = free), or the free slot it would take."""
    mask = keys.shape[0] - 1
    slot = np.int64(key & np.uint64(mask))
    while keys[slot] != key and keys[slot] != 0:
        slot = (slot + 1) & mask
    return slot


@nb.njit
def _add(keys, counts, key, n) -> int:
    """Add ``n`` to ``key``'s count; returns 1 where the key took a free slot, else 0."""
    slot = _slot(keys, key)
    new = keys[slot] == 0
    if new:
        keys[slot] = key
    counts[slot] += n
    return 1 if new else 0


@nb.njit(nogil=True, cache=True)
def _count_words(offsets, data, valid, start, classes, keys, counts, used):
    """Pass 1: every token of docs ``start``, ... counted in (``keys``, ``counts``); returns (the doc it stopped
    before, the table's used slots). It stops where the next doc could fill more than half the table."""
    cps, tok, buf = _word_scratch(offsets)
    n = offsets.shape[0] - 1
    for d in range(start, n):
        if not valid[d]:
            continue
        g = _doc_words(data, offsets[d], offsets[d + 1], classes, cps, tok, buf)
        if 2 * (used + g) > keys.shape[0]:
            return d, used
        for j in range(g):
            used += _add(keys, counts, buf[j], 1)
    return n, used


@nb.njit(cache=True)
def _grown(keys, counts):
    """The table at twice its size."""
    new_keys = np.zeros(2 * keys.shape[0], np.uint64)
    new_counts = np.zeros(2 * keys.shape[0], np.int64)
    for i in range(keys.shape[0]):
        if keys[i] != 0:
            slot = _slot(new_keys, keys[i])
            new_keys[slot] = keys[i]
            new_counts[slot] = counts[i]
    return new_keys, new_counts


@nb.njit(nogil=True, cache=True)
def _add_table(keys, counts, used, other_keys, other_counts, start):
    """Add the entries ``start``, ... of another table; returns (the entry it stopped before, used slots): it stops
    where the next entry could fill more than half the table."""
    for i in range(start, other_keys.shape[0]):
        if other_keys[i] == 0:
            continue
        if 2 * (used + 1) > keys.shape[0]:
            return i, used
        used += _add(keys, counts, other_keys[i], other_counts[i])
    return other_keys.shape[0], used


@nb.njit(nogil=True, cache=True)
def _count_listed(offsets, data, valid, owner, classes, table, column, counts, total, first):
    """Pass 2 and the timelines: per row owner (``owner`` >= 0), its tokens (``total``) and its count of each
    listed word (``counts``; ``table`` holds their keys, ``column`` their column); ``first``: per word, the
    first doc holding it (-1 until found)."""
    cps, tok, buf = _word_scratch(offsets)
    for d in range(offsets.shape[0] - 1):
        a = owner[d]
        if a < 0 or not valid[d]:
            continue
        g = _doc_words(data, offsets[d], offsets[d + 1], classes, cps, tok, buf)
        total[a] += g
        for j in range(g):
            slot = _slot(table, buf[j])
            if table[slot] != 0:
                col = column[slot]
                counts[a, col] += 1
                if first[col] < 0:
                    first[col] = d


@nb.njit(cache=True)
def _first_keys(offsets, data, classes):
    """The key of each text's first token (0 for a text without one)."""
    cps, tok, buf = _word_scratch(offsets)
    out = np.zeros(offsets.shape[0] - 1, np.uint64)
    for d in range(offsets.shape[0] - 1):
        if _doc_words(data, offsets[d], offsets[d + 1], classes, cps, tok, buf):
            out[d] = buf[0]
    return out


def word_keys(words: Sequence[str]) -> np.ndarray:
    """The key of each word (a token each, lowercased), as the kernels key it."""
    offsets, data, _ = _views(pa.array(list(words), pa.large_string()))
    return _first_keys(offsets, data, character_classes()) if len(words) else np.zeros(0, np.uint64)


def _listed_table(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An open-addressing table of ``keys`` (at most a quarter full) and each slot's column."""
    size = 1 << max(4, int(4 * max(len(keys), 1) - 1).bit_length())
    table, column = np.zeros(size, np.uint64), np.full(size, -1, np.int64)
    for col, key in enumerate(keys):
        slot = _slot(table, np.uint64(key))
        table[slot], column[slot] = key, col
    return table, column


def count_listed(texts: pa.Array | pa.ChunkedArray, owner: np.ndarray, keys: np.ndarray, n_rows: int,
                 first: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """(count of each listed word per row (rows x words), tokens per row, the lowercased texts) of texts owned by
    ``owner`` (a row per text, -1 for none); ``first`` gets the first text holding each word still at -1."""
    lowered = normalize_texts(texts, lowercase=True)
    offsets, data, valid = _views(lowered)
    table, column = _listed_table(keys)
    counts = np.zeros((n_rows, len(keys)), np.int64)
    total = np.zeros(n_rows, np.int64)
    _count_listed(offsets, data, valid, owner.astype(np.int64, copy=False), character_classes(), table, column,
                  counts, total, first if first is not None else np.full(len(keys), -1, np.int64))
    return counts, total, lowered


@dataclass
class _Table:
    """One thread's pass-1 table: token keys (0 = free) and their counts."""

    keys: np.ndarray
    counts: np.ndarray
    used: int = 0

    @classmethod
    def empty(cls) -> _Table:
        return cls(np.zeros(1 << 16, np.uint64), np.zeros(1 << 16, np.int64))

    def count(self, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray) -> None:
        """Count the tokens of a batch."""
        self._fill(lambda done: _count_words(offsets, data, valid, done, character_classes(), self.keys, self.counts,
                                             self.used), len(offsets) - 1)

    def add(self, other: _Table) -> None:
        """Add another thread's counts."""
        self._fill(lambda done: _add_table(self.keys, self.counts, self.used, other.keys, other.counts, done),
                   len(other.keys))

    def _fill(self, step: Callable[[int], tuple[int, int]], end: int) -> None:
        """Run ``step`` from 0 to ``end``, doubling the table wherever it stops half full."""
        done = 0
        while True:
            done, self.used = step(done)
            if done >= end:
                return
            self.keys, self.counts = _grown(self.keys, self.counts)


def _each_batch(items: Iterable[T], work: Callable[[T, S], None], states: Sequence[S]) -> None:
    """``work(item, state)`` for every item on one thread per state, each thread with a state of its own (the kernels
    release the GIL), at most one item per thread in flight while the next is read."""
    free: queue.SimpleQueue[S] = queue.SimpleQueue()
    for state in states:
        free.put(state)

    def run(item: T) -> None:
        state = free.get()
        try:
            work(item, state)
        finally:
            free.put(state)

    with ThreadPoolExecutor(len(states)) as pool:
        pending: deque[Future[None]] = deque()
        for item in items:
            pending.append(pool.submit(run, item))
            if len(pending) >= len(states):
                pending.popleft().result()
        for future in pending:
            future.result()


def _word_counts(histories: HistorySource, chunk_rows: int,
                 held_out: frozenset[str] | None) -> tuple[np.ndarray, np.ndarray, dict[Any, int], int]:
    """Pass 1: every distinct token's key and count, the author index (in file order), the post count."""
    authors: dict[Any, int] = {}
    n_posts = 0

    def texts() -> Iterator[pa.Array]:
        nonlocal n_posts
        for batch in author_batches(histories, chunk_rows, held_out):
            author_codes(batch.column("author_id"), authors, grow=True)
            n_posts += batch.num_rows
            yield batch.column("text")

    tables = [_Table.empty() for _ in range(kernel_threads())]
    _each_batch(texts(), lambda text, table: table.count(*_views(normalize_texts(text, lowercase=True))), tables)
    for other in tables[1:]:
        tables[0].add(other)
    held = tables[0].keys != 0
    return tables[0].keys[held], tables[0].counts[held], authors, n_posts


def _candidates(counts: np.ndarray, n: int) -> np.ndarray:
    """Indices of the words that can be among the ``n`` most frequent: the ``n`` highest counts and every word
    tied with the lowest of them (code-point order breaks the tie, once their text is known)."""
    if len(counts) <= n:
        return np.arange(len(counts))
    cut = np.partition(counts, len(counts) - n)[len(counts) - n]
    return np.flatnonzero(counts >= cut)


def _named(lowered: pa.Array, doc: int, key: int) -> str:
    """The token of text ``doc`` whose key is ``key``."""
    words = re.findall(TOKEN_PATTERN, lowered[doc].as_py())
    return words[int(np.flatnonzero(word_keys(words) == np.uint64(key))[0])]


def _relative(counts: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Relative frequencies (0 in a row without tokens)."""
    return counts / np.maximum(total, 1)[:, None]


def _z(freq: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return np.where(std > 0, (freq - mean) / np.where(std > 0, std, 1.0), 0.0)


def profile_histories(histories: HistorySource, params: DeltaParams = DeltaParams(), *, chunk_rows: int = CHUNK_ROWS,
                      held_out: frozenset[str] | None = None) -> DeltaProfiles:
    """Profile every history author once (parquet path or DataFrame with author_id, text; doc_id when
    ``held_out`` names documents the adversary lacks): two streaming passes."""
    keys, totals, authors, n_posts = _word_counts(histories, chunk_rows, held_out)
    listed = _candidates(totals, params.mfw)
    names: list[str | None] = [None] * len(listed)
    parts = [(np.zeros((len(authors), len(listed)), np.int64), np.zeros(len(authors), np.int64))
             for _ in range(kernel_threads() if len(listed) else 0)]

    def count(batch: pa.RecordBatch, part: tuple[np.ndarray, np.ndarray]) -> None:
        owner = author_codes(batch.column("author_id"), authors, grow=False)
        first = np.full(len(listed), -1, np.int64)
        counts, n_tokens, lowered = count_listed(batch.column("text"), owner, keys[listed], len(authors), first)
        part[0][...] += counts
        part[1][...] += n_tokens
        for col in np.flatnonzero(first >= 0):
            if names[col] is None:
                names[col] = _named(lowered, int(first[col]), int(keys[listed[col]]))

    if parts:
        _each_batch(author_batches(histories, chunk_rows, held_out), count, parts)
    author_counts = sum(p[0] for p in parts) if parts else np.zeros((len(authors), 0), np.int64)
    total = sum(p[1] for p in parts) if parts else np.zeros(len(authors), np.int64)
    order = sorted(range(len(listed)), key=lambda col: (-int(totals[listed[col]]), names[col]))[:params.mfw]
    mfw = pa.array([names[col] for col in order], pa.large_string())
    freq = _relative(author_counts[:, order], total)
    mean = freq.mean(axis=0) if len(authors) else np.zeros(len(mfw))
    std = freq.std(axis=0) if len(authors) else np.zeros(len(mfw))
    return DeltaProfiles(params, ordered_authors(authors), mfw, mean, std, _z(freq, mean, std), n_posts)


def timeline_z(profiles: DeltaProfiles, synthetic: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                         np.ndarray]:
    """(z-vector per timeline, timeline ids, true authors, posts per timeline) of the synthetic side under
    the histories' MFW, mean and std."""
    check_timelines(synthetic)
    codes, groups, true_author, n_posts = timeline_codes(synthetic)
    texts = pa.array(synthetic["text"].astype(object).where(synthetic["text"].notna(), None).tolist(),
                     pa.large_string())
    counts, total, _ = count_listed(texts, codes, word_keys(profiles.words.to_pylist()), len(groups))
    return _z(_relative(counts, total), profiles.mean, profiles.std), groups, true_author, n_posts


def _unit_rows(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1)
    return m / np.where(norms > 0, norms, 1.0)[:, None]


def delta_scores(timelines: np.ndarray, profiles: DeltaProfiles) -> np.ndarray:
    """Dense (timelines x authors) scores, higher is closer: Cosine Delta or minus classic Delta."""
    if profiles.z.shape[0] == 0 or profiles.z.shape[1] == 0:
        return np.zeros((timelines.shape[0], profiles.z.shape[0]))
    if profiles.params.variant == "cosine":
        return _unit_rows(timelines) @ _unit_rows(profiles.z).T
    from scipy.spatial.distance import cdist  # deferred: every CLI command imports the attack registry

    return -cdist(timelines, profiles.z, metric="cityblock") / profiles.z.shape[1]


def delta_attack(profiles: DeltaProfiles, synthetic: pd.DataFrame, setting: Setting = "full") -> ReidResult:
    """Attribute each synthetic timeline (group_id, true author_id, text) to the history author whose
    z-vector is closest; ``setting`` is recorded (the profiles were built for it)."""
    timelines, groups, true_author, n_posts = timeline_z(profiles, synthetic)
    per, summary = attribute_scores(delta_scores(timelines, profiles), profiles.authors, groups, true_author, n_posts)
    return ReidResult(per_timeline=per, summary=attack_summary(
        "delta", setting, summary, profiles.params, n_history_posts=profiles.n_posts,
        n_history_users=len(profiles.authors), n_synthetic_posts=len(synthetic)))
