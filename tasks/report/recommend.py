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
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

import numpy as np
import pandas as pd

from tasks.errors import ConfigError, InputError, shown
from tasks.metrics import catalogue
from tasks.privacy.audit import NOTHING_MEASURABLE
from tasks.report.tables import strategy_label
from tasks.scores import BASELINE_ROWS, CHANCE, ORIGINAL, column_key, structure_of

UseCase = Literal["augment", "share_model", "share_data"]
USE_CASES: tuple[str, ...] = get_args(UseCase)
DP_FAMILY = "dp"  #: the registered strategy with a formal DP guarantee

#: Aspect weights per use case (each row sums to 1). augment: utility > meaning = style, privacy not
#: scored (public data; §7 "highly meaning- and style-preserving methods"). share_model: privacy = utility
#: (§7 "sharing models trained on UGC for health applications"); divergence stands in a little for attacks
#: a run did not measure (§6.2.2: divergence lowers profiling and re-identification risks). share_data:
#: privacy > utility > meaning: the released text itself is attacked.
WEIGHTS: dict[str, dict[str, float]] = {
    "augment": {"utility": 0.50, "meaning": 0.25, "style": 0.25},
    "share_model": {"privacy": 0.45, "utility": 0.45, "divergence": 0.10},
    "share_data": {"privacy": 0.45, "utility": 0.30, "meaning": 0.15, "divergence": 0.10},
}
#: Extra weight of the moments-of-change recall for a longitudinal goal (before renormalising): enough to
#: reorder strategies with similar overall utility, not to override privacy.
LONGITUDINAL_WEIGHT = 0.25
#: How the privacy aspect combines the attacks. Sharing the data exposes the text to re-identification and
#: profiling directly, so they weigh more there; membership (was this record in the training set?) is the
#: classic risk of a shared model, so it weighs the same as the others for share_model.
PRIVACY_PART_WEIGHTS: dict[str, dict[str, float]] = {
    "augment": {"reidentification": 1 / 3, "profiling": 1 / 3, "membership": 1 / 3},
    "share_model": {"reidentification": 1 / 3, "profiling": 1 / 3, "membership": 1 / 3},
    "share_data": {"reidentification": 0.4, "profiling": 0.4, "membership": 0.2},
}
#: A substitution loss of this much (F1 / coverage points, or added WER) or more scores utility 0: about
#: the distance from a good to a chance-level classifier on the article's binary tasks; DP-BART's <0.05
#: F1 cost in §6.2 (which the article calls worth it) keeps 0.75.
SUBSTITUTION_LOSS_SCALE = 0.20
#: An augmentation gain (loss) of this much saturates the utility score at 1 (0): the article's post- and
#: dialogue-level gains are a few points (Tables 7-8); larger timeline recall gains saturate anyway.
AUGMENTATION_GAIN_SCALE = 0.05
#: Two eligible strategies closer than this in score are a close call (said in the notes).
CLOSE_CALL = 0.05
#: A privacy aspect below this is "little measurable protection" (said in the reasons for share_*).
LITTLE_PROTECTION = 0.2

#: The profiling measures the privacy aspect scores (their rows carry attribute and model).
_PROFILING_METRICS = ("profiling_accuracy", "llm_profiling_accuracy", "llm_profiling_success")

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


class GoalError(ConfigError, ValueError):
    """A goal that cannot be used: names the bad field or word and the accepted values."""


# ---------------------------------------------------------------------------------------------- goals


@dataclass(frozen=True)
class Goal:
    """What the user wants to do with synthetic data (the inputs of seed 000's Figure 4)."""

    use_case: UseCase
    formal_dp: bool = False
    longitudinal: bool = False

    def __post_init__(self) -> None:
        if self.use_case not in USE_CASES:
            raise GoalError(f"Goal.use_case must be one of {', '.join(USE_CASES)}; got {self.use_case!r}")
        for name in ("formal_dp", "longitudinal"):
            value = getattr(self, name)
            if not isinstance(value, bool | np.bool_):
                raise GoalError(f"Goal.{name} must be True or False; got {value!r}")

    def weights(self) -> dict[str, float]:
        """Aspect weights of this goal before renormalising (``WEIGHTS`` plus the longitudinal one)."""
        out = dict(WEIGHTS[self.use_case])
        if self.longitudinal:
            out["longitudinal"] = LONGITUDINAL_WEIGHT
        return out

    def headline(self) -> str:
        """The goal in a few words (the report's at-a-glance table)."""
        what = {"augment": "Augment a public dataset with synthetic text",
                "share_model": "Share a model trained on synthetic instead of sensitive data",
                "share_data": "Share synthetic data in place of sensitive data"}[self.use_case]
        if self.longitudinal:
            what += " for a longitudinal (timeline) task"
        if self.formal_dp:
            what += ", formal differential privacy required"
        return what

    def describe(self) -> str:
        """One sentence: the goal and how strategies are ranked for it."""
        what = self.headline()
        total = sum(self.weights().values())
        parts = ", ".join(f"{ASPECT_NAMES[a]} {w / total:.0%}" for a, w in self.weights().items())
        tail = "; privacy not scored" if "privacy" not in self.weights() else ""
        tail += "; only DP strategies are eligible" if self.formal_dp else ""
        return f"{what}: ranked by {parts}{tail}."


ASPECT_NAMES: dict[str, str] = {"utility": "utility", "privacy": "privacy", "meaning": "meaning",
                                "style": "style", "divergence": "divergence",
                                "longitudinal": "moments-of-change recall"}

#: Preset goals by the short name the CLI and the config use.
GOALS: dict[str, Goal] = {
    "augment": Goal("augment"),
    "augment-longitudinal": Goal("augment", longitudinal=True),
    "share-model": Goal("share_model"),
    "share-model-dp": Goal("share_model", formal_dp=True),
    "share-data": Goal("share_data"),
    "share-data-dp": Goal("share_data", formal_dp=True),
}

_FLAGS = {"dp": "formal_dp", "formal_dp": "formal_dp", "formal-dp": "formal_dp",
          "longitudinal": "longitudinal", "timeline": "longitudinal"}


def parse_goal(text: str) -> Goal:
    """A goal from a preset name (``share-model-dp``) or words separated by commas or ``+``: one use case
    (``augment``, ``share_model``, ``share_data``; ``-`` or ``_``) and the flags ``dp`` and ``longitudinal``."""
    raw = str(text).strip().lower()
    if raw in GOALS:
        return GOALS[raw]
    words = [w.strip() for w in re.split(r"[,+]", raw) if w.strip()]
    use_cases: list[str] = []
    flags: dict[str, bool] = {}
    for word in words:
        if word.replace("-", "_") in USE_CASES:
            use_cases.append(word.replace("-", "_"))
        elif word in _FLAGS:
            flags[_FLAGS[word]] = True
        else:
            raise GoalError(f"goal {shown(text)}: unknown word {shown(word)}; use a preset ({', '.join(GOALS)}) or one "
                            f"use case ({', '.join(USE_CASES)}) with optional flags dp, longitudinal")
    if len(use_cases) != 1:
        found = ", ".join(use_cases) if use_cases else "none"
        raise GoalError(f"goal {shown(text)}: name exactly one use case ({', '.join(USE_CASES)}); found {found}")
    return Goal(use_cases[0], **flags)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- formatting


def format_number(value: float) -> str:
    """A measured number in a reason: three decimals (``n/a`` when missing)."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def format_delta(value: float) -> str:
    """A signed difference in a reason: ``+0.031`` / ``−0.024`` (a real minus sign); ``±0.000`` when it
    rounds to zero."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return "±0.000" if abs(value) < 0.0005 else f"{value:+.3f}".replace("-", "−")


def format_percent(value: float) -> str:
    """A rate in a reason: ``17%``; rates under 1% keep two significant digits (``0.0026%``)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.0%}" if value == 0 or abs(value) >= 0.01 else f"{100 * value:.2g}%"


def metric_label(metric: str) -> str:
    """How a task metric is named in a reason: ``macro-F1``, ``IS coverage recall``, ``SegWER``."""
    return "macro-F1" if metric == "macro_f1" else catalogue.label(metric)


def _clip(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


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


@dataclass(frozen=True)
class _Value:
    value: float
    std: float
    n: int | None
    reason: str | None
    ci_low: float = math.nan
    ci_high: float = math.nan

    @property
    def ok(self) -> bool:
        return math.isfinite(self.value)

    def percent(self) -> str:
        """The value as a percentage with its 95% interval where it has one: ``40% [17%, 69%]``."""
        shown = format_percent(self.value)
        if math.isfinite(self.ci_low) and math.isfinite(self.ci_high):
            shown += f" [{format_percent(self.ci_low)}, {format_percent(self.ci_high)}]"
        return shown


@dataclass
class _Aspect:
    score: float | None = None  # None: not measured
    reasons: list[str] = field(default_factory=list)
    cost: str = ""
    seeds: int | None = None


def _float(x: object) -> float:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")
    return v


def _text(x: object) -> str | None:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return None
    s = str(x).strip()
    return s.splitlines()[0] if s else None


class _Scores:
    """Lookups into the long score table: (strategy, variant, column key) -> value, std, n, reason, where
    the column key is the metric with its structure (setting, fraction, attribute, ...; tasks.scores)."""

    def __init__(self, summary: pd.DataFrame) -> None:
        missing = [c for c in ("strategy", "variant", "metric", "value") if c not in summary.columns]
        if missing:
            raise InputError(f"score table lacks column(s) {', '.join(missing)}; expected the run's long "
                             "summary (strategy, variant, level, metric, value, std, n, ..., reason)")
        self.index: dict[tuple[str, str, str], _Value] = {}
        self.structure: dict[str, dict] = {}  # column key -> {"metric": ..., **structure}
        self.epsilon: dict[tuple[str, str], float] = {}
        order: dict[tuple[str, str], None] = {}
        for row in summary.to_dict("records"):
            strategy, variant = str(row["strategy"]), "" if _text(row["variant"]) is None else str(row["variant"])
            structure = structure_of(row)
            key = column_key(str(row["metric"]), structure)
            self.structure.setdefault(key, {"metric": str(row["metric"]), **structure})
            n = _float(row.get("n"))
            entry = _Value(_float(row["value"]), _float(row.get("std")), None if not math.isfinite(n) else int(n),
                           _text(row.get("reason")), _float(row.get("ci_low")), _float(row.get("ci_high")))
            old = self.index.get((strategy, variant, key))
            if old is None or (not old.ok and entry.ok):  # duplicates: the first measured one
                self.index[(strategy, variant, key)] = entry
            if math.isfinite(eps := _float(row.get("epsilon"))):
                self.epsilon.setdefault((strategy, variant), eps)
            order.setdefault((strategy, variant), None)
        self.order: list[tuple[str, str]] = list(order)

    def get(self, strategy: str, variant: str, key: str) -> _Value | None:
        """The exact row, else the strategy-level one (variant '')."""
        return self.index.get((strategy, variant, key)) or self.index.get((strategy, "", key))

    def baseline(self, name: str, key: str) -> _Value | None:
        hits = [v for (s, _, k), v in self.index.items() if s == name and k == key]
        return next((v for v in hits if v.ok), hits[0] if hits else None)

    def keys_of(self, strategy: str, variant: str, *metrics: str) -> list[str]:
        """The column keys of this candidate's rows whose metric is one of ``metrics``."""
        return list(dict.fromkeys(k for (s, v, k) in self.index
                                  if s == strategy and v in (variant, "") and self.structure[k]["metric"] in metrics))


def candidates(summary: pd.DataFrame, families: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The (strategy, variant) pairs to rank: every strategy but ``original``/``chance``, one pair per
    named variant (strategy-level rows with variant '' only make a pair when the strategy has no named
    variant), in the order of ``families`` (the run config), then of the table."""
    return _candidates(_Scores(summary), families)


def _candidates(scores: _Scores, families: Mapping[str, str] | None) -> list[tuple[str, str]]:
    pairs = [p for p in scores.order if p[0] not in BASELINE_ROWS]
    named = {s for s, v in pairs if v}
    pairs = [(s, v) for s, v in pairs if v or s not in named]
    order = {label: i for i, label in enumerate(families or {})}
    return sorted(pairs, key=lambda p: order.get(p[0], len(order)))  # stable: table order within


# ---------------------------------------------------------------------------------------------- aspects


def _utility_rows(scores: _Scores, strategy: str, variant: str, variants: Sequence[str]) -> tuple[
        dict[tuple[str, str, str], _Value], str | None]:
    """The utility rows of one candidate: (setting, pct, task metric) -> value, and why there are none.

    The utility stage trains one model per variant and records each under its variant. Runs recorded
    before that (variant '') trained on the first variant in sorted order only; those numbers belong to
    that variant only."""
    def utility(k: tuple[str, str, str]) -> bool:
        return "setting" in scores.structure[k[2]] and "fraction" in scores.structure[k[2]]

    own = {k: v for k, v in scores.index.items() if k[0] == strategy and k[1] == variant and utility(k)}
    if not own and variant:
        first = sorted(variants)[0] if variants else variant
        shared = {k: v for k, v in scores.index.items() if k[0] == strategy and k[1] == "" and utility(k)}
        if shared and variant != first:
            return {}, f"utility not measured for this variant: the utility runs trained on variant {first!r}"
        own = shared
    out = {}
    for (_, _, key), value in own.items():
        about = scores.structure[key]
        out[(str(about["setting"]), _percent(float(about["fraction"])), str(about["metric"]))] = value
    return out, None


def _percent(fraction: float) -> str:
    """A training fraction as the percent a reason shows (``10``, ``100``)."""
    return f"{100 * fraction:g}"


def _direction(metric: str) -> float:
    return float(catalogue.direction(metric))


def _spread_note(delta: float, *values: _Value) -> str:
    """``, within the seed std X`` when a difference is no larger than the spread over seeds behind it."""
    stds = [v.std for v in values if math.isfinite(v.std) and (v.n or 0) > 1]
    if stds and max(stds) > 0 and abs(delta) <= max(stds):
        return f", within the seed std {format_number(max(stds))}"
    return ""


def _task_utility(scores: _Scores, rows: dict[tuple[str, str, str], _Value], setting: str,
                  keep: Callable[[str], bool] | None = None, what: str = "utility") -> _Aspect:
    """Substitution gap or augmentation gain (``setting``) over the real-data baseline, per task metric;
    ``keep(metric)`` restricts the metrics (the longitudinal aspect)."""
    aspect = _Aspect()
    mine = {k: v for k, v in rows.items() if k[0] == setting and (keep is None or keep(k[2]))}
    metrics = list(dict.fromkeys(k[2] for k in mine))
    metric_scores: list[float] = []
    costs: list[str] = []
    for metric in metrics:
        name, sign = metric_label(metric), _direction(metric)
        worse = " lower is better" if sign < 0 else ""
        parts, weights, fr_scores, deltas, used = [], [], [], [], []
        pcts = sorted({k[1] for k in mine if k[2] == metric}, key=float)
        for pct in pcts:
            value = mine[(setting, pct, metric)]
            base = scores.baseline(ORIGINAL, column_key(metric, {"setting": "baseline", "fraction": float(pct) / 100}))
            if not value.ok:
                aspect.reasons.append(f"{setting} {name} at {pct}% not available"
                                      + (f": {value.reason}" if value.reason else ""))
                continue
            if base is None or not base.ok:
                aspect.reasons.append(f"{setting} {name} {format_number(value.value)} at {pct}% has no real-data "
                                      "baseline to compare with")
                continue
            delta = value.value - base.value
            gap = sign * delta
            deltas.append(delta)
            used.append(pct)
            spread = _spread_note(delta, value, base)
            if setting == "substitution":
                fr_scores.append(_clip(1 + gap / SUBSTITUTION_LOSS_SCALE))
                parts.append(f"{format_number(value.value)} vs {format_number(base.value)} on real data "
                             f"({format_delta(delta)}{',' + worse if worse else ''}{spread})")
            else:
                fr_scores.append(_clip(0.5 + gap / (2 * AUGMENTATION_GAIN_SCALE)))
                parts.append(f"{pct}% {format_number(value.value)} vs {format_number(base.value)} without "
                             f"({format_delta(delta)}{spread})")
            weights.append(float(pct) ** -0.5)
            if aspect.seeds is None and value.n and not math.isfinite(value.ci_high):
                aspect.seeds = value.n  # n counts seeds only without an interval (which counts test documents)
        if not fr_scores:
            continue
        metric_scores.append(float(np.average(fr_scores, weights=weights)))
        if setting == "substitution":
            aspect.reasons.append(f"{setting} {name} {'; '.join(parts)}")
            costs.append(f"{name} {format_delta(deltas[0])}")
        else:
            aspect.reasons.append(f"{setting} {name}{' (' + worse.strip() + ')' if worse else ''}: "
                                  f"{', '.join(parts)}")
            costs.append(f"{name} " + ", ".join(f"{format_delta(d)} at {p}%" for d, p in zip(deltas, used,
                                                                                              strict=True)))
    if metric_scores:
        aspect.score = float(np.mean(metric_scores))
        aspect.cost = ("substitution " if setting == "substitution" else "augmentation ") + "; ".join(costs)
    elif not aspect.reasons:
        aspect.reasons.append(f"no {setting} {what} measured in this run")
    return aspect


def _utility(scores: _Scores, rows: dict[tuple[str, str, str], _Value], goal: Goal, unavailable: str | None) -> _Aspect:
    if unavailable:
        return _Aspect(reasons=[unavailable])
    if goal.use_case == "augment":
        aspect = _task_utility(scores, rows, "augmentation")
        if aspect.score is None:
            fallback = _task_utility(scores, rows, "substitution")
            if fallback.score is not None:
                fallback.reasons.insert(0, "no augmentation runs in this run: utility is the substitution gap")
                return fallback
        return aspect
    return _task_utility(scores, rows, "substitution")


def _longitudinal(scores: _Scores, rows: dict[tuple[str, str, str], _Value], goal: Goal,
                  unavailable: str | None) -> _Aspect:
    if unavailable:
        return _Aspect(reasons=[f"moments of change: {unavailable}"])
    setting = "augmentation" if goal.use_case == "augment" else "substitution"
    recall = catalogue.CATALOGUE["_Cr"]
    aspect = _task_utility(scores, rows, setting, keep=recall.matches, what="")
    if aspect.score is None:
        aspect = _Aspect(reasons=["no timeline utility (moments-of-change coverage recall) in this run: the "
                                  "longitudinal preference is not scored"])
    else:
        aspect.reasons = [f"moments of change: {r}" for r in aspect.reasons]
    return aspect


def _profiling_label(about: Mapping[str, object]) -> str:
    """``gender profiling (linear) accuracy``, ``gender profiling (LLM) accuracy``, ``LLM profiling of all
    attributes success rate``: from a row's metric, attribute and model."""
    if about["metric"] == "profiling_accuracy":
        return f"{about.get('attribute')} profiling ({about.get('model')}) accuracy"
    if about["metric"] == "llm_profiling_accuracy":
        return f"{about.get('attribute')} profiling (LLM) accuracy"
    return "LLM profiling of all attributes success rate"


def _residual(scores: _Scores, strategy: str, variant: str, reid_key: str) -> str:
    """The residual risk over chance of the attack behind ``reid_key``, in words: its value and interval,
    or that the attack found nothing measurable (never "0% risk")."""
    about = {k: v for k, v in scores.structure.get(reid_key, {}).items() if k != "metric"}
    risk = scores.get(strategy, variant, column_key("reid_residual_risk", about))
    if risk is None:
        return "no residual risk measured"
    if risk.ok:
        return f"residual risk over chance {risk.percent()}"
    return NOTHING_MEASURABLE if risk.reason == NOTHING_MEASURABLE else f"residual risk: {risk.reason or 'not measured'}"


def _privacy(scores: _Scores, strategy: str, variant: str, goal: Goal) -> _Aspect:
    aspect = _Aspect()
    parts: dict[str, float] = {}
    costs: list[str] = []

    attacks = [(k, v) for k in scores.keys_of(strategy, variant, "reid_accuracy")
               if (v := scores.get(strategy, variant, k)) is not None]
    reid_key, reid = max(attacks, key=lambda kv: kv[1].value if kv[1].ok else -math.inf, default=("", None))
    if reid is not None and reid.ok:  # several attacks or adversary settings: the worst case counts
        chance = scores.baseline(CHANCE, reid_key)
        c = chance.value if chance is not None and chance.ok and chance.value < 1 else 0.0
        parts["reidentification"] = 1 - _clip((reid.value - c) / (1 - c))
        of = f"{reid.n} author timelines" if reid.n else "author timelines"
        about = scores.structure.get(reid_key, {})
        by = ", ".join(f"{about[k]} {k}" for k in ("attack", "adversary") if about.get(k))
        worst = f" by the strongest attack ({by})" if by and len(attacks) > 1 else f" ({by})" if by else ""
        aspect.reasons.append(f"re-identified {reid.percent()} of {of}{worst} "
                              f"(chance {format_percent(c)}; {_residual(scores, strategy, variant, reid_key)})")
        costs.append(f"re-identified {reid.percent()} (chance {format_percent(c)})")
    else:
        aspect.reasons.append(f"re-identification not available: {reid.reason}" if reid is not None and reid.reason
                              else "no re-identification measured in this run")

    profiled: list[float] = []
    names = scores.keys_of(strategy, variant, *_PROFILING_METRICS)
    for metric in names:
        value = scores.get(strategy, variant, metric)
        if value is None:
            continue
        label = _profiling_label(scores.structure[metric])
        if not value.ok:
            aspect.reasons.append(f"{label} not available" + (f": {value.reason}" if value.reason else ""))
            continue
        real, chance = scores.baseline(ORIGINAL, metric), scores.baseline(CHANCE, metric)
        if real is None or not real.ok or chance is None or not chance.ok:
            aspect.reasons.append(f"{label} {format_number(value.value)} has no real-text or chance "
                                  "baseline: not scored")
            continue
        if real.value - chance.value <= 1e-9:
            aspect.reasons.append(f"{label}: the attack on the real text is no better than chance "
                                  f"({format_number(real.value)} vs {format_number(chance.value)}): not scored")
            continue
        share = _clip((real.value - value.value) / (real.value - chance.value))
        profiled.append(share)
        verdict = ("no reduction" if share <= 0 else "down to chance" if share >= 1
                   else f"{format_percent(share)} of the way to chance")
        aspect.reasons.append(f"{label} {format_number(value.value)}, real text "
                              f"{format_number(real.value)}, chance {format_number(chance.value)}: {verdict}")
    if profiled:
        parts["profiling"] = float(np.mean(profiled))
        share = parts["profiling"]
        costs.append("profiling not reduced" if share <= 0 else "profiling down to chance" if share >= 1
                     else f"profiling {format_percent(share)} of the way to chance")
    elif not names:
        aspect.reasons.append("no profiling attack measured in this run")

    membership = catalogue.CATALOGUE["membership_auc"]
    member = scores.get(strategy, variant, membership.name)
    if member is not None and member.ok and membership.target is not None:
        blind = membership.target  # the AUC of an attacker who cannot tell members from non-members
        parts["membership"] = 1 - _clip(abs(member.value - blind) / max(blind, 1 - blind))
        aspect.reasons.append(f"membership AUC {format_number(member.value)} ({blind:g} = members indistinguishable)")
        costs.append(f"membership AUC {format_number(member.value)}")
    else:
        aspect.reasons.append(f"membership inference not available: {member.reason}"
                              if member is not None and member.reason else "no membership attack measured in this run")

    if parts:
        w = PRIVACY_PART_WEIGHTS[goal.use_case]
        aspect.score = sum(w[k] * v for k, v in parts.items()) / sum(w[k] for k in parts)
        aspect.cost = ", ".join(costs)
    return aspect


def _intrinsic(scores: _Scores, strategy: str, variant: str, aspect_name: str) -> _Aspect:
    spec = [(m.name, m.description) for m in catalogue.headline_metrics(aspect_name)]
    found = [(label, v) for metric, label in spec if (v := scores.get(strategy, variant, metric)) is not None and v.ok]
    if not found:
        names = ", ".join(m for m, _ in spec)
        return _Aspect(reasons=[f"no {aspect_name} score ({names}) in this run"])
    text = ", ".join(f"{label} {format_number(v.value)}" for label, v in found)
    return _Aspect(score=float(np.mean([_clip(v.value) for _, v in found])), reasons=[f"{aspect_name}: {text}"])


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


def recommend(summary: pd.DataFrame, goal: Goal, families: Mapping[str, str]) -> list[Recommendation]:
    """Rank the strategies (variants) of a run for ``goal`` from its long score table (see the module
    docstring): the eligible ones by score (rank 1 = best), then the ineligible ones, unranked."""
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
            "privacy": _privacy(scores, strategy, variant, goal),
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
    """For a share-data goal in a run with a budget (``report.require``): the strategies that meet it (the
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
