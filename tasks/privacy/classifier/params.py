"""The classifier attack's parameters (:class:`ClassifierParams`): its features (the stylometric n-grams),
the linear SVM, the two-stage sizes, and the mode the histories' size asks for."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.limits import MAX_DOCS, MAX_SEED, check_range
from tasks.privacy.reidentify import HistorySource, history_rows
from tasks.privacy.stylometric.params import StyloParams
from tasks.signatures import make_signature

Mode = Literal["auto", "exact", "two_stage"]


@dataclass(frozen=True)
class ClassifierParams:
    """Features (the stylometric n-grams), the linear SVM, and the two-stage sizes."""

    ngram_min: int = 2
    ngram_max: int = 4
    word_min: int = 1          # word n-grams (scikit-learn's word tokens); word_max 0 = characters only
    word_max: int = 2
    lowercase: bool = False    # casing is style
    c: float = 1.0             # the SVM's C: two_stage's, and exact's when c_grid is empty
    c_grid: tuple[float, ...] | list[float] = (0.3, 1.0, 3.0)  # exact: C tuned on a validation split of history posts
    validation_share: float = 0.2  # exact: of each author's posts, for tuning C
    mode: Mode = "auto"        # exact up to exact_max_pairs history posts x authors, two_stage above
    exact_max_pairs: int = 5_000_000
    top_k: int = 20            # two_stage: candidates re-ranked per timeline
    posts_per_author: int = 50  # two_stage: a candidate's posts the re-ranker trains on (the first in file order)
    hash_bits: int = 20        # two_stage: n-gram buckets of the re-ranker's features
    df_sample: int = 250_000   # two_stage: posts the re-ranker's IDF is estimated from (where stage 1 is not a sketch of the same buckets, whose IDF it takes)
    tol: float = 1e-4          # exact: LinearSVC's tolerance (scikit-learn's default)
    rerank_tol: float = 0.3    # two_stage: the dual solver's tolerance (looser than liblinear's 0.1: same accuracy)
    max_iter: int = 1000
    seed: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.c_grid, list):  # a config's list: the parameters are hashable (the memo's key)
            object.__setattr__(self, "c_grid", tuple(self.c_grid))
        self.stylo  # noqa: B018 - the n-gram settings are checked as the stylometric attack checks them
        for name in ("c", "tol", "rerank_tol"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number; got {value}")
        for value in self.c_grid:
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"c_grid values must be positive numbers; got {value}")
        if not 0 < self.validation_share < 1:
            raise ValueError(f"validation_share must be in (0, 1); got {self.validation_share}")
        if self.mode not in ("auto", "exact", "two_stage"):
            raise ValueError(f"mode must be 'auto', 'exact' or 'two_stage'; got {self.mode!r}")
        check_range("exact_max_pairs", self.exact_max_pairs, 0, 10**15)
        check_range("top_k", self.top_k, 1, 10_000)
        check_range("posts_per_author", self.posts_per_author, 1, 1_000_000)
        check_range("hash_bits", self.hash_bits, 8, 26)
        check_range("df_sample", self.df_sample, 1, MAX_DOCS)
        check_range("max_iter", self.max_iter, 1, 1_000_000)
        check_range("seed", self.seed, 0, MAX_SEED)

    @property
    def stylo(self) -> StyloParams:
        """The n-gram settings as the stylometric kernels take them (exact keys; the sketch's IDF sample)."""
        return StyloParams(ngram_min=self.ngram_min, ngram_max=self.ngram_max, word_min=self.word_min,
                           word_max=self.word_max, lowercase=self.lowercase, mode="sketch", hash_bits=self.hash_bits,
                           df_sample=self.df_sample)

    @property
    def signature(self) -> str:
        exact = self.mode in ("exact", "auto")
        staged = self.mode in ("two_stage", "auto")
        return make_signature(
            "reid_classifier", features=self.stylo.features, tf="sublinear", idf="smooth-histories", norm="l2",
            model="linear-svc-ovr", loss="squared_hinge", timeline="joined", lowercase=self.lowercase,
            mode=self.mode, exact_max_pairs=self.exact_max_pairs if self.mode == "auto" else None,
            c_grid=",".join(f"{c:g}" for c in self.c_grid) if exact and self.c_grid else None,
            validation=self.validation_share if exact and self.c_grid else None,
            c=self.c if staged or not self.c_grid else None, tol=self.tol if exact else None,
            stage1=f"stylometric@{_digest(StyloParams().signature)}" if staged else None,
            top_k=self.top_k if staged else None,
            posts_per_author=self.posts_per_author if staged else None,
            buckets=f"2^{self.hash_bits}" if staged else None, df_sample=self.df_sample if staged else None,
            rerank_tol=self.rerank_tol if staged else None, max_iter=self.max_iter, seed=self.seed)

    def resolved_mode(self, histories: HistorySource) -> Literal["exact", "two_stage"]:
        """``auto``: ``exact`` when the histories' posts x authors (before any is held out, so both settings
        agree) is at most ``exact_max_pairs``, else ``two_stage``; the others are themselves."""
        if self.mode != "auto":
            return self.mode
        rows = history_rows(histories)
        if rows > self.exact_max_pairs:  # every author has a post: no need to count them
            return "two_stage"
        if isinstance(histories, pd.DataFrame):
            authors = histories["author_id"].nunique() if "author_id" in histories.columns else 0
        else:
            authors = pc.count_distinct(pq.read_table(histories, columns=["author_id"]).column("author_id")).as_py() \
                if rows else 0
        return "exact" if rows * authors <= self.exact_max_pairs else "two_stage"


def _digest(text: str) -> str:
    """A short stable name of a signature nested in another (stage 1's: its own rows carry it in full)."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:10]
