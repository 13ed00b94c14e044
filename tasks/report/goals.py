"""The goals the report ranks strategies for (seed 000 §7, Figure 4): one use case (augment, share_model,
share_data) with the flags formal_dp and longitudinal, the aspect weights each goal scores by
(``WEIGHTS``), the presets (``GOALS``) and :func:`parse_goal` for the CLI and the config. Kept apart from
the ranking (:mod:`tasks.report.recommend`, whose docstring explains the goals and the weights) because
the config and the CLI read goals without ranking anything."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from tasks.errors import ConfigError, shown

UseCase = Literal["augment", "share_model", "share_data"]
USE_CASES: tuple[str, ...] = get_args(UseCase)

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
