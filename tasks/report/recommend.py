"""Which generation strategy should I use for my data, and what does it cost me in utility and privacy?

The report ranks the strategies of a run for a stated goal (seed 000 §7, Figure 4) from the numbers the
run measured, and gives the numbers behind every rank.

**Goals.** The use case is one of

- ``augment``: add synthetic text to a public dataset to train a better model. Utility (the gain over
  training on the real data alone) counts most, then meaning and style preservation (§7 recommends
  meaning- and style-preserving strategies); privacy is not scored, the data being public.
- ``share_model``: release a model trained on synthetic text instead of sensitive data (e.g. health
  posts). Privacy and utility (what substituting the real training data costs) weigh the same.
- ``share_data``: release the synthetic text itself, the strictest case: whoever gets it can run
  re-identification and profiling attacks on it. Privacy first, then utility, then meaning.

``formal_dp`` requires a formal differential-privacy guarantee: only strategies of the ``dp`` family are
eligible; the others are listed, unranked, with the reason. ``longitudinal`` (a task over timelines of
posts) adds the recall of the moments of change, where synthetic data tends to under-predict rare labels
(§6.2) and where §6.2.1/§6.3.1 found stylistic variation with within-user consistency (SynTr) helps;
it can only be scored when the run has timeline utility numbers.

**Aspects**, each a number in 0..1 (1 = best) computed from the run's score table:

- utility, ``share_*``: substitution gap ``d`` = (synthetic-trained − real-trained) on the real test set,
  signed so that positive is better (SegWER/JointWER/DSER/DER are error rates); score
  ``clip(1 + d / SUBSTITUTION_LOSS_SCALE)``: no loss (or a gain) is 1, a loss of 0.20 or more is 0.
- utility, ``augment``: augmentation gain ``g`` over the same fraction of real data without
  augmentation; score ``clip(0.5 + g / (2 * AUGMENTATION_GAIN_SCALE))``: no change is 0.5, ±0.05 is
  1 / 0; fractions are weighted ``1/sqrt(fraction)`` (10% weighs 3.2x 100%: augmentation matters most
  when real data is scarce). Without augmentation runs the substitution gap is used, and said so.
- privacy: the mean of three attacks (``share_data`` weighs re-identification and profiling 0.4 each,
  membership 0.2): re-identification ``1 − (accuracy − chance) / (1 − chance)``; profiling, per
  attribute and attacker, the share of the way from the attack on the real text down to chance
  ``(real − synthetic) / (real − chance)``; membership ``1 − |AUC − t| / max(t, 1 − t)`` with ``t``
  the catalogue's target of ``membership_auc`` (0.5: members indistinguishable).
- meaning: BERTScore F1; style: the mean of the style-embedding cosine and the POS Jaccard; divergence:
  1 − BLEU against the source. These are already 0..1 and used as they are.

**Score** = the weighted mean of the measured aspects (``WEIGHTS``; the weights of the aspects with
numbers are renormalised to sum to 1). An aspect without numbers is left out and said so in the reasons;
a strategy lacking an aspect that other strategies of the run have ranks after those measured on every
aspect (less evidence must not win by renormalisation), and one with no measured aspect has score NaN and
ranks last. Ties keep the run's strategy order (the config's, then the score table's).
The scores rank the strategies of *this* run; they are not comparable across runs.

The goals and their weights are in :mod:`tasks.report.goals`, the aspect scores in
:mod:`tasks.report.aspects` and the score-table lookups in :mod:`tasks.report.score_lookup`; this module
ranks the strategies and writes the run-level notes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from tasks.metrics import catalogue
from tasks.report.aspects import _Aspect, _intrinsic, _longitudinal, _privacy, _utility, _utility_rows
from tasks.report.goals import ASPECT_NAMES, Goal, GoalError
from tasks.report.score_lookup import _candidates, _Scores, format_number
from tasks.report.tables import strategy_label

DP_FAMILY = "dp"  #: the registered strategy with a formal DP guarantee

#: Two eligible strategies closer than this in score are a close call (said in the notes).
CLOSE_CALL = 0.05
#: A privacy aspect below this is "little measurable protection" (said in the reasons for share_*).
LITTLE_PROTECTION = 0.2

#: What the article found for the syntax-guided families on its timeline task (§6.2.1, §6.3.1); shown as
#: context for a longitudinal goal, never scored.
LONGITUDINAL_FINDINGS: dict[str, str] = {
    "syntr": "consistent stylistic variation (SynTr) helped recall of the rarest label (sudden changes, IS) most",
    "syndiff": "stochastic stylistic variation (SynDiff) helped generalisation (gradual changes, IE) "
               "but not the rarest label (IS)",
    "synsim": "syntactically similar paraphrases (SynSim) trained the most precise timeline classifiers",
    "synorig": "paraphrases from the original parses (SynOrig) trailed SynTr in substitution except for IS "
               "precision, and gave more precise IE in augmentation",
}


# ---------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Recommendation:
    """One strategy (variant) for one goal: its rank, 0..1 score, the reasons with the measured numbers,
    and a one-line cost in utility and privacy."""

    rank: int | None  # 1-based among the eligible; None when not eligible
    strategy: str
    variant: str
    score: float  # 0..1, NaN when no aspect was measured
    eligible: bool
    reasons: list[str]
    cost: str
    family: str | None = None  # registered strategy name (dp, llm, ...); None when unknown
    aspects: dict[str, float] = field(default_factory=dict)  # every measured aspect -> 0..1 (scored or not)
    seeds: int | None = None  # runs behind each utility number
    epsilon: str | None = None  # the DP budget of the variant (the score table's epsilon column)

    @property
    def label(self) -> str:
        return f"{self.strategy}/{self.variant}" if self.variant else self.strategy


# ---------------------------------------------------------------------------------------------- ranking


def _epsilon(scores: _Scores, strategy: str, variant: str) -> str | None:
    """The DP budget of a strategy variant, from the score table's epsilon column."""
    eps = scores.epsilon.get((strategy, variant))
    return f"{eps:g}" if eps is not None else None


def _pii_leaked(scores: _Scores, strategy: str, variant: str) -> float | None:
    """The share of the source's PII spans a strategy copied verbatim (all entity types), if measured."""
    for key in scores.keys_of(strategy, variant, "pii_leakage"):
        if scores.structure[key].get("entity") in (None, "all"):
            value = scores.get(strategy, variant, key)
            if value is not None and value.ok:
                return value.value
    return None


def recommend(summary: pd.DataFrame, goal: Goal, families: Mapping[str, str], *,
              trials: str = "author timelines") -> list[Recommendation]:
    """Rank the strategies (variants) of a run for ``goal`` from its long score table (see the module
    docstring): the eligible ones by score (rank 1 = best), then the ineligible ones, unranked. ``trials`` names
    what one re-identification trial is (``turns``, ``posts``, ``author timelines``) in the reasons."""
    if not isinstance(goal, Goal):
        raise GoalError(f"goal must be a Goal (see GOALS / parse_goal); got {goal!r}")
    scores = _Scores(summary)
    weights = goal.weights()
    pairs = _candidates(scores, families)
    variants_of: dict[str, list[str]] = {}
    for s, v in pairs:
        variants_of.setdefault(s, []).append(v)

    drafts = []
    for strategy, variant in pairs:
        family = families.get(strategy)
        reasons: list[str] = []
        eligible = True
        if family == DP_FAMILY:
            eps = _epsilon(scores, strategy, variant)
            reasons.append("formal DP guarantee" + (f" (ε = {eps} per document)" if eps else ""))
        elif goal.formal_dp:
            eligible = False
            reasons.append("no formal DP guarantee" + (f" (family {family!r})" if family else
                                                       " (strategy family unknown: not in the run config)"))
        leaked = _pii_leaked(scores, strategy, variant)
        if goal.use_case == "share_data" and leaked:
            eligible = False
            reasons.append(f"copies {leaked:.0%} of the source's direct identifiers (PII spans) verbatim: never the "
                           "choice for sharing data; pseudonymise first (generate.pseudonymize)")
        rows, unavailable = _utility_rows(scores, strategy, variant, variants_of[strategy])
        aspects: dict[str, _Aspect] = {
            "utility": _utility(scores, rows, goal, unavailable),
            "privacy": _privacy(scores, strategy, variant, goal, trials),
        }
        for name in ("meaning", "style", "divergence"):  # all of them: the notes use meaning for ε
            aspects[name] = _intrinsic(scores, strategy, variant, name)
        if goal.longitudinal:
            aspects["longitudinal"] = _longitudinal(scores, rows, goal, unavailable)

        measured = {a: s for a in weights if (s := aspects[a].score) is not None}
        total = sum(weights[a] for a in measured)
        score = sum(weights[a] * s for a, s in measured.items()) / total if total else float("nan")

        for name in weights:  # reasons in weight order, heaviest first
            reasons += aspects[name].reasons
        if "privacy" not in weights:
            reasons.append("privacy not scored: augmenting a public dataset")
        elif aspects["privacy"].score is not None and aspects["privacy"].score < LITTLE_PROTECTION:
            reasons.append(f"little measurable protection (privacy {aspects['privacy'].score:.2f} of 1): not enough "
                           "on its own for sensitive data")
        if goal.longitudinal and family in LONGITUDINAL_FINDINGS:
            reasons.append(f"in the article's timeline task (§6.2.1, §6.3.1), {LONGITUDINAL_FINDINGS[family]} "
                           "(not measured here)")
        if measured:
            terms = " + ".join(f"{ASPECT_NAMES[a]} {s:.2f}×{weights[a] / total:.2f}" for a, s in measured.items())
            dropped = [ASPECT_NAMES[a] for a in weights if a not in measured]
            reasons.append(f"score {score:.2f} = {terms}"
                           + (f" (weights renormalised without {', '.join(dropped)})" if dropped else ""))
        else:
            reasons.append("no aspect of this goal was measured for this strategy: not scored")

        unscored = " (not scored)" if "privacy" not in weights else ""
        cost = (f"utility: {aspects['utility'].cost or 'not measured'}; "
                f"privacy{unscored}: {aspects['privacy'].cost or 'not measured'}")
        drafts.append(dict(strategy=strategy, variant=variant, epsilon=_epsilon(scores, strategy, variant),
                           score=float(score), eligible=eligible,
                           reasons=reasons, cost=cost, family=family,
                           aspects={a: float(x.score) for a, x in aspects.items() if x.score is not None},
                           seeds=aspects["utility"].seeds))

    # An aspect measured for some eligible strategies but not for this one: its score rests on less
    # evidence, so it ranks after the complete ones instead of profiting from the renormalised weights.
    covered = {a for d in drafts if d["eligible"] for a in d["aspects"] if a in weights}
    partial: dict[int, list[str]] = {}
    for i, d in enumerate(drafts):
        lacking = [a for a in weights if a in covered and a not in d["aspects"]]
        if lacking and math.isfinite(d["score"]):
            partial[i] = lacking
            d["reasons"].insert(len(d["reasons"]) - 1, "ranked after the strategies measured on every aspect: no "
                                f"{', '.join(ASPECT_NAMES[a] for a in lacking)} numbers for this one")

    def key(item: tuple[int, dict]) -> tuple[int, int, float, int]:
        i, d = item
        s = d["score"]
        return (0 if d["eligible"] else 1, 1 if i in partial else 0,
                -round(s, 9) if math.isfinite(s) else math.inf, i)

    out, rank = [], 0
    for _, d in sorted(enumerate(drafts), key=key):
        if d["eligible"]:
            rank += 1
        out.append(Recommendation(rank=rank if d["eligible"] else None, **d))
    return out


#: The reason a strategy is not eligible to share: it misses the run's budget (followed by the budget).
OVER_BUDGET = "not eligible: it misses the run's budget"


def within_budget(goal: Goal, recs: Sequence[Recommendation], verdicts: pd.DataFrame,
                  budget: str) -> list[Recommendation]:
    """For a share-data goal in a run with a budget: only the strategies that meet it stay eligible (ranked in the
    same order); the others say they miss it. Other goals: ``recs`` as they are."""
    if goal.use_case != "share_data":
        return list(recs)

    meeting = set(verdicts.loc[verdicts["meets"].astype(bool), "strategy"].astype(str)) if len(verdicts) else set()
    out, rank = [], 0
    for rec in recs:
        if rec.eligible and strategy_label(rec.strategy, rec.variant) not in meeting:
            rec = replace(rec, eligible=False, rank=None,
                          reasons=[*rec.reasons, f"{OVER_BUDGET} {budget}"])
        elif rec.eligible:
            rank += 1
            rec = replace(rec, rank=rank)
        out.append(rec)
    return out


def budget_note(goal: Goal, verdicts: pd.DataFrame, budget: str) -> str | None:
    """For a share-data goal in a run with a budget (``report.budget``): the strategies that meet it (the
    verdicts of :func:`tasks.report.budgets.check_budget`), or that none does; None for other goals."""
    if goal.use_case != "share_data":
        return None
    meeting = verdicts.loc[verdicts["meets"].astype(bool), "strategy"].astype(str).tolist() if len(verdicts) else []
    if not meeting:
        return f"no strategy meets the run's budget {budget}: none is eligible to share as it stands"
    return f"meets the run's budget {budget}: {', '.join(meeting)} (eligible to share)"


def protect_note(goal: Goal, recs: Sequence[Recommendation], label: str, budget: str, met: bool) -> str | None:
    """For a share-data goal in a run with a protect stage: its output (strategy ``label``), whether it met its
    budget and where it ranks; None for other goals."""
    if goal.use_case != "share_data":
        return None
    rec = next((r for r in recs if r.strategy == label), None)
    if rec is None:
        return f"the protect output ({label!r}) has no scores in this run: it could not be ranked"
    place = f"ranked {rec.rank}" if rec.rank is not None else "not eligible"
    if met:
        return (f"the protect output ({label!r}) meets its budget {budget} on its certificate (every registered "
                f"attack on the full histories): {place} here for sharing data")
    return (f"the protect output ({label!r}) misses its budget {budget}: {place} here, on the run's own attacks "
            "like any strategy")


def recommendation_notes(goal: Goal, recs: Sequence[Recommendation]) -> list[str]:
    """Run-level notes for one goal: what is missing from the run, how firm the ranking is."""
    notes: list[str] = []
    if not recs:
        return ["no synthetic strategy in this run's scores: nothing to rank"]
    if goal.formal_dp and not any(r.family == DP_FAMILY for r in recs):
        notes.append("no strategy with formal DP in this run: add `dp` (DP-BART) to generate.strategies to get "
                     "one; the strategies below are listed for information, none is eligible")
    dp_recs = sorted((r for r in recs if r.family == DP_FAMILY),
                     key=lambda r: (float(r.epsilon) if r.epsilon else math.inf, r.variant))
    dp_meaning = {(r.epsilon or r.variant): r.aspects.get("meaning") for r in dp_recs}
    if len(dp_meaning) > 1:  # strictest budget first
        shown = ", ".join(f"ε = {e}: meaning {format_number(m)}" if m is not None else f"ε = {e}"
                          for e, m in dp_meaning.items())
        notes.append(f"several privacy budgets ({shown}): calibrate ε with caution, a strict budget costs meaning "
                     "and style and, through them, utility (§7)")
    hints = {"utility": "enable utility in the config", "privacy": "enable privacy (profiling, membership, "
             "reidentify) in the config",
             **{a: f"add {' / '.join(m.name for m in catalogue.headline_metrics(a))} to metrics.names"
                for a in ("meaning", "style", "divergence")}}
    for aspect in goal.weights():
        if aspect != "longitudinal" and not any(aspect in r.aspects for r in recs):
            notes.append(f"no {ASPECT_NAMES[aspect]} numbers in this run: left out of every score ({hints[aspect]})")
    if goal.longitudinal and not any("longitudinal" in r.aspects for r in recs):
        notes.append("this run has no longitudinal (timeline) utility numbers: §7's advice for longitudinal tasks "
                     "(stylistic variation with within-user consistency, e.g. SynDiff, SynTr) is not scored; run "
                     "the timeline task (utility.task: timeline) to measure it")
    seeds = sorted({r.seeds for r in recs if r.seeds})
    if seeds:
        n = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
        notes.append(f"utility measured with {n} seed{'' if n == '1' else 's'}"
                     + (": one run each, so small differences may be noise" if seeds[-1] == 1
                        else " (means; the reasons flag differences within the seed std)"))
    ranked = [r for r in recs if r.rank is not None and math.isfinite(r.score)]
    if len(ranked) >= 2 and ranked[0].score - ranked[1].score < CLOSE_CALL:
        notes.append(f"{ranked[0].label} and {ranked[1].label} score within {CLOSE_CALL} of each other "
                     f"({ranked[0].score:.2f} vs {ranked[1].score:.2f}): a close call, compare their reasons")
    if goal.use_case != "augment" and ranked and "privacy" in ranked[0].aspects \
            and ranked[0].aspects["privacy"] < LITTLE_PROTECTION:
        notes.append(f"even the top-ranked {ranked[0].label} offers little measurable protection (privacy "
                     f"{ranked[0].aspects['privacy']:.2f} of 1): consider a DP or a high-divergence (LLM) strategy")
    return notes
