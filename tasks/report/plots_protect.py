"""The report's protect figures (see :mod:`tasks.report.plots` for what every plot promises): the protect
loop's rounds and the risk-meaning frontier of a protect run, each against the budget's bound."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from tasks.protect.files import CURVE_COLUMNS
from tasks.report.plots import (
    OKABE_ITO,
    Plot,
    _bounds,
    _error_bars,
    _finished,
    _missing,
    _numeric,
    _padded_limits,
    _skipped,
    _style_axes,
    _text,
    new_figure,
)

# ------------------------------------------------------------------------------------------ 6. protect
PROTECT_TITLE = "Protect: re-identification against meaning, round by round"
#: The protect roles the curve draws, each with its colour and words (the judge decides the budget).
PROTECT_SERIES: dict[str, tuple[str, str]] = {
    "judge": (OKABE_ITO[3], "judge (half the histories: stops the loop)"),
    "feedback": (OKABE_ITO[0], "feedback (steers the rewriting)"),
    "certificate": (OKABE_ITO[5], "certificate (every attack, full histories: decides the budget)")}
_SERIES_MARKS: tuple[tuple[str, int], ...] = (("o", 6), ("s", -12), ("D", 14))  # marker, label offset per series


#: How the protect curve labels each figure it can draw (:data:`tasks.protect.files.CURVE_COLUMNS`): the y axis
#: and the budget line's words.
CURVE_LABELS: dict[str, tuple[str, str]] = {
    "reidentification": ("timelines re-identified, accuracy@1", "re-identification"),
    "reidentification_risk": ("residual re-identification risk over chance", "residual risk")}


def protect_curve_chart(curve: pd.DataFrame, limit: float | None = None, figure: str = "reidentification") -> Plot:
    """The protect loop's path: per round, the judge's and the feedback attack's worst ``figure`` (y, lower =
    more private: accuracy@1, or the residual risk over chance 1/N) against the round's mean meaning (x,
    BERTScore F1), points labelled by round, the budget's bound as a dashed line. ``curve`` rows: round, role,
    the figure's column (:data:`tasks.protect.files.CURVE_COLUMNS`), meaning, optional ``<column>_ci_low``/``_ci_high`` (drawn as
    error bars: the 95% interval)."""
    column, (ylabel, words_of) = CURVE_COLUMNS[figure], CURVE_LABELS[figure]
    name = "protect-rounds"
    what = ("the share of timelines the worst attack still attributes to their author" if column == "accuracy_at_1"
            else "the worst attack's residual risk over chance (how far above guessing it re-identifies the "
                 "timelines whose author the adversary knows)")
    caption = (f"Each point is one round of the protect loop: {what} (lower = more private) against the meaning "
               "the round's texts keep (BERTScore F1 against the source, right = more kept), labelled by round "
               "(r0 = the starting move). The feedback attack steers the rewriting; the judge attacks, on the other "
               "half of each user's history, decide when the loop stops; the certificate, every registered attack "
               "run again after the last round against the full histories, decides the budget.")
    problem = _missing(curve, ["round", "role", column, "meaning"])
    if problem:
        return _skipped(name, PROTECT_TITLE, caption, problem)
    low, high = _bounds(curve, column)
    frame = pd.DataFrame({"round": _numeric(curve["round"]).to_numpy(), "role": curve["role"].map(_text).to_numpy(),
                          "x": _numeric(curve["meaning"]).to_numpy(), "y": _numeric(curve[column]).to_numpy(),
                          "y_low": low, "y_high": high})
    frame = frame[frame["role"].isin(list(PROTECT_SERIES))].dropna(subset=["round", "x", "y"])
    if frame.empty:
        return _skipped(name, PROTECT_TITLE, caption, f"needs at least 1 round with finite {ylabel} and meaning")
    fig = new_figure()
    ax = fig.add_subplot()
    _style_axes(ax)
    if (frame["y_low"].notna() & frame["y_high"].notna()).any():
        caption += (" Bars: the 95% interval (Wilson) of each share." if column == "accuracy_at_1" else
                    " Bars: the 95% interval of each risk (Anonymeter's, over chance).")
    for k, (role, (colour, words)) in enumerate(PROTECT_SERIES.items()):
        part = frame[frame["role"] == role].sort_values("round")
        if part.empty:
            continue
        _error_bars(ax, part, "y", colour)
        marker, offset = _SERIES_MARKS[k % len(_SERIES_MARKS)]
        ax.plot(part["x"], part["y"], color=colour, marker=marker, markersize=7, linewidth=1.4,
                markeredgecolor="#1b1f24", label=words, zorder=3)
        for x, y, r in zip(part["x"], part["y"], part["round"], strict=True):  # judge above, feedback below
            ax.annotate(f"r{r:.0f}", (x, y), xytext=(6, offset), textcoords="offset points",
                        fontsize=8.5, color=colour)
    return _risk_meaning_finished(fig, ax, frame, limit, words_of, ylabel, "the round", name, PROTECT_TITLE, caption)


def _risk_meaning_finished(fig: Figure, ax, frame: pd.DataFrame, limit: float | None, words_of: str, ylabel: str,
                           of: str, name: str, title: str, caption: str) -> Plot:
    """A protect chart's common end: the budget's bound as a dashed line (said in the caption), risk on [0, 1]
    against the meaning kept (mean BERTScore F1 of ``of``), titles, legend."""
    if limit is not None and math.isfinite(limit):
        ax.axhline(limit, color="#57606a", linestyle="--", linewidth=1.3, zorder=1,
                   label=f"budget: {words_of} ≤ {limit:g}")
        caption += f" The dashed line is the budget's bound on the {words_of}."
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlim(*_padded_limits(frame["x"].to_numpy(), 0.0, 1.0, 0.2))
    ax.set_xlabel(f"meaning kept (mean BERTScore F1 of {of})", fontsize=10)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8.5, frameon=False, loc="best")
    return _finished(name, title, caption, fig)


FRONTIER_TITLE = "Protect: the risk-meaning frontier, one certified point per meaning floor"


def protect_frontier_chart(frontier: pd.DataFrame, limit: float | None = None) -> Plot:
    """The frontier of a protect run: per meaning floor, the certificate's worst figure (y, with its 95% interval)
    against the meaning its output keeps (x, mean BERTScore F1 with its bootstrap interval), points labelled by
    floor, the chosen point ringed, the budget's bound as a dashed line. ``frontier``:
    :data:`tasks.protect.files.FRONTIER_COLUMNS` (one row per point is enough)."""
    name = "protect-frontier"
    caption = ("Each point is one protect run at a meaning floor (a move is kept only if the document keeps at "
               "least that BERTScore F1 against its source), certified by every registered attack on the full "
               "histories: the worst attack's figure (lower = more private) against the mean meaning the output keeps "
               "(right = more kept). Bars: 95% intervals. The ringed point is the one chosen: the highest floor "
               "whose certificate meets the budget, else the least re-identified.")
    problem = _missing(frontier, ["floor", "value", "meaning", "chosen", "figure"])
    if problem:
        return _skipped(name, FRONTIER_TITLE, caption, problem)
    points = frontier.drop_duplicates("floor")
    frame = pd.DataFrame({"floor": _numeric(points["floor"]).to_numpy(), "x": _numeric(points["meaning"]).to_numpy(),
                          "y": _numeric(points["value"]).to_numpy(),
                          "x_low": _numeric(points.get("meaning_ci_low", pd.Series(np.nan, index=points.index))).to_numpy(),
                          "x_high": _numeric(points.get("meaning_ci_high", pd.Series(np.nan, index=points.index))).to_numpy(),
                          "y_low": _numeric(points.get("ci_low", pd.Series(np.nan, index=points.index))).to_numpy(),
                          "y_high": _numeric(points.get("ci_high", pd.Series(np.nan, index=points.index))).to_numpy(),
                          "chosen": points["chosen"].astype(bool).to_numpy()}).dropna(subset=["x", "y"])
    if frame.empty:
        return _skipped(name, FRONTIER_TITLE, caption, "needs at least 1 point with a finite figure and meaning")
    figure = str(points["figure"].iloc[0])
    ylabel, words_of = CURVE_LABELS.get(figure, (figure, figure))
    frame = frame.sort_values("floor", ascending=False)
    fig = new_figure()
    ax = fig.add_subplot()
    _style_axes(ax)
    colour = PROTECT_SERIES["certificate"][0]
    _error_bars(ax, frame, "y", colour)
    _error_bars(ax, frame, "x", colour)
    ax.plot(frame["x"], frame["y"], color=colour, marker="D", markersize=7, linewidth=1.4, markeredgecolor="#1b1f24",
            label="certificate's worst attack", zorder=3)
    for x, y, floor in zip(frame["x"], frame["y"], frame["floor"], strict=True):
        ax.annotate(f"floor {floor:g}", (x, y), xytext=(6, 6), textcoords="offset points", fontsize=8.5, color=colour)
    chosen = frame[frame["chosen"]]
    if len(chosen):
        ax.scatter(chosen["x"], chosen["y"], s=260, facecolors="none", edgecolors="#1b1f24", linewidths=1.6,
                   zorder=4, label="chosen point (the output P)")
    return _risk_meaning_finished(fig, ax, frame, limit, words_of, ylabel, "the output", name, FRONTIER_TITLE, caption)
