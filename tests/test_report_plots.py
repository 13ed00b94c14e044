"""The report's plots: real PNGs of the right size with colour in them, stable bytes, a reason instead of an
exception on degenerate input, and a heatmap whose colours follow its values."""

from __future__ import annotations

import base64
import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from tasks.metrics.metaeval import metric_correlations
from tasks.report import plots
from tasks.report.plots import Plot, plot_to_png, reid_vs_divergence, tradeoff_chart
from tasks.report.plots_metrics import (
    correlation_heatmap,
    cosine_distributions,
    heatmap_figure,
    metaeval_chart,
)
from tasks.report.plots_protect import protect_curve_chart, protect_frontier_chart
from tasks.report.tables import strategy_label


# ------------------------------------------------------------------------------------------ inputs
def _distributions() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    real = rng.normal(0.45, 0.08, 200)
    rows = []
    for strategy, variant, shift in (("stymask", "first", 0.0), ("backtranslate", "pivot-spa", -0.1)):
        rows.append({"strategy": strategy, "variant": variant, "metric": "fcsd", "series": "real",
                     "values": real.tolist()})
        rows.append({"strategy": strategy, "variant": variant, "metric": "fcsd", "series": "synthetic",
                     "values": (real + shift + rng.normal(0, 0.02, 200)).tolist()})
    return pd.DataFrame(rows)


def _bar_segments(chart, aspects: pd.DataFrame, monkeypatch) -> dict[str, np.ndarray]:
    """The error bars a chart drew, by axis (``x``, ``y``): each bar's two end points, in data coordinates, as
    the figure holds them when it is turned into the PNG."""
    from matplotlib.collections import LineCollection

    from tasks.report import plots

    figures = []
    original = plots._finished
    monkeypatch.setattr(plots, "_finished", lambda *a: figures.append(a[-1]) or original(*a))
    assert chart(aspects).ok
    ax = figures[-1].axes[0]
    return {axis: np.array(c.get_segments()) for c in ax.collections if isinstance(c, LineCollection)
            for axis in ("x", "y") if c.get_gid() == f"ci-{axis}"}


def test_tradeoff_draws_both_95_intervals_as_error_bars(monkeypatch) -> None:
    """Meaning (y) and divergence (x) carry their bootstrap intervals as bars on both axes, where known."""
    plain = tradeoff_chart(_aspects())
    both = _aspects().assign(meaning_ci_low=[0.97, 0.80, 0.70], meaning_ci_high=[0.99, 0.86, 0.79],
                             divergence_ci_low=[0.10, 0.45, np.nan], divergence_ci_high=[0.15, 0.52, np.nan])
    bars = _bar_segments(tradeoff_chart, both, monkeypatch)
    # sorted by label: backtranslate, paraphrase, stymask; paraphrase has no divergence interval
    np.testing.assert_allclose(bars["y"], [[[0.49, 0.80], [0.49, 0.86]], [[0.7, 0.70], [0.7, 0.79]],
                                           [[0.12, 0.97], [0.12, 0.99]]])
    np.testing.assert_allclose(bars["x"], [[[0.45, 0.83], [0.52, 0.83]], [[0.10, 0.98], [0.15, 0.98]]])
    chart = tradeoff_chart(both)
    assert chart.png != plain.png and "Bars: the 95% interval" not in plain.caption
    assert "of divergence and of meaning" in chart.caption
    only_meaning = tradeoff_chart(both.drop(columns=["divergence_ci_low", "divergence_ci_high"]))
    assert "of meaning." in only_meaning.caption and only_meaning.png not in (plain.png, chart.png)
    assert set(_bar_segments(tradeoff_chart, both.drop(columns=["divergence_ci_low", "divergence_ci_high"]),
                             monkeypatch)) == {"y"}


def _aspects() -> pd.DataFrame:
    return pd.DataFrame({"strategy": ["stymask", "backtranslate", "paraphrase"],
                         "variant": ["first", "pivot-spa", "first"],
                         "meaning": [0.98, 0.83, 0.75], "divergence": [0.12, 0.49, 0.7],
                         "reidentification": [1.0, 0.6, np.nan], "chance": [1 / 6] * 3})


def _matrix() -> pd.DataFrame:
    names = ["bertscore_f1", "fcsd", "char_jsd"]
    values = np.array([[1.0, 1.0, 0.1], [1.0, 1.0, 0.5], [0.1, 0.5, 1.0]])
    return pd.DataFrame(values, columns=names).assign(metric=names)[["metric", *names]]


def _metaeval() -> pd.DataFrame:
    rows = []
    for metric, rhos in (("fcsd", (0.9, 0.4, np.nan)), ("char_jsd", (-0.3, 1.0, 0.7))):
        for manipulation, rho in zip(("tdm-peaked", "nti", "eda-replace"), rhos, strict=True):
            defined = int(np.isfinite(rho))
            rows.append({"metric": metric, "manipulation": manipulation, "rho_mean": rho, "rho_std": 0.1,
                         "n_bags": 3, "n_defined": 3 * defined, "reason": None if defined else "constant"})
    return pd.DataFrame(rows)


def _protect_curve() -> pd.DataFrame:
    """Three rounds of a protect loop: each role's worst accuracy@1 falls as meaning falls."""
    rows = []
    for role, accuracies in (("judge", (0.7, 0.45, 0.2)), ("feedback", (0.9, 0.5, 0.1))):
        for k, (accuracy, meaning) in enumerate(zip(accuracies, (0.97, 0.9, 0.84), strict=True)):
            rows.append({"round": k, "role": role, "accuracy_at_1": accuracy, "meaning": meaning})
    return pd.DataFrame(rows)


CASES = {
    "cosine": lambda: cosine_distributions(_distributions()),
    "tradeoff": lambda: tradeoff_chart(_aspects()),
    "heatmap": lambda: correlation_heatmap(_matrix()),
    "reid": lambda: reid_vs_divergence(_aspects()),
    "metaeval": lambda: metaeval_chart(_metaeval()),
    "protect": lambda: protect_curve_chart(_protect_curve(), 0.3),
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, Plot]:
    return {key: make() for key, make in CASES.items()}


def _image(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as img:
        return np.asarray(img.convert("RGB")).astype(int)


def _coloured(rgb: np.ndarray) -> np.ndarray:
    """Mask of clearly coloured (not grey, black or white) pixels."""
    return (rgb.max(axis=2) - rgb.min(axis=2)) > 60


# ------------------------------------------------------------------------------------------ every plot
@pytest.mark.parametrize("key", list(CASES))
def test_plot_is_a_png_of_the_stated_size_with_colour(rendered: dict[str, Plot], key: str) -> None:
    plot = rendered[key]
    assert plot.png is not None, plot.reason
    assert plot.reason is None
    with Image.open(io.BytesIO(plot.png)) as img:
        assert img.format == "PNG"
        assert img.size == (plot.width, plot.height) == (plots.WIDTH_PX, plots.HEIGHT_PX)
    rgb = _image(plot.png)
    assert (rgb.sum(axis=2) < 600).mean() > 0.01  # something drawn beyond the white background
    assert _coloured(rgb).sum() > 200
    assert plot.name and plot.title and plot.caption


@pytest.mark.parametrize("key", list(CASES))
def test_plot_bytes_are_deterministic(rendered: dict[str, Plot], key: str) -> None:
    again = CASES[key]()
    assert again.png == rendered[key].png


def test_data_uri_round_trips(rendered: dict[str, Plot]) -> None:
    plot = rendered["tradeoff"]
    uri = plot.data_uri()
    prefix = "data:image/png;base64,"
    assert uri.startswith(prefix)
    assert base64.b64decode(uri[len(prefix):]) == plot.png


def test_data_uri_without_an_image_says_why() -> None:
    plot = correlation_heatmap(pd.DataFrame())
    assert not plot.ok
    with pytest.raises(ValueError, match="no image"):
        plot.data_uri()


def test_plot_to_png_keeps_the_size_and_sets_no_software_tag() -> None:
    fig = plots.new_figure(640, 480)
    fig.add_subplot().plot([0, 1], [0, 1])
    png = plot_to_png(fig)
    with Image.open(io.BytesIO(png)) as img:
        assert img.size == (640, 480)
        assert "Software" not in img.info


# ------------------------------------------------------------------------------------------ degenerate input
DEGENERATE = {
    "cosine-empty": lambda: cosine_distributions(pd.DataFrame()),
    "cosine-none": lambda: cosine_distributions(None),  # type: ignore[arg-type]
    "cosine-nan": lambda: cosine_distributions(pd.DataFrame([
        {"strategy": "a", "variant": "first", "metric": "fcsd", "series": "real", "values": [np.nan, np.inf]},
        {"strategy": "a", "variant": "first", "metric": "fcsd", "series": "synthetic", "values": None}])),
    "cosine-other-metric": lambda: cosine_distributions(_distributions().assign(metric="fbd")),
    "tradeoff-empty": lambda: tradeoff_chart(pd.DataFrame()),
    "tradeoff-nan": lambda: tradeoff_chart(_aspects().assign(meaning=np.nan)),
    "tradeoff-missing-column": lambda: tradeoff_chart(_aspects().drop(columns="divergence")),
    "heatmap-empty": lambda: correlation_heatmap(pd.DataFrame()),
    "heatmap-nan": lambda: correlation_heatmap(_matrix().assign(fcsd=np.nan, char_jsd=np.nan, bertscore_f1=np.nan)),
    "heatmap-one-strategy": lambda: correlation_heatmap(
        metric_correlations(pd.DataFrame({"bleu": [0.3], "fcsd": [0.2], "sti": [0.1]}))),
    "reid-empty": lambda: reid_vs_divergence(pd.DataFrame()),
    "reid-nan": lambda: reid_vs_divergence(_aspects().assign(reidentification=[np.nan, np.inf, None])),
    "metaeval-empty": lambda: metaeval_chart(pd.DataFrame()),
    "metaeval-nan": lambda: metaeval_chart(_metaeval().assign(rho_mean=np.nan)),
    "protect-empty": lambda: protect_curve_chart(pd.DataFrame()),
    "protect-nan": lambda: protect_curve_chart(_protect_curve().assign(meaning=np.nan), 0.3),
    "protect-unknown-role": lambda: protect_curve_chart(_protect_curve().assign(role="helper")),
    "frontier-empty": lambda: protect_frontier_chart(pd.DataFrame()),
    "frontier-nan": lambda: protect_frontier_chart(_frontier().assign(value=np.nan)),
}


def _frontier() -> pd.DataFrame:
    """Three frontier points: the certificate's worst falls with the floor; floor 0.7 chosen."""
    return pd.DataFrame({"floor": [0.9, 0.8, 0.7], "value": [0.3, 0.15, 0.08], "ci_low": [0.2, 0.1, 0.05],
                         "ci_high": [0.4, 0.2, 0.09], "meaning": [0.95, 0.9, 0.85], "meaning_ci_low": [0.94, 0.89, 0.83],
                         "meaning_ci_high": [0.96, 0.91, 0.87], "chosen": [False, False, True],
                         "figure": "reidentification", "worst_attack": "classifier", "documents_kept": [90, 95, 99],
                         "documents_held_back": [10, 5, 1], "met": [False, False, True],
                         "moves": ["pseudonymize 80, generalize 10", "generalize 50", "stymask 60"]})


def test_the_frontier_draws_each_floor_with_its_intervals_the_budget_and_the_chosen_point() -> None:
    from tasks.report.render import protect_frontier_table

    plain, with_budget = protect_frontier_chart(_frontier()), protect_frontier_chart(_frontier(), 0.1)
    unchosen = protect_frontier_chart(_frontier().assign(chosen=False), 0.1)
    assert plain.ok and with_budget.ok and unchosen.ok and len({plain.png, with_budget.png, unchosen.png}) == 3
    assert "dashed line is the budget" in with_budget.caption and "dashed" not in plain.caption
    shown = protect_frontier_table(pd.concat([_frontier(), _frontier()]))  # one row per point, highest floor first
    assert list(shown["meaning floor"]) == ["0.9", "0.8", "0.7"] and list(shown["chosen"]) == ["", "", "yes"]
    assert shown["certificate (worst attack)"].iloc[2] == "0.080 [0.050, 0.090] (classifier)"
    assert list(shown["budget"]) == ["not met", "not met", "met"] and shown["kept / held back"].iloc[0] == "90 / 10"
    assert list(shown["released"]) == ["–"] * 3  # a frontier written before rows released and fluency were
    with_fluency = protect_frontier_table(_frontier().assign(fluency=[-0.1, -0.3, -0.5], fluency_ci_low=-0.6,
                                                             fluency_ci_high=0.0, documents_released=[80, 90, 1200]))
    assert with_fluency["fluency (vs source)"].iloc[2] == "-0.500 [-0.600, 0.000]"
    assert list(with_fluency["released"]) == ["80", "90", "1,200"]


@pytest.mark.parametrize("key", list(DEGENERATE))
def test_degenerate_input_gives_a_reason_not_an_exception(key: str) -> None:
    plot = DEGENERATE[key]()
    assert plot.png is None
    assert isinstance(plot.reason, str) and len(plot.reason) > 10
    assert not plot.ok


def test_heatmap_of_one_strategy_explains_the_spearman_limit() -> None:
    plot = DEGENERATE["heatmap-one-strategy"]()
    assert "3 strategies" in (plot.reason or "")


def test_non_finite_values_are_dropped_not_drawn(rendered: dict[str, Plot]) -> None:
    noisy = _distributions()
    noisy["values"] = [[*v, np.nan, np.inf, -np.inf] for v in noisy["values"]]
    assert cosine_distributions(noisy).png == rendered["cosine"].png
    extra = pd.concat([_aspects(), pd.DataFrame([{"strategy": "broken", "variant": "first", "meaning": np.inf,
                                                  "divergence": np.nan, "reidentification": 0.5}])])
    assert tradeoff_chart(extra).png == rendered["tradeoff"].png


# ------------------------------------------------------------------------------------------ per plot
def test_cosine_falls_back_to_a_histogram_on_few_distinct_values() -> None:
    frame = pd.DataFrame([
        {"strategy": "a", "variant": "first", "metric": "fcsd", "series": "real", "values": [0.5, 0.5, 0.5]},
        {"strategy": "a", "variant": "first", "metric": "fcsd", "series": "synthetic", "values": [0.4, 0.45]}])
    plot = cosine_distributions(frame)
    assert plot.ok
    assert _coloured(_image(plot.png)).sum() > 100


def test_cosine_grows_to_more_rows_of_panels() -> None:
    base = _distributions()
    many = pd.concat([base.assign(strategy=base["strategy"] + f"-{i}") for i in range(3)])  # 6 panels, 2 rows
    plot = cosine_distributions(many)
    assert plot.ok and plot.width == plots.WIDTH_PX and plot.height > plots.HEIGHT_PX
    with Image.open(io.BytesIO(plot.png)) as img:
        assert img.size == (plot.width, plot.height)


def test_tradeoff_caption_names_strategies_without_reidentification(rendered: dict[str, Plot]) -> None:
    caption = rendered["tradeoff"].caption
    assert "Hollow" in caption and "paraphrase" in caption
    assert "stymask" not in caption


def test_heatmap_cell_of_one_is_darker_than_cell_of_a_tenth() -> None:
    matrix = _matrix()
    labels = matrix["metric"].tolist()
    values = matrix[labels].to_numpy()
    fig = heatmap_figure(values, labels)
    rgb = _image(plot_to_png(fig))
    ax = fig.axes[0]
    height = rgb.shape[0]

    def cell(i: int, j: int) -> np.ndarray:
        # a quarter cell off the centre, away from the annotation text
        x, y = ax.transData.transform((j + 0.3, i + 0.3))
        return rgb[int(np.rint(height - y)), int(np.rint(x))]

    assert values[0, 1] == 1.0 and values[0, 2] == 0.1
    dark, light = cell(0, 1), cell(0, 2)
    assert dark.sum() < light.sum() - 200
    assert dark[2] > dark[0]  # the sequential map is blue: a coloured cell, not grey
    assert abs(cell(2, 2).sum() - dark.sum()) < 15  # the diagonal 1.0 matches


def test_heatmap_leaves_out_metrics_never_defined() -> None:
    matrix = _matrix()
    matrix["sti"] = np.nan
    matrix = pd.concat([matrix, pd.DataFrame([{"metric": "sti"}])], ignore_index=True)
    plot = correlation_heatmap(matrix)
    assert plot.ok
    assert "sti" in plot.caption


def test_metaeval_bar_direction_follows_the_sign_of_rho() -> None:
    def centroid(rho: float) -> float:
        frame = pd.DataFrame([{"metric": "fcsd", "manipulation": "nti", "rho_mean": rho, "rho_std": np.nan,
                               "n_bags": 1, "n_defined": 1, "reason": None}])
        rgb = _image(metaeval_chart(frame).png)
        bar = (np.abs(rgb - np.array([0x00, 0x72, 0xB2])).sum(axis=2) < 30)  # first Okabe-Ito colour
        assert bar.sum() > 500
        return float(np.nonzero(bar)[1].mean())

    assert centroid(0.9) > centroid(-0.9) + 150


def test_reid_chance_line_is_optional() -> None:
    plot = reid_vs_divergence(_aspects().drop(columns="chance"))
    assert plot.ok
    assert plot.png != reid_vs_divergence(_aspects()).png


@pytest.mark.parametrize(("strategy", "variant", "expected"), [
    ("stymask", "first", "stymask"), ("stymask", None, "stymask"), ("stymask", float("nan"), "stymask"),
    ("backtranslate", "pivot-spa", "backtranslate (pivot-spa)"),
])
def test_strategy_label(strategy: str, variant: object, expected: str) -> None:
    assert strategy_label(strategy, variant) == expected


def test_crowded_points_still_render_at_the_fixed_size() -> None:
    rng = np.random.default_rng(3)
    crowded = pd.DataFrame({"strategy": [f"strategy-{i}" for i in range(10)], "variant": "temp-0.7",
                            "meaning": rng.uniform(0.80, 0.82, 10), "divergence": rng.uniform(0.40, 0.42, 10),
                            "reidentification": rng.uniform(0, 1, 10)})
    first, second = tradeoff_chart(crowded), tradeoff_chart(crowded)
    assert first.ok and first.png == second.png
    with Image.open(io.BytesIO(first.png)) as img:
        assert img.size == (plots.WIDTH_PX, plots.HEIGHT_PX)


def test_reid_takes_a_chance_row_as_the_chance_rate(rendered: dict[str, Plot]) -> None:
    with_row = pd.concat([_aspects().drop(columns="chance"),
                          pd.DataFrame([{"strategy": "chance", "variant": "", "meaning": np.nan,
                                         "divergence": np.nan, "reidentification": 1 / 6}])])
    assert reid_vs_divergence(with_row).png == rendered["reid"].png


def test_reid_draws_the_95_interval_as_error_bars(monkeypatch) -> None:
    from tasks.intervals import wilson

    plain = reid_vs_divergence(_aspects())
    (lo1, hi1), (lo2, hi2) = wilson(10, 10), wilson(6, 10)
    with_ci = reid_vs_divergence(_aspects().assign(reidentification_ci_low=[lo1, lo2, np.nan],
                                                   reidentification_ci_high=[hi1, hi2, np.nan]))
    assert with_ci.ok and with_ci.png != plain.png
    assert "Bars: the 95% interval" in with_ci.caption and "Bars" not in plain.caption
    assert set(_bar_segments(reid_vs_divergence, _aspects().assign(reidentification_ci_low=[lo1, lo2, np.nan],
                                                                  reidentification_ci_high=[hi1, hi2, np.nan]),
                             monkeypatch)) == {"y"}


def test_protect_curve_draws_the_95_interval_and_the_budget() -> None:
    from tasks.intervals import wilson

    plain = protect_curve_chart(_protect_curve())
    bounds = [wilson(round(24 * a), 24) for a in _protect_curve()["accuracy_at_1"]]
    with_ci = protect_curve_chart(_protect_curve().assign(accuracy_at_1_ci_low=[lo for lo, _ in bounds],
                                                          accuracy_at_1_ci_high=[hi for _, hi in bounds]))
    with_budget = protect_curve_chart(_protect_curve(), 0.3)
    assert plain.ok and with_ci.ok and with_budget.ok
    assert len({plain.png, with_ci.png, with_budget.png}) == 3
    assert "Bars: the 95% interval" in with_ci.caption and "Bars" not in plain.caption
    assert "dashed line is the budget" in with_budget.caption and "dashed" not in plain.caption


def test_protect_curve_draws_the_residual_risk_when_the_budget_bounds_it() -> None:
    """A budget on reidentification_risk: the curve draws each round's worst residual risk (not accuracy@1),
    says so, and its dashed line is the risk's bound; the worst case per round follows the risk."""
    from tasks.report.build import protect_curve

    rounds = pd.DataFrame({
        "round": [0, 0, 1, 1], "role": ["judge"] * 4, "attack": ["delta", "minhash"] * 2, "adversary": ["disjoint"] * 4,
        "accuracy_at_1": [0.30, 0.40, 0.25, 0.40], "accuracy_at_1_ci_low": [0.2, 0.3, 0.15, 0.3],
        "accuracy_at_1_ci_high": [0.4, 0.5, 0.35, 0.5], "residual_risk": [0.30, 0.0, 0.10, 0.0],
        "residual_risk_ci_low": [0.2, 0.0, 0.02, 0.0], "residual_risk_ci_high": [0.4, 0.05, 0.2, 0.05],
        "meaning": [0.95, 0.95, 0.9, 0.9]})
    by_risk = protect_curve(rounds, "bound", "reidentification_risk")
    assert list(by_risk["attack"]) == ["delta", "delta"] and list(by_risk["residual_risk"]) == [0.30, 0.10]
    assert list(protect_curve(rounds, "bound")["attack"]) == ["minhash", "minhash"]  # accuracy's worst
    chart = protect_curve_chart(by_risk, 0.1, figure="reidentification_risk")
    accuracy = protect_curve_chart(by_risk, 0.1)
    assert chart.ok and accuracy.ok and chart.png != accuracy.png
    assert "residual risk over chance" in chart.caption and "bound on the residual risk" in chart.caption
    assert "interval of each risk" in chart.caption and "share of timelines" in accuracy.caption
