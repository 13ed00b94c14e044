"""The attribution output every re-identification attack shares, and the adversary settings.

An attack scores every (synthetic timeline, history author) pair; this module turns the scores into
one row per timeline (predicted author, rank of the true author) and one summary (accuracy@1,
accuracy@10, mean reciprocal rank of the true author, chance), so MinHash votes, stylometric cosines
and embedding cosines are read the same way.

Ranks are pessimistic: the true author's rank is the number of authors scoring at least as much as it
(ties count against the attack). A true author who is the unique top scorer has rank 1; one tied with
others does not, so a tie is a miss, as the MinHash voting rule has always said. A timeline whose true
author has no history in the adversary's data (possible in the ``disjoint`` setting, or with foreign
histories) has no rank: it is a miss at every cut-off, contributes 0 to the MRR and is counted in
``n_no_history``.

Adversary settings (seed 000 §5.3: the adversary holds "users' digital traces left before and after
the subset of data used for synthetic data generation"):

- ``full``: the histories include the released originals (the article's setting);
- ``disjoint``: the histories exclude every document that was rewritten (matched by ``doc_id``); for a
  corpus used as its own history this holds out each timeline's rewritten posts from the adversary's copy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Literal

import numpy as np
import pandas as pd

from tasks.errors import InputError
from tasks.intervals import N_RESAMPLES, bootstrap, residual_risk, wilson

Setting = Literal["full", "disjoint"]
SETTINGS: tuple[Setting, ...] = ("full", "disjoint")
TOP_K = 10
NO_HISTORY_REASON = "timelines whose author has no history in this setting count as misses"


def check_setting(setting: str) -> Setting:
    """The setting, or ValueError naming the allowed ones."""
    if setting not in SETTINGS:
        raise ValueError(f"adversary setting must be one of {', '.join(SETTINGS)}; got {setting!r}")
    return setting  # type: ignore[return-value]


def ranks_from_scores(scores: np.ndarray, true_col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pessimistic rank of the true author (nan where ``true_col`` < 0), best column) per row of a
    dense (timelines x authors) score matrix; the best column is the smallest index among the tied top."""
    n_rows = scores.shape[0]
    rank = np.full(n_rows, np.nan)
    best = np.full(n_rows, -1, np.int64)
    if scores.size == 0:
        return rank, best
    best = np.argmax(scores, axis=1).astype(np.int64)
    has = true_col >= 0
    if has.any():
        rows = np.flatnonzero(has)
        true_score = scores[rows, true_col[rows]]
        rank[rows] = (scores[rows] >= true_score[:, None]).sum(axis=1)
    return rank, best


def attribution_table(groups: Sequence[Any], true_author: Sequence[Any], predicted: Sequence[Any],
                      rank: np.ndarray, score_true: np.ndarray, score_top: np.ndarray,
                      n_posts: np.ndarray, evidence: np.ndarray | None = None) -> pd.DataFrame:
    """One row per timeline: group_id, author_id, n_posts, predicted_author, rank, reciprocal_rank,
    correct (rank 1), in_top10, in_history, score_true, score_top. ``evidence`` False marks timelines
    with no evidence at all (e.g. no MinHash candidate): a miss even against a single history author."""
    rank = np.asarray(rank, dtype=float)
    in_history = ~np.isnan(rank)
    recip = np.where(in_history, 1.0 / np.where(in_history, rank, 1.0), 0.0)
    hit = in_history & (rank == 1)
    if evidence is not None:
        hit &= np.asarray(evidence, dtype=bool)
    return pd.DataFrame({
        "group_id": np.asarray(groups, dtype=object), "author_id": np.asarray(true_author, dtype=object),
        "n_posts": np.asarray(n_posts, dtype=np.int64), "predicted_author": np.asarray(predicted, dtype=object),
        "rank": rank, "reciprocal_rank": np.where(hit | (rank > 1), recip, 0.0) if evidence is not None else recip,
        "correct": hit,
        "in_top10": in_history & (rank <= TOP_K), "in_history": in_history,
        "score_true": np.asarray(score_true, dtype=float), "score_top": np.asarray(score_top, dtype=float),
    })


def chance(n_authors: int) -> dict[str, float]:
    """What a random guess scores against ``n_authors`` candidates: accuracy@1 = 1/N, accuracy@10 =
    min(10, N)/N and MRR = H_N / N (the mean of 1/rank over a uniform rank)."""
    if n_authors <= 0:
        return {"chance": math.nan, "chance_at_10": math.nan, "chance_mrr": math.nan}
    harmonic = float(np.sum(1.0 / np.arange(1, n_authors + 1)))
    return {"chance": 1.0 / n_authors, "chance_at_10": min(TOP_K, n_authors) / n_authors,
            "chance_mrr": harmonic / n_authors}


def attribution_summary(per: pd.DataFrame, n_authors: int, *, n_resamples: int = N_RESAMPLES,
                        seed: int = 0) -> dict[str, Any]:
    """accuracy_at_1, accuracy_at_10, mrr over all timelines (misses included) with their 95% intervals
    (``<figure>_ci_low``/``_ci_high``: Wilson for the accuracies, a seeded percentile bootstrap over timelines
    with ``n_resamples`` for the MRR), the chance rates, the residual risk of accuracy@1 over chance among
    the timelines whose author the history holds (``risk``, ``risk_ci_low``, ``risk_ci_high``: Anonymeter's,
    chance being the control: see :data:`CONTROL`), counts, and a ``reason`` when some timelines have no history or nothing can be
    attributed."""
    n = len(per)
    n_correct, n_top10 = int(per["correct"].sum()), int(per["in_top10"].sum())
    rates = chance(n_authors)
    trials = n if n_authors else 0  # nothing to attribute to: no trial, no interval
    mrr_ci = bootstrap(per["reciprocal_rank"].to_numpy(float)[:trials], n_resamples=n_resamples, seed=seed)
    # the risk to the users the adversary knows: a timeline whose author has no history is a miss by
    # construction, and counting it would dilute the others' risk below its chance control
    attackable = int(per["in_history"].sum()) if n_authors else 0
    risk = residual_risk(n_correct, attackable, control_rate=rates["chance"])
    out: dict[str, Any] = {
        # no history author: nothing could be attributed, so the attack measured nothing (not "0 re-identified")
        "accuracy_at_1": float(per["correct"].mean()) if trials else math.nan,
        "accuracy_at_10": float(per["in_top10"].mean()) if trials else math.nan,
        "mrr": float(per["reciprocal_rank"].mean()) if trials else math.nan,
        **_interval("accuracy_at_1", wilson(n_correct, trials)),
        **_interval("accuracy_at_10", wilson(n_top10, trials)),
        **_interval("mrr", mrr_ci),
        "risk": risk.value, "risk_ci_low": risk.ci_low, "risk_ci_high": risk.ci_high,
        "n_timelines": int(n), "n_correct": n_correct, "n_top10": n_top10,
        "n_no_history": int((~per["in_history"]).sum()), "n_authors": int(n_authors),
        **rates,
    }
    if n_authors == 0:
        out["reason"] = "history is empty: no author can be attributed"
    elif n == 0:
        out["reason"] = "no synthetic timelines"
    elif out["n_no_history"]:
        out["reason"] = f"{out['n_no_history']} {NO_HISTORY_REASON}"
    return out


def _interval(name: str, bounds: tuple[float, float]) -> dict[str, float]:
    return {f"{name}_ci_low": bounds[0], f"{name}_ci_high": bounds[1]}


#: Why the control of a re-identification attack is chance: a timeline whose true author has no history is a
#: miss by construction (it has no rank), so an attack run on such timelines succeeds 0 times by definition and
#: measures nothing; the rate of an attack that knows nothing about the text, 1/N, is the control instead.
CONTROL = "chance (1/N history authors): what the attack scores when the text says nothing about its author"


def attribute_scores(scores: np.ndarray, authors: np.ndarray, groups: Sequence[Any], true_author: Sequence[Any],
                     n_posts: np.ndarray) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per-timeline rows and summary of a dense (timelines x authors) score matrix; ``authors`` names
    the columns."""
    lookup = pd.Index(np.asarray(authors, dtype=object))
    true_col = lookup.get_indexer(pd.Index(np.asarray(true_author, dtype=object))).astype(np.int64)
    rank, best = ranks_from_scores(scores, true_col)
    rows = np.arange(scores.shape[0])
    has = true_col >= 0
    score_true = np.full(len(rows), np.nan)
    score_top = np.full(len(rows), np.nan)
    predicted = np.full(len(rows), None, dtype=object)
    if scores.size:
        score_true[has] = scores[rows[has], true_col[has]]
        score_top = scores[rows, best].astype(float)
        predicted = np.asarray(authors, dtype=object)[best]
    per = attribution_table(groups, true_author, predicted, rank, score_true, score_top, n_posts)
    return per, attribution_summary(per, len(authors))


def attack_summary(attack: str, setting: Setting, summary: dict[str, Any], params: Any, *, n_history_posts: int,
                   n_history_users: int, n_synthetic_posts: int) -> dict[str, Any]:
    """The summary of an attack that profiles the histories: :func:`attribution_summary`'s figures, the
    attack, the setting, the counts, its parameters' signature and each parameter as ``param_<name>``."""
    return {"attack": attack, "adversary": setting, **summary, "accuracy": summary["accuracy_at_1"],
            "n_history_posts": n_history_posts, "n_history_users": n_history_users,
            "n_synthetic_posts": n_synthetic_posts, "signature": params.signature,
            **{f"param_{k}": v for k, v in asdict(params).items()}}


def check_timelines(synthetic: pd.DataFrame) -> None:
    """InputError unless the synthetic table has group_id, author_id and text and one author per timeline."""
    for col in ("group_id", "author_id", "text"):
        if col not in synthetic.columns:
            raise InputError("synthetic data lacks required column", column=col)
    per_group = synthetic.groupby("group_id", sort=False, dropna=False)["author_id"].nunique(dropna=False)
    if (per_group > 1).any():
        raise InputError(f"timeline '{per_group.index[(per_group > 1).argmax()]}' has several true authors",
                         column="author_id")


def timeline_codes(synthetic: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(timeline code per post, timeline ids, true author per timeline, posts per timeline) of a
    synthetic table with group_id and author_id (one author per timeline, checked by the callers)."""
    codes, groups = pd.factorize(synthetic["group_id"], sort=False)
    n = len(groups)
    first = pd.Series(synthetic["author_id"].to_numpy(dtype=object)).groupby(codes).first().reindex(range(n))
    return codes.astype(np.int64), np.asarray(groups, dtype=object), first.to_numpy(dtype=object), \
        np.bincount(codes, minlength=n)


def held_out_doc_ids(synthetic: pd.DataFrame, setting: Setting) -> frozenset[str] | None:
    """The history documents the adversary lacks: none in ``full``, the rewritten ones in ``disjoint``."""
    if check_setting(setting) == "full":
        return None
    if "doc_id" not in synthetic.columns:
        raise InputError("the disjoint setting needs the source doc_id of every synthetic post", column="doc_id")
    return frozenset(synthetic["doc_id"].dropna().astype(str))
