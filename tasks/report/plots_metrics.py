"""The report's metric figures (see :mod:`tasks.report.plots` for what every plot promises): the FCSD
cosine distributions (seed 001), the metric correlation heatmap (seed 000 Fig. 5) and the metric
meta-evaluation bars (seed 003 Fig. 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from tasks.report.plots import (
    HEATMAP_CMAP,
    HEIGHT_PX,
    NAN_COLOUR,
    OKABE_ITO,
    REAL_COLOUR,
    SYNTHETIC_COLOUR,
    WIDTH_PX,
    Plot,
    _as_floats,
    _finished,
    _labels,
    _missing,
    _numeric,
    _skipped,
    _style_axes,
    _text,
    new_figure,
)

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
