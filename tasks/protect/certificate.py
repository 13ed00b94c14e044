"""The certificate of a protect output: every registered attack run again on what the output exposes, against the
full histories (both halves: what a real adversary holds), after the last round.

The loop's judge profiles half of each author's history, so it is weaker than the adversary by construction; it
steers the loop and decides when to stop, but it never certifies. The certificate's worst case decides the exit
code, the verdict line, the report's Protection section and what ``release`` states and refuses. It attacks the
kept output at the unit it exposes: whole timelines (an author's documents in one group, in runs of
``timeline_posts`` when set) while P keeps authors and groups linked. Beside the attacks it states the PII still
in the text (with a pii_leakage bound) and the share of documents that hold a run of their source (``verbatim``:
always). With a profiling bound, the judge's attribute classifier is trained on the full histories.

It is cached by what it attacks (the kept documents and their texts, the attacks and their parameters): a rerun of
a finished protect run reads it back.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.corpus.importers import write_parquet_atomic
from tasks.privacy.attacks import AttackPlan
from tasks.privacy.audit import attack_timelines
from tasks.protect.attackers import (
    Attackers,
    Profilers,
    RoleSpec,
    attack_figures,
    attack_rows,
    residual,
    share_figure,
    summaries,
)
from tasks.protect.files import VERBATIM_COLUMN
from tasks.store import fingerprint_config, fingerprint_frame

ROLE = "certificate"


@dataclass
class Certificate:
    """The certificate's per-timeline attack rows, their summaries, its figures, and the attacks it left out."""

    attacks: pd.DataFrame
    summaries: list[dict[str, Any]]
    figures: dict[str, dict[str, Any]]
    left_out: Mapping[str, str]
    seconds: float

    def rows(self) -> list[dict[str, Any]]:
        """One row per (attack, adversary): accuracy@1 and the residual risk over chance with their 95% intervals,
        timelines, chance (what the summary, the report and the card list)."""
        out = []
        for s in self.summaries:
            value, low, high = residual(s)
            out.append({"attack": s["attack"], "adversary": s["adversary"], "accuracy_at_1": s["accuracy_at_1"],
                        "accuracy_at_1_ci_low": s["accuracy_at_1_ci_low"],
                        "accuracy_at_1_ci_high": s["accuracy_at_1_ci_high"], "residual_risk": value,
                        "residual_risk_ci_low": low, "residual_risk_ci_high": high, "n_timelines": s["n_timelines"],
                        "chance": s.get("chance")})
        return out


def kept_timelines(table: pd.DataFrame, timeline_posts: int | None) -> pd.DataFrame:
    """What the output exposes to an attack: its kept documents as timelines (an author's documents in one group)."""
    return attack_timelines(table, timeline_posts)


def certify(table: pd.DataFrame, *, histories: str, plan: AttackPlan, params: Mapping[str, Mapping[str, Any]],
            adversaries: tuple[str, ...], timeline_posts: int | None, decide_on: str, corpus: pd.DataFrame,
            cache: Path, profiling: Mapping[str, Any] | None = None, pii: tuple[int, int] | None = None,
            seed: int = 0, shards: tuple[str, ...] = ()) -> Certificate:
    """Run every attack of ``plan`` (with ``params``) under each of ``adversaries`` against ``histories`` (the full
    file) on the kept ``table`` (the protected table's rows: doc_id, author_id, group_id, text, status, verbatim);
    ``profiling``: the judge classifier's parameters, with a profiling bound; ``pii``: (leaked spans, source spans)
    of the kept documents, with a pii_leakage bound; ``shards``: the halves of ``histories`` (an index an attack
    built for a half serves the full histories: :class:`tasks.protect.attackers.RoleSpec`)."""
    started = time.perf_counter()
    timelines = kept_timelines(table, timeline_posts)
    specs = tuple((name, dict(params.get(name, {}))) for name in plan.names)
    key = fingerprint_config({"docs": fingerprint_frame(timelines),
                              "attacks": [list(s) for s in specs], "adversaries": list(adversaries),
                              "profiling": dict(profiling) if profiling is not None else None})[:24]
    path = cache / f"certificate-{key}.attacks.parquet"
    if path.exists():
        attacks = pd.read_parquet(path)
    else:
        corpus_docs = frozenset(corpus["doc_id"].astype(str))
        frames = [Attackers([RoleSpec(ROLE, specs, histories, adversaries, shards)], corpus_docs, cache).run(timelines)]
        if profiling is not None:
            frames.append(Profilers({ROLE: (histories, profiling)}, adversaries, corpus, seed).run(timelines))

        attacks = attack_rows(frames)
        cache.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(attacks, path)
    summary = summaries(attacks)
    figures = attack_figures(summary, ROLE, decide_on, profiling is not None)
    flags = table[VERBATIM_COLUMN].to_numpy(bool) if VERBATIM_COLUMN in table.columns else np.zeros(len(table), bool)
    figures["verbatim"] = share_figure(int(flags.sum()), len(flags), what="verbatim")
    if pii is not None:
        figures["pii_leakage"] = share_figure(*pii, what="pii")
    return Certificate(attacks, summary, figures, dict(plan.left_out), time.perf_counter() - started)
