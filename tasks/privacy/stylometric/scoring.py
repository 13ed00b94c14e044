"""The stylometric attack's scoring: each synthetic timeline's profile under the histories' vocabulary and
IDF, the cosine to every author's profile, and the attribution (:func:`stylometric_attack`,
:func:`reidentify_stylometric`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp

from tasks.privacy.attribution import (
    Setting,
    attack_summary,
    attribute_scores,
    check_timelines,
    held_out_doc_ids,
    timeline_codes,
)
from tasks.privacy.reidentify import HistorySource, ReidResult
from tasks.privacy.stylometric.features import (
    _exact_counts,
    _exact_tfidf,
    _l2_rows,
    _mean_rows,
    _sublinear_rows,
    normalize_texts,
)
from tasks.privacy.stylometric.kernels import _bucket_table, _sketch_add, _views
from tasks.privacy.stylometric.params import StyloParams
from tasks.privacy.stylometric.profiles import HistoryProfiles, profile_histories


def timeline_profiles(profiles: HistoryProfiles, synthetic: pd.DataFrame) -> tuple[Any, np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
    """(L2-normalised timeline profiles, timeline ids, true authors, posts per timeline) of the synthetic
    side under the histories' vocabulary and IDF."""
    check_timelines(synthetic)
    codes, groups, true_author, n_posts = timeline_codes(synthetic)
    texts = normalize_texts(pa.array(synthetic["text"].astype(object).where(synthetic["text"].notna(), None).tolist(),
                                     pa.large_string()), profiles.params.lowercase)
    params = profiles.params
    if profiles.mode in ("text", "exact"):
        if profiles.vocab is None or len(profiles.vocab) == 0:
            return sp.csr_matrix((len(groups), 0)), groups, true_author, n_posts
        if profiles.mode == "text":  # the timeline's posts as one text
            counts, _ = _exact_counts(texts, params, profiles.vocab)
            summed = sp.csr_matrix((np.ones(len(codes)), (codes, np.arange(len(codes)))),
                                   shape=(len(groups), len(codes))) @ counts
            return _sublinear_rows(summed.tocsr(), profiles.idf), groups, true_author, n_posts
        rows, _, _ = _exact_tfidf(texts, params, profiles.vocab, profiles.idf)
        return _l2_rows(_mean_rows(rows, codes, len(groups))).tocsr(), groups, true_author, n_posts
    sketch = np.zeros((len(groups), params.width), np.float32)
    offsets, data, valid = _views(texts)
    if len(texts):
        _sketch_add(offsets, data, valid, codes, params, _bucket_table(profiles.idf, params.width, params.seed),
                    sketch, True)
    counts = np.maximum(n_posts, 1).astype(np.float32)
    return _l2_rows(sketch / counts[:, None]), groups, true_author, n_posts


def similarity(timelines: Any, profiles: HistoryProfiles) -> np.ndarray:
    """Dense (timelines x authors) cosine of unit-norm profiles."""
    if profiles.profiles.shape[0] == 0:
        return np.zeros((timelines.shape[0], 0))
    out = timelines @ profiles.profiles.T
    return np.asarray(out.toarray() if sp.issparse(out) else out, dtype=np.float64)


def stylometric_attack(profiles: HistoryProfiles, synthetic: pd.DataFrame, setting: Setting = "full") -> ReidResult:
    """Attribute each synthetic timeline (group_id, true author_id, text) to the history author with the
    most similar profile; ``setting`` is recorded (the profiles were built for it)."""
    timelines, groups, true_author, n_posts = timeline_profiles(profiles, synthetic)
    per, summary = attribute_scores(similarity(timelines, profiles), profiles.authors, groups, true_author, n_posts)
    return ReidResult(per_timeline=per, summary={**attack_summary(
        "stylometric", setting, summary, profiles.params, n_history_posts=profiles.n_posts,
        n_history_users=len(profiles.authors), n_synthetic_posts=len(synthetic)), "mode_used": profiles.mode})


def reidentify_stylometric(histories: HistorySource, synthetic: pd.DataFrame, params: StyloParams = StyloParams(), *,
                           setting: Setting = "full", chunk_rows: int = 1_000_000) -> ReidResult:
    """Profile the histories (without the synthetic posts' sources in ``disjoint``) and attack."""
    profiles = profile_histories(histories, params, chunk_rows=chunk_rows,
                                 held_out=held_out_doc_ids(synthetic, setting))
    return stylometric_attack(profiles, synthetic, setting)
