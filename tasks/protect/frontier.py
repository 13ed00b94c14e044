"""The risk-meaning frontier of a protect run: one protect point per meaning floor, each certified, with the rows
it keeps and what it is still good for.

What identifies people is often what they talk about, so no single meaning floor fits every corpus: a lower floor
lets stronger rewrites stand (less meaning kept, less re-identification). The frontier puts the points side by
side; the chosen point is the highest floor whose certificate meets the budget (P is its output), or, where none
does, the least re-identified point, and the verdict says so. The frontier should fall as the floor falls; where a
lower floor reads higher, the table's notes say where (rewrites are stochastic and the loop stops on its judge, not
on the certificate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tasks.budgets import number
from tasks.protect.files import CURVE_COLUMNS, FRONTIER_COLUMNS, frontier_points
from tasks.protect.settings import ProtectSettings
from tasks.training.utility import run_post_utility

#: The utility figures of a point: macro-F1 on the real test rows of a model trained on the point's kept rows
#: (substitution), on the real training rows plus them (augmentation), and on the real training rows (real).
UTILITY_KEYS: tuple[str, ...] = ("substitution_macro_f1", "augmentation_macro_f1", "real_macro_f1")


def frontier_figure(settings: ProtectSettings) -> str:
    """The budget figure the frontier draws: the re-identification bound, else the budget's first."""
    columns = [b.column for b in settings.bounds]
    return next((c for c in columns if c in CURVE_COLUMNS), columns[0])


def _value(summary: Mapping[str, Any], figure: str) -> float:
    return number((summary.get("figures") or {}).get(figure, {}).get("value"))


def choose_point(summaries: Sequence[Mapping[str, Any]], figure: str, prefer: str = "balanced") -> tuple[int, str]:
    """The chosen point (``summaries`` in frontier order, highest floor first) and why: among the points whose
    certificate meets the budget, the one handing out the most meaning in all (``prefer`` balanced: rows released
    times their mean meaning), the highest floor (``meaning``) or the one releasing the most rows (``rows``), the
    higher floor among equals; where none meets it, the one reading least on ``figure`` (the highest floor among
    equals)."""
    met = [i for i, s in enumerate(summaries) if s.get("met")]
    if met:
        rows = {i: _released(summaries[i]) for i in met}
        mean = {i: number((summaries[i].get("meaning") or {}).get("value")) for i in met}
        if prefer == "meaning":
            best = met[0]
            return best, (f"it keeps the most meaning per row (the highest floor) of the {len(met)} point(s) that "
                          f"meet the budget, releasing {rows[best]} rows (--prefer meaning)")
        score = {i: float(rows[i]) if prefer == "rows" else rows[i] * np.nan_to_num(mean[i]) for i in met}
        best = max(met, key=lambda i: (score[i], -i))
        if prefer == "rows":
            return best, (f"it releases the most rows ({rows[best]}) of the {len(met)} point(s) that meet the budget "
                          f"(--prefer rows)")
        return best, (f"of the {len(met)} point(s) that meet the budget it hands out the most meaning in all: "
                      f"{rows[best]} rows at mean BERTScore {mean[best]:.3f} (--prefer balanced; meaning: the "
                      f"highest floor, rows: the most rows)")
    values = np.array([_value(s, figure) for s in summaries])
    if np.isnan(values).all():
        return len(summaries) - 1, "no point meets the budget or has a figure: the lowest floor"
    least = int(np.nanargmin(values))  # the first of equal minima: the highest floor
    return least, f"no point meets the budget: the least re-identified ({figure} {values[least]:.3g})"


def _released(summary: Mapping[str, Any]) -> int:
    """The rows a point's release hands out (its kept rows less the verbatim ones)."""
    docs = summary.get("documents") or {}
    return int(docs.get("released", docs.get("kept", 0)))


def point_utility(corpus: pd.DataFrame, table: pd.DataFrame, *, seed: int = 0) -> dict[str, Any]:
    """What a point is still good for: macro-F1 on the corpus's labelled real test rows of the linear utility model
    (C chosen on the validation rows) trained on the point's kept train rows, on the real train rows plus them, and
    on the real train rows alone; ``reason`` instead where the corpus has no labelled train and test rows."""
    empty: dict[str, Any] = {k: None for k in UTILITY_KEYS}
    if not {"label", "split"} <= set(corpus.columns):
        return {**empty, "reason": "the corpus has no label or split column"}
    labelled = corpus[corpus["label"].notna().to_numpy(bool)]
    splits = set(labelled["split"].astype("string").dropna())
    if not {"train", "test"} <= splits:
        return {**empty, "reason": "the corpus has no labelled train and test rows"}
    runs = run_post_utility(corpus, {"protect": table}, settings=("substitution", "augmentation"), fractions=(1.0,),
                            seeds=(seed,))
    out = dict(empty)
    for setting, key in (("substitution", "substitution_macro_f1"), ("augmentation", "augmentation_macro_f1"),
                         ("baseline", "real_macro_f1")):
        row = runs[(runs["setting"] == setting) & (runs["status"] == "ok")]
        out[key] = float(row["macro_f1"].iloc[0]) if len(row) else None
    failed = runs[runs["status"] != "ok"]
    if len(failed):
        out["reason"] = "; ".join(f"{s}: {r}" for s, r in zip(failed["setting"], failed["reason"], strict=True))
    return out


def frontier_table(summaries: Sequence[Mapping[str, Any]], chosen: int, settings: ProtectSettings
                   ) -> tuple[pd.DataFrame, list[str]]:
    """One row per point and certificate attack (:data:`FRONTIER_COLUMNS`; the point's figures repeated on each of
    its rows), and the notes on where the frontier is not monotone in its floors."""
    figure = frontier_figure(settings)
    rows = []
    for i, s in enumerate(summaries):
        f = (s.get("figures") or {}).get(figure, {})
        docs, meaning, link, util = s["documents"], s.get("meaning") or {}, s.get("linkability") or {}, \
            s.get("utility") or {}
        fluency = s.get("fluency") or {}
        point = {"floor": float(s["meaning_floor"]), "chosen": i == chosen, "met": bool(s["met"]), "figure": figure,
                 "value": number(f.get("value")), "ci_low": number(f.get("ci_low")),
                 "ci_high": number(f.get("ci_high")), "worst_attack": f.get("attack"),
                 "worst_adversary": f.get("adversary"), "rounds": int(s["rounds"]),
                 "documents_input": int(docs["input"]), "documents_kept": int(docs["kept"]),
                 "documents_held_back": int(docs["failed"]), "documents_rewritten": int(docs["rewritten"]),
                 "meaning": number(meaning.get("value")), "meaning_ci_low": number(meaning.get("ci_low")),
                 "meaning_ci_high": number(meaning.get("ci_high")),
                 "fluency": number(fluency.get("value")), "fluency_ci_low": number(fluency.get("ci_low")),
                 "fluency_ci_high": number(fluency.get("ci_high")), "fluency_floor": number(s.get("fluency_floor")),
                 "documents_released": _released(s),
                 "verbatim": number((s.get("figures") or {}).get("verbatim", {}).get("value")),
                 "linkability_auc": number(link.get("value")), "linkability_ci_low": number(link.get("ci_low")),
                 "linkability_ci_high": number(link.get("ci_high")),
                 **{k: number(util.get(k)) for k in UTILITY_KEYS}, "utility_note": util.get("reason"),
                 "moves": ", ".join(f"{m} {n}" for m, n in sorted((s.get("moves") or {}).items(),
                                                                   key=lambda kv: (-kv[1], kv[0])))}
        for c in s.get("certificate") or [{}]:
            rows.append({**point, **{k: c.get(k) for k in ("attack", "adversary")},
                         **{k: number(c.get(k)) for k in ("accuracy_at_1", "accuracy_at_1_ci_low",
                                                           "accuracy_at_1_ci_high", "residual_risk",
                                                           "residual_risk_ci_low", "residual_risk_ci_high")},
                         "n_timelines": int(c.get("n_timelines") or 0)})
    table = pd.DataFrame(rows, columns=list(FRONTIER_COLUMNS))
    return table, monotone_notes(table)


def monotone_notes(table: pd.DataFrame) -> list[str]:
    """Where a lower floor reads higher on the frontier's figure than the floor above it (empty: monotone)."""
    points = frontier_points(table)
    notes = []
    for (_, hi), (_, lo) in zip(points.iloc[:-1].iterrows(), points.iloc[1:].iterrows(), strict=True):
        if lo["value"] > hi["value"]:
            beyond = lo["ci_low"] > hi["ci_high"]
            notes.append(f"the frontier is not monotone: floor {lo['floor']:g} reads {lo['figure']} "
                         f"{lo['value']:.3g} above floor {hi['floor']:g}'s {hi['value']:.3g}"
                         + (" beyond their intervals" if beyond else " (within their intervals)"))
    return notes
