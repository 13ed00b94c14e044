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
  more word characters). Punctuation is not a token. Arrow does the splitting (RE2's ``[^\\pL\\pN_]`` for
  Python's ``\\W``, utf8proc's lowercase); they agree with Python on every code point of Unicode 14 except
  76 case mappings (e.g. ``İ``; measured over all code points with Python 3.11);
- the MFW: the ``mfw`` most frequent tokens of the adversary's histories (without the held-out documents),
  ties broken by code-point order of the token;
- an author's relative frequencies: its count of each MFW over all its history posts divided by its total
  token count (every token, not only the MFW); the mean and the standard deviation (ddof 0) of each word's
  relative frequency over the authors; z = (frequency - mean) / std (0 for a word whose std is 0);
- a timeline's z-vector likewise over its posts, with the authors' mean and std;
- score: the cosine of the two z-vectors (``cosine``, 0 where either is all zero), or minus their
  Manhattan distance divided by the number of MFW (``classic``, Burrows' Delta negated so that higher is
  closer). Attribution follows :mod:`tasks.privacy.attribution`.

Scale: two streaming passes over the history parquet in batches, vectorised in Arrow and numpy (no Python
loop per post) and one batch per core at a time: pass 1 counts every token (``value_counts`` merged across
batches), pass 2 counts each author's MFW (``index_in`` + ``bincount``). Memory: the distinct tokens, the
batches in flight (:data:`CHUNK_ROWS`) and authors x MFW x 8 B (91 MB at 37.9k authors and 300 words).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from scipy.spatial.distance import cdist

from tasks.limits import MAX_MFW, check_range
from tasks.privacy.attribution import (
    Setting,
    attack_summary,
    attribute_scores,
    check_timelines,
    timeline_codes,
)
from tasks.privacy.reidentify import HistorySource, ReidResult
from tasks.privacy.stylometric.features import normalize_texts
from tasks.privacy.stylometric.profiles import author_batches, author_codes, ordered_authors
from tasks.signatures import make_signature

Variant = Literal["cosine", "classic"]
T = TypeVar("T")
R = TypeVar("R")
#: Python's ``\W`` (scikit-learn's token boundaries) in RE2, Arrow's regex engine, whose ``\w`` is ASCII only.
NON_WORD = r"[^\pL\pN_]+"
#: Posts per batch, one batch per thread in flight: a batch's text is copied several times while it is
#: tokenised (lowercase, split, positions); peak RSS 1.24 GB profiling 1M simulated posts on 2 threads.
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


def tokens(texts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """(every token of the texts, flat; the index of the text each came from): lowercased runs of two or
    more word characters (scikit-learn's default tokens); null texts have none."""
    pieces = pc.split_pattern_regex(normalize_texts(texts, lowercase=True), NON_WORD)
    flat = pc.list_flatten(pieces)
    keep = pc.greater_equal(pc.utf8_length(flat), 2)
    parent = pc.list_parent_indices(pieces).filter(keep)
    return flat.filter(keep), parent.to_numpy(zero_copy_only=False).astype(np.int64)


def _merge_counts(counts: pa.Table | None, part: pa.Table) -> pa.Table:
    """Two (word, n) count tables summed."""
    if counts is None:
        return part
    merged = pa.concat_tables([counts, part]).group_by("word").aggregate([("n", "sum")])
    return pa.table({"word": merged.column("word"), "n": merged.column("n_sum")})


def most_frequent_words(counts: pa.Table | None, n: int) -> pa.Array:
    """The ``n`` most frequent words of a (word, n) table, ties in code-point order."""
    if counts is None or counts.num_rows == 0:
        return pa.array([], pa.large_string())
    order = pc.sort_indices(counts, sort_keys=[("n", "descending"), ("word", "ascending")])
    return counts.column("word").take(order[:n]).combine_chunks()


def _in_threads(work: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """``work(item)`` of each item, in order, on ``threads`` threads (Arrow's kernels release the GIL), with
    at most ``threads`` items in flight while the next one is read."""
    with ThreadPoolExecutor(threads) as pool:
        pending: deque[Future[R]] = deque()
        for item in items:
            pending.append(pool.submit(work, item))
            if len(pending) >= threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _batch_counts(texts: pa.Array) -> pa.Table:
    """(word, n) counts of one batch's tokens."""
    found = pc.value_counts(tokens(texts)[0])
    return pa.table({"word": found.field("values"), "n": found.field("counts")})


def _word_counts(histories: HistorySource, chunk_rows: int,
                 held_out: frozenset[str] | None) -> tuple[pa.Table | None, dict[Any, int], int]:
    """Pass 1: every token's count, the author index, the post count."""
    authors: dict[Any, int] = {}
    n_posts = 0

    def texts() -> Iterator[pa.Array]:
        nonlocal n_posts
        for batch in author_batches(histories, chunk_rows, held_out):
            author_codes(batch.column("author_id"), authors, grow=True)
            n_posts += batch.num_rows
            yield batch.column("text")

    counts = None
    for part in _in_threads(_batch_counts, texts(), pa.cpu_count()):
        counts = part if counts is None else _merge_counts(counts, part)
    return counts, authors, n_posts


def _count_rows(words: pa.Array, owner: np.ndarray, mfw: pa.Array, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(MFW counts per row (rows x MFW), tokens per row) of tokens owned by ``owner`` (a row per token)."""
    n_words = len(mfw)
    column = pc.index_in(words, value_set=mfw).fill_null(-1).to_numpy(zero_copy_only=False)
    hit = column >= 0
    counts = np.bincount(owner[hit] * n_words + column[hit], minlength=n_rows * n_words)
    return counts.reshape(n_rows, n_words), np.bincount(owner, minlength=n_rows)


def _relative(counts: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Relative frequencies (0 in a row without tokens)."""
    return counts / np.maximum(total, 1)[:, None]


def _z(freq: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return np.where(std > 0, (freq - mean) / np.where(std > 0, std, 1.0), 0.0)


def profile_histories(histories: HistorySource, params: DeltaParams = DeltaParams(), *, chunk_rows: int = CHUNK_ROWS,
                      held_out: frozenset[str] | None = None) -> DeltaProfiles:
    """Profile every history author once (parquet path or DataFrame with author_id, text; doc_id when
    ``held_out`` names documents the adversary lacks): two streaming passes."""
    counts, authors, n_posts = _word_counts(histories, chunk_rows, held_out)
    mfw = most_frequent_words(counts, params.mfw)
    del counts
    author_mfw = np.zeros((len(authors), len(mfw)), np.int64)
    total = np.zeros(len(authors), np.int64)

    def count(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        words, post = tokens(batch.column("text"))
        owner = author_codes(batch.column("author_id"), authors, grow=False)
        return _count_rows(words, owner[post], mfw, len(authors))

    if len(mfw):
        for part, n_tokens in _in_threads(count, author_batches(histories, chunk_rows, held_out), pa.cpu_count()):
            author_mfw += part
            total += n_tokens
    freq = _relative(author_mfw, total)
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
    words, post = tokens(texts)
    counts, total = _count_rows(words, codes[post], profiles.words, len(groups))
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
    return -cdist(timelines, profiles.z, metric="cityblock") / profiles.z.shape[1]


def delta_attack(profiles: DeltaProfiles, synthetic: pd.DataFrame, setting: Setting = "full") -> ReidResult:
    """Attribute each synthetic timeline (group_id, true author_id, text) to the history author whose
    z-vector is closest; ``setting`` is recorded (the profiles were built for it)."""
    timelines, groups, true_author, n_posts = timeline_z(profiles, synthetic)
    per, summary = attribute_scores(delta_scores(timelines, profiles), profiles.authors, groups, true_author, n_posts)
    return ReidResult(per_timeline=per, summary=attack_summary(
        "delta", setting, summary, profiles.params, n_history_posts=profiles.n_posts,
        n_history_users=len(profiles.authors), n_synthetic_posts=len(synthetic)))
