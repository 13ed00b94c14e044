"""Every re-identification attack under every adversary setting, one summary row each, and the worst
case a privacy verdict must use.

Attacks: ``minhash`` (near-duplicate posts, :mod:`tasks.privacy.reidentify`), ``stylometric``
(character and word n-gram author profiles, :mod:`tasks.privacy.stylometric`; the histories are
profiled once per process for each setting and reused by every strategy, :func:`history_profiles`), ``embedding`` (mean sentence
embeddings, :mod:`tasks.privacy.embedding_attack`; a GPU attack, in ``all`` only when CUDA is present).
Settings: ``full`` and ``disjoint`` (:mod:`tasks.privacy.attribution`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import pandas as pd

from tasks.metrics.base import make_signature
from tasks.privacy.attribution import SETTINGS, Setting, check_setting
from tasks.privacy.reidentify import HistorySource, LSHParams, ReidResult, reidentify

ATTACKS = ("minhash", "stylometric", "embedding")
CPU_ATTACKS = ("minhash", "stylometric")
SUMMARY_FIELDS = ["attack", "adversary", "accuracy_at_1", "accuracy_at_10", "mrr", "chance", "chance_at_10",
                  "chance_mrr", "n_timelines", "n_no_history", "n_history_users", "n_history_posts", "signature",
                  "reason"]


def _gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover - torch is a dependency
        return False


def attack_names(attack: str) -> list[str]:
    """The attacks ``--attack`` names: one of ATTACKS, or ``all`` (the CPU attacks, plus embedding on a GPU)."""
    if attack == "all":
        return list(CPU_ATTACKS) + (["embedding"] if _gpu() else [])
    if attack not in ATTACKS:
        raise ValueError(f"attack must be one of {', '.join(ATTACKS)} or all; got {attack!r}")
    return [attack]


def setting_names(setting: str) -> list[Setting]:
    """The settings ``--setting`` names: full, disjoint or both."""
    return list(SETTINGS) if setting == "both" else [check_setting(setting)]


def minhash_signature(params: LSHParams, jaccard_threshold: float | None) -> str:
    """The MinHash attack's signature (its parameters and the Jaccard filter)."""
    return make_signature("reid_minhash", **asdict(params), jaccard=jaccard_threshold)


_PROFILES: OrderedDict[tuple, Any] = OrderedDict()
_PROFILES_LOCK = threading.Lock()
_PROFILES_KEPT = 2  # full and disjoint: every strategy of a run attacks the same two


def history_profiles(histories: HistorySource, params: Any, held_out: frozenset[str] | None) -> Any:
    """The stylometric profiles of a history file, computed once per process for each (file contents,
    parameters, held-out documents) and reused by every strategy and variant of a run. DataFrames are not
    remembered. The last two stay in memory (full and disjoint): 2 x authors x width x 4 B, 1.2 GB at the
    article's 37.9k authors."""
    from tasks.privacy.stylometric import profile_histories

    if isinstance(histories, pd.DataFrame):
        return profile_histories(histories, params, held_out=held_out)
    path = os.fspath(histories)
    stat = os.stat(path)
    held = hashlib.sha256("\n".join(sorted(held_out)).encode()).hexdigest() if held_out is not None else None
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns, params, held)
    with _PROFILES_LOCK:  # one thread profiles; the others wait for its result instead of redoing it
        if key in _PROFILES:
            _PROFILES.move_to_end(key)
            return _PROFILES[key]
        profiles = profile_histories(path, params, held_out=held_out)
        _PROFILES[key] = profiles
        while len(_PROFILES) > _PROFILES_KEPT:
            _PROFILES.popitem(last=False)
        return profiles


def run_attacks(histories: HistorySource, synthetic: pd.DataFrame, *, attack: str = "all", setting: str = "both",
                minhash: dict[str, Any] | None = None, stylometric: dict[str, Any] | None = None,
                embedding: dict[str, Any] | None = None) -> list[ReidResult]:
    """One result per (attack, setting); each summary names its ``attack``, ``adversary`` and signature."""
    from tasks.privacy.attribution import held_out_doc_ids
    from tasks.privacy.stylometric import StyloParams, stylometric_attack

    names, settings = attack_names(attack), setting_names(setting)
    mh = dict(minhash or {})
    results = []
    for name in names:
        for adv in settings:
            if name == "minhash":
                res = reidentify(histories, synthetic, setting=adv, **mh)
                lsh = LSHParams(**{k: v for k, v in mh.items() if k in LSHParams.__dataclass_fields__})
                res.summary["signature"] = minhash_signature(lsh, mh.get("jaccard_threshold"))
            elif name == "stylometric":
                params = StyloParams(**(stylometric or {}))
                res = stylometric_attack(history_profiles(histories, params, held_out_doc_ids(synthetic, adv)),
                                         synthetic, adv)
            else:
                from tasks.privacy.embedding_attack import reidentify_embedding

                res = reidentify_embedding(histories, synthetic, setting=adv, **(embedding or {}))
            results.append(res)
    return results


def summary_table(summaries: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per (attack, adversary) with real columns (SUMMARY_FIELDS)."""
    rows = [{f: s.get(f) for f in SUMMARY_FIELDS} for s in summaries]
    table = pd.DataFrame(rows, columns=SUMMARY_FIELDS)
    table["reason"] = table["reason"].astype("string")
    return table


def worst_case(rows: pd.DataFrame, metric: str = "accuracy_at_1", by: Sequence[str] = ("strategy",)) -> pd.DataFrame:
    """Per ``by`` group, the (attack, adversary) with the highest ``metric`` (the verdict a user must
    read: the strongest attack wins); rows whose value is nan never win. Ties go to the first in
    (attack, adversary) order. Columns: by..., attack, adversary, metric value, n_attacks."""
    keys = list(by)
    valid = rows[rows[metric].notna()].sort_values([*keys, "attack", "adversary"], kind="stable")
    if valid.empty:
        return pd.DataFrame(columns=[*keys, "attack", "adversary", metric, "n_attacks"])
    best = valid.loc[valid.groupby(keys, sort=True)[metric].idxmax()]
    counts = valid.groupby(keys, sort=True).size().rename("n_attacks").reset_index()
    return best[[*keys, "attack", "adversary", metric]].merge(counts, on=keys).reset_index(drop=True)
