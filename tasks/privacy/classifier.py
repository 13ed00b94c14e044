"""The classifier re-identification attack: a discriminative linear model over the character and word
n-grams of the history posts, the standard strong authorship-attribution baseline (Stamatatos 2009, "A
survey of modern authorship attribution methods"; one-vs-rest linear SVMs over character n-grams are the
baseline that most shared tasks report against).

Features (as the stylometric attack's: :func:`tasks.privacy.stylometric.reference_vectorizer` of the same
n-gram settings): character ``ngram_min..ngram_max``-grams and word ``word_min..word_max``-grams of each
history post, sublinear TF ``1 + ln(count)`` times the smooth IDF of the history posts, L2-normalised.
Each history post is a training example labelled by its author (the held-out documents removed in the
``disjoint`` setting). A timeline is scored as its posts joined into one text (the sum of its posts' n-gram
counts, no n-gram across two posts; sublinear TF, IDF, L2): on the 2012 conventions speakers (disjoint,
seeded splits 0-2 of :func:`tasks.corpus.splits.author_timelines`) that read accuracy@1 0.383 against 0.357
for the mean of its posts' rows at C = 1, and 0.394 against 0.374 at C = 3 (``benchmarks/conventions.py
--seeds 0 1 2 --svc-forms 1 3``). A timeline's score for an author is the model's decision value for that
author.

Two ways to compute it, chosen by the size of the histories (``mode="auto"``):

- ``exact`` (history posts x authors at most ``exact_max_pairs``: the one-vs-rest problems' size, which is
  what a fit costs): scikit-learn's ``LinearSVC`` (L2 penalty, squared hinge, one-vs-rest, ``tol``,
  ``max_iter``, ``random_state=seed``) on the exact features (64-bit n-gram keys, sparse). C is tuned over
  ``c_grid`` on a validation split of the history posts (``validation_share`` of each author's posts,
  picked by a seeded hash of their text and position; authors with one post keep it): each author's
  validation posts are joined into one text like a timeline, C is the grid value with the most authors
  found (then the highest mean reciprocal rank, then the smallest C), and the model is refitted on every
  post with it. An empty ``c_grid`` fits with ``c``. Its predictions equal scikit-learn's own pipeline
  (``TfidfVectorizer`` + ``LinearSVC`` with the same C): ``tests/test_classifier_attack.py``.
- ``two_stage`` (the article's scale: 8.7M posts of 37.9k authors): stage 1 is the stylometric attack with
  its default parameters (:class:`tasks.privacy.stylometric.StyloParams`, the profiles the registry's
  ``stylometric`` attack keeps per process, so a run with both attacks profiles the histories once); each
  timeline's ``top_k`` authors by its cosine are its candidates. Stage 2 re-ranks them: one streaming pass
  reads the first ``posts_per_author`` posts (file order) of every candidate, and per timeline a
  one-vs-rest L2-loss linear SVM (the dual coordinate descent of liblinear, Hsieh et al. 2008, written in
  numba: :func:`_rerank_all`; the same optimisation problem as ``LinearSVC``, equal to it within its
  tolerance, tested) is trained among its candidates on their posts, over the n-grams hashed into
  ``2**hash_bits`` buckets (the stylometric kernels' 64-bit keys; IDF estimated from ``df_sample`` posts as
  the stylometric sketch does) with C = ``c`` and tolerance ``rerank_tol``. A timeline's candidates score
  their decision value minus the lowest candidate's (>= 0), every other author its stage-1 cosine minus 3
  (< 0): authors not re-ranked keep lower ranks, so a true author outside the top-K is a miss at rank 1
  and keeps its stage-1 order below the candidates for accuracy@10 and MRR.

Measured (``benchmarks/README.md``): at the article's scale (``benchmarks/reidentify.py --full``) two stages
take 34-37 s on 2 cores beyond the stylometric profiles they share (84-88 s with them) and 2.74 GB at most;
accuracy@1 against the stylometric attack's: ``full`` 0.982 / 0.946 (1.000 / 0.944) at rewrite 0.2 / 0.8,
``disjoint`` 0.846 / 0.686 (0.832 / 0.640). 50 posts per candidate read better and twice as fast as 100
(0.686 against 0.668, disjoint 0.8), and tolerance 0.3 reads as 0.1 in 25% less time. On the conventions
speakers (10 splits) exact mode reads 0.382, below the stylometric text profiles' 0.419: with ~44 one-sentence
posts per speaker the centroid of all of a speaker's text is the stronger model.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numba as nb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from tasks.limits import MAX_DOCS, MAX_SEED, check_range
from tasks.privacy.attribution import (
    Setting,
    attack_summary,
    attribute_scores,
    check_timelines,
    held_out_doc_ids,
    timeline_codes,
)
from tasks.privacy.evidence import carried_by
from tasks.privacy.reidentify import HistorySource, ReidResult
from tasks.privacy.stylometric import (
    EVIDENCE_COLUMNS,
    HistoryProfiles,
    StyloParams,
    _distinct_buckets,
    _doc_ngrams,
    _exact_counts,
    _sketch_df,
    _smooth_idf,
    _sublinear_rows,
    _threads,
    _views,
    author_batches,
    author_codes,
    character_classes,
    df_stride,
    estimated_idf,
    history_rows,
    ngram_names,
    normalize_texts,
    similarity,
    timeline_profiles,
)
from tasks.signatures import make_signature

Mode = Literal["auto", "exact", "two_stage"]
#: Below every re-ranked candidate (whose scores are >= 0): the stage-1 cosine (in [-1, 1]) minus this.
NOT_RERANKED = 3.0


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
    df_sample: int = 250_000   # two_stage: posts the re-ranker's document frequencies are estimated from
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


# ------------------------------------------------------------------------------------------ exact mode

@dataclass
class ExactModel:
    """The one-vs-rest SVM fitted on every history post: its classes (author ids, sorted), the features'
    vocabulary (sorted 64-bit n-gram keys) and IDF, the weights, the C it used and the validation figures."""

    params: ClassifierParams
    authors: np.ndarray
    vocab: np.ndarray
    idf: np.ndarray
    coef: np.ndarray          # classes x vocab (float64)
    intercept: np.ndarray
    c: float
    validation: dict[float, tuple[float, float]]  # C -> (accuracy, MRR) of the validation authors
    n_posts: int


def _texts(values: Any, lowercase: bool) -> pa.Array:
    return normalize_texts(pa.array(pd.Series(values, dtype=object).where(pd.notna(values), None).tolist(),
                                    pa.large_string()), lowercase)


def _joined(counts: sp.csr_matrix, codes: np.ndarray, n_groups: int, idf: np.ndarray) -> sp.csr_matrix:
    """Each group's texts as one text: summed counts, sublinear TF, IDF, L2."""
    g = sp.csr_matrix((np.ones(len(codes)), (codes, np.arange(len(codes)))), shape=(n_groups, len(codes)))
    return _sublinear_rows((g @ counts).tocsr(), idf)


def linear_svc(x: sp.csr_matrix, y: np.ndarray, c: float, params: ClassifierParams) -> Any:
    """scikit-learn's one-vs-rest ``LinearSVC`` as the exact mode fits it (a ConvergenceWarning at
    ``max_iter`` is silenced: the model is used as it stands, as scikit-learn's would be)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    model = LinearSVC(C=c, loss="squared_hinge", penalty="l2", dual=True, tol=params.tol, max_iter=params.max_iter,
                      random_state=params.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(x, y)


def decision(model: Any, x: sp.csr_matrix) -> np.ndarray:
    """classes x rows decision values, one column per class also when there are two classes."""
    scores = model.decision_function(x)
    return np.column_stack([-scores, scores]) if scores.ndim == 1 else scores


def validation_split(texts: pa.Array, owner: np.ndarray, share: float, seed: int) -> np.ndarray:
    """True for the validation posts: per author with at least two posts, the ``share`` (rounded, at least
    one, never all) whose seeded hash of (text, position) is smallest."""
    digest = pd.util.hash_array(np.asarray(texts.to_pylist(), dtype=object), hash_key=f"{seed:016d}"[-16:]) \
        ^ pd.util.hash_array(np.arange(len(owner)).astype(np.uint64))
    frame = pd.DataFrame({"owner": owner, "digest": digest})
    rank = frame.groupby("owner")["digest"].rank(method="first").to_numpy() - 1
    size = frame.groupby("owner")["owner"].transform("size").to_numpy()
    take = np.where(size >= 2, np.clip(np.rint(size * share), 1, size - 1), 0)
    return rank < take


def fit_exact(histories: HistorySource, params: ClassifierParams, held_out: frozenset[str] | None,
              chunk_rows: int = 1_000_000) -> ExactModel:
    """The exact mode's model: features of every history post (without ``held_out``), C tuned, LinearSVC."""
    batches = list(author_batches(histories, chunk_rows, held_out))
    table = pa.Table.from_batches(batches) if batches else None
    if table is None or table.num_rows == 0:
        return ExactModel(params, np.empty(0, object), np.zeros(0, np.uint64), np.zeros(0), np.zeros((0, 0)),
                          np.zeros(0), params.c, {}, 0)
    y = table.column("author_id").cast(pa.string()).to_numpy(zero_copy_only=False).astype(object)
    texts = normalize_texts(table.column("text"), params.lowercase)
    counts, vocab = _exact_counts(texts, params.stylo, None)
    idf = _smooth_idf(np.bincount(counts.indices, minlength=len(vocab)), len(texts))
    x = _sublinear_rows(counts, idf)
    authors = np.unique(y)
    if len(authors) < 2:  # one author: every timeline is theirs (score 0), nothing to learn
        return ExactModel(params, authors, vocab, idf, np.zeros((len(authors), len(vocab))), np.zeros(len(authors)),
                          params.c, {}, len(y))
    c, validation = params.c, {}
    if params.c_grid:
        owner = pd.Index(authors).get_indexer(y)
        held = validation_split(texts, owner, params.validation_share, params.seed)
        if held.any() and len(np.unique(y[~held])) >= 2:
            groups, names = pd.factorize(owner[held], sort=True)
            val = _joined(counts[np.flatnonzero(held)], groups, len(names), idf)
            for value in params.c_grid:
                model = linear_svc(x[np.flatnonzero(~held)], y[~held], value, params)
                scores = decision(model, val)
                true = pd.Index(model.classes_).get_indexer(authors[names])
                rank = (scores >= scores[np.arange(len(true)), true][:, None]).sum(axis=1)
                validation[value] = (float(np.mean(rank == 1)), float(np.mean(1.0 / rank)))
            c = max(params.c_grid, key=lambda v: (*validation[v], -v))
    model = linear_svc(x, y, c, params)
    coef = model.coef_ if len(model.classes_) > 2 else np.vstack([-model.coef_[0], model.coef_[0]])
    intercept = model.intercept_ if len(model.classes_) > 2 else np.array([-model.intercept_[0], model.intercept_[0]])
    return ExactModel(params, np.asarray(model.classes_, dtype=object), vocab, idf, coef, intercept, c, validation,
                      len(y))


#: A fitted exact model is kept in the cache folder up to this size (its weights: authors x n-grams x 8 B); a
#: larger one would cost more disk than refitting costs time.
MODEL_CACHE_MAX_BYTES = 1 << 30
#: What the exact model is made by: a change in any of them makes the cached models stale.
_EXACT_CODE = ("tasks/privacy/classifier.py", "tasks/privacy/stylometric.py")


def exact_model_key(histories: str, params: ClassifierParams, held_out: frozenset[str] | None) -> str:
    """The name of a fitted model in the cache: the history file's contents, every parameter, the held-out
    documents and the code that fits it."""
    # deferred: loads fsspec only when this runs
    from tasks.store import code_version, fingerprint_config, fingerprint_file

    held = sorted(held_out) if held_out is not None else None
    return fingerprint_config({"histories": fingerprint_file(histories), "params": dataclasses.asdict(params),
                               "held_out": fingerprint_config(held), "code": code_version(*_EXACT_CODE)})[:32]


def save_exact(model: ExactModel, path: Path) -> None:
    """Write ``model`` as one .npz (atomically: a half-written file is never read as a model)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    grid = np.array(sorted(model.validation), float)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    with open(part, "wb") as f:
        np.savez(f, authors=model.authors.astype(str), vocab=model.vocab, idf=model.idf, coef=model.coef,
                 intercept=model.intercept, c=np.array(model.c), grid=grid,
                 validation=np.array([model.validation[c] for c in grid], float).reshape(-1, 2),
                 n_posts=np.array(model.n_posts))
    os.replace(part, path)


def load_exact(path: Path, params: ClassifierParams) -> ExactModel:
    """The model :func:`save_exact` wrote."""
    with np.load(path, allow_pickle=False) as z:
        validation = {float(c): (float(a), float(m)) for c, (a, m) in zip(z["grid"], z["validation"], strict=True)}
        return ExactModel(params, z["authors"].astype(object), z["vocab"], z["idf"], z["coef"], z["intercept"],
                          float(z["c"]), validation, int(z["n_posts"]))


def fit_exact_cached(histories: HistorySource, params: ClassifierParams, held_out: frozenset[str] | None,
                     cache: Path | None, chunk_rows: int = 1_000_000) -> ExactModel:
    """:func:`fit_exact`, kept in ``cache`` (a folder) for a history file: a rerun on the same histories (the
    next protect run, its certificate, ``reidentify``) reads the fitted SVM instead of tuning and fitting it
    again."""
    if cache is None or isinstance(histories, pd.DataFrame):
        return fit_exact(histories, params, held_out, chunk_rows)
    path = cache / f"{exact_model_key(str(histories), params, held_out)}.npz"
    if path.exists():
        try:
            return load_exact(path, params)
        except (OSError, ValueError, KeyError):  # unreadable: fitted again and replaced
            pass
    model = fit_exact(histories, params, held_out, chunk_rows)
    if model.coef.nbytes <= MODEL_CACHE_MAX_BYTES:
        save_exact(model, path)
    return model


def exact_scores(model: ExactModel, synthetic: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(timelines x authors decision values, timeline ids, true authors, posts per timeline)."""
    codes, groups, true_author, n_posts = timeline_codes(synthetic)
    if len(model.authors) == 0:
        return np.zeros((len(groups), 0)), groups, true_author, n_posts
    counts, _ = _exact_counts(_texts(synthetic["text"], model.params.lowercase), model.params.stylo, model.vocab)
    joined = _joined(counts, codes, len(groups), model.idf)
    return np.asarray(joined @ model.coef.T) + model.intercept[None, :], groups, true_author, n_posts


def exact_evidence(model: ExactModel, timelines: pd.DataFrame, top: int = 20,
                   authors: set[str] | None = None) -> pd.DataFrame:
    """Per timeline (group_id, author_id, text), the ``top`` character and word n-grams with the largest
    contribution ``x_f * w_f`` to its true author's decision value, ``x`` the timeline's feature row as
    :func:`exact_scores` scores it (its posts joined) and ``w`` that author's one-vs-rest weights: the features
    that most pull the SVM towards the true author, which a protect move masks. Only contributions > 0 (so
    features the timeline holds, x_f > 0), largest first, ties by the reference vectorizer's feature order, and
    only those :func:`tasks.privacy.evidence.carried_by` finds in the timeline's posts as written: a move cannot
    mask the others (an n-gram under two non-space characters such as ``"I "``, a word bigram scikit-learn's
    tokens join across a comma or a one-letter word). Each is named as the first of the timeline's posts that
    holds it writes it (with ``lowercase`` its capitals kept, so a case-sensitive
    :func:`tasks.protect.moves.mask_evidence` finds it there); a key whose name the analyzer writes otherwise is
    left out. A timeline whose author the model lacks, or outside ``authors`` where given,
    gets no rows. Columns :data:`tasks.privacy.stylometric.EVIDENCE_COLUMNS`."""
    if timelines.empty or top < 1 or len(model.authors) == 0:
        return pd.DataFrame(columns=EVIDENCE_COLUMNS)
    params = model.params
    codes, groups, true_author, _ = timeline_codes(timelines)
    texts = timelines["text"].fillna("").astype(str).tolist()
    counts, _ = _exact_counts(_texts(timelines["text"], params.lowercase), params.stylo, model.vocab)
    joined = _joined(counts, codes, len(groups), model.idf)
    named_authors = pd.Index(true_author).astype(str)
    row = pd.Index(model.authors).get_indexer(named_authors)
    if authors is not None:
        row[~named_authors.isin(list(authors))] = -1
    posts = pd.Series(np.arange(len(codes))).groupby(codes, sort=True).indices
    frame: list[tuple[Any, Any, str, str, float]] = []
    for g, mine in posts.items():
        if row[g] < 0:
            continue
        x = joined[g]
        values = x.data * model.coef[row[g], x.indices]
        cols, values = x.indices[values > 0], values[values > 0]
        held = counts[mine]  # the timeline's posts, in order: the first that holds each key names it
        post = np.repeat(mine, np.diff(held.indptr))
        hit = np.isin(held.indices, cols)
        key_cols, at = np.unique(held.indices[hit], return_index=True)
        first = dict(zip(key_cols.tolist(), post[hit][at].tolist(), strict=True))
        ids = sorted(set(first.values()))
        names = ngram_names([texts[i] for i in ids], ids, params.stylo, as_written=True)
        keys = model.vocab[cols].tolist()
        named = [(*names[first[c]][k], v) for c, k, v in zip(cols.tolist(), keys, values.tolist(), strict=True)
                 if k in names[first[c]]]  # a key the analyzer writes otherwise (a case it maps apart) is left out
        named.sort(key=lambda f: (-f[2], ("\x00" if f[1] == "word" else "") + f[0]))
        own = [texts[i] for i in mine]
        kept: list[tuple[str, str, float]] = []
        for f in named:  # the strongest that a move can find in the text (not a word bigram across a comma)
            if carried_by(own, f[0], f[1]).any():
                kept.append(f)
                if len(kept) == top:
                    break
        frame += [(groups[g], true_author[g], *f) for f in kept]
    return pd.DataFrame(frame, columns=EVIDENCE_COLUMNS)


# -------------------------------------------------------------------------------------- two-stage mode

@dataclass
class TwoStageSide:
    """The two-stage mode's adversary side: the stage-1 stylometric profiles, the re-ranker's bucket IDF,
    the histories, and the posts of every candidate read so far (:meth:`posts_of`: a later attack on other
    timelines, a protect round's, reads only the candidates it has not seen; ~7.5 KB per candidate at 50
    posts of 150 characters)."""

    params: ClassifierParams
    stage1: HistoryProfiles
    idf: np.ndarray  # float32 per bucket
    histories: HistorySource
    held_out: frozenset[str] | None
    n_posts: int
    read: dict[Any, pa.Array] = field(default_factory=dict)  # candidate -> its normalised posts

    def posts_of(self, names: np.ndarray, chunk_rows: int) -> tuple[pa.Array, np.ndarray]:
        """(normalised texts, candidate index) of the first ``posts_per_author`` posts of each of ``names``, grouped
        by candidate, as :func:`candidate_posts` reads them; the candidates read before are not read again."""
        missing = np.asarray([n for n in names if n not in self.read], dtype=object)
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
    """Stage 1's profiles and the re-ranker's IDF (one pass: the document frequencies of a hashed sample of
    about ``df_sample`` posts, as the stylometric sketch estimates them)."""
    stage1 = stage1_profiles(histories, held_out)
    stylo = params.stylo
    df, n_posts, n_sampled, _ = _sketch_df(histories, stylo, chunk_rows, held_out,
                                           df_stride(history_rows(histories), stylo))
    return TwoStageSide(params, stage1, estimated_idf(df, n_sampled, n_posts), histories, held_out, n_posts)


def candidate_posts(histories: HistorySource, held_out: frozenset[str] | None, names: np.ndarray, per_author: int,
                    lowercase: bool, chunk_rows: int = 1_000_000) -> tuple[pa.Array, np.ndarray]:
    """(normalised texts, candidate index) of the first ``per_author`` posts in file order of each author in
    ``names``, in one streaming pass; texts are grouped by candidate."""
    index = {name: i for i, name in enumerate(names)}
    seen = np.zeros(len(names), np.int64)
    texts, owners = [], []
    for batch in author_batches(histories, chunk_rows, held_out):
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


@nb.njit(inline="always")
def _xorshift(state):
    state ^= state << np.uint64(13)
    state ^= state >> np.uint64(7)
    state ^= state << np.uint64(17)
    return state


@nb.njit(inline="always")
def _n_grams(offsets, lo, hi, wlo, whi):
    """(longest text, most n-grams of one text) of a batch."""
    maxlen = 1
    for d in range(offsets.shape[0] - 1):
        maxlen = max(maxlen, offsets[d + 1] - offsets[d])
    return maxlen, maxlen * ((hi - lo + 1) + (whi - wlo + 1 if whi > 0 else 0)) + 1


@nb.njit(nogil=True)
def _post_stripe(offsets, data, lo, hi, wlo, whi, classes, shift, idf, t, n_threads, indptr, idx, val, fill):
    """Texts t, t + n_threads, ...: their distinct buckets' count into ``indptr[d + 1]`` (``fill`` False), or
    their buckets and L2-normalised ``(1 + ln(count)) * idf`` weights into ``idx``, ``val`` at ``indptr[d]``."""
    maxlen, n_grams = _n_grams(offsets, lo, hi, wlo, whi)
    size = 64
    while size < 2 * n_grams:
        size <<= 1
    cps = np.empty(maxlen, np.uint32)
    tok = np.empty(maxlen + 2, np.int64)
    buf = np.empty(n_grams, np.uint64)
    table = np.full(size, -1, np.int64)
    slots = np.empty(n_grams, np.int64)
    buckets = np.empty(n_grams, np.int32)
    counts = np.empty(n_grams, np.int32)
    for d in range(t, offsets.shape[0] - 1, n_threads):
        g = _doc_ngrams(data, offsets[d], offsets[d + 1], lo, hi, wlo, whi, classes, cps, tok, buf)
        k = _distinct_buckets(buf, g, shift, table, slots, buckets, counts)
        if not fill:
            indptr[d + 1] = k
            continue
        at = indptr[d]
        norm2 = 0.0
        for j in range(k):
            w = idf[buckets[j]] * (1.0 + math.log(counts[j]))
            idx[at + j] = buckets[j]
            val[at + j] = w
            norm2 += w * w
        if norm2 > 0.0:
            inv = 1.0 / math.sqrt(norm2)
            for j in range(k):
                val[at + j] *= inv


@nb.njit(parallel=True, cache=True)
def _post_rows(offsets, data, lo, hi, wlo, whi, classes, shift, idf, n_threads):
    """Each text's row over the ``2**hash_bits`` buckets: (indptr, bucket, weight), sublinear TF x IDF, L2."""
    n = offsets.shape[0] - 1
    indptr = np.zeros(n + 1, np.int64)
    idx = np.empty(0, np.int32)
    val = np.empty(0, np.float32)
    for t in nb.prange(n_threads):
        _post_stripe(offsets, data, lo, hi, wlo, whi, classes, shift, idf, t, n_threads, indptr, idx, val, False)
    for d in range(n):
        indptr[d + 1] += indptr[d]
    idx = np.empty(indptr[n], np.int32)
    val = np.empty(indptr[n], np.float32)
    for t in nb.prange(n_threads):
        _post_stripe(offsets, data, lo, hi, wlo, whi, classes, shift, idf, t, n_threads, indptr, idx, val, True)
    return indptr, idx, val


@nb.njit(nogil=True, fastmath=True)
def _rerank_one(t, cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, lo, hi, wlo, whi, classes, shift,
                idf, c, tol, max_iter, seed, remap, used, cps, tok, buf, table, slots, buckets, counts, out):
    """The one-vs-rest L2-loss SVM among timeline ``t``'s candidates (``cand[t]``; candidate ``a``'s posts are
    rows ``cand_ptr[a]:cand_ptr[a + 1]`` of (``indptr``, ``idx``, ``val``): :func:`_post_rows`) trained on
    their posts, and its decision values on the timeline's posts joined (``out[t]``). Features are local ids
    of the buckets the timeline and the posts hold (``remap``, left at -1 again), plus a bias feature of 1
    (liblinear's ``intercept_scaling=1``). Dual coordinate descent (Hsieh et al. 2008; liblinear's
    ``solve_l2r_l1l2_svc`` without shrinking), the candidates' binary problems in lockstep: each epoch visits
    the examples in one seeded shuffle and updates every class still running, whose weights sit side by side
    (a feature's row of the weight matrix is one read for all classes); a class stops when its projected
    gradient's spread over an epoch is at most ``tol``, all after ``max_iter`` epochs."""
    n_loc = 0
    # the timeline: its posts' counts summed per bucket, sublinear TF x IDF, L2
    cap = 1
    for d in range(tl_ptr[t], tl_ptr[t + 1]):
        cap += tl_offsets[d + 1] - tl_offsets[d]
    per = (hi - lo + 1) + (whi - wlo + 1 if whi > 0 else 0)
    tl_count = np.zeros(cap * per, np.float64)
    for d in range(tl_ptr[t], tl_ptr[t + 1]):
        g = _doc_ngrams(tl_data, tl_offsets[d], tl_offsets[d + 1], lo, hi, wlo, whi, classes, cps, tok, buf)
        k = _distinct_buckets(buf, g, shift, table, slots, buckets, counts)
        for j in range(k):
            b = buckets[j]
            if remap[b] < 0:
                remap[b] = n_loc
                used[n_loc] = b
                n_loc += 1
            tl_count[remap[b]] += counts[j]
    n_tl = n_loc
    tl_val = np.zeros(n_tl, np.float64)
    norm2 = 0.0
    for q in range(n_tl):
        w = idf[used[q]] * (1.0 + math.log(tl_count[q]))
        tl_val[q] = w
        norm2 += w * w
    if norm2 > 0.0:
        inv = 1.0 / math.sqrt(norm2)
        for q in range(n_tl):
            tl_val[q] *= inv
    # the examples: the candidates' post rows over local ids
    n_cand = cand.shape[1]
    n_ex = 0
    size = 0
    for j in range(n_cand):
        a = cand[t, j]
        n_ex += cand_ptr[a + 1] - cand_ptr[a]
        size += indptr[cand_ptr[a + 1]] - indptr[cand_ptr[a]]
    ex_ptr = np.zeros(n_ex + 1, np.int64)
    ex_idx = np.empty(size, np.int64)
    ex_val = np.empty(size, np.float32)
    label = np.empty(n_ex, np.int64)
    e = 0
    p = 0
    for j in range(n_cand):
        a = cand[t, j]
        for d in range(cand_ptr[a], cand_ptr[a + 1]):
            for q in range(indptr[d], indptr[d + 1]):
                b = idx[q]
                if remap[b] < 0:
                    remap[b] = n_loc
                    used[n_loc] = b
                    n_loc += 1
                ex_idx[p] = remap[b] * n_cand
                ex_val[p] = val[q]
                p += 1
            label[e] = j
            e += 1
            ex_ptr[e] = p
    for q in range(n_loc):
        remap[used[q]] = -1
    # the candidates' one-vs-rest problems, in lockstep
    diag = 0.5 / c
    qd = np.empty(n_ex, np.float64)
    for i in range(n_ex):
        s = 1.0 + diag  # the bias feature
        for q in range(ex_ptr[i], ex_ptr[i + 1]):
            s += np.float64(ex_val[q]) * ex_val[q]
        qd[i] = s
    w = np.zeros((n_loc + 1) * n_cand, np.float32)  # feature-major: w[f * n_cand + class]
    bias = n_loc * n_cand
    alpha = np.zeros(n_ex * n_cand, np.float64)
    running = np.ones(n_cand, np.bool_)
    grad = np.empty(n_cand, np.float32)
    step = np.empty(n_cand, np.float32)
    pg_max = np.empty(n_cand, np.float64)
    pg_min = np.empty(n_cand, np.float64)
    order = np.arange(n_ex)
    state = _xorshift(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(t + 1))
    n_running = n_cand
    it = 0
    while it < max_iter and n_running > 0:
        for i in range(n_ex - 1, 0, -1):
            state = _xorshift(state)
            r = np.int64(state % np.uint64(i + 1))
            order[i], order[r] = order[r], order[i]
        pg_max[:] = -np.inf
        pg_min[:] = np.inf
        for s_ in range(n_ex):
            i = order[s_]
            for k in range(n_cand):
                grad[k] = w[bias + k]
            for q in range(ex_ptr[i], ex_ptr[i + 1]):
                f = ex_idx[q]
                v = ex_val[q]
                for k in range(n_cand):
                    grad[k] += w[f + k] * v
            moved = False
            for k in range(n_cand):
                step[k] = 0.0
                if not running[k]:
                    continue
                y = 1.0 if label[i] == k else -1.0
                a_old = alpha[i * n_cand + k]
                g = y * grad[k] - 1.0 + a_old * diag
                pg = g if a_old > 0.0 else min(g, 0.0)
                pg_max[k] = max(pg_max[k], pg)
                pg_min[k] = min(pg_min[k], pg)
                if abs(pg) > 1e-12:
                    a_new = max(a_old - g / qd[i], 0.0)
                    alpha[i * n_cand + k] = a_new
                    step[k] = np.float32((a_new - a_old) * y)
                    moved = True
            if moved:
                for q in range(ex_ptr[i], ex_ptr[i + 1]):
                    f = ex_idx[q]
                    v = ex_val[q]
                    for k in range(n_cand):
                        w[f + k] += step[k] * v
                for k in range(n_cand):
                    w[bias + k] += step[k]
        it += 1
        for k in range(n_cand):
            if running[k] and pg_max[k] - pg_min[k] <= tol:
                running[k] = False
                n_running -= 1
    for k in range(n_cand):
        score = w[bias + k]
        for q in range(n_tl):
            score += w[q * n_cand + k] * tl_val[q]
        out[t, k] = score


@nb.njit(parallel=True, cache=True)
def _rerank_all(cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, lo, hi, wlo, whi, classes, shift, idf,
                c, tol, max_iter, seed, n_threads):
    """(timelines x candidates) decision values of :func:`_rerank_one`, timelines striped over threads."""
    n_tl = tl_ptr.shape[0] - 1
    out = np.zeros((n_tl, cand.shape[1]), np.float64)
    maxlen, n_grams = _n_grams(tl_offsets, lo, hi, wlo, whi)
    size = 64
    while size < 2 * n_grams:
        size <<= 1
    for th in nb.prange(n_threads):
        remap = np.full(idf.shape[0], -1, np.int64)
        used = np.empty(idf.shape[0], np.int64)
        cps = np.empty(maxlen, np.uint32)
        tok = np.empty(maxlen + 2, np.int64)
        buf = np.empty(n_grams, np.uint64)
        table = np.full(size, -1, np.int64)
        slots = np.empty(n_grams, np.int64)
        buckets = np.empty(n_grams, np.int32)
        counts = np.empty(n_grams, np.int32)
        for t in range(th, n_tl, n_threads):
            _rerank_one(t, cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, lo, hi, wlo, whi, classes,
                        shift, idf, c, tol, max_iter, seed, remap, used, cps, tok, buf, table, slots, buckets, counts,
                        out)
    return out


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
    top = top_candidates(first, params.top_k)
    scores = first - NOT_RERANKED
    if top.size == 0:
        return scores, groups, true_author, n_posts, {"n_candidates": 0}
    union, cand = np.unique(top, return_inverse=True)
    cand = cand.reshape(top.shape).astype(np.int64)
    texts, owner = side.posts_of(authors[union], chunk_rows)
    cand_ptr = np.searchsorted(owner, np.arange(len(union) + 1)).astype(np.int64)
    codes = timeline_codes(synthetic)[0]
    order = np.argsort(codes, kind="stable")
    tl_texts = _texts(synthetic["text"].to_numpy(object)[order], params.lowercase)
    tl_ptr = np.searchsorted(codes[order], np.arange(len(groups) + 1)).astype(np.int64)
    offsets, data, _ = _views(texts)
    tl_offsets, tl_data, _ = _views(tl_texts)
    stylo = params.stylo
    shift, idf = np.uint64(64 - params.hash_bits), side.idf.astype(np.float64)
    indptr, idx, val = _post_rows(offsets, data, *stylo.ngram_args(), character_classes(), shift, idf, _threads())
    decided = _rerank_all(cand, cand_ptr, indptr, idx, val, tl_ptr, tl_offsets, tl_data, *stylo.ngram_args(),
                          character_classes(), shift, idf, params.c, params.rerank_tol, params.max_iter, params.seed,
                          _threads())
    rows = np.arange(len(groups))[:, None]
    scores[rows, top] = decided - decided.min(axis=1, keepdims=True)
    true_col = pd.Index(authors).get_indexer(pd.Index(true_author))
    in_top = (top == true_col[:, None]).any(axis=1) & (true_col >= 0)
    return scores, groups, true_author, n_posts, {"n_candidates": len(union), "n_candidate_posts": len(owner),
                                                  "top_k_recall": float(in_top.mean()) if len(in_top) else math.nan}


# ------------------------------------------------------------------------------------------- the attack

def fit_classifier(histories: HistorySource, params: ClassifierParams, held_out: frozenset[str] | None,
                   chunk_rows: int = 1_000_000, cache: Path | None = None) -> ExactModel | TwoStageSide:
    """The adversary's side in the mode the histories' size asks for (:meth:`ClassifierParams.resolved_mode`);
    ``cache``: the folder exact models are kept in (:func:`fit_exact_cached`)."""
    if params.resolved_mode(histories) == "exact":
        return fit_exact_cached(histories, params, held_out, cache, chunk_rows)
    return prepare_two_stage(histories, params, held_out, chunk_rows)


def classifier_attack(side: ExactModel | TwoStageSide, synthetic: pd.DataFrame, setting: Setting = "full",
                      chunk_rows: int = 1_000_000) -> ReidResult:
    """Attribute each synthetic timeline (group_id, author_id, text) to the history author the model scores
    highest; ``setting`` is recorded (the side was built for it)."""
    check_timelines(synthetic)
    if isinstance(side, ExactModel):
        scores, groups, true_author, n_posts = exact_scores(side, synthetic)
        authors, n_history, extra = side.authors, side.n_posts, {
            "mode_used": "exact", "c_used": side.c,
            "validation": {f"{c:g}": {"accuracy": a, "mrr": m} for c, (a, m) in side.validation.items()}}
    else:
        scores, groups, true_author, n_posts, figures = two_stage_scores(side, synthetic, chunk_rows)
        authors, n_history, extra = side.stage1.authors, side.n_posts, {"mode_used": "two_stage", "c_used": side.params.c,
                                                                          **figures}
    per, summary = attribute_scores(scores, authors, groups, true_author, n_posts)
    return ReidResult(per_timeline=per, summary={**attack_summary(
        "classifier", setting, summary, side.params, n_history_posts=n_history, n_history_users=len(authors),
        n_synthetic_posts=len(synthetic)), **extra})


def reidentify_classifier(histories: HistorySource, synthetic: pd.DataFrame,
                          params: ClassifierParams = ClassifierParams(), *, setting: Setting = "full",
                          chunk_rows: int = 1_000_000) -> ReidResult:
    """Fit on the histories (without the synthetic posts' sources in ``disjoint``) and attack."""
    side = fit_classifier(histories, params, held_out_doc_ids(synthetic, setting), chunk_rows)
    return classifier_attack(side, synthetic, setting, chunk_rows)
