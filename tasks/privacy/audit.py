"""The privacy audit of one strategy's synthetic table, as the flow and the report use it.

- Attribute profiling (seed 000 §5.1.2): for every ``attr_*`` column and every configured model, a
  classifier trained on the real train split is scored on the real test split and on the strategy's
  synthetic version of it.
- Every figure carries its 95% interval (:mod:`tasks.intervals`); profiling also its advantage over the
  majority class (the control: a constant guess), as a residual risk.
- Membership (beyond the article): members are the train-split documents (their synthetic versions are
  released), non-members the test-split documents (theirs are not); distance to the closest released
  synthetic record gives the AUC.

Every number also goes into a long ``privacy`` summary of the declared score schema
(:data:`tasks.scores.SCORES`: strategy, variant, level, metric, attribute, model, attack, ..., value, ...,
signature, reason), the same table as the intrinsic metrics, so the report lays them out the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tasks.corpus.schema import STATUS_OK, attr_columns
from tasks.errors import InputError
from tasks.intervals import N_RESAMPLES, Residual, wilson
from tasks.privacy.membership import membership_audit
from tasks.privacy.profiling import profile_attribute
from tasks.scores import ORIGINAL, SCORES, score_frame, variant_epsilons
from tasks.signatures import make_signature


@dataclass(frozen=True)
class PrivacyOptions:
    """Which attacks run and how."""

    attributes: tuple[str, ...] | None = None  # attribute names without attr_; default: every attr_* column
    profiling_models: tuple[str, ...] = ("linear",)
    profiling_level: str = "post"  # post | author
    membership: bool = True
    membership_embed: str = "tfidf"
    n_bootstrap: int = N_RESAMPLES  # resamples of every bootstrap interval (membership AUC, profiling macro-F1)
    seed: int = 0


@dataclass
class PrivacyTables:
    """Profiling scores/evidence, membership, and the long summary."""

    profiling: pd.DataFrame
    top_words: pd.DataFrame
    word_bins: pd.DataFrame
    membership: pd.DataFrame
    summary: pd.DataFrame


def attributes_of(corpus: pd.DataFrame, options: PrivacyOptions) -> list[str]:
    """Attribute names to attack: the configured ones, or every attr_* column with at least two values."""
    if options.attributes is not None:
        return list(options.attributes)
    names = []
    for col in attr_columns(corpus):
        if corpus[col].dropna().nunique() >= 2:
            names.append(col.removeprefix("attr_"))
    return names


def _row(strategy: str, variant: str, metric: str, value: float, n: int, signature: str,
         reason: str | None = None, n_failed: int = 0, ci: tuple[float, float] = (np.nan, np.nan),
         **structure: object) -> dict:
    """One privacy score row with its 95% interval ``ci`` (nan where none applies: a chance rate is exact);
    ``structure`` fills the schema's structure columns (attribute, model, attack, ...)."""
    return {"strategy": strategy, "variant": variant, "level": "privacy", "metric": metric, **structure,
            "value": value, "std": np.nan, "median": np.nan, "n": n, "n_failed": n_failed, "ci_low": ci[0],
            "ci_high": ci[1], "signature": signature, "reason": reason if reason else None}


#: Said instead of a risk when an attack does no better than its control (never "0% risk").
NOTHING_MEASURABLE = "the attack found nothing measurable: it is not above its control"


def _proportion(k: float, n: int) -> tuple[float, float]:
    """The Wilson interval of ``k`` of ``n`` (``k`` may come from a rate times n: rounded)."""
    return wilson(round(k), n) if n and np.isfinite(k) else (np.nan, np.nan)


def _risk_row(strategy: str, variant: str, metric: str, risk: Residual, n: int, signature: str,
              control: str, why: str | None = None, **structure: object) -> dict:
    """A residual-risk row: the risk over ``control`` with its interval, or nan with :data:`NOTHING_MEASURABLE`
    (or with ``why`` the figure itself is missing, where it is)."""
    if not np.isfinite(risk.value):
        return _row(strategy, variant, metric, np.nan, n, signature,
                    why or f"no residual risk: no trials or {control} is 1", **structure)
    if not risk.measurable:
        return _row(strategy, variant, metric, np.nan, n, signature, NOTHING_MEASURABLE, ci=(risk.ci_low, risk.ci_high),
                    **structure)
    return _row(strategy, variant, metric, risk.value, n, signature, ci=(risk.ci_low, risk.ci_high), **structure)


def audit_strategy(corpus: pd.DataFrame, synthetic: pd.DataFrame, label: str, options: PrivacyOptions) -> PrivacyTables:
    """Profiling and membership for one strategy (all its variants); the ``original`` rows are the
    attack on the real text, the baseline the article reports first."""
    profiling, top_words, word_bins, summary = [], [], [], []
    variants = synthetic["variant"].dropna().unique().tolist() if "variant" in synthetic.columns else []
    single_variant = str(variants[0]) if len(variants) == 1 else ""
    for attr in attributes_of(corpus, options):
        for model in options.profiling_models:
            try:
                result = profile_attribute(corpus, attr, synthetic={label: synthetic}, model=model,
                                           seed=options.seed, level=options.profiling_level,  # type: ignore[arg-type]
                                           n_resamples=options.n_bootstrap)
            except (ValueError, InputError) as exc:  # e.g. no labelled test documents: recorded, not fatal
                summary.append(_row(label, single_variant, "profiling_accuracy", np.nan, 0, "",
                                    reason=str(exc).splitlines()[0], attribute=attr, model=model))
                continue
            scores = result.scores.assign(attribute=attr, model=model)
            profiling.append(scores)
            top_words.append(result.top_words.assign(attribute=attr, model=model))
            word_bins.append(result.word_bins.assign(attribute=attr, model=model))
            for row in scores.itertuples(index=False):
                name = str(row.set)
                strategy, variant = (ORIGINAL, "") if name == ORIGINAL else _set_name(name, label, single_variant)
                n_units, about = int(row.n_units), {"attribute": attr, "model": model}
                summary.append(_row(strategy, variant, "profiling_accuracy", float(row.accuracy), n_units,
                                    result.signature, ci=(row.accuracy_ci_low, row.accuracy_ci_high), **about))
                summary.append(_row(strategy, variant, "profiling_macro_f1", float(row.macro_f1), n_units,
                                    result.signature, ci=(row.macro_f1_ci_low, row.macro_f1_ci_high), **about))
                summary.append(_risk_row(strategy, variant, "profiling_advantage",
                                         Residual(row.advantage, row.advantage_ci_low, row.advantage_ci_high),
                                         n_units, result.signature, "the majority class", **about))
                if strategy != ORIGINAL:
                    summary.append(_row(strategy, variant, "profiling_reduction", float(row.reduction),
                                        int(row.n_units), result.signature, attribute=attr, model=model))
            chance = float(scores["chance"].iloc[0])
            summary.append(_row("chance", "", "profiling_accuracy", chance, int(scores["n_units"].iloc[0]),
                                result.signature, reason=None if np.isfinite(chance) else "no test units",
                                attribute=attr, model=model))

    membership = []
    if options.membership:
        members = corpus[corpus["split"] == "train"]
        non_members = corpus[corpus["split"] == "test"]
        for variant, part in synthetic.groupby("variant", sort=True):
            released = part[(part["status"] == STATUS_OK) & part["doc_id"].isin(set(members["doc_id"]))]
            signature = make_signature("membership_auc", attack="dcr", embed=options.membership_embed,
                                       members="train", non_members="test", bootstrap=options.n_bootstrap,
                                       seed=options.seed)
            if members.empty or non_members.empty:
                summary.append(_row(label, str(variant), "membership_auc", np.nan, 0, signature,
                                    reason="needs documents in both the train and the test split"))
                continue
            audit = membership_audit(members, non_members, released, embed=options.membership_embed,  # type: ignore[arg-type]
                                     n_bootstrap=options.n_bootstrap, seed=options.seed)
            membership.append({"strategy": label, "variant": str(variant),
                               **{k: v for k, v in audit.items() if not isinstance(v, pd.DataFrame)}})
            summary.append(_row(label, str(variant), "membership_auc", float(audit["auc"]),
                                int(audit["n_members"] + audit["n_non_members"]), signature, reason=audit["reason"],
                                ci=(float(audit["ci_low"]), float(audit["ci_high"]))))

    def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    epsilons = variant_epsilons(synthetic)
    for row in summary:
        row["epsilon"] = epsilons.get(str(row["variant"]), np.nan) if row["strategy"] == label else np.nan
    table = summary_frame(summary)
    return PrivacyTables(profiling=concat(profiling), top_words=concat(top_words), word_bins=concat(word_bins),
                         membership=pd.DataFrame(membership), summary=table)


def _set_name(name: str, label: str, single_variant: str) -> tuple[str, str]:
    """(strategy, variant) of a profiling set name: ``label`` (one variant) or ``label/variant``."""
    if "/" in name:
        strategy, variant = name.split("/", 1)
        return strategy, variant
    return label, single_variant


def attack_timelines(synthetic: pd.DataFrame, timeline_posts: int | None = None) -> pd.DataFrame:
    """The synthetic side of re-identification: ok rows with a known author, grouped into timelines.

    A timeline is one author's posts within one group (a user's timeline, or a speaker's turns in one
    conversation), or all of the author's posts when the corpus has no groups. With ``timeline_posts`` each
    is split, in row order, into runs of at most that many consecutive posts (``<timeline>#<run>``), each a
    trial of its own."""
    rows = synthetic[(synthetic["status"] == STATUS_OK) & synthetic["author_id"].notna()]
    group = rows["group_id"].astype("string") if "group_id" in rows.columns else None
    author = rows["author_id"].astype("string")
    timeline = author if group is None or group.isna().all() else author + "/" + group.fillna("")
    if timeline_posts is not None:
        if timeline_posts < 1:
            raise ValueError(f"timeline_posts must be a positive integer, got {timeline_posts!r}")
        run = timeline.groupby(timeline.to_numpy(), sort=False).cumcount() // timeline_posts
        timeline = timeline + "#" + run.astype("string")
    return pd.DataFrame({"doc_id": rows["doc_id"].astype(str).to_numpy(), "group_id": timeline.to_numpy(),
                         "author_id": author.to_numpy(), "text": rows["text"].astype(str).to_numpy()})


def reidentification_rows(summary: dict, strategy: str, variant: str, signature: str, *,
                          attack: str, adversary: str | None = None,
                          epsilon: float | None = None) -> list[dict]:
    """The attack's numbers as privacy summary rows with their 95% intervals (accuracy@1, accuracy@10, MRR,
    candidate recall over synthetic posts, the residual risk over chance, and the random baseline 1/N),
    with the attack, the adversary setting (full/disjoint, when known) and the variant's DP epsilon."""
    reason = summary.get("reason")
    n = int(summary.get("n_timelines", 0) or 0)
    how = {"attack": attack, "adversary": adversary}
    eps = np.nan if epsilon is None else float(epsilon)

    def figure(metric: str, key: str) -> dict:
        ci = (float(summary.get(f"{key}_ci_low", np.nan)), float(summary.get(f"{key}_ci_high", np.nan)))
        return _row(strategy, variant, metric, float(summary.get(key, np.nan)), n, signature, reason, ci=ci, **how,
                    epsilon=eps)

    recall = float(summary.get("candidate_recall", np.nan))
    n_posts = int(summary.get("n_synthetic_posts", 0) or 0)
    risk = Residual(*(float(summary.get(k, np.nan)) for k in ("risk", "risk_ci_low", "risk_ci_high")))
    rows = [figure("reid_accuracy", "accuracy_at_1"), figure("reid_accuracy_at_10", "accuracy_at_10"),
            figure("reid_mrr", "mrr"),
            _risk_row(strategy, variant, "reid_residual_risk", risk, n, signature, "chance 1/N", reason, **how,
                      epsilon=eps)]
    if np.isfinite(recall):  # MinHash only: the share of synthetic posts with their author among the candidates
        rows.append(_row(strategy, variant, "reid_candidate_recall", recall, n_posts, signature, reason,
                         ci=_proportion(recall * n_posts, n_posts), **how, epsilon=eps))
    rows.append(_row("chance", "", "reid_accuracy", float(summary.get("chance", np.nan)), n, signature,
                     reason if reason else None, **how))
    return rows


def summary_frame(rows: list[dict]) -> pd.DataFrame:
    """Privacy summary rows as a frame of the declared score table (:data:`tasks.scores.SCORES`)."""
    return score_frame(rows, SCORES)


def llm_profiling_rows(result: object, strategy: str) -> list[dict]:
    """Zero-shot LLM profiling numbers (per-attribute accuracy, all-attributes success, with Wilson intervals)
    as summary rows;
    the ``original`` rows are the attack on the real transcripts."""
    rows = []
    signature = getattr(result, "signature", "")
    for r in result.accuracy.itertuples(index=False):  # type: ignore[attr-defined]
        name = strategy if str(r.strategy) != ORIGINAL else ORIGINAL
        variant = "" if name == ORIGINAL else str(r.variant)
        rows.append(_row(name, variant, "llm_profiling_accuracy", float(r.accuracy), int(r.n), signature,
                         ci=_proportion(float(r.accuracy) * int(r.n), int(r.n)), attribute=str(r.attribute)))
        rows.append(_row("chance", "", "llm_profiling_accuracy", float(r.chance), int(r.n), signature,
                         attribute=str(r.attribute)))
    for r in result.success.itertuples(index=False):  # type: ignore[attr-defined]
        name = strategy if str(r.strategy) != ORIGINAL else ORIGINAL
        variant = "" if name == ORIGINAL else str(r.variant)
        rows.append(_row(name, variant, "llm_profiling_success", float(r.success_rate), int(r.n_dialogues),
                         signature, n_failed=int(r.n_failed_requests),
                         ci=_proportion(float(r.success_rate) * int(r.n_dialogues), int(r.n_dialogues))))
        rows.append(_row("chance", "", "llm_profiling_success", float(r.chance), int(r.n_dialogues), signature))
    return rows
