"""The classifier attack (a one-vs-rest linear SVM over the history posts' character and word n-grams), as
the registry runs it; the method is :mod:`tasks.privacy.classifier`."""

from __future__ import annotations

import pandas as pd

from tasks.privacy.attacks import ProfilingAttack, register_attack
from tasks.privacy.attribution import Setting
from tasks.privacy.classifier import (
    ClassifierParams,
    ExactModel,
    TwoStageSide,
    classifier_attack,
    fit_classifier,
)
from tasks.privacy.reidentify import HistorySource, ReidResult


@register_attack("classifier", params=ClassifierParams)
class ClassifierAttack(ProfilingAttack):
    """Discriminative: a one-vs-rest linear SVM over character 2-4-grams and word 1-2-grams of the history posts (two stages at scale: stylometric top-K, then re-ranked)."""

    params: ClassifierParams

    def profile(self, histories: HistorySource, held_out: frozenset[str] | None) -> ExactModel | TwoStageSide:
        """Exact: the SVM (authors x n-grams x 8 B: 0.15 GB for the 181 conventions speakers). Two stages:
        the stylometric profiles (shared with the stylometric attack) and a 4 MB bucket IDF; the candidates'
        posts are read again by each attack. A fitted exact model is kept in ``<cache_dir>/classifier``."""
        from tasks.settings import get_settings

        return fit_classifier(histories, self.params, held_out, cache=get_settings().cache_dir / "classifier")

    def attribute(self, profiles: ExactModel | TwoStageSide, timelines: pd.DataFrame, setting: Setting) -> ReidResult:
        return classifier_attack(profiles, timelines, setting)
