"""The statistics of an imported human evaluation (:func:`tasks.report.human_eval.import_sheets` writes
them): inter-annotator agreement (Krippendorff's alpha, mean pairwise Cohen's kappa), the mean human scores
and the human profiling attack per strategy, and the Spearman correlation of each automatic sample-level
metric with the mean human scores."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from tasks.report.human_eval_sheet import CANT_TELL
from tasks.report.run_files import RunFiles
from tasks.scores import SAMPLE_SCORES

AGREEMENT_COLUMNS: tuple[str, ...] = ("aspect", "level", "alpha", "kappa", "kappa_weights", "n_items",
                                      "n_annotators", "n_pairs", "reason")
STRATEGY_SCORE_COLUMNS: tuple[str, ...] = ("strategy", "variant", "n_items", "n_ratings", "fluency_mean",
                                           "fluency_std", "fluency_n", "meaning_mean", "meaning_std",
                                           "meaning_n", "attribute_accuracy", "attribute_n",
                                           "attribute_cant_tell", "attribute_majority_baseline")
CORRELATION_COLUMNS: tuple[str, ...] = ("metric", "aspect", "rho", "p_value", "n", "reason")
SCALE_ASPECTS: tuple[str, ...] = ("fluency", "meaning")
ASPECTS: tuple[str, ...] = (*SCALE_ASPECTS, "attribute_guess")
MIN_CORRELATION_ITEMS = 3


# -------------------------------------------------------------------------------------------- statistics


def krippendorff_alpha(ratings: np.ndarray, level: Literal["nominal", "ordinal"] = "nominal") -> float:
    """Krippendorff's alpha (the ``krippendorff`` package) of an (annotators x items) matrix of numeric codes,
    NaN = not rated; items with one rating do not count. ``ordinal`` codes must be ordered. NaN when no
    item has two ratings or when the values of the items rated twice or more do not vary (alpha is
    undefined then; the package raises)."""
    data = np.asarray(ratings, dtype=float)
    if data.ndim != 2:
        raise ValueError(f"ratings must be annotators x items, got shape {data.shape}")
    pairable = data[:, (~np.isnan(data)).sum(axis=0) >= 2]
    if np.unique(pairable[~np.isnan(pairable)]).size < 2:
        return float("nan")
    import krippendorff  # deferred on purpose: every run imports this module, few rate

    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


def cohen_kappa(a: Sequence, b: Sequence, labels: Sequence,
                weights: Literal["quadratic"] | None = None) -> float:
    """Cohen's kappa (scikit-learn's ``cohen_kappa_score``) of two annotators' ratings of the same items,
    over the given label order (quadratic weights use the labels' positions, so 1-5 scores weigh
    (i - j)^2). NaN when there is no item or chance agreement is total (both gave one and the same label
    to every item)."""
    if len(a) == 0:
        return float("nan")
    from sklearn.exceptions import UndefinedMetricWarning  # deferred on purpose, as krippendorff above
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():  # the undefined case is answered with NaN, which callers report
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return float(cohen_kappa_score(list(a), list(b), labels=list(labels), weights=weights,
                                       replace_undefined_by=np.nan))


def _aspect_matrix(annotations: pd.DataFrame, aspect: str, labels: Sequence) -> pd.DataFrame:
    """annotators x items, the rating's position in ``labels`` (NaN = not rated)."""
    rated = annotations[annotations[aspect].notna()]
    codes = rated[aspect].map({label: float(i) for i, label in enumerate(labels)}).astype(float)
    frame = pd.DataFrame({"annotator": rated["annotator"].astype(str),
                          "item_id": rated["item_id"].astype(str), "code": codes.to_numpy()})
    return frame.pivot(index="annotator", columns="item_id", values="code")


def agreement_table(annotations: pd.DataFrame, choices: Sequence[str]) -> pd.DataFrame:
    """Per aspect: Krippendorff's alpha (ordinal for the 1-5 scales, nominal for the attribute guess), mean
    pairwise Cohen's kappa (quadratic weights / unweighted), items rated by two or more annotators, the
    annotators who rated the aspect, the annotator pairs with a defined kappa, and why a value is NaN."""
    rows = []
    aspects: list[tuple[str, str, Sequence, Literal["quadratic"] | None]] = [
        ("fluency", "ordinal", range(1, 6), "quadratic"), ("meaning", "ordinal", range(1, 6), "quadratic"),
        ("attribute_guess", "nominal", list(choices), None)]
    for aspect, level, labels, weights in aspects:
        if not labels:
            rows.append({"aspect": aspect, "level": level, "alpha": float("nan"), "kappa": float("nan"),
                         "kappa_weights": "none", "n_items": 0, "n_annotators": 0, "n_pairs": 0,
                         "reason": "this export asks no attribute question"})
            continue
        matrix = _aspect_matrix(annotations, aspect, list(labels))
        n_annotators = len(matrix.index)
        shared = matrix.notna().sum(axis=0) >= 2
        n_items = int(shared.sum())
        alpha = kappa = float("nan")
        n_pairs = 0
        reason = None
        if n_annotators == 0:
            reason = f"no {aspect} ratings"
        elif n_annotators == 1:
            reason = f"only one annotator ({matrix.index[0]}) rated {aspect}"
        elif n_items == 0:
            reason = f"no item has {aspect} ratings from two or more annotators"
        else:
            alpha = krippendorff_alpha(matrix.to_numpy(), level)  # type: ignore[arg-type]
            kappas = []
            for first, second in itertools.combinations(matrix.index, 2):
                both = matrix.loc[[first, second]].dropna(axis=1)
                if both.shape[1]:
                    value = cohen_kappa(both.iloc[0].astype(int), both.iloc[1].astype(int),
                                        range(len(labels)), weights)
                    if not math.isnan(value):
                        kappas.append(value)
            n_pairs = len(kappas)
            kappa = float(np.mean(kappas)) if kappas else float("nan")
            problems = []
            if math.isnan(alpha):
                problems.append(f"alpha: no variation in the {aspect} ratings of the items rated twice "
                                "or more")
            if not kappas:
                problems.append("kappa: no annotator pair with shared items and varying ratings")
            reason = "; ".join(problems) or None
        rows.append({"aspect": aspect, "level": level, "alpha": alpha, "kappa": kappa,
                     "kappa_weights": weights or "none", "n_items": n_items, "n_annotators": n_annotators,
                     "n_pairs": n_pairs, "reason": reason})
    table = pd.DataFrame(rows, columns=list(AGREEMENT_COLUMNS))
    return table.astype({"aspect": "string", "level": "string", "alpha": float, "kappa": float,
                         "kappa_weights": "string", "n_items": "int64", "n_annotators": "int64",
                         "n_pairs": "int64", "reason": "string"})


def strategy_score_table(annotations: pd.DataFrame, key: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, variant) of the export: mean and std of fluency and meaning over all ratings, and the
    human profiling attack: attribute-guess accuracy against the true value (\"can't tell\" counts as
    wrong), its guess count, the \"can't tell\" count, and the accuracy of always guessing the most common
    true value of the exported items (the chance line the accuracy should be read against)."""
    values = key["attribute_value"].dropna()
    majority = values.value_counts().sort_index().idxmax() if len(values) else None
    rows = []
    for (strategy, variant), items in key.groupby(["strategy", "variant"], sort=True, dropna=False):
        part = annotations[(annotations["strategy"] == strategy) & (annotations["variant"] == variant)]
        row = {"strategy": strategy, "variant": variant, "n_items": len(items),
               "n_ratings": int(part[list(ASPECTS)].notna().any(axis=1).sum())}
        for aspect in SCALE_ASPECTS:
            scores = part[aspect].dropna().astype(float)
            row[f"{aspect}_mean"] = float(scores.mean()) if len(scores) else float("nan")
            row[f"{aspect}_std"] = float(scores.std(ddof=1)) if len(scores) > 1 else float("nan")
            row[f"{aspect}_n"] = len(scores)
        scored = part[part["attribute_correct"].notna()]
        row["attribute_n"] = len(scored)
        row["attribute_accuracy"] = float(scored["attribute_correct"].astype(bool).mean()) if len(scored) \
            else float("nan")
        row["attribute_cant_tell"] = int((scored["attribute_guess"] == CANT_TELL).sum())
        row["attribute_majority_baseline"] = float((scored["attribute_value"] == majority).mean()) \
            if len(scored) else float("nan")
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(STRATEGY_SCORE_COLUMNS))
    return table.astype({"strategy": "string", "variant": "string", "n_items": "int64", "n_ratings": "int64",
                         "fluency_n": "int64", "meaning_n": "int64", "attribute_n": "int64",
                         "attribute_cant_tell": "int64", "fluency_mean": float, "fluency_std": float,
                         "meaning_mean": float, "meaning_std": float, "attribute_accuracy": float,
                         "attribute_majority_baseline": float})


def item_sample_scores(run: RunFiles, key: pd.DataFrame) -> pd.DataFrame:
    """The automatic sample-level scores of each exported item (item_id + one column per numeric metric),
    from the run's ``metrics/<strategy>/sample_scores.parquet``; strategies without scores are left out."""
    frames = []
    for strategy in sorted(key["strategy"].dropna().unique()):
        path = run.sample_scores(strategy)
        if not path.is_file():
            continue
        scores = pd.read_parquet(path)
        metric_columns = [c for c in scores.columns
                          if c not in SAMPLE_SCORES.columns
                          and not c.endswith("_reason")
                          and pd.api.types.is_numeric_dtype(scores[c])
                          and not pd.api.types.is_bool_dtype(scores[c])]
        scores = pd.DataFrame({
            "doc_id": scores["doc_id"].astype(str).to_numpy(),
            "variant": scores["variant"].astype("string").fillna("").to_numpy(dtype=object),
            **{c: pd.to_numeric(scores[c], errors="coerce").astype(float).to_numpy() for c in metric_columns},
        }).drop_duplicates(["doc_id", "variant"])
        items = key.loc[key["strategy"] == strategy, ["item_id", "doc_id", "variant"]].astype(object)
        joined = items.merge(scores, on=["doc_id", "variant"], how="inner")
        frames.append(joined.drop(columns=["doc_id", "variant"]))
    if not frames:
        return pd.DataFrame({"item_id": pd.Series(dtype="string")})
    return pd.concat(frames, ignore_index=True)


def correlation_table(annotations: pd.DataFrame, item_scores: pd.DataFrame) -> pd.DataFrame:
    """Spearman rho (and p-value) of each automatic metric with each item's mean human fluency and meaning
    over annotators, on the items where both are finite; NaN with a reason when fewer than 3 items or
    either side is constant."""
    from scipy.stats import spearmanr  # deferred on purpose (0.5 s), as krippendorff above

    rows = []
    metrics = [c for c in item_scores.columns if c != "item_id"]
    for aspect in SCALE_ASPECTS:
        human = annotations.dropna(subset=[aspect]).groupby("item_id")[aspect].mean().astype(float)
        human.index = human.index.astype(str)
        for metric in metrics:
            automatic = pd.Series(item_scores[metric].to_numpy(dtype=float),
                                  index=item_scores["item_id"].astype(str))
            pair = pd.concat([automatic.rename("metric"), human.rename("human")], axis=1, join="inner")
            pair = pair[np.isfinite(pair["metric"]) & np.isfinite(pair["human"])]
            n = len(pair)
            rho = p_value = float("nan")
            if n < MIN_CORRELATION_ITEMS:
                reason = (f"{n} rated item(s) with a finite {metric}; Spearman needs at least "
                          f"{MIN_CORRELATION_ITEMS}")
            elif pair["metric"].nunique() == 1:
                reason = f"{metric} is constant over the {n} rated items"
            elif pair["human"].nunique() == 1:
                reason = f"mean human {aspect} is constant over the {n} items"
            else:
                result = spearmanr(pair["metric"], pair["human"])
                rho, p_value, reason = float(result.statistic), float(result.pvalue), None
            rows.append({"metric": metric, "aspect": aspect, "rho": rho, "p_value": p_value, "n": n,
                         "reason": reason})
    table = pd.DataFrame(rows, columns=list(CORRELATION_COLUMNS))
    return table.astype({"metric": "string", "aspect": "string", "rho": float, "p_value": float, "n": "int64",
                         "reason": "string"})


