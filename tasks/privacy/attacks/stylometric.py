"""The stylometric attack (character and word n-gram author profiles), as the registry runs it; the method
is :mod:`tasks.privacy.stylometric`."""

from __future__ import annotations

from collections.abc import Hashable

import pandas as pd

from tasks.privacy.attacks import Prepared, ProfilingAttack, register_attack
from tasks.privacy.attribution import Setting
from tasks.privacy.reidentify import HistorySource, ReidResult
from tasks.privacy.stylometric.evidence import evidence_key, stylometric_evidence
from tasks.privacy.stylometric.params import StyloParams
from tasks.privacy.stylometric.profiles import HistoryProfiles, profile_histories
from tasks.privacy.stylometric.scoring import stylometric_attack


@register_attack("stylometric", params=StyloParams, returns_evidence=True)
class StylometricAttack(ProfilingAttack):
    """Writing style: TF-IDF author profiles of character 2-4-grams and word 1-2-grams, nearest by cosine."""

    params: StyloParams

    def profile(self, histories: HistorySource, held_out: frozenset[str] | None) -> HistoryProfiles:
        """Authors x width x 4 B per setting: 0.62 GB at the article's 37.9k authors."""
        return profile_histories(histories, self.params, held_out=held_out)

    def attribute(self, profiles: HistoryProfiles, timelines: pd.DataFrame, setting: Setting) -> ReidResult:
        return stylometric_attack(profiles, timelines, setting)

    def evidence(self, prepared: Prepared, timelines: pd.DataFrame, top: int = 20, *,
                 authors: set[str] | None = None) -> pd.DataFrame:
        """The character and word n-grams that brought each timeline closest to its true author."""
        return stylometric_evidence(prepared.histories, timelines, self.params, held_out=prepared.held_out, top=top,
                                    authors=authors)

    def evidence_key(self, prepared: Prepared) -> Hashable:
        return evidence_key(prepared.histories, prepared.held_out, self.params)
