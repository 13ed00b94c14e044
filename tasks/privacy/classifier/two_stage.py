"""The classifier attack's two-stage mode (the article's scale): stage 1 is the stylometric attack's
default profiles, whose top-K authors per timeline are its candidates; stage 2 re-ranks them with an SVM
trained on the candidates' posts (:mod:`tasks.privacy.classifier.rerank`). Holds the adversary's side
(:class:`TwoStageSide`), the candidates' posts and the combined scores."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.parallel import kernel_threads, read_ahead
from tasks.privacy.attribution import Setting, timeline_codes
from tasks.privacy.classifier.exact import _texts
from tasks.privacy.classifier.params import ClassifierParams
from tasks.privacy.classifier.rerank import _post_rows, _rerank_all
from tasks.privacy.reidentify import HistorySource, history_rows
from tasks.privacy.stylometric.features import normalize_texts
from tasks.privacy.stylometric.kernels import _views, character_classes
from tasks.privacy.stylometric.params import StyloParams
from tasks.privacy.stylometric.profiles import (
    HistoryProfiles,
    _sketch_df,
    author_batches,
    author_codes,
    df_stride,
    estimated_idf,
)
from tasks.privacy.stylometric.scoring import similarity, timeline_profiles

#: Below every re-ranked candidate (whose scores are >= 0): the stage-1 cosine (in [-1, 1]) minus this.
NOT_RERANKED = 3.0
#: A pass over the histories also reads the posts of each timeline's next ranks, up to this many times ``top_k``
#: (:meth:`TwoStageSide.posts_of`): a protect round re-attacks rewritten timelines, whose candidates move a little.
READ_AHEAD = 2


# -------------------------------------------------------------------------------------- two-stage mode

@dataclass
class TwoStageSide:
    """The two-stage mode's adversary side: the stage-1 stylometric profiles, the re-ranker's bucket IDF,
    the histories, and the posts of every candidate read so far (:meth:`posts_of`: a later attack on other
    timelines, a protect round's, reads only the candidates it has not seen; ~7.5 KB per candidate at 50
    posts of 150 characters). A pass over the histories costs about the same for few candidates as for many
    (4.8 s for 2,435 candidates of 8.7M posts), so a pass also reads the candidates a later attack on the same
    timelines is likely to ask for (``ahead``: the next ranks of stage 1)."""

    params: ClassifierParams
    stage1: HistoryProfiles
    idf: np.ndarray  # float32 per bucket
    histories: HistorySource
    held_out: frozenset[str] | None
    n_posts: int
    read: dict[Any, pa.Array] = field(default_factory=dict)  # candidate -> its normalised posts

    def posts_of(self, names: np.ndarray, chunk_rows: int, ahead: np.ndarray | None = None
                 ) -> tuple[pa.Array, np.ndarray]:
        """(normalised texts, candidate index) of the first ``posts_per_author`` posts of each of ``names``, grouped
        by candidate, as :func:`candidate_posts` reads them; the candidates read before are not read again. When
        a pass is needed, it reads the posts of ``ahead`` too (kept for a later call, not returned)."""
        missing = [n for n in names if n not in self.read]
        if missing and ahead is not None:
            missing += [n for n in ahead if n not in self.read]
        missing = np.asarray(list(dict.fromkeys(missing)), dtype=object)  # in order, once each
        if len(missing):
            texts, owner = candidate_posts(self.histories, self.held_out, missing, self.params.posts_per_author,
                                           self.params.lowercase, chunk_rows)
            if isinstance(texts, pa.ChunkedArray):
                texts = texts.combine_chunks()
            bounds = np.searchsorted(owner, np.arange(len(missing) + 1))
            for i, name in enumerate(missing):
                self.read[name] = texts.slice(bounds[i], bounds[i + 1] - bounds[i])
        parts = [self.read[n] for n in names]
        owner = np.repeat(np.arange(len(names), dtype=np.int64), [len(p) for p in parts])
        texts = pa.concat_arrays(parts) if parts else pa.array([], pa.large_string())
        return texts, owner


def stage1_profiles(histories: HistorySource, held_out: frozenset[str] | None) -> HistoryProfiles:
    """The stylometric attack's default profiles of these histories, from its per-process memo (imported
    late: the attack registry imports this module's registration)."""
    # deferred: loads fsspec only when this runs
    from tasks.privacy.attacks.stylometric import StylometricAttack

    setting: Setting = "full" if held_out is None else "disjoint"
    return StylometricAttack(StyloParams()).prepare(histories, setting, held_out).profiles


def prepare_two_stage(histories: HistorySource, params: ClassifierParams, held_out: frozenset[str] | None,
                      chunk_rows: int = 1_000_000) -> TwoStageSide:
    """Stage 1's profiles and the re-ranker's IDF: stage 1's own where it profiled in sketch mode over the same
    n-grams and buckets (the document frequencies of its sample: no pass of its own), else one pass estimating
    them from a hashed sample of about ``df_sample`` posts, as the stylometric sketch does."""
    stage1 = stage1_profiles(histories, held_out)
    stylo = params.stylo
    if stage1.mode == "sketch" and (stage1.params.ngram_args(), stage1.params.lowercase, stage1.params.hash_bits) \
            == (stylo.ngram_args(), stylo.lowercase, stylo.hash_bits):
        return TwoStageSide(params, stage1, stage1.idf, histories, held_out, stage1.n_posts)
    df, n_posts, n_sampled, _ = _sketch_df(histories, stylo, chunk_rows, held_out,
                                           df_stride(history_rows(histories), stylo))
    return TwoStageSide(params, stage1, estimated_idf(df, n_sampled, n_posts), histories, held_out, n_posts)


def candidate_posts(histories: HistorySource, held_out: frozenset[str] | None, names: np.ndarray, per_author: int,
                    lowercase: bool, chunk_rows: int = 1_000_000) -> tuple[pa.Array, np.ndarray]:
    """(normalised texts, candidate index) of the first ``per_author`` posts in file order of each author in
    ``names``, in one streaming pass; texts are grouped by candidate. The pass keeps a few rows of each batch, so
    decoding the text is most of it: two row groups decode side by side and the next batch is read while this one
    is sorted (about twice as fast at the article's scale: benchmarks/reidentify.py)."""
    index = {name: i for i, name in enumerate(names)}
    seen = np.zeros(len(names), np.int64)
    texts, owners = [], []
    for batch in read_ahead(author_batches(histories, chunk_rows, held_out, readers=2)):
        code = author_codes(batch.column("author_id"), index, grow=False)
        rows = np.flatnonzero(code >= 0)
        if not len(rows):
            continue
        mine = code[rows]
        order = np.argsort(mine, kind="stable")  # rank of each row among its author's rows in this batch
        sorted_codes = mine[order]
        starts = np.r_[0, np.flatnonzero(np.diff(sorted_codes)) + 1]
        rank = np.empty(len(rows), np.int64)
        rank[order] = np.arange(len(rows)) - np.repeat(starts, np.diff(np.r_[starts, len(rows)]))
        keep = rank + seen[mine] < per_author
        np.add.at(seen, mine, 1)
        texts.append(batch.column("text").take(pa.array(rows[keep])).cast(pa.large_string()))
        owners.append(mine[keep])
    owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
    order = np.argsort(owner, kind="stable")
    joined = pa.chunked_array(texts, pa.large_string()) if texts else pa.array([], pa.large_string())
    return normalize_texts(joined, lowercase).take(pa.array(order)), owner[order]


def top_candidates(scores: np.ndarray, k: int) -> np.ndarray:
    """Per row, the ``k`` columns with the highest scores, best first (ties by column)."""
    k = min(k, scores.shape[1])
    if k == 0:
        return np.zeros((scores.shape[0], 0), np.int64)
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k < scores.shape[1] else \
        np.tile(np.arange(scores.shape[1]), (scores.shape[0], 1))
    picked = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -picked), axis=1)
    return np.take_along_axis(part, order, axis=1).astype(np.int64)


def two_stage_scores(side: TwoStageSide, synthetic: pd.DataFrame, chunk_rows: int = 1_000_000
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """(timelines x authors scores, timeline ids, true authors, posts per timeline, stage figures)."""
    params = side.params
    profiles, groups, true_author, n_posts = timeline_profiles(side.stage1, synthetic)
    first = similarity(profiles, side.stage1)
    authors = side.stage1.authors
    pool = top_candidates(first, READ_AHEAD * params.top_k)
    top = pool[:, :params.top_k]
    scores = first - NOT_RERANKED
    if top.size == 0:
        return scores, groups, true_author, n_posts, {"n_candidates": 0}
    union, cand = np.unique(top, return_inverse=True)
    cand = cand.reshape(top.shape).astype(np.int64)
    texts, owner = side.posts_of(authors[union], chunk_rows, ahead=authors[np.unique(pool)])
    cand_ptr = np.searchsorted(owner, np.arange(len(union) + 1)).astype(np.int64)
    codes = timeline_codes(synthetic)[0]
    order = np.argsort(codes, kind="stable")
    tl_texts = _texts(synthetic["text"].to_numpy(object)[order], params.lowercase)
    tl_ptr = np.searchsorted(codes[order], np.arange(len(groups) + 1)).astype(np.int64)
    offsets, data, _ = _views(texts)
    tl_offsets, tl_data, _ = _views(tl_texts)
    stylo = params.stylo
    shift, idf = np.uint64(64 - params.hash_bits), side.idf.astype(np.float64)
    indptr, idx, val = _post_rows(offsets, data, *stylo.ngram_args(), character_classes(), shift, idf, kernel_threads())
    decided = _rerank_all(cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, *stylo.ngram_args(),
                          character_classes(), shift, idf, params.c, params.rerank_tol, params.max_iter, params.seed,
                          kernel_threads())
    rows = np.arange(len(groups))[:, None]
    scores[rows, top] = decided - decided.min(axis=1, keepdims=True)
    true_col = pd.Index(authors).get_indexer(pd.Index(true_author))
    in_top = (top == true_col[:, None]).any(axis=1) & (true_col >= 0)
    return scores, groups, true_author, n_posts, {"n_candidates": len(union), "n_candidate_posts": len(owner),
                                                  "top_k_recall": float(in_top.mean()) if len(in_top) else math.nan}
