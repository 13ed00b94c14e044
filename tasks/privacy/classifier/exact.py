"""The classifier attack's exact mode: scikit-learn's one-vs-rest ``LinearSVC`` on the exact features of
every history post, C tuned on a validation split (:func:`fit_exact`; the grid's fits side by side, a process
each), its decision values on joined timelines (:func:`exact_scores`) and the evidence its weights give
(:func:`exact_evidence`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp

from tasks.parallel import fit_process_count, map_in_processes
from tasks.privacy.attribution import timeline_codes
from tasks.privacy.classifier.params import ClassifierParams
from tasks.privacy.evidence import carried_by
from tasks.privacy.reidentify import HistorySource
from tasks.privacy.stylometric.evidence import EVIDENCE_COLUMNS, ngram_names
from tasks.privacy.stylometric.features import _exact_counts, _smooth_idf, _sublinear_rows, normalize_texts
from tasks.privacy.stylometric.profiles import author_batches


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


def validation_scores(x: sp.csr_matrix, y: np.ndarray, val: sp.csr_matrix, c: float, params: ClassifierParams
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(classes, decision values on ``val``) of :func:`linear_svc` fitted with C = ``c``: one value of the C grid,
    which :func:`fit_exact` fits in a process of its own (liblinear's random numbers are one global stream, so
    two fits never share a process's threads)."""
    model = linear_svc(x, y, c, params)
    return model.classes_, decision(model, val)


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
            fit_on = (x[np.flatnonzero(~held)], y[~held], val)
            grid = sorted(set(params.c_grid), reverse=True)  # the largest C iterates longest: it starts first
            fitted = dict(zip(grid, map_in_processes(validation_scores, [(*fit_on, value, params) for value in grid],
                                                     fit_process_count(len(grid))), strict=True))
            for value in params.c_grid:
                classes, scores = fitted[value]
                true = pd.Index(classes).get_indexer(authors[names])
                rank = (scores >= scores[np.arange(len(true)), true][:, None]).sum(axis=1)
                validation[value] = (float(np.mean(rank == 1)), float(np.mean(1.0 / rank)))
            c = max(params.c_grid, key=lambda v: (*validation[v], -v))
    model = linear_svc(x, y, c, params)
    coef = model.coef_ if len(model.classes_) > 2 else np.vstack([-model.coef_[0], model.coef_[0]])
    intercept = model.intercept_ if len(model.classes_) > 2 else np.array([-model.intercept_[0], model.intercept_[0]])
    return ExactModel(params, np.asarray(model.classes_, dtype=object), vocab, idf, coef, intercept, c, validation,
                      len(y))


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
    gets no rows. Columns :data:`tasks.privacy.stylometric.evidence.EVIDENCE_COLUMNS`."""
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
