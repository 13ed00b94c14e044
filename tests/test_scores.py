"""The declared score schema (tasks/scores.py): frames are built and checked against it, and every score
table the run's tasks write (metrics, privacy, re-identification, utility, meta-evaluation) has the declared
columns and dtypes after a parquet round trip, with its structure in real columns, not in metric names."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tasks.corpus.datasets import fetch_dataset
from tasks.generate.base import build_strategy, generate_synthetic
from tasks.layout import RunLayout, StageResult
from tasks.metrics import catalogue
from tasks.metrics.suite import MetricOptions, metaeval_metrics, score_strategy
from tasks.privacy.audit import PrivacyOptions, audit_strategy, reidentification_rows, summary_frame
from tasks.report.build import score_summary
from tasks.scores import (
    DISTRIBUTIONS,
    METAEVAL_ROWS,
    METAEVAL_SUMMARY,
    METRIC_CORRELATIONS,
    SAMPLE_SCORES,
    SCORES,
    STRUCTURE_COLUMNS,
    UTILITY_RUNS,
    ScoreSchemaError,
    ScoreTable,
    score_frame,
    validate_scores,
)
from tasks.store import ArtifactRef
from tasks.training.utility import run_post_utility, utility_summary_rows

REPO = Path(__file__).resolve().parent.parent
ROW = {"strategy": "a", "variant": "first", "level": "sample-mean", "metric": "bertscore_f1", "value": 0.9, "n": 3,
       "n_failed": 0, "signature": "metric:bertscore", "reason": None}


def test_score_frame_declares_every_column_with_nulls_for_absent_structure():
    frame = score_frame([ROW, {**ROW, "metric": "macro_f1", "level": "utility", "setting": "substitution",
                               "fraction": 1.0}])
    assert list(frame.columns) == list(SCORES.columns)
    assert {str(frame[c].dtype) for c in ("strategy", "metric", "setting", "attribute", "signature", "reason")} == {"str"}
    assert frame["value"].dtype == np.float64 and frame["fraction"].dtype == np.float64
    assert frame["n"].dtype == np.int64 and frame["n_failed"].dtype == np.int64
    assert frame.loc[0, STRUCTURE_COLUMNS.keys()].isna().all()  # absent structure is null, not a magic string
    assert frame.loc[1, "setting"] == "substitution" and frame.loc[1, "fraction"] == 1.0
    assert (frame["setting"] == "augmentation").tolist() == [False, False]  # a null compares False, not NA
    assert validate_scores(frame) is frame


@pytest.mark.parametrize(("bad", "column"), [
    ({k: v for k, v in ROW.items() if k != "value"}, "value"),  # missing required column
    ({**ROW, "value": "high"}, "value"),  # not a number
    ({**ROW, "n": None}, "n"),  # an int column with a hole
    ({**ROW, "epsilon_doc": 3.0}, "epsilon_doc"),  # undeclared column
])
def test_score_frame_names_the_bad_column(bad, column):
    with pytest.raises(ScoreSchemaError, match=f"scores table.*{column}") as info:
        score_frame([bad])
    assert info.value.column == column and "\n" not in str(info.value)


def test_validate_scores_rejects_a_wrong_dtype_and_a_missing_column():
    frame = score_frame([ROW])
    with pytest.raises(ScoreSchemaError, match="'n' has dtype float64, declared int"):
        validate_scores(frame.assign(n=frame["n"].astype(float)))
    with pytest.raises(ScoreSchemaError, match=r"lacks column.*signature"):
        validate_scores(frame.drop(columns=["signature"]))
    with pytest.raises(ScoreSchemaError, match="undeclared column 'x'"):
        validate_scores(frame[["metric"]].assign(x=1.0), ScoreTable("toy", {"metric": "text"}))


# ------------------------------------------------------------------------- the tables the tasks write


@pytest.fixture(scope="module")
def debates() -> pd.DataFrame:
    """90 real debate turns (30 per split), labelled by speaker role, with the speakers' party."""
    corpus = pd.read_parquet(fetch_dataset("debates", REPO / "data"))
    corpus = corpus[corpus["text"].str.len().between(40, 400)]
    return (corpus.groupby("split").head(30).reset_index(drop=True)
            .assign(**{c: lambda f, c=c: f[c].astype(object) for c in ("label", "attr_party")}))


@pytest.fixture(scope="module")
def synthetic(debates) -> pd.DataFrame:
    """stymask's real rewrite as two DP-budget variants: the epsilon column a DP strategy writes per row."""
    out = generate_synthetic(build_strategy("stymask"), debates, seed=0)
    return pd.concat([out.assign(variant="eps5", epsilon_doc_bound=5.0), out.assign(variant="eps50", epsilon_doc_bound=50.0)],
                     ignore_index=True)


def _round_trip(frame: pd.DataFrame, table: ScoreTable, folder: Path) -> pd.DataFrame:
    path = folder / f"{table.name}.parquet"
    frame.to_parquet(path)
    return validate_scores(pd.read_parquet(path), table)


def test_every_table_the_tasks_write_has_the_declared_schema(debates, synthetic, tmp_path):
    names = ["bleu_divergence", "self_bleu", "char_jsd", "cos_tf"]
    suite = score_strategy(debates, synthetic, names, MetricOptions(), tmp_path / "emb.sqlite")
    privacy = audit_strategy(debates, synthetic, "stymask", PrivacyOptions(n_bootstrap=20))
    reid = summary_frame(reidentification_rows({"accuracy": 0.25, "candidate_recall": 0.5, "baseline": 0.1,
                                                "n_timelines": 8}, "stymask", "eps5", "metric:reid", attack="minhash",
                                               epsilon=5.0))
    runs = run_post_utility(debates, {"stymask": synthetic[synthetic["variant"] == "eps5"]}, fractions=(0.5, 1.0),
                            seeds=(0,))
    meta = metaeval_metrics(debates["text"].tolist(), ["char_jsd", "cos_tf"], MetricOptions(), tmp_path / "m.sqlite",
                            bag_size=10)
    written = [(SAMPLE_SCORES, suite.sample_scores), (SCORES, suite.distribution_scores),
               (DISTRIBUTIONS, suite.distributions), (UTILITY_RUNS, runs), (METAEVAL_ROWS, meta.rows),
               (METAEVAL_SUMMARY, meta.summary), (METRIC_CORRELATIONS, meta.correlations)]
    for table, frame in written:
        back = _round_trip(frame, table, tmp_path)
        assert len(back) == len(frame) and (len(back) > 0 or table is DISTRIBUTIONS), table.name  # fcsd not run
    for frame in (privacy.summary, reid, utility_summary_rows(runs, "metric:utility")):
        back = _round_trip(frame, SCORES, tmp_path)
        assert list(back.columns) == list(SCORES.columns)
        assert not back["metric"].str.contains(r"[\[\]%/]").any()  # no structure inside a metric name

    # the structure is in its columns: the variant's DP budget, the attacked attribute, the training fraction
    dist = suite.distribution_scores
    assert dict(zip(dist["variant"], dist["epsilon"], strict=True)) == {"eps5": 5.0, "eps50": 50.0}
    profiled = privacy.summary[privacy.summary["metric"] == "profiling_accuracy"]
    assert set(profiled["attribute"]) == {"party"} and set(profiled["model"]) == {"linear"}
    assert profiled.loc[profiled["strategy"] == "stymask", "epsilon"].notna().all()
    assert profiled.loc[profiled["strategy"].isin(["original", "chance"]), "epsilon"].isna().all()
    assert set(reid["attack"]) == {"minhash"} and reid["adversary"].isna().all()
    util = utility_summary_rows(runs, "metric:utility")
    assert set(zip(util["setting"], util["fraction"], strict=True)) >= {("substitution", 1.0), ("baseline", 0.5)}
    assert set(util["metric"]) == {"macro_f1"} and catalogue.direction("macro_f1") == 1


def _ref(path: str, frame: pd.DataFrame) -> ArtifactRef:
    return ArtifactRef(path=path, fingerprint=path, rows=len(frame))


def test_report_summary_is_the_declared_table_and_every_row_knows_its_variants_budget(tmp_path):
    metrics = score_frame([{**ROW, "variant": "eps5", "epsilon": 5.0}])
    reid = summary_frame(reidentification_rows({"accuracy_at_1": 0.2, "candidate_recall": 0.3, "baseline": 0.1,
                                                "n_timelines": 4}, "a", "eps5", "sig", attack="minhash"))  # no epsilon passed
    tables = {"metrics/a/distribution_scores": metrics, "privacy/a/reid_scores": reid}
    layout = RunLayout([StageResult("metrics", {"label": "a"}, {"distribution_scores": _ref("metrics/a/distribution_scores", metrics)}),
                        StageResult("reidentify", {"label": "a"}, {"scores": _ref("privacy/a/reid_scores", reid)})])
    summary = score_summary(layout, lambda ref: tables[ref.path])
    validate_scores(summary)
    mine = summary[summary["strategy"] == "a"]
    # the metric, and accuracy@1, @10, MRR, residual risk and candidate recall of the attack
    assert (mine["epsilon"] == 5.0).all() and len(mine) == 6
    assert math.isnan(summary.loc[summary["strategy"] == "chance", "epsilon"].iloc[0])


def test_a_baseline_every_strategy_repeats_is_kept_once_with_a_value_and_left_empty_where_strategies_disagree():
    # chance per (attack, adversary) and strategy: the same for both; missing for one (nothing it could attack);
    # two different values (the strategies released different documents)
    chances = {("minhash", "full"): (0.25, 0.25), ("minhash", "disjoint"): (math.nan, 0.5),
               ("delta", "full"): (0.2, 0.5)}
    tables, results = {}, []
    for i, strategy in enumerate(("a", "b")):
        frame = pd.concat([summary_frame(reidentification_rows({"accuracy_at_1": 0.5, "n_timelines": 4,
                                                                 "chance": pair[i]}, strategy, "", "sig",
                                                                attack=attack, adversary=adversary))
                           for (attack, adversary), pair in chances.items()], ignore_index=True)
        tables[f"privacy/{strategy}/reid_scores"] = frame
        results.append(StageResult("reidentify", {"label": strategy},
                                   {"scores": _ref(f"privacy/{strategy}/reid_scores", frame)}))
    summary = score_summary(RunLayout(results), lambda ref: tables[ref.path])
    validate_scores(summary)
    chance = summary[summary["strategy"] == "chance"].set_index(["attack", "adversary"])
    assert len(chance) == len(chances) and not chance.index.duplicated().any()
    assert chance.loc[("minhash", "full"), "value"] == 0.25
    assert chance.loc[("minhash", "disjoint"), "value"] == 0.5
    assert math.isnan(chance.loc[("delta", "full"), "value"])
    assert "differs between strategies (0.2, 0.5)" in chance.loc[("delta", "full"), "reason"]
    assert len(summary[summary["strategy"] == "a"]) == len(summary[summary["strategy"] == "b"]) == 4 * len(chances)
