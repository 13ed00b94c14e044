"""The files one protect run writes beside its output ``P.parquet``: the rounds table, the failures, the
summary, the frontier. Every reader and writer takes the names from here; the report reads protect's outputs
through this module only (it imports nothing else of protect)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

#: Columns the protected table adds to the synthetic table's schema (``verbatim``: the document holds a run of its
#: source's characters, :mod:`tasks.metrics.verbatim`; ``release`` leaves such documents out).
ROUND_COLUMN, MOVE_COLUMN, VERBATIM_COLUMN = "round", "move", "verbatim"
#: The document's fluency against its source (:mod:`tasks.metrics.fluency`): set where a later round's move was
#: kept, and for every kept document once the loop is done.
FLUENCY_COLUMN = "fluency"
#: The source a protect round's output depends on (a change recomputes the rounds; the flow's cache key of the
#: protect stage reads it too): the intervals and the budget decide which documents a round moves, and a round keeps
#: its attacks' summaries.
ROUND_CODE: tuple[str, ...] = ("tasks/protect", "tasks/privacy", "tasks/generate", "tasks/signatures.py",
                               "tasks/models/pii.py", "tasks/metrics/meaning.py", "tasks/metrics/verbatim.py",
                               "tasks/metrics/fluency.py",
                               "tasks/intervals.py", "tasks/budgets.py")
ROUNDS_COLUMNS = ["round", "attack", "adversary", "role", "accuracy_at_1", "accuracy_at_1_ci_low",
                  "accuracy_at_1_ci_high", "accuracy_at_10", "n_timelines", "chance", "residual_risk",
                  "residual_risk_ci_low", "residual_risk_ci_high", "meaning", "documents_rewritten", "seconds"]

#: The rounds table's roles: the feedback attacks steer, the judge decides when the loop stops, ``check`` (round 0)
#: runs the registered attacks a narrowed judge leaves out, and the ``certificate`` (the last round) runs every
#: registered attack on the full histories: it decides the verdict.
ROLES: tuple[str, ...] = ("feedback", "judge", "check", "certificate")

#: The re-identification budget figures the protect curve can draw, by the rounds table's column holding each
#: (with ``_ci_low``/``_ci_high`` beside it).
CURVE_COLUMNS: dict[str, str] = {"reidentification": "accuracy_at_1", "reidentification_risk": "residual_risk"}

#: The frontier table ``P.frontier.parquet``: one row per meaning floor and certificate attack; the point's figures
#: (the budget's re-identification figure with its interval, rows kept and held back, meaning, linkability at post
#: unit, utility, the moves that made the kept documents as ``move count, ...``) are repeated on each of its rows
#: (:mod:`tasks.protect.frontier`).
FRONTIER_COLUMNS: tuple[str, ...] = (
    "floor", "chosen", "met", "figure", "value", "ci_low", "ci_high", "worst_attack", "worst_adversary", "rounds",
    "documents_input", "documents_kept", "documents_held_back", "documents_rewritten", "meaning", "meaning_ci_low",
    "meaning_ci_high", "fluency", "fluency_ci_low", "fluency_ci_high", "fluency_floor", "documents_released",
    "verbatim", "linkability_auc", "linkability_ci_low", "linkability_ci_high",
    "substitution_macro_f1", "augmentation_macro_f1", "real_macro_f1", "utility_note", "moves", "attack", "adversary",
    "accuracy_at_1", "accuracy_at_1_ci_low", "accuracy_at_1_ci_high", "residual_risk", "residual_risk_ci_low",
    "residual_risk_ci_high", "n_timelines")

#: The ``attack`` of a profiling row of the rounds table is this prefix and the attribute's name (``profiling:age``);
#: its accuracy_at_1 is the attribute classifier's accuracy, its accuracy_at_10 empty.
PROFILING_ATTACK = "profiling:"

#: The keys of ``P.protect.json`` every reader may rely on (the loop writes at least these).
PROTECT_SUMMARY_KEYS: tuple[str, ...] = ("tool_version", "signature", "budget", "decide_on", "met", "rounds",
                                         "start", "ladder", "meaning_metric", "meaning_floor", "on_fail", "figures",
                                         "certificate", "meaning", "documents", "verdict")


class ProtectPaths(NamedTuple):
    """``P.parquet`` and the files beside it."""

    table: Path
    rounds: Path
    failures: Path
    summary: Path
    private: Path  # folder: the pseudonym mapping, never handed out
    frontier: Path
    frontier_plot: Path  # the frontier drawn (written when the run has several floors)
    mapping: Path  # the pseudonym mapping, in ``private``


def mapping_path(out: str | Path) -> Path:
    """Where the pseudonym mapping of the output ``out`` (``P.parquet``) goes: ``private/P.pii_mapping.parquet``
    beside it (it undoes the pseudonyms: never handed out). ``synthugc protect`` and ``synthugc pseudonymize``
    both write it there."""
    out = Path(out)
    return out.parent / "private" / f"{out.name.removesuffix('.parquet')}.pii_mapping.parquet"


def protect_paths(out: str | Path) -> ProtectPaths:
    """The files of the protect output ``out`` (``P.parquet`` -> ``P.rounds.parquet``, ``P.failures.parquet``,
    ``P.protect.json``, ``private/``, ``P.frontier.parquet``, ``P.frontier.png``, :func:`mapping_path`)."""
    out = Path(out)
    stem = out.name.removesuffix(".parquet")
    return ProtectPaths(out, out.with_name(f"{stem}.rounds.parquet"), out.with_name(f"{stem}.failures.parquet"),
                        out.with_name(f"{stem}.protect.json"), mapping_path(out).parent,
                        out.with_name(f"{stem}.frontier.parquet"), out.with_name(f"{stem}.frontier.png"),
                        mapping_path(out))


def frontier_points(table: pd.DataFrame) -> pd.DataFrame:
    """One row per point of a frontier table, highest floor first."""
    return table.drop_duplicates("floor").sort_values("floor", ascending=False, kind="stable").reset_index(drop=True)
