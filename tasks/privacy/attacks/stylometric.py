"""The stylometric attack (character and word n-gram author profiles), as the registry runs it; the method
is :mod:`tasks.privacy.stylometric`."""

from __future__ import annotations

import pandas as pd

from tasks.privacy.attacks import Attack, HistoryMemo, register_attack
from tasks.privacy.attribution import Setting
from tasks.privacy.reidentify import HistorySource, ReidResult
from tasks.privacy.stylometric import HistoryProfiles, StyloParams, profile_histories, stylometric_attack

#: 2 x authors x width x 4 B: 1.2 GB at the article's 37.9k authors.
_PROFILES = HistoryMemo()


@register_attack("stylometric", params=StyloParams)
class StylometricAttack(Attack):
    """Writing style: TF-IDF author profiles of character 2-4-grams and word 1-2-grams, nearest by cosine."""

    params: StyloParams

    @property
    def signature(self) -> str:
        return self.params.signature

    def prepare(self, histories: HistorySource, setting: Setting, held_out: frozenset[str] | None, *,
                index: str | None = None) -> tuple[HistoryProfiles, Setting]:
        """Every history author's profile, without the held-out documents (once per process and setting)."""
        return _PROFILES.get(histories, self.params, held_out, profile_histories), setting

    def run(self, prepared: tuple[HistoryProfiles, Setting], timelines: pd.DataFrame) -> ReidResult:
        profiles, setting = prepared
        return stylometric_attack(profiles, timelines, setting)
