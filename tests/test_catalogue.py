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

from flows.config_sections import MetricsConfig
from tasks.errors import ConfigError
from tasks.metrics import catalogue
from tasks.metrics.base import MetricResult
from tasks.metrics.suite import ALL_METRICS, MetricOptions, check_metric_names, score_synthetic
from tasks.report.build import ReportData
from tasks.report.render import render_html, render_markdown
from tasks.report.tables import intrinsic_table, privacy_table
from tasks.signatures import make_signature

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
                                                 "relative change in length", (), length_change))
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
    # the best cell in bold, with its 95% interval over documents (every pair kept the length: [0, 0])
    assert "**0.000 [0.000, 0.000]**" in render_markdown(ReportData(title="t", facts={}, summary=summary))


def distinct_outputs(outputs_by_input: list[list[str]], options: object, cache: object) -> MetricResult:
    """Variant level: how many different texts the variants of one input are."""
    values = [float(len(set(outputs))) if outputs else np.nan for outputs in outputs_by_input]
    reasons = [None if outputs else "no ok output" for outputs in outputs_by_input]
    return MetricResult(pd.DataFrame({"distinct_outputs": values, "distinct_outputs_reason": reasons}),
                        {"distinct_outputs": make_signature("distinct_outputs", case="exact")})


def bag_length_ratio(reference: pd.DataFrame, generated: pd.DataFrame, names: list[str], options, cache: object
                     ) -> pd.DataFrame:
    """Bag level: total characters of the generated bag over the reference bag's, per group of options.bag_group."""
    group = options.bag_group
    ref = reference.groupby(group)["text"].agg(lambda s: s.str.len().sum())
    gen = generated.groupby(group)["text"].agg(lambda s: s.str.len().sum())
    return pd.DataFrame({group: ref.index, "metric": "bag_length_ratio", "value": (gen.reindex(ref.index) / ref).to_numpy(),
                         "signature": make_signature("bag_length_ratio", unit="char"), "reason": None})


def copied_share(pairs: pd.DataFrame, names: list[str], options: object, cache: object
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair level: whether each output is its source verbatim, and the share per variant."""
    per_pair = pairs[["doc_id", "variant"]].assign(copied_share=(pairs["text"] == pairs["source"]).astype(float),
                                                   copied_share_reason=None)
    signature = make_signature("copied_share", match="exact")
    rows = pd.DataFrame([{"strategy": pairs["strategy"].iloc[0], "variant": v, "metric": "copied_share",
                          "value": part["copied_share"].mean(), "n": len(part), "n_failed": 0, "signature": signature,
                          "reason": None} for v, part in per_pair.groupby("variant", sort=False)])
    return per_pair, rows


@pytest.fixture()
def toy_levels():
    """A variant-, a bag- and a pair-level metric registered for one test, then removed."""
    toys = [catalogue.register(catalogue.Metric("distinct_outputs", "variant", "diversity", 1, "Distinct",
                                                "distinct variants per input", (), distinct_outputs)),
            catalogue.register(catalogue.Metric("bag_length_ratio", "bag", "similarity", 1, "Bag len",
                                                "length of the synthetic bag over the real one", ("bag_group",),
                                                bag_length_ratio, closer_is_higher=True, target=1.0)),
            catalogue.register(catalogue.Metric("copied_share", "pair", "privacy", -1, "Copied",
                                                "share of outputs that copy their source", (), copied_share))]
    yield toys
    for metric in toys:
        catalogue.unregister(metric.name)


def test_metrics_of_every_level_are_computed_from_their_registration(toy_levels, tmp_path):
    corpus = pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(SOURCES))], "text": SOURCES,
                           "group_id": ["g1", "g1", "g2", "g2"]})
    same, longer, shorter = (_strategy("toy", rewrite) for rewrite in (lambda t: t, lambda t: t + " " + t,
                                                                        lambda t: t[: len(t) // 2]))
    synthetic = pd.concat([same, longer.assign(variant="second"), shorter.assign(variant="third")],
                          ignore_index=True).assign(
        group_id=lambda f: f["doc_id"].map(dict(zip(corpus["doc_id"], corpus["group_id"], strict=True))))
    names = ["distinct_outputs", "bag_length_ratio", "copied_share", "self_bleu"]
    result = score_synthetic(corpus, synthetic, names, MetricOptions(), tmp_path / "emb.sqlite")

    per_doc = result.sample_scores.drop_duplicates("doc_id").set_index("doc_id")
    assert per_doc["distinct_outputs"].to_dict() == {"d0": 3.0, "d1": 3.0, "d2": 3.0, "d3": 3.0}
    assert per_doc["self_bleu"].notna().all()  # the built-in variant metric beside the registered one
    copied = result.sample_scores.set_index(["doc_id", "variant"])["copied_share"]
    assert copied[("d0", "first")] == 1.0 and copied[("d0", "second")] == 0.0
    rows = result.distribution_scores.set_index(["metric", "variant"])
    assert rows.loc[("distinct_outputs", "first"), "level"] == "sample-mean"
    assert rows.loc[("distinct_outputs", "first"), "value"] == 3.0
    assert rows.loc[("bag_length_ratio", "first"), "level"] == "bag-mean"
    assert rows.loc[("bag_length_ratio", "first"), "value"] == pytest.approx(1.0)
    doubled = [(2 * sum(map(len, SOURCES[:2])) + 2) / sum(map(len, SOURCES[:2])),
               (2 * sum(map(len, SOURCES[2:])) + 2) / sum(map(len, SOURCES[2:]))]
    assert rows.loc[("bag_length_ratio", "second"), "value"] == pytest.approx(np.mean(doubled))
    assert rows.loc[("bag_length_ratio", "second"), "n"] == 2  # two groups
    assert rows.loc[("copied_share", "second"), "level"] == "privacy"
    assert rows.loc[("copied_share", "first"), "value"] == 1.0 and rows.loc[("copied_share", "second"), "value"] == 0.0
    assert result.signatures["distinct_outputs"].startswith("metric:distinct_outputs|case:exact")
    assert "agg:mean-over-finite-groups" in result.signatures["bag_length_ratio"]

    # the bag metric's target (1.0: as long as the real bag) ranks the intrinsic table, not its direction
    table = intrinsic_table(result.distribution_scores, "bag-mean")
    column = next(c for c in table.columns if c.metric == "bag_length_ratio")
    assert column.header == "Bag len" and column.note.endswith("→1")
    bold = {table.label(r) for (r, key), marks in table.marks.items() if key == column.key and "best" in marks}
    assert bold == {"toy"}  # the copy (ratio 1), not the doubled texts (ratio 2, the highest)


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


def test_register_refuses_duplicates_and_unknown_levels_aspects_directions_options():
    with pytest.raises(ValueError, match="already registered"):
        catalogue.register(catalogue.CATALOGUE["fbd"])
    base = catalogue.Metric("toy", "sample", "style", 1, "T", "toy", compute=length_change)
    for bad, match in ((dict(level="corpus"), "level"), (dict(aspect="vibes"), "aspect"),
                       (dict(direction=2), "direction must be \\+1 or -1, got 2"),
                       (dict(direction=0), "direction must be \\+1 or -1, got 0"),  # unranked: refused here, not later
                       (dict(compute=None), "compute"), (dict(compute=("unit",)), "compute")):
        with pytest.raises(ValueError, match=match):
            catalogue.register(catalogue.Metric(**{**base.__dict__, **bad}))
    # an option the suite does not have (a typo of bertscore_layer) would never load its model: refused
    with pytest.raises(ConfigError, match="metric 'toy': unknown option 'bert_layer'"):
        catalogue.register(catalogue.Metric(**{**base.__dict__, "options": ("token_encoder", "bert_layer")}))
    assert "toy" not in catalogue.CATALOGUE


def test_suite_names_are_the_catalogue_and_every_measure_has_a_direction():
    assert catalogue.names("sample", "variant", "distribution", "bag", "pair") == ALL_METRICS
    assert all(m.direction in (-1, 1) for m in catalogue.CATALOGUE.values())
    assert catalogue.direction("SegWER") == -1 and catalogue.direction("IS_Cr") == 1  # a class's coverage recall
    assert catalogue.label("IS_Cr") == "IS coverage recall"
    assert {m.closer_is_higher for m in catalogue.metrics("distribution")} == {False}
    assert {m.closer_is_higher for m in catalogue.metrics("bag")} == {True}


def test_cli_metrics_prints_one_line_per_registered_metric():
    import json
    import re

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run([str(CLI), "metrics"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    header, *lines = out.stdout.strip().splitlines()
    assert re.split(r"\s{2,}", header) == ["metric", "level", "aspect", "better", "description"]
    listed = json.loads(subprocess.run([str(CLI), "metrics", "--json"], capture_output=True, text=True, env=env,
                                       timeout=120).stdout)
    assert [line.split()[0] for line in lines] == [m["name"] for m in listed]
    assert {m["name"] for m in listed} >= {n for n, m in catalogue.CATALOGUE.items() if not m.suffix}
    parsed = {line.split()[0]: re.split(r"\s{2,}", line)[1:] for line in lines}
    assert parsed["fbd"][:3] == ["distribution", "meaning", "lower is better"]
    assert parsed["bertscore_f1"] == ["sample", "meaning", "higher is better", "BERTScore F1"]
    assert parsed["membership_auc"][:3] == ["privacy", "privacy", "closest to 0.5 is better"]
    assert parsed["<class>_Cr"][0] == "utility"
    assert np.all([p[2].endswith("is better") for p in parsed.values()])
