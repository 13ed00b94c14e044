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

from tasks.protect.files import CURVE_COLUMNS
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


# ------------------------------------------------------------------------------------------ 1. FCSD
COSINE_TITLE = "Cosine similarity to the mean of the real embeddings"
COSINE_CAPTION = ("Per strategy, the distribution of each text's cosine similarity to the mean real embedding "
                  "(seed 001's FCSD picture): real texts in blue (filled), synthetic in dashed orange. The closer the two "
                  "curves overlap, the closer the synthetic set is to the real one.")


def cosine_distributions(distributions: pd.DataFrame, metric: str = "fcsd") -> Plot:
    """Small multiples, one panel per (strategy, variant) with a shared x axis: the real and the synthetic
    distribution of cosine-to-real-mean values (KDE; a histogram when fewer than 3 distinct values).

    ``distributions`` rows: strategy, variant, metric, series ('real' | 'synthetic'), values (one float per
    text); rows of another ``metric`` are ignored."""
    name = "cosine-distributions"
    problem = _missing(distributions, ["strategy", "metric", "series", "values"])
    if problem:
        return _skipped(name, COSINE_TITLE, COSINE_CAPTION, problem)
    rows = distributions[distributions["metric"].astype(str) == metric]
    panels: dict[str, dict[str, np.ndarray]] = {}
    for row, label in zip(rows.itertuples(index=False), _labels(rows), strict=True):
        series = _text(row.series).lower()
        if series not in ("real", "synthetic"):
            continue
        vals = _as_floats(row.values)
        if vals.size:
            bucket = panels.setdefault(label, {})
            bucket[series] = np.concatenate([bucket.get(series, np.empty(0)), vals])
    shared_real = next((p["real"] for _, p in sorted(panels.items()) if "real" in p), None)
    drawable = {k: p for k, p in sorted(panels.items()) if "synthetic" in p}
    if not drawable:
        return _skipped(name, COSINE_TITLE, COSINE_CAPTION,
                        f"no finite synthetic '{metric}' values for any strategy")
    n = len(drawable)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig = new_figure(WIDTH_PX, max(HEIGHT_PX, 60 + 200 * nrows))
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=False, squeeze=False)
    everything = np.concatenate([v for p in drawable.values() for v in p.values()]
                                + ([shared_real] if shared_real is not None else []))
    lo, hi = float(everything.min()), float(everything.max())
    pad = max((hi - lo) * 0.08, 0.01)
    grid = np.linspace(lo - pad, hi + pad, 400)
    for k, (label, panel) in enumerate(drawable.items()):
        ax = axes[k // ncols][k % ncols]
        _style_axes(ax)
        real = panel.get("real", shared_real)
        if real is not None:
            _density(ax, real, grid, REAL_COLOUR, "real", filled=True)
        synth = panel["synthetic"]
        _density(ax, synth, grid, SYNTHETIC_COLOUR, "synthetic", filled=False)
        ax.set_title(label, fontsize=10)
        ax.set_yticks([])
        ax.set_ylim(bottom=0)
        if k // ncols == nrows - 1 or k + ncols >= n:
            ax.set_xlabel("cosine similarity to the real mean", fontsize=9)
            ax.tick_params(labelbottom=True)
        if k % ncols == 0:
            ax.set_ylabel("density", fontsize=9)
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    fig.suptitle(COSINE_TITLE, fontsize=11)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", fontsize=9, frameon=False, ncols=2)
    return _finished(name, COSINE_TITLE, COSINE_CAPTION, fig)


def _density(ax, values: np.ndarray, grid: np.ndarray, colour: str, label: str, filled: bool) -> None:
    """A Gaussian KDE of ``values`` on ``grid``; a density histogram when a KDE is not defined."""
    if np.unique(values).size >= 3:
        from scipy.stats import gaussian_kde

        try:
            density = gaussian_kde(values)(grid)
        except (np.linalg.LinAlgError, ValueError):
            density = None
        if density is not None and np.all(np.isfinite(density)):
            ax.plot(grid, density, color=colour, linewidth=2 if filled else 2.2,
                    linestyle="-" if filled else "--", label=label)
            if filled:
                ax.fill_between(grid, density, color=colour, alpha=0.25, linewidth=0)
            return
    ax.hist(values, bins=np.linspace(grid[0], grid[-1], 41), density=True, color=colour,
            alpha=0.35 if filled else 0.6, label=label)


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


# ------------------------------------------------------------------------------------------ 3. heatmap
HEATMAP_TITLE = "Metric correlations across strategies (absolute Spearman)"
_MAX_ANNOTATED = 20


def correlation_heatmap(matrix: pd.DataFrame, title: str = HEATMAP_TITLE) -> Plot:
    """An annotated heatmap of a square |Spearman| matrix (seed 000 Fig. 5): darker = stronger rank
    agreement between two metrics across strategies; undefined (NaN) cells grey.

    ``matrix``: a ``metric`` column plus one column per metric, rows in the same order (or the metric names
    as the index). Metrics with no defined correlation to any other are left out (named in the caption)."""
    name = "metric-correlations"
    caption = ("Absolute Spearman rank correlation between two metrics' values across strategies: dark = the "
               "metrics rank strategies alike (1 = same order, or exactly reversed), light = unrelated. "
               "Grey cells are undefined (a metric constant across the strategies, or too few strategies).")
    if not isinstance(matrix, pd.DataFrame) or matrix.empty:
        return _skipped(name, title, caption, "no correlation matrix (needs at least 3 strategies with scores)")
    frame = matrix.set_index("metric") if "metric" in matrix.columns else matrix
    frame = frame.set_axis(frame.index.map(str), axis=0).set_axis(frame.columns.map(str), axis=1)
    frame = frame.loc[~frame.index.duplicated(), ~frame.columns.duplicated()]
    order = [m for m in frame.index if m in frame.columns]
    if len(order) < 2:
        return _skipped(name, title, caption, "needs at least 2 metrics that appear as both a row and a column")
    values = frame.loc[order, order].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    values = np.where(np.isfinite(values), np.abs(values), np.nan)
    off = values.copy()
    np.fill_diagonal(off, np.nan)
    keep = np.isfinite(off).any(axis=1) | np.isfinite(off).any(axis=0)
    if not keep.any():
        return _skipped(name, title, caption, "every correlation between two different metrics is undefined: "
                        "needs at least 3 strategies (Spearman across 2 strategies is undefined) and metrics "
                        "that vary across them")
    dropped = [m for m, k in zip(order, keep, strict=True) if not k]
    if dropped:
        caption += f" Left out, never defined: {', '.join(dropped)}."
    labels = [m for m, k in zip(order, keep, strict=True) if k]
    fig = heatmap_figure(values[np.ix_(keep, keep)], labels, title)
    return _finished(name, title, caption, fig)


def heatmap_figure(values: np.ndarray, labels: Sequence[str], title: str = HEATMAP_TITLE) -> Figure:
    """The heatmap figure itself (rows and columns in ``labels`` order, cell (i, j) at data coordinates
    (j, i) of the first axes), so tests can find where a cell is drawn."""
    n = len(labels)
    height = int(np.clip(170 + 24 * n, HEIGHT_PX, 900))
    fig = new_figure(WIDTH_PX, height)
    ax = fig.add_subplot()
    cmap = colormaps[HEATMAP_CMAP].with_extremes(bad=NAN_COLOUR)
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto",
                      interpolation="nearest")
    label_size = 9 if n <= 12 else 8 if n <= 24 else 6.5
    if n <= 16:
        ax.set_xticks(range(n), labels, rotation=45, ha="right", rotation_mode="anchor", fontsize=label_size)
    else:
        ax.set_xticks(range(n), labels, rotation=90, fontsize=label_size)
    ax.set_yticks(range(n), labels, fontsize=label_size)
    ax.tick_params(length=0)
    ax.set_xticks(np.arange(-0.5, n), minor=True)
    ax.set_yticks(np.arange(-0.5, n), minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if n <= _MAX_ANNOTATED:
        cell_size = 9 if n <= 8 else 7.5 if n <= 14 else 6
        for i in range(n):
            for j in range(n):
                v = values[i, j]
                if np.isfinite(v):
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=cell_size,
                            color="white" if v > 0.6 else "#1b1f24")
    bar = fig.colorbar(image, ax=ax, shrink=0.8, pad=0.02)
    bar.set_label("|Spearman ρ|", fontsize=9)
    bar.ax.tick_params(labelsize=8)
    ax.set_title(title, fontsize=11)
    return fig


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


# ------------------------------------------------------------------------------------------ 5. meta-eval
METAEVAL_TITLE = "Metric meta-evaluation: rank correlation with the true manipulation order"


def metaeval_chart(summary: pd.DataFrame) -> Plot:
    """Grouped horizontal bars: per metric (group) and manipulation (bar), the mean Spearman rho between the
    metric's scores and the true order of increasingly manipulated bags (seed 003 Fig. 1), with ±1 std over
    bags as error bars. ``summary`` rows: metric, manipulation, rho_mean, rho_std, n_bags, n_defined, reason
    (as ``tasks.metrics.metaeval.summarize_metaeval``)."""
    name = "metric-metaeval"
    caption = ("Per metric and manipulation, Spearman's ρ between the metric's scores and the true order of "
               "increasingly manipulated bags (seed 003): ρ near 1 = the metric ranks them correctly, 0 = "
               "it does not notice the manipulation, negative = it ranks them backwards. Error bars: ±1 "
               "standard deviation over bags; 'undefined' marks a pair with no finite ρ.")
    problem = _missing(summary, ["metric", "manipulation", "rho_mean"])
    if problem:
        return _skipped(name, METAEVAL_TITLE, caption, problem)
    frame = pd.DataFrame({"metric": summary["metric"].map(_text), "manipulation": summary["manipulation"].map(_text),
                          "rho": _numeric(summary["rho_mean"]).clip(-1, 1),
                          "std": _numeric(summary["rho_std"]) if "rho_std" in summary.columns else np.nan})
    frame = frame[(frame["metric"] != "") & (frame["manipulation"] != "")]
    if frame["rho"].notna().sum() == 0:
        return _skipped(name, METAEVAL_TITLE, caption, "no finite rho for any metric and manipulation")
    frame = frame.drop_duplicates(["metric", "manipulation"], keep="first")
    metrics = list(dict.fromkeys(frame["metric"]))
    manipulations = list(dict.fromkeys(frame["manipulation"]))
    lookup = {(r.metric, r.manipulation): (r.rho, r.std) for r in frame.itertuples(index=False)}
    k = len(manipulations)
    bar_h = 0.8 / k
    height = int(np.clip(150 + len(metrics) * (10 * k + 14), HEIGHT_PX, 1400))
    fig = new_figure(WIDTH_PX, height)
    ax = fig.add_subplot()
    _style_axes(ax)
    ax.grid(True, axis="x", color="#e5e7eb")
    ax.grid(False, axis="y")
    for j, manipulation in enumerate(manipulations):
        colour = OKABE_ITO[j % len(OKABE_ITO)]
        ys, widths, errs = [], [], []
        for i, metric in enumerate(metrics):
            y = i - 0.4 + bar_h * (j + 0.5)
            rho, std = lookup.get((metric, manipulation), (math.nan, math.nan))
            if math.isfinite(rho):
                ys.append(y)
                widths.append(rho)
                spread = std if math.isfinite(std) else 0.0
                errs.append((min(spread, rho + 1), min(spread, 1 - rho)))  # kept inside [-1, 1]
            elif (metric, manipulation) in lookup:
                ax.text(0.02, y, "undefined", va="center", ha="left", fontsize=6.5, color="#57606a")
        xerr = np.array(errs, dtype=np.float64).T.reshape(2, -1) if errs else None
        has_err = xerr is not None and bool(np.any(xerr > 0))
        ax.barh(ys, widths, height=bar_h * 0.9, color=colour, label=manipulation, zorder=3,
                xerr=xerr if has_err else None,
                error_kw={"ecolor": "#1b1f24", "elinewidth": 0.8, "capsize": 1.5, "alpha": 0.8})
    ax.axvline(0, color="#1b1f24", linewidth=1, zorder=4)
    ax.set_xlim(-1.05, 1.05)
    ax.set_yticks(range(len(metrics)), metrics, fontsize=9 if len(metrics) <= 20 else 7.5)
    ax.set_ylim(len(metrics) - 0.5, -0.5)
    ax.set_xlabel("Spearman ρ with the true order (1 = ranks manipulated bags correctly)", fontsize=10)
    fig.suptitle(METAEVAL_TITLE, fontsize=11)
    fig.legend(title="manipulation", fontsize=8.5, title_fontsize=8.5, frameon=False, loc="outside lower center",
               ncols=min(k, 4))
    return _finished(name, METAEVAL_TITLE, caption, fig)


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
