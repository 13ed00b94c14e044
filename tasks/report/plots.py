"""The report's plots, drawn with matplotlib (Agg, no pyplot, so no global state) and embedded in the
self-contained HTML page as inline PNG data URIs.

Every plot function takes plain DataFrames and returns a :class:`Plot`; it never raises on empty, NaN or
infinite input: non-finite values are dropped and, when nothing drawable is left, ``png`` is ``None`` and
``reason`` says why. The same input gives the same PNG bytes (fixed size and dpi, no software/date metadata).

- :func:`cosine_distributions`: the FCSD picture of seed 001 (cosine of each real / synthetic text embedding
  to the mean of the real embeddings, as two density curves per strategy).
- :func:`tradeoff_chart`: meaning kept vs divergence from the source, coloured by re-identification.
- :func:`correlation_heatmap`: absolute Spearman between metrics across strategies (seed 000 Fig. 5).
- :func:`reid_vs_divergence`: re-identification rate against divergence, with the chance rate.
- :func:`metaeval_chart`: per metric and manipulation, Spearman with the true ranking of increasingly
  manipulated bags (seed 003 Fig. 1).

This module holds :class:`Plot`, the fixed size and palette, the helpers every figure uses (label
placement, error bars, limits) and the two strategy-point charts; the metric figures are in
:mod:`tasks.report.plots_metrics`, the protect figures in :mod:`tasks.report.plots_protect`.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib import colormaps, patheffects
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.transforms import Bbox

from tasks.report.tables import strategy_label
from tasks.scores import CHANCE

#: Fixed output resolution: PNG size in pixels is (width, height) exactly.
DPI = 110
WIDTH_PX = 800
HEIGHT_PX = 450
#: Okabe & Ito's colour-blind-safe palette (black last: used only when the others run out).
OKABE_ITO: tuple[str, ...] = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
                              "#000000")
REAL_COLOUR = "#0072B2"
SYNTHETIC_COLOUR = "#D55E00"
NAN_COLOUR = "#bdbdbd"
#: Sequential, colour-blind-safe maps: light = low, dark = high.
HEATMAP_CMAP = "Blues"
REID_CMAP = "YlOrRd"
#: Variant names that add nothing to a strategy's label (as the report's tables).


@dataclass(frozen=True)
class Plot:
    """One figure of the report: ``png`` is ``None`` when it could not be drawn, and ``reason`` says why."""

    name: str  # slug, used as the HTML id
    title: str
    caption: str
    png: bytes | None = None
    reason: str | None = None
    width: int = WIDTH_PX
    height: int = HEIGHT_PX

    @property
    def ok(self) -> bool:
        return self.png is not None

    def data_uri(self) -> str:
        """The PNG as ``data:image/png;base64,...`` for an inline ``<img src>``; raises ``ValueError`` when
        there is no image (check :attr:`ok`, show :attr:`reason` instead)."""
        if self.png is None:
            raise ValueError(f"plot {self.name!r} has no image: {self.reason}")
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


# ------------------------------------------------------------------------------------------ helpers
def new_figure(width_px: int = WIDTH_PX, height_px: int = HEIGHT_PX) -> Figure:
    """A figure of exactly ``width_px`` x ``height_px`` pixels at :data:`DPI`, with its own Agg canvas
    (no pyplot, so figures never leak into global state and threads do not share one)."""
    fig = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plot_to_png(fig: Figure) -> bytes:
    """The figure as PNG bytes: fixed dpi, no metadata that changes between runs (so bytes are stable)."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _finished(name: str, title: str, caption: str, fig: Figure) -> Plot:
    png = plot_to_png(fig)
    width, height = (round(v) for v in fig.get_size_inches() * DPI)
    return Plot(name=name, title=title, caption=caption, png=png, width=width, height=height)


def _skipped(name: str, title: str, caption: str, reason: str) -> Plot:
    return Plot(name=name, title=title, caption=caption, png=None, reason=reason)


def _missing(frame: object, columns: Iterable[str]) -> str | None:
    if not isinstance(frame, pd.DataFrame):
        return f"expected a DataFrame, got {type(frame).__name__}"
    if frame.empty:
        return "no data (empty table)"
    absent = [c for c in columns if c not in frame.columns]
    return f"missing columns: {', '.join(absent)}" if absent else None


def _as_floats(values: object) -> np.ndarray:
    """Finite floats out of a list / array / scalar / None; anything not numeric is dropped."""
    if values is None:
        return np.empty(0)
    if isinstance(values, str | bytes):
        return np.empty(0)
    if np.isscalar(values):
        values = [values]
    try:
        arr = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    except TypeError:
        return np.empty(0)
    return arr[np.isfinite(arr)]


def _numeric(column: pd.Series) -> pd.Series:
    out = pd.to_numeric(column, errors="coerce").astype(np.float64)
    return out.where(np.isfinite(out))


def _text(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    return str(value)


def _labels(frame: pd.DataFrame) -> list[str]:
    variants = frame["variant"] if "variant" in frame.columns else [None] * len(frame)
    return [strategy_label(s, v) for s, v in zip(frame["strategy"], variants, strict=True)]


def _padded_limits(values: np.ndarray, lo: float, hi: float, min_span: float) -> tuple[float, float]:
    """Axis limits around ``values`` with a margin, at least ``min_span`` wide, kept inside [lo, hi]
    (plus a small margin so markers on the bounds are not cut)."""
    vmin, vmax = float(np.min(values)), float(np.max(values))
    lo, hi = min(lo, vmin), max(hi, vmax)  # values outside the nominal range stay on the axes
    span = max(vmax - vmin, min_span)
    centre = (vmin + vmax) / 2
    a, b = centre - span * 0.6, centre + span * 0.6
    margin = (hi - lo) * 0.03
    if a < lo - margin:
        a, b = lo - margin, b + (lo - margin - a)
    if b > hi + margin:
        a, b = a - (b - hi - margin), hi + margin
    return max(a, lo - margin), min(b, hi + margin)


_OFFSETS: tuple[tuple[float, float, str, str], ...] = (
    (7, 5, "left", "bottom"), (7, -5, "left", "top"), (-7, 5, "right", "bottom"), (-7, -5, "right", "top"),
    (0, 9, "center", "bottom"), (0, -9, "center", "top"), (12, 0, "left", "center"), (-12, 0, "right", "center"),
    (7, 16, "left", "bottom"), (7, -16, "left", "top"), (-7, 16, "right", "bottom"), (-7, -16, "right", "top"),
)
#: Overlap (px², labels with labels, points or the outside of the axes) tolerated before numbering points.
_TOLERATED_OVERLAP = 30.0


def _place_labels(fig: Figure, ax, xs: Sequence[float], ys: Sequence[float], labels: Sequence[str],
                  fontsize: float = 9, obstacles: Sequence = ()) -> None:
    """Name each point: next to it when a free spot is found for every label (a few offsets tried per label,
    the first overlapping no other label, point or obstacle and inside the axes), otherwise, when points
    crowd, a number in each marker and a key beside the axes. Deterministic for the same input."""
    fig.draw_without_rendering()
    fig.set_layout_engine("none")  # positions computed here are the ones drawn
    renderer = fig.canvas.get_renderer()
    axes_box = ax.get_window_extent(renderer)
    points = [ax.transData.transform((x, y)) for x, y in zip(xs, ys, strict=True)]
    point_boxes = [Bbox.from_bounds(px - 8, py - 8, 16, 16) for px, py in points]  # markers of s~100
    placed: list[Bbox] = [artist.get_window_extent(renderer) for artist in obstacles]
    for artist, box in zip(obstacles, placed, strict=True):
        if isinstance(artist, Legend):  # "best" would move it away from the labels placed below: pin it
            artist.set_loc(tuple(ax.transAxes.inverted().transform((box.x0, box.y0))))
    texts, worst = [], 0.0
    for i in sorted(range(len(labels)), key=lambda i: (-ys[i], xs[i], labels[i])):
        best, best_cost = None, math.inf
        for dx, dy, ha, va in _OFFSETS:
            text = ax.annotate(labels[i], (xs[i], ys[i]), xytext=(dx, dy), textcoords="offset points",
                               ha=ha, va=va, fontsize=fontsize, color="#1b1f24", annotation_clip=False)
            box = text.get_window_extent(renderer)
            overlap = sum(_overlap(box, other) for other in placed)
            overlap += sum(_overlap(box, other) for j, other in enumerate(point_boxes) if j != i)
            cost = overlap + 3 * (box.width * box.height - _overlap(box, axes_box))
            if cost < best_cost:
                if best is not None:
                    best[0].remove()
                best, best_cost = (text, box), cost
            else:
                text.remove()
            if cost == 0:
                break
        if best is not None:
            texts.append(best[0])
            placed.append(best[1])
            worst = max(worst, best_cost)
    if worst <= _TOLERATED_OVERLAP:
        return
    for text in texts:
        text.remove()
    fig.set_layout_engine("constrained")  # room for the key
    for artist in obstacles:
        if isinstance(artist, Legend):
            artist.set_loc("best")  # the axes will shrink: a pinned spot would no longer fit
    halo = [patheffects.withStroke(linewidth=2.5, foreground="white")]
    for k, (x, y) in enumerate(zip(xs, ys, strict=True)):
        ax.text(x, y, str(k + 1), ha="center", va="center", fontsize=7, fontweight="bold", color="#1b1f24",
                path_effects=halo, zorder=5)
    handles = [Line2D([], [], linestyle="none") for _ in labels]
    fig.legend(handles, [f"{k + 1}  {label}" for k, label in enumerate(labels)], loc="outside right upper",
               fontsize=8, frameon=False, handlelength=0, handletextpad=0, title="strategies",
               title_fontsize=8.5, alignment="left")


def _overlap(a: Bbox, b: Bbox) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def _style_axes(ax) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=9)


def _bounds(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """The 95% interval of ``column`` per row (``<column>_ci_low``/``_ci_high``; NaN where absent)."""
    return tuple(_numeric(frame[f"{column}_{side}"]).to_numpy() if f"{column}_{side}" in frame.columns
                 else np.full(len(frame), np.nan) for side in ("ci_low", "ci_high"))  # type: ignore[return-value]


def _error_bars(ax, frame: pd.DataFrame, axis: str, colour: str = "#1b1f24") -> bool:
    """Draw the 95% interval of each point along ``axis`` (``x`` or ``y``: columns ``<axis>``, ``<axis>_low``,
    ``<axis>_high`` of ``frame``) where both bounds are known; whether any was drawn."""
    part = frame[frame[f"{axis}_low"].notna() & frame[f"{axis}_high"].notna()]
    if part.empty:
        return False
    err = np.vstack([(part[axis] - part[f"{axis}_low"]).clip(lower=0),
                     (part[f"{axis}_high"] - part[axis]).clip(lower=0)])
    ax.errorbar(part["x"], part["y"], **{f"{axis}err": err}, fmt="none", ecolor=colour, elinewidth=1.1,
                capsize=4, zorder=2, gid=f"ci-{axis}")
    return True


# ------------------------------------------------------------------------------------------ 2. trade-off
TRADEOFF_TITLE = "Aspect trade-off: meaning kept, divergence and re-identification"


def tradeoff_chart(aspects: pd.DataFrame) -> Plot:
    """One point per strategy: x = divergence from the source (higher = more rewritten), y = meaning kept
    (higher = more kept), colour = share of users re-identified (lighter = more private; hollow when not
    measured). ``aspects`` rows: strategy, variant, meaning, divergence, reidentification (may be NaN), optional
    ``meaning_ci_low``/``_ci_high`` and ``divergence_ci_low``/``_ci_high`` (drawn as error bars on each axis: the
    95% intervals)."""
    name = "aspect-tradeoff"
    caption = ("Each point is a strategy: how far its texts moved from the source (divergence, right = more "
               "rewritten) against how much meaning they kept (up = more kept); the top right keeps meaning "
               "while rewriting most. Colour: share of users the re-identification attack recovers "
               "(lighter = more private).")
    problem = _missing(aspects, ["strategy", "meaning", "divergence", "reidentification"])
    if problem:
        return _skipped(name, TRADEOFF_TITLE, caption, problem)
    (x_low, x_high), (y_low, y_high) = _bounds(aspects, "divergence"), _bounds(aspects, "meaning")
    frame = pd.DataFrame({"label": _labels(aspects), "x": _numeric(aspects["divergence"]).to_numpy(),
                          "y": _numeric(aspects["meaning"]).to_numpy(),
                          "c": _numeric(aspects["reidentification"]).to_numpy(),
                          "x_low": x_low, "x_high": x_high, "y_low": y_low, "y_high": y_high})
    frame = frame.dropna(subset=["x", "y"]).sort_values("label", kind="stable").reset_index(drop=True)
    if frame.empty:
        return _skipped(name, TRADEOFF_TITLE, caption, "needs at least 1 strategy with finite meaning and divergence")
    hollow = frame["c"].isna()
    if hollow.any():
        caption += (" Hollow points: re-identification not measured for "
                    + ", ".join(frame.loc[hollow, "label"]) + ".")
    fig = new_figure()
    ax = fig.add_subplot()
    _style_axes(ax)
    drawn = [axis for axis in ("x", "y") if _error_bars(ax, frame, axis)]
    if drawn:
        caption += (" Bars: the 95% interval (percentile bootstrap over documents) of "
                    + " and of ".join({"x": "divergence", "y": "meaning"}[a] for a in drawn) + ".")
    cmap = colormaps[REID_CMAP]
    norm = Normalize(0.0, 1.0)
    measured = frame[~hollow]
    if not measured.empty:
        mappable = ax.scatter(measured["x"], measured["y"], c=measured["c"], cmap=cmap, norm=norm, s=110,
                              edgecolors="#1b1f24", linewidths=0.8, zorder=3)
        bar = fig.colorbar(mappable, ax=ax, shrink=0.9, pad=0.02)
        bar.set_label("re-identification rate (lower = more private)", fontsize=9)
        bar.ax.tick_params(labelsize=8)
    obstacles = []
    if hollow.any():
        ax.scatter(frame.loc[hollow, "x"], frame.loc[hollow, "y"], facecolors="none", edgecolors="#1b1f24",
                   linewidths=1.4, s=110, zorder=3, label="re-identification not measured")
        obstacles.append(ax.legend(fontsize=8, frameon=False, loc="best"))
    ax.set_xlim(*_padded_limits(frame["x"].to_numpy(), 0.0, 1.0, 0.3))
    ax.set_ylim(*_padded_limits(frame["y"].to_numpy(), 0.0, 1.0, 0.3))
    ax.set_xlabel("divergence from the source (higher = more rewritten)", fontsize=10)
    ax.set_ylabel("meaning kept (higher = more kept)", fontsize=10)
    ax.set_title(TRADEOFF_TITLE, fontsize=11)
    _place_labels(fig, ax, frame["x"].tolist(), frame["y"].tolist(), frame["label"].tolist(), obstacles=obstacles)
    return _finished(name, TRADEOFF_TITLE, caption, fig)


# ------------------------------------------------------------------------------------------ 4. re-id
REID_TITLE = "Re-identification rate against divergence"


def reid_vs_divergence(points: pd.DataFrame) -> Plot:
    """One point per strategy: x = divergence from the source, y = share of users re-identified (0..1, lower
    = more private), dashed line at the chance rate. ``points`` rows: strategy, variant, divergence,
    reidentification, optional reidentification_ci_low/_ci_high (drawn as error bars: the 95% interval),
    optional chance (same for every row). A row whose strategy is ``chance`` (as in the re-identification
    scores) is not a point: its reidentification is the chance rate when no chance column gives one."""
    name = "reid-vs-divergence"
    caption = ("Each point is a strategy: the share of users the re-identification attack recovers from its "
               "texts (lower = more private) against how far the texts moved from the source (right = more "
               "rewritten). The dashed line is the chance rate; points near it leak little identity.")
    problem = _missing(points, ["strategy", "divergence", "reidentification"])
    if problem:
        return _skipped(name, REID_TITLE, caption, problem)
    is_chance = (points["strategy"].map(_text) == CHANCE).to_numpy()
    rates = _numeric(points["reidentification"])
    chance = math.nan
    if "chance" in points.columns:
        finite = _numeric(points["chance"]).dropna()
        chance = float(finite.iloc[0]) if not finite.empty else math.nan
    if not math.isfinite(chance) and rates[is_chance].notna().any():
        chance = float(rates[is_chance].dropna().iloc[0])
    low, high = _bounds(points, "reidentification")
    frame = pd.DataFrame({"label": _labels(points), "x": _numeric(points["divergence"]).to_numpy(),
                          "y": rates.to_numpy(), "y_low": low, "y_high": high})[~is_chance]
    frame = frame.dropna(subset=["x", "y"]).sort_values("label", kind="stable").reset_index(drop=True)
    frame = frame[np.isfinite(frame["x"]) & np.isfinite(frame["y"])].reset_index(drop=True)
    if frame.empty:
        return _skipped(name, REID_TITLE, caption,
                        "needs at least 1 strategy with finite divergence and re-identification")
    fig = new_figure()
    ax = fig.add_subplot()
    _style_axes(ax)
    # one colour per strategy while the palette lasts (repeated colours would suggest a relation)
    colours = list(OKABE_ITO[:len(frame)]) if len(frame) <= len(OKABE_ITO) else [OKABE_ITO[0]] * len(frame)
    if _error_bars(ax, frame, "y"):
        caption += " Bars: the 95% interval (Wilson) of each share."
    ax.scatter(frame["x"], frame["y"], c=colours, s=90, edgecolors="#1b1f24", linewidths=0.8, zorder=3)
    ax.set_ylim(-0.03, 1.05)
    xlim = _padded_limits(frame["x"].to_numpy(), 0.0, 1.0, 0.3)
    ax.set_xlim(*xlim)
    ax.set_xlabel("divergence from the source (higher = more rewritten)", fontsize=10)
    ax.set_ylabel("users re-identified (lower = more private)", fontsize=10)
    ax.set_title(REID_TITLE, fontsize=11)
    obstacles = []
    if math.isfinite(chance):
        ax.axhline(chance, color="#57606a", linestyle="--", linewidth=1.3, zorder=2)
        # the label goes at the end of the line farther from the points near it
        near = frame[(frame["y"] - chance).abs() < 0.15]["x"]
        span = xlim[1] - xlim[0]
        left_gap = float((near - xlim[0]).min()) if not near.empty else span
        right_gap = float((xlim[1] - near).min()) if not near.empty else span
        at_right = right_gap >= left_gap
        obstacles.append(ax.text(0.99 if at_right else 0.01, chance, f"chance ({chance:.2f})",
                                 transform=ax.get_yaxis_transform(), ha="right" if at_right else "left",
                                 va="bottom", fontsize=9, color="#57606a"))
    _place_labels(fig, ax, frame["x"].tolist(), frame["y"].tolist(), frame["label"].tolist(), obstacles=obstacles)
    return _finished(name, REID_TITLE, caption, fig)
