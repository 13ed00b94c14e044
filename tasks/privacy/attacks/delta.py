"""The Burrows' Delta attack (z-scored most frequent words), as the registry runs it; the method is
:mod:`tasks.privacy.delta`."""

from __future__ import annotations

import pandas as pd

from tasks.privacy.attacks import Attack, HistoryMemo, register_attack
from tasks.privacy.attribution import Setting
from tasks.privacy.delta import DeltaParams, DeltaProfiles, delta_attack, profile_histories
from tasks.privacy.reidentify import HistorySource, ReidResult

#: 2 x authors x MFW x 8 B: 0.18 GB at the article's 37.9k authors and 300 words.
_PROFILES = HistoryMemo()


@register_attack("delta", params=DeltaParams)
class DeltaAttack(Attack):
    """Function words: Burrows' Delta, z-scored frequencies of the histories' most frequent words (Cosine Delta by default)."""

    params: DeltaParams

    @property
    def signature(self) -> str:
        return self.params.signature

    def prepare(self, histories: HistorySource, setting: Setting, held_out: frozenset[str] | None, *,
                index: str | None = None) -> tuple[DeltaProfiles, Setting]:
        """Every history author's z-vector, without the held-out documents (once per process and setting)."""
        return _PROFILES.get(histories, self.params, held_out, profile_histories), setting

    def run(self, prepared: tuple[DeltaProfiles, Setting], timelines: pd.DataFrame) -> ReidResult:
        profiles, setting = prepared
        return delta_attack(profiles, timelines, setting)
