"""The metric catalogue drives the suite, the config check, the report's columns and marks and
``synthugc metrics``: a metric registered here, in the test, is computed, shown and ranked like a built-in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flows.config import MetricsConfig
from tasks.metrics import catalogue
from tasks.metrics.base import MetricResult, make_signature
from tasks.metrics.suite import ALL_METRICS, MetricOptions, check_metric_names, score_synthetic
from tasks.report.build import ReportData
from tasks.report.render import render_html, render_markdown
from tasks.report.tables import intrinsic_table, privacy_table

CLI = Path(sys.executable).parent / "synthugc"
SOURCES = ["We need to bring jobs back to this country, and we will do it quickly.",
           "My plan cuts taxes for the middle class and invests in infrastructure.",
           "I have been fighting for children and families my entire career.",
           "Well, I think that is not true, and the record shows it."]


def length_change(sources: list[str], outputs: list[str], options: object, cache: object) -> MetricResult:
    """|len(output) - len(source)| / len(source) per pair, in characters: lower keeps the length."""
    values = [abs(len(o) - len(s)) / len(s) for s, o in zip(sources, outputs, strict=True)]
    return MetricResult(pd.DataFrame({"length_change": values}),
                        {"length_change": make_signature("length_change", unit="char")})


@pytest.fixture()
def toy_metric():
    """A sample-level metric registered for one test (one registration plus its function), then removed."""
    metric = catalogue.register(catalogue.Metric("length_change", "sample", "style", -1, "Len Δ",
                                                 "relative change in length", (), ("unit",), length_change))
    yield metric
    catalogue.unregister(metric.name)


def _strategy(name: str, rewrite) -> pd.DataFrame:
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(SOURCES))], "strategy": name, "variant": "first",
                         "text": [rewrite(t) for t in SOURCES], "status": "ok"})


def test_a_registered_metric_is_computed_shown_and_bolded_by_its_direction(toy_metric, tmp_path):
    corpus = pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(SOURCES))], "text": SOURCES})
    synthetic = pd.concat([_strategy("same", lambda t: t.upper()),  # length kept: 0 change, the best
                           _strategy("short", lambda t: t[: len(t) // 2]),
                           _strategy("long", lambda t: t + " " + t)], ignore_index=True)
    assert check_metric_names(["length_change", "bleu_divergence"]) == ["length_change", "bleu_divergence"]
    assert MetricsConfig(names=["length_change"]).names == ["length_change"]  # the config accepts it

    result = score_synthetic(corpus, synthetic, ["length_change", "bleu_divergence"], MetricOptions(),
                             tmp_path / "emb.sqlite")
    per_pair = result.sample_scores.set_index(["strategy", "doc_id"])["length_change"]
    assert per_pair.loc[("long", "d0")] == pytest.approx((len(SOURCES[0]) + 1) / len(SOURCES[0]))
    summary = result.distribution_scores
    means = summary[summary["metric"] == "length_change"].set_index("strategy")["value"]
    assert means["same"] == 0.0 and means["short"] < means["long"]
    assert summary.loc[summary["metric"] == "length_change", "signature"].str.startswith("metric:length_change|unit:char").all()

    table = intrinsic_table(summary, "sample-mean")
    column = next(c for c in table.columns if c.metric == "length_change")
    assert column.header == "Len Δ" and column.direction == -1 and column.note == "relative change in length ↓"
    bold = {table.rows[r][0] for (r, key), marks in table.marks.items() if key == column.key and "best" in marks}
    assert bold == {"same"}  # lower is better: the unchanged length wins, not the longest
    page = render_html(ReportData(title="t", facts={}, summary=summary))
    assert 'title="relative change in length ↓"' in page and ">Len Δ<sup>" in page
    assert "**0.000**" in render_markdown(ReportData(title="t", facts={}, summary=summary))


def test_privacy_marks_follow_the_catalogue_direction_and_target():
    rows = [{"strategy": s, "variant": "first", "level": "privacy", "metric": m, "value": v, "n": 10, "n_failed": 0,
             "signature": "", "reason": None, **extra}
            for s, auc, acc in (("a", 0.45, 0.9), ("b", 0.70, 0.6), ("c", 0.58, 0.7))
            for m, v, extra in (("membership_auc", auc, {}),
                                ("profiling_accuracy", acc, {"attribute": "party", "model": "linear"}))]
    table = privacy_table(pd.DataFrame(rows))
    best = {c.metric: {table.rows[r][0] for (r, k), marks in table.marks.items() if k == c.key and "best" in marks}
            for c in table.columns}
    assert best == {"membership_auc": {"a"}, "profiling_accuracy": {"b"}}  # closest to 0.5; lowest accuracy
    assert [c.header for c in table.columns] == ["Profiling party/linear ↓", "Membership AUC →0.5"]


def test_register_refuses_duplicates_and_unknown_levels_aspects_directions():
    with pytest.raises(ValueError, match="already registered"):
        catalogue.register(catalogue.CATALOGUE["fbd"])
    base = catalogue.Metric("toy", "sample", "style", 1, "T", "toy", compute=length_change)
    for bad, match in ((dict(level="corpus"), "level"), (dict(aspect="vibes"), "aspect"), (dict(direction=2), "direction"),
                       (dict(compute=None), "compute")):
        with pytest.raises(ValueError, match=match):
            catalogue.register(catalogue.Metric(**{**base.__dict__, **bad}))
    assert "toy" not in catalogue.CATALOGUE


def test_suite_names_are_the_catalogue_and_every_measure_has_a_direction():
    assert catalogue.names("sample", "variant", "distribution", "bag", "pair") == ALL_METRICS
    assert all(m.direction in (-1, 1) for m in catalogue.CATALOGUE.values())
    assert catalogue.direction("SegWER") == -1 and catalogue.direction("IS_Cr") == 1  # a class's coverage recall
    assert catalogue.label("IS_Cr") == "IS coverage recall"
    assert {m.closer_is_higher for m in catalogue.metrics("distribution")} == {False}
    assert {m.closer_is_higher for m in catalogue.metrics("bag")} == {True}


def test_cli_metrics_prints_one_line_per_registered_metric():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run([str(CLI), "metrics"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(catalogue.CATALOGUE)
    parsed = {line.split()[0]: line.split(maxsplit=3)[1:] for line in lines}
    assert parsed["fbd"] == ["distribution", "meaning", "lower is better"]
    assert parsed["bertscore_f1"] == ["sample", "meaning", "higher is better"]
    assert parsed["membership_auc"] == ["privacy", "privacy", "closest to 0.5 is better"]
    assert parsed["<class>_Cr"][0] == "utility"
    assert np.all([p[2].endswith("is better") for p in parsed.values()])
