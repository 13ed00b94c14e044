"""The aspect scores behind a recommendation (:mod:`tasks.report.recommend`, whose docstring states the
formulas): utility (the substitution gap or the augmentation gain over the real-data baseline), privacy
(re-identification, profiling, membership), the moments-of-change recall of a longitudinal goal and the
intrinsic aspects (meaning, style, divergence), each 0..1 with the reasons and numbers it rests on."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tasks.metrics import catalogue
from tasks.privacy.audit import NOTHING_MEASURABLE
from tasks.report.goals import Goal
from tasks.report.score_lookup import (
    _clip,
    _Scores,
    _Value,
    format_delta,
    format_number,
    format_percent,
    metric_label,
)
from tasks.scores import CHANCE, ORIGINAL, column_key

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

#: The profiling measures the privacy aspect scores (their rows carry attribute and model).
_PROFILING_METRICS = ("profiling_accuracy", "llm_profiling_accuracy", "llm_profiling_success")


@dataclass
class _Aspect:
    score: float | None = None  # None: not measured
    reasons: list[str] = field(default_factory=list)
    cost: str = ""
    seeds: int | None = None


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


def _own_real_accuracy(scores: _Scores, strategy: str, variant: str, metric: str, value: _Value) -> _Value | None:
    """The real text's profiling accuracy on the test units this strategy covered: its accuracy plus its own
    ``profiling_reduction`` (the pair the privacy stage measures), or None where it has none (the LLM attacks)."""
    about = {k: v for k, v in scores.structure.get(metric, {}).items() if k != "metric"}
    reduction = scores.get(strategy, variant, column_key("profiling_reduction", about))
    if scores.structure[metric]["metric"] != "profiling_accuracy" or reduction is None or not reduction.ok:
        return None
    return _Value(value.value + reduction.value, math.nan, value.n, None)


def _privacy(scores: _Scores, strategy: str, variant: str, goal: Goal, trials: str = "author timelines") -> _Aspect:
    """The privacy aspect of one strategy for ``goal``; ``trials`` names what one re-identification trial is (turns,
    posts, author timelines)."""
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
        of = f"{reid.n:,} {trials}" if reid.n else trials
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
        if real is None or not real.ok:  # strategies disagree on it: this strategy's own, on the units it covered
            real = _own_real_accuracy(scores, strategy, variant, metric, value) or real
        if real is None or not real.ok or chance is None or not chance.ok:
            # Never dropped: a part left out would renormalise the privacy score over the others, and a strategy
            # would rank more private for a baseline it lacks. The conservative reading counts.
            why = next((b.reason for b in (real, chance) if b is not None and not b.ok and b.reason),
                       "no real-text or chance baseline")
            profiled.append(0.0)
            aspect.reasons.append(f"{label} {format_number(value.value)} has no single real-text or chance baseline "
                                  f"({why}): counted as no reduction, the conservative reading")
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

