"""The Burrows' Delta attack (z-scored most frequent words), as the registry runs it; the method is
:mod:`tasks.privacy.delta`."""

from __future__ import annotations

import pandas as pd

from tasks.privacy.attacks import ProfilingAttack, register_attack
from tasks.privacy.attribution import Setting
from tasks.privacy.delta import DeltaParams, DeltaProfiles, delta_attack, profile_histories
from tasks.privacy.reidentify import HistorySource, ReidResult


@register_attack("delta", params=DeltaParams)
class DeltaAttack(ProfilingAttack):
    """Function words: Burrows' Delta, z-scored frequencies of the histories' most frequent words (Cosine Delta by default)."""

    params: DeltaParams

    def profile(self, histories: HistorySource, held_out: frozenset[str] | None) -> DeltaProfiles:
        """Authors x MFW x 8 B per setting: 91 MB at the article's 37.9k authors and 300 words."""
        return profile_histories(histories, self.params, held_out=held_out)

    def attribute(self, profiles: DeltaProfiles, timelines: pd.DataFrame, setting: Setting) -> ReidResult:
        return delta_attack(profiles, timelines, setting)
