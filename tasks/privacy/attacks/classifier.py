"""The classifier attack (a one-vs-rest linear SVM over the history posts' character and word n-grams), as
the registry runs it; the method is :mod:`tasks.privacy.classifier`."""

from __future__ import annotations

from collections.abc import Hashable

import pandas as pd

from tasks.privacy.attacks import Prepared, ProfilingAttack, register_attack
from tasks.privacy.attribution import Setting
from tasks.privacy.classifier.attack import classifier_attack, fit_classifier
from tasks.privacy.classifier.exact import ExactModel, exact_evidence
from tasks.privacy.classifier.params import ClassifierParams
from tasks.privacy.classifier.two_stage import TwoStageSide
from tasks.privacy.reidentify import HistorySource, ReidResult
from tasks.privacy.stylometric.evidence import evidence_key, stylometric_evidence
from tasks.privacy.stylometric.params import StyloParams
from tasks.settings import run_cache_dir


@register_attack("classifier", params=ClassifierParams, returns_evidence=True)
class ClassifierAttack(ProfilingAttack):
    """Discriminative: a one-vs-rest linear SVM over character 2-4-grams and word 1-2-grams of the history posts (two stages at scale: stylometric top-K, then re-ranked)."""

    params: ClassifierParams

    def __init__(self, params: ClassifierParams) -> None:
        super().__init__(params)
        #: the run's cache folder, taken where the attack is built (the stage's thread), so the threads that
        #: prepare it later keep fitted models there too (:func:`tasks.settings.run_cache_dir`)
        self.cache_dir = run_cache_dir()

    def profile(self, histories: HistorySource, held_out: frozenset[str] | None) -> ExactModel | TwoStageSide:
        """Exact: the SVM (authors x n-grams x 8 B: 0.15 GB for the 181 conventions speakers). Two stages:
        the stylometric profiles (shared with the stylometric attack) and a 4 MB bucket IDF; the candidates'
        posts are read again by each attack. A fitted exact model is kept in ``<run's cache folder>/classifier``."""
        return fit_classifier(histories, self.params, held_out, cache=self.cache_dir / "classifier")

    def attribute(self, profiles: ExactModel | TwoStageSide, timelines: pd.DataFrame, setting: Setting) -> ReidResult:
        return classifier_attack(profiles, timelines, setting)

    def evidence(self, prepared: Prepared, timelines: pd.DataFrame, top: int = 20, *,
                 authors: set[str] | None = None) -> pd.DataFrame:
        """Exact mode: the n-grams with the largest contribution ``x_f * w_f`` to the true author's decision value
        (:func:`tasks.privacy.classifier.exact.exact_evidence`), from the model ``prepare`` fitted (or read from
        the cache folder): nothing is refitted, whatever ``authors`` holds (it only limits whose timelines get rows).
        Two stages: the re-ranker's model is trained per timeline and not kept, so the evidence is stage 1's, the
        stylometric attack's default profiles (:func:`tasks.privacy.stylometric.evidence.stylometric_evidence`),
        which decide whether the true author is re-ranked at all."""
        side = prepared.profiles
        if isinstance(side, ExactModel):
            return exact_evidence(side, timelines, top, authors)
        return stylometric_evidence(prepared.histories, timelines, StyloParams(), held_out=prepared.held_out, top=top,
                                    authors=authors)

    def evidence_key(self, prepared: Prepared) -> Hashable:
        """Two stages: the stylometric attack's with its default parameters (the same rows)."""
        if isinstance(prepared.profiles, ExactModel):
            return super().evidence_key(prepared)
        return evidence_key(prepared.histories, prepared.held_out, StyloParams())
