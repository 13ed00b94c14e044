"""Membership audit of a synthetic set (beyond the article): can an adversary tell which real documents
were in the source of the synthetic data from how close each sits to its closest synthetic record?

The distance-to-closest-record (DCR) attack: for every real candidate document (members = used as the
source, non-members = held out, from the same distribution), the distance to its closest synthetic
record; score = -distance; AUC of members vs non-members (``sklearn.metrics.roc_auc_score``). AUC 0.5 =
the synthetic set does not reveal membership this way; 1 = it is a copy of its source.

Choices:

- Space: cosine distance between TF-IDF character 3-grams (``analyzer='char'``, idf fitted on candidates
  and synthetic texts together), which catches verbatim and near-verbatim copying; ``embed='sbert'``
  uses L2-normalised sentence embeddings of the registry's sentence encoder (meaning-level copying).
- CI: percentile bootstrap, members and non-members resampled separately (each keeps its size), seeded.
- Canaries (:func:`insert_canaries`): unique random-word texts planted in the source; a strategy that
  memorises or copies reproduces them. Exposure = share of canaries whose closest synthetic record is
  within ``canary_distance`` (default 0.3 in the char-3gram space: a verbatim copy is 0, an unrelated
  text ~0.9-1), plus each canary's rank among the non-members (p-value: share of non-members at least as
  close to the synthetic set).
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import numpy as np
import pandas as pd

from tasks.corpus.schema import STATUS_OK
from tasks.errors import InputError
from tasks.models.registry import resolve_model

_CHUNK = 2048  # candidate rows per similarity block (bounds memory to CHUNK x n_synthetic floats)

_SYLLABLES = ("ka", "zu", "mor", "vel", "tri", "po", "lex", "qui", "dra", "sen", "yo", "bra", "fin", "gol",
              "ux", "ne", "rha", "sto", "wim", "jo", "cal", "pe", "tor", "vin", "esh", "li", "mu", "gra")


def _texts(df: pd.DataFrame, what: str) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"{what} must be a DataFrame with a 'text' column, got {type(df).__name__}")
    if "text" not in df.columns:
        raise InputError(f"{what} has no 'text' column (columns: {', '.join(map(str, df.columns))})",
                         column="text")
    rows = df[df["status"] == STATUS_OK] if "status" in df.columns else df
    bad = np.asarray([not isinstance(t, str) for t in rows["text"]], dtype=bool)
    if bad.any():
        raise InputError(f"{what}: text at position {int(np.flatnonzero(bad)[0])} is not a string",
                         column="text")
    out = rows.reset_index(drop=True)
    if "doc_id" not in out.columns:
        out = out.assign(doc_id=[f"{what}-{i}" for i in range(len(out))])
    return out


def _vectors(candidates: list[str], synthetic: list[str], embed: str, spec: Any, cache: Any):
    """(candidate matrix, synthetic matrix), rows L2-normalised (cosine similarity = dot product)."""
    if embed == "tfidf":
        from sklearn.feature_extraction.text import TfidfVectorizer

        vec = TfidfVectorizer(analyzer="char", ngram_range=(3, 3), lowercase=True).fit(candidates + synthetic)
        return vec.transform(candidates), vec.transform(synthetic)  # TfidfVectorizer rows are L2-normed
    # deferred: loads fsspec, pyarrow, sqlite3 only when this runs
    from tasks.models.embeddings import sentence_embeddings

    spec = spec or resolve_model("sentence_encoder")
    both = sentence_embeddings(candidates + synthetic, spec, cache).astype(np.float64)
    both /= np.maximum(np.linalg.norm(both, axis=1, keepdims=True), 1e-12)
    return both[:len(candidates)], both[len(candidates):]


def closest_records(query, reference) -> tuple[np.ndarray, np.ndarray]:
    """(cosine distance to the closest reference row, its index) per query row; rows L2-normalised."""
    dist = np.empty(query.shape[0])
    arg = np.empty(query.shape[0], dtype=np.int64)
    for start in range(0, query.shape[0], _CHUNK):
        sims = query[start:start + _CHUNK] @ reference.T
        sims = sims.toarray() if hasattr(sims, "toarray") else np.asarray(sims)
        arg[start:start + _CHUNK] = sims.argmax(axis=1)
        dist[start:start + _CHUNK] = 1.0 - sims.max(axis=1)
    return np.clip(dist, 0.0, 2.0), arg


def auc_score(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + 0.5 P(tie): the ROC AUC (Mann-Whitney U), in
    O(n log n); equals ``sklearn.metrics.roc_auc_score``."""
    neg_sorted = np.sort(neg)
    below = np.searchsorted(neg_sorted, pos, side="left")
    ties = np.searchsorted(neg_sorted, pos, side="right") - below
    return float((below.sum() + 0.5 * ties.sum()) / (len(pos) * len(neg)))


def bootstrap_auc(pos: np.ndarray, neg: np.ndarray, *, n_bootstrap: int, seed: int,
                  level: float = 0.95) -> tuple[float, float, np.ndarray]:
    """Percentile bootstrap CI of the AUC; positives and negatives resampled separately (stratified)."""
    rng = np.random.default_rng(seed)
    stats = np.empty(n_bootstrap)
    for b in range(n_bootstrap):
        stats[b] = auc_score(pos[rng.integers(0, len(pos), len(pos))], neg[rng.integers(0, len(neg), len(neg))])
    alpha = (1 - level) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return float(low), float(high), stats


def membership_audit(members: pd.DataFrame, non_members: pd.DataFrame, synthetic: pd.DataFrame, *,
                     embed: Literal["tfidf", "sbert"] = "tfidf", n_bootstrap: int = 1000, seed: int = 0,
                     level: float = 0.95, canary_ids: list[str] | None = None, canary_distance: float = 0.3,
                     spec: Any = None, cache: Any = None) -> dict[str, Any]:
    """DCR membership audit (see the module docstring).

    Returns a dict: auc, ci_low, ci_high, n_members, n_non_members, n_synthetic, embed, level,
    n_bootstrap, seed, mean_distance_members, mean_distance_non_members, tpr_at_fpr_01 (share of members
    flagged by the score threshold that flags at most 1% of non-members), reason (None, or why auc is NaN),
    ``distances`` (DataFrame: doc_id, member, distance, closest_synthetic_doc_id), and with
    ``canary_ids``: n_canaries, canary_exposure, canary_median_distance, ``canaries`` (DataFrame: doc_id,
    distance, closest_synthetic_doc_id, p_value, exposed). Canaries are scored apart from the member
    AUC (they are not drawn from the non-members' distribution)."""
    if embed not in ("tfidf", "sbert"):
        raise ValueError(f"embed must be 'tfidf' or 'sbert', got {embed!r}")
    if not isinstance(n_bootstrap, int) or n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be a positive integer, got {n_bootstrap!r}")
    mem, non, syn = _texts(members, "members"), _texts(non_members, "non_members"), _texts(synthetic, "synthetic")
    if non.empty:
        raise InputError("no non-members: the audit compares members with held-out real documents "
                         "from the same distribution; pass a non-empty non_members table")
    canaries = set(map(str, canary_ids or []))
    is_canary = mem["doc_id"].astype(str).isin(canaries).to_numpy()
    if canaries and not is_canary.any():
        raise InputError("none of the canary_ids is among the members (insert the canaries into the source "
                         "corpus, then pass them as members)", column="doc_id")
    audited = mem[~is_canary]
    if audited.empty:
        raise InputError("no members: pass the real documents that were in the source of the synthetic set")
    result: dict[str, Any] = {
        "auc": float("nan"), "ci_low": float("nan"), "ci_high": float("nan"),
        "n_members": len(audited), "n_non_members": len(non), "n_synthetic": len(syn), "embed": embed,
        "level": level, "n_bootstrap": n_bootstrap, "seed": seed, "mean_distance_members": float("nan"),
        "mean_distance_non_members": float("nan"), "tpr_at_fpr_01": float("nan"), "reason": None,
    }
    if syn.empty:
        result["reason"] = "synthetic set is empty (no rows with status ok)"
        result["distances"] = pd.DataFrame(columns=["doc_id", "member", "distance", "closest_synthetic_doc_id"])
        return result
    candidates = pd.concat([mem.assign(member=True), non.assign(member=False)], ignore_index=True)
    q, s = _vectors(candidates["text"].tolist(), syn["text"].tolist(), embed, spec, cache)
    dist, arg = closest_records(q, s)
    table = pd.DataFrame({"doc_id": candidates["doc_id"].astype(str).to_numpy(),
                          "member": candidates["member"].to_numpy(), "distance": dist,
                          "closest_synthetic_doc_id": syn["doc_id"].astype(str).to_numpy()[arg]})
    cand_canary = np.concatenate([is_canary, np.zeros(len(non), dtype=bool)])
    d_mem, d_non = dist[:len(mem)][~is_canary], dist[len(mem):]
    pos, neg = -d_mem, -d_non
    low, high, _ = bootstrap_auc(pos, neg, n_bootstrap=n_bootstrap, seed=seed, level=level)
    threshold = np.quantile(neg, 0.99, method="higher")  # flags at most ~1% of non-members (strictly above)
    result.update(auc=auc_score(pos, neg), ci_low=low, ci_high=high,
                  mean_distance_members=float(d_mem.mean()), mean_distance_non_members=float(d_non.mean()),
                  tpr_at_fpr_01=float((pos > threshold).mean()), distances=table[~cand_canary].reset_index(drop=True))
    if canaries:
        c = table[cand_canary].reset_index(drop=True)
        c["p_value"] = [(d_non <= d).mean() for d in c["distance"]]
        c["exposed"] = c["distance"] <= canary_distance
        result.update(n_canaries=len(c), canary_distance=canary_distance,
                      canary_exposure=float(c["exposed"].mean()),
                      canary_median_distance=float(c["distance"].median()), canaries=c)
    return result


def insert_canaries(corpus: pd.DataFrame, n: int, seed: int = 0, *, split: str = "train",
                    words: int = 12) -> tuple[pd.DataFrame, list[str]]:
    """(corpus with ``n`` canary documents appended, their doc_ids).

    A canary is a unique random text (``words`` pronounceable nonsense words and two number groups, e.g.
    "my code is vel-mor 4821 ..."), which no honest rewrite of other documents produces; it goes to
    ``split`` (train: the part that is rewritten), under its own author and group. Label and attr_*
    columns are copied from a random real row, so label distributions barely move. Deterministic given
    ``seed``."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if "doc_id" not in corpus.columns or "text" not in corpus.columns:
        raise InputError("corpus needs doc_id and text columns to receive canaries")
    rng = np.random.default_rng(seed)
    existing = set(corpus["doc_id"].astype(str))
    rows, ids = [], []
    for i in range(n):
        doc_id = f"canary-{seed}-{i}"
        while doc_id in existing:
            doc_id += "x"
        body = " ".join("".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 4)))) for _ in range(words))
        text = f"my code is {body} {int(rng.integers(1000, 10000))}-{int(rng.integers(1000, 10000))}"
        row: dict[str, Any] = {c: None for c in corpus.columns}
        if len(corpus):
            donor = corpus.iloc[int(rng.integers(0, len(corpus)))]
            for col in corpus.columns:
                if col == "label" or col.startswith("attr_"):
                    row[col] = donor[col]
        row.update(doc_id=doc_id, text=text)
        for col, value in (("author_id", f"canary-author-{seed}-{i}"), ("group_id", f"canary-group-{seed}-{i}"),
                           ("position", 0), ("split", split)):
            if col in corpus.columns:
                row[col] = value
        rows.append(row)
        ids.append(doc_id)
    added = pd.DataFrame(rows, columns=corpus.columns)
    out = pd.concat([corpus, added], ignore_index=True) if len(corpus) else added
    for col in corpus.columns:  # keep the corpus's dtypes (string, Int64) where the values allow
        with contextlib.suppress(TypeError, ValueError):
            out[col] = out[col].astype(corpus[col].dtype)
    return out, ids
