"""The classifier attack as a whole: the adversary's side in the mode the histories' size asks for (exact
or two-stage), the attribution of each timeline, and fit-and-attack in one call."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tasks.privacy.attribution import (
    Setting,
    attack_summary,
    attribute_scores,
    check_timelines,
    held_out_doc_ids,
)
from tasks.privacy.classifier.exact import ExactModel, exact_scores
from tasks.privacy.classifier.exact_cache import fit_exact_cached
from tasks.privacy.classifier.params import ClassifierParams
from tasks.privacy.classifier.two_stage import TwoStageSide, prepare_two_stage, two_stage_scores
from tasks.privacy.reidentify import HistorySource, ReidResult


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
