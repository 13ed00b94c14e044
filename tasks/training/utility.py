"""Downstream utility of synthetic data: the privacy-oriented and augmentation settings of seed 000 §5
(Figure 2), for any task through one evaluator interface.

Settings (every model is tested on the REAL test split of the corpus):

- ``substitution`` (privacy-oriented, Table 5): train and validate on the synthetic version of the real
  train and val rows -- one synthetic per original (status ok only; source rows whose generation failed
  are left out, so the set can be smaller). Run at 100% only, as in the article.
- ``augmentation`` (Tables 7-9): the real training split undersampled to each fraction (nested and
  seeded by :func:`~tasks.corpus.splits.undersample`, by whole groups), plus the synthetic version of
  exactly the kept rows (one per real row, ok only); validation on the real val split.
- ``baseline`` (strategy ``original``): the same model on the real training rows at each fraction
  ("Original (without augmentation)"; at 100% the "best system trained on original data" of Table 5).

Each (setting, fraction, strategy, variant, seed) is one run: a strategy with several outputs per text
(e.g. LLM paraphrases ``first`` and ``second``) trains one model per variant, one synthetic per original
each, and every variant is its own row (baseline rows have variant ``''``). ``seed`` drives the undersample
of the 10/50% subsets and the model (the encoder's initialisation and data order), so the spread over seeds
includes the draw of the data; at 100% only the model's. A deterministic model (the linear baseline) on the
same data gives identical numbers over seeds: the summary says so (``deterministic``, ``n_distinct``)
instead of a std of 0. A run that
raises is recorded with ``status='failed'`` and the reason; the other runs go on.

Synthetic rows take ``text`` from the synthetic table and every other column from their source row of
the corpus (label, split, group, position, author), so a synthetic table cannot move a row to another
split; in augmentation their ``doc_id``/``group_id`` get a ``|syn`` suffix so a synthetic conversation or
timeline stays separate from its real source. ``origin`` is ``real`` or ``synthetic``. A word-level
``seg_tags`` column does not carry over (the words changed); task models fall back to the row's label.
Real rows keep ``seg_tags`` (the corpus schema keeps it through ingest), so the flow and ``synthugc utility``
score dialogue acts against the same word-level gold.

An evaluator is ``evaluate(train, val, test, seed) -> {metric: value}`` on corpus-shaped tables with the
task label in ``label``: :func:`post_evaluator` (macro F1), :func:`tasks.training.dialogue.dialogue_evaluator`
(SegWER/JointWER), :func:`tasks.training.timeline.timeline_evaluator` (coverage).

Post models choose on the run's validation split: the linear baseline its regularisation C and class
weighting (grid, :class:`~tasks.training.classifiers.LinearTextClassifier` ``C='auto'``), the encoder its
stopping epoch (early stopping on validation macro-F1).

Learning rate of the encoder: the article's 1e-3 (A.6, :data:`~tasks.training.classifiers.DEFAULT_ENCODER_LR`),
with early stopping on validation; pass ``model_kwargs={'lr': 5e-5}`` for the usual fine-tuning rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tasks.corpus.schema import STATUS_OK
from tasks.corpus.splits import undersample
from tasks.errors import ConfigError
from tasks.intervals import N_RESAMPLES, bootstrap
from tasks.scores import ORIGINAL, SCORES, UTILITY_PREDICTIONS, UTILITY_RUNS, score_frame
from tasks.training.classifiers import EncoderClassifier, LinearTextClassifier
from tasks.training.dialogue import dialogue_evaluator
from tasks.training.task_metrics import macro_f1, macro_f1_codes
from tasks.training.timeline import timeline_evaluator

SETTINGS: tuple[str, ...] = ("substitution", "augmentation", "baseline")
SYN_SUFFIX = "|syn"
#: The run-description columns of a results table (the declared :data:`tasks.scores.UTILITY_RUNS`).
RESULT_COLUMNS: tuple[str, ...] = tuple(UTILITY_RUNS.columns)

#: The linear utility model: TF-IDF word 1-2grams + a linear SVM (the standard strong text baseline; about
#: 5-10x faster to tune than logistic regression, which reached the same macro-F1 within 0.02 on
#: rotten_tomatoes), C and class weighting chosen on the validation split.
LINEAR_UTILITY_MODEL: dict[str, Any] = {"loss": "hinge", "C": "auto", "class_weight": "auto"}

#: The run columns of a predictions table (:data:`tasks.scores.UTILITY_PREDICTIONS`): which run a prediction is of.
RUN_KEY: tuple[str, ...] = ("setting", "fraction", "strategy", "variant", "seed")
#: The task metrics whose 95% interval resamples the test documents' predictions, and their statistic over
#: integer-coded (truth, prediction) rows.
UNIT_STATISTICS: dict[str, Callable[[np.ndarray], float]] = {"macro_f1": macro_f1_codes}


@dataclass(frozen=True)
class Evaluation:
    """What an evaluator may return instead of its scores alone: the scores and, per real test document, the
    true label and the prediction (``doc_id``, ``truth``, ``prediction``), which the interval resamples."""

    scores: Mapping[str, float]
    predictions: pd.DataFrame


Evaluator = Callable[[pd.DataFrame, pd.DataFrame, pd.DataFrame, int], Mapping[str, float] | Evaluation]


@dataclass(frozen=True)
class UtilityRun:
    """One training set of the design: what to train on and validate with."""

    setting: str
    fraction: float
    strategy: str
    variant: str
    seed: int
    train: pd.DataFrame
    val: pd.DataFrame


def synthetic_view(corpus: pd.DataFrame, synthetic: pd.DataFrame, *, variant: str | None = None) -> pd.DataFrame:
    """One synthetic row per source document, shaped like the corpus (see the module docstring).

    Keeps rows with status ok whose ``doc_id`` is in the corpus. With several variants per source, the
    named ``variant`` is used, or (None) the first in sorted order -- one synthetic per original."""
    syn = synthetic
    if "status" in syn.columns:
        syn = syn[syn["status"] == STATUS_OK]
    if "variant" in syn.columns and len(syn):
        if variant is not None:
            syn = syn[syn["variant"].astype(str) == str(variant)]
        else:
            syn = syn.sort_values("variant", kind="stable").drop_duplicates("doc_id", keep="first")
    syn = syn.drop_duplicates("doc_id", keep="first")
    syn = syn[syn["text"].map(lambda t: isinstance(t, str) and bool(t.strip())).to_numpy(dtype=bool)]
    base = corpus.drop(columns=["text", "seg_tags"], errors="ignore").copy()
    base["doc_id"] = base["doc_id"].astype(str)
    texts = pd.DataFrame({"doc_id": syn["doc_id"].astype(str).to_numpy(), "text": syn["text"].to_numpy()})
    view = base.merge(texts, on="doc_id", how="inner", validate="one_to_one")
    view["origin"] = "synthetic"
    return view


def synthetic_variants(synthetic: pd.DataFrame) -> list[str]:
    """The variant names of a synthetic table in sorted order (failed rows count: a variant whose every
    row failed is still a run, recorded as failed); ``['']`` without a variant column."""
    if "variant" not in synthetic.columns or synthetic.empty:
        return [""]
    return sorted(dict.fromkeys(synthetic["variant"].fillna("").astype(str)))


def _rename_synthetic(view: pd.DataFrame) -> pd.DataFrame:
    out = view.copy()
    out["doc_id"] = out["doc_id"].astype(str) + SYN_SUFFIX
    if "group_id" in out.columns:
        out["group_id"] = out["group_id"].astype("string") + SYN_SUFFIX
    return out


def _split(df: pd.DataFrame, name: str) -> pd.DataFrame:
    return df[(df["split"].astype("string") == name).fillna(False).to_numpy(dtype=bool)]


def design(corpus: pd.DataFrame, synthetic: Mapping[str, pd.DataFrame] | None, *,
           settings: Sequence[str] = ("substitution", "augmentation"), fractions: Sequence[float] = (0.1, 0.5, 1.0),
           seeds: Sequence[int] = (0, 1, 2, 3, 4), baseline: bool = True,
           variant: str | None = None) -> Iterator[UtilityRun]:
    """The training sets of every run, lazily: baseline, then per strategy and variant (every variant of
    the table, or only ``variant``) substitution and augmentation."""
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise ConfigError(f"utility settings must be among {', '.join(SETTINGS)}, got {unknown}")
    bad = [f for f in fractions if not 0 < f <= 1]
    if bad:
        raise ConfigError(f"utility fractions must be in (0, 1], got {bad}")
    real = corpus.assign(origin="real")
    real_val = _split(real, "val")
    if baseline or "baseline" in settings:
        for fraction in fractions:
            for seed in seeds:
                train = _split(undersample(real, fraction, seed=seed), "train")
                yield UtilityRun("baseline", fraction, ORIGINAL, "", seed, train, real_val)
    for strategy, table in (synthetic or {}).items():
        names = synthetic_variants(table) if variant is None else [str(variant)]
        for name in names:
            view = synthetic_view(corpus, table, variant=name if "variant" in table.columns else None)
            if "substitution" in settings:
                for seed in seeds:
                    yield UtilityRun("substitution", 1.0, strategy, name, seed, _split(view, "train"),
                                     _split(view, "val"))
            if "augmentation" in settings:
                renamed = _rename_synthetic(view)
                source_ids = view["doc_id"].to_numpy()
                for fraction in fractions:
                    for seed in seeds:
                        kept = _split(undersample(real, fraction, seed=seed), "train")
                        syn = renamed[np.isin(source_ids, kept["doc_id"].astype(str).to_numpy())]
                        train = pd.concat([kept, syn], ignore_index=True)
                        yield UtilityRun("augmentation", fraction, strategy, name, seed, train, real_val)


def run_utility(corpus: pd.DataFrame, synthetic: Mapping[str, pd.DataFrame] | None, evaluate: Evaluator, *,
                settings: Sequence[str] = ("substitution", "augmentation"),
                fractions: Sequence[float] = (0.1, 0.5, 1.0), seeds: Sequence[int] = (0, 1, 2, 3, 4),
                baseline: bool = True, variant: str | None = None, label_col: str = "label",
                predictions: list[pd.DataFrame] | None = None) -> pd.DataFrame:
    """One row per (setting, fraction, strategy, variant, seed): sizes, status, reason, seconds, metrics.

    ``label_col`` names the task label (copied to ``label`` for the evaluator); test rows without a
    label are dropped. Failed runs have NaN metrics and ``status='failed'`` with ``reason``. An evaluator that
    returns an :class:`Evaluation` adds its run's test predictions to ``predictions`` (when given), as
    :data:`tasks.scores.UTILITY_PREDICTIONS` frames."""
    if label_col not in corpus.columns:
        raise ConfigError(f"label column '{label_col}' is not in the corpus")
    if label_col != "label":
        corpus = corpus.assign(label=corpus[label_col])
    test = _split(corpus, "test")
    test = test[test["label"].notna().to_numpy(dtype=bool)]
    rows: list[dict[str, Any]] = []
    for run in design(corpus, synthetic, settings=settings, fractions=fractions, seeds=seeds,
                      baseline=baseline, variant=variant):
        row: dict[str, Any] = {"setting": run.setting, "fraction": run.fraction, "strategy": run.strategy,
                               "variant": run.variant, "seed": run.seed, "n_train": len(run.train), "n_val": len(run.val),
                               "n_test": len(test), "status": STATUS_OK, "reason": None}
        start = time.perf_counter()
        try:
            if test.empty:
                raise ValueError("the corpus has no labelled test rows")
            if run.train.empty:
                raise ValueError(f"no training rows: no synthetic row with status ok for variant '{run.variant}'"
                                 if run.setting == "substitution" else "no training rows")
            result = evaluate(run.train, run.val, test, run.seed)
            if isinstance(result, Evaluation):
                if predictions is not None:
                    predictions.append(score_frame(result.predictions.assign(**{k: row[k] for k in RUN_KEY}),
                                                   UTILITY_PREDICTIONS))
                result = result.scores
            row.update({k: float(v) for k, v in result.items()})
        except Exception as exc:  # one failed run must not stop the others; recorded below
            row["status"] = "failed"
            row["reason"] = f"{type(exc).__name__}: {exc}"
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
    out = pd.DataFrame(rows, columns=list(RESULT_COLUMNS)) if not rows else pd.DataFrame(rows)
    return score_frame(out, UTILITY_RUNS)


def post_evaluator(model: str = "linear", **model_kwargs: Any) -> Evaluator:
    """Macro F1 of a text classifier trained on ``train`` and tuned on ``val``, with its test predictions
    (an :class:`Evaluation`): ``linear`` (TF-IDF word 1-2grams
    + linear SVM, :data:`LINEAR_UTILITY_MODEL`; C and class weighting chosen on ``val``, cross-validation on
    ``train`` when ``val`` has fewer than two classes) or ``encoder`` (the fine-tuned classifier backbone, A.6's recipe with early
    stopping on ``val``; one CPU thread by default). ``model_kwargs`` override the model's defaults."""
    if model not in ("linear", "encoder"):
        raise ConfigError(f"post utility model must be 'linear' or 'encoder', got '{model}'")

    def evaluate(train: pd.DataFrame, val: pd.DataFrame, test: pd.DataFrame, seed: int) -> dict[str, float]:
        if model == "linear":
            clf: Any = LinearTextClassifier(seed=seed, **{**LINEAR_UTILITY_MODEL, **model_kwargs})
        else:
            clf = EncoderClassifier(seed=seed, **{"num_threads": 1, **model_kwargs})
        clf.fit(train["text"].astype(object).tolist(), train["label"].astype(object).tolist(),
                val_texts=val["text"].astype(object).tolist(), val_labels=val["label"].astype(object).tolist())
        truth, pred = test["label"].astype(object).tolist(), list(clf.predict(test["text"].astype(object).tolist()))
        return Evaluation({"macro_f1": macro_f1(truth, pred)}, pd.DataFrame(
            {"doc_id": test["doc_id"].astype(str).to_numpy(), "truth": [str(t) for t in truth],
             "prediction": [str(p) for p in pred]}))

    return evaluate


def run_post_utility(corpus: pd.DataFrame, synthetic: Mapping[str, pd.DataFrame] | None, *,
                     settings: Sequence[str] = ("substitution", "augmentation"),
                     fractions: Sequence[float] = (0.1, 0.5, 1.0), seeds: Sequence[int] = (0, 1, 2, 3, 4),
                     model: str = "linear", label_col: str = "label", baseline: bool = True,
                     variant: str | None = None, model_kwargs: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Post-level utility (macro F1 on the real test split) for every setting, fraction, strategy, seed.

    Posts are the unit, so the training split is undersampled by post (each post its own group), not by
    conversation: a dialogue corpus with a few long conversations would otherwise keep all or nothing."""
    corpus = corpus.assign(group_id=corpus["doc_id"])
    return run_utility(corpus, synthetic, post_evaluator(model, **dict(model_kwargs or {})), settings=settings,
                       fractions=fractions, seeds=seeds, baseline=baseline, variant=variant, label_col=label_col)


# ---------------------------------------------------------------------------------------------- summaries


def metric_columns(results: pd.DataFrame) -> list[str]:
    """The metric columns of a results table (everything but the run description)."""
    return [c for c in results.columns if c not in RESULT_COLUMNS]


def summarize_utility(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample std (ddof=1; NaN with one seed) over the ok seeds of each (setting, strategy,
    variant, fraction), with the counts of ok and failed runs. Columns ``<metric>_mean``, ``<metric>_std``,
    ``n_distinct`` (distinct metric results over the ok seeds) and ``deterministic`` (several ok seeds, one
    result: the seeds changed nothing, so the std says nothing about the spread and is NaN, not 0)."""
    results = _with_variant(results)
    keys = ["setting", "strategy", "variant", "fraction"]
    metrics = metric_columns(results)
    ok = results[results["status"] == STATUS_OK]
    counts = results.groupby(keys, sort=False)["status"].agg(
        n_ok=lambda s: int((s == STATUS_OK).sum()), n_failed=lambda s: int((s != STATUS_OK).sum()))
    if not metrics or ok.empty:  # every run failed: counts only, the reasons are in the runs table
        return counts.reset_index()
    agg = ok.groupby(keys, sort=False)[metrics].agg(["mean", "std"])
    agg.columns = [f"{m}_{s}" for m, s in agg.columns]
    distinct = ok.groupby(keys, sort=False)[metrics].apply(
        lambda part: len({tuple(np.round(r, 12)) for r in part.to_numpy(dtype=float).tolist()})).rename("n_distinct")
    out = counts.join(agg).join(distinct)
    out["n_distinct"] = out["n_distinct"].fillna(0).astype(int)
    out["deterministic"] = (out["n_ok"] > 1) & (out["n_distinct"] == 1)
    for metric in metrics:
        out.loc[out["deterministic"], f"{metric}_std"] = np.nan
    return out.reset_index()


def _with_variant(results: pd.DataFrame) -> pd.DataFrame:
    """Runs tables written before variants were trained separately have no ``variant`` column."""
    if "variant" in results.columns:
        return results.assign(variant=results["variant"].fillna("").astype(str))
    return results.assign(variant="")


def strategy_variant_label(strategy: str, variant: str, variants: Sequence[str]) -> str:
    """``strategy`` alone when it has one variant (or none), else ``strategy (variant)``."""
    return f"{strategy} ({variant})" if variant and len(variants) > 1 else strategy


def utility_tables(results: pd.DataFrame, *, stat: str = "mean") -> dict[str, pd.DataFrame]:
    """The article's layouts, one number (``stat``: mean or std) per cell.

    ``substitution`` (Table 5): a row per strategy (``strategy (variant)`` for each variant of a strategy
    with several) and the row ``original`` (the baseline at 100%), a column per metric. ``augmentation``
    (Tables 7-9): the same rows and ``original`` (without augmentation), columns (metric, percent of the
    training data). A deterministic cell's std is NaN (see :func:`summarize_utility`)."""
    summary = summarize_utility(results)
    metrics = metric_columns(results)
    cols = [f"{m}_{stat}" for m in metrics]
    variants = summary.groupby("strategy", sort=False)["variant"].agg(lambda v: sorted(set(v)))
    summary = summary.assign(strategy=[strategy_variant_label(s, v, variants[s])
                                       for s, v in zip(summary["strategy"], summary["variant"], strict=True)])
    tables: dict[str, pd.DataFrame] = {}
    sub = summary[summary["setting"] == "substitution"]
    best = summary[(summary["setting"] == "baseline") & (summary["fraction"] == 1.0)]
    table5 = pd.concat([sub, best])[["strategy", *cols]].set_index("strategy")
    table5.columns = metrics
    tables["substitution"] = table5
    aug = summary[summary["setting"].isin(["augmentation", "baseline"])]
    if aug.empty:
        tables["augmentation"] = pd.DataFrame()
        return tables
    aug = aug.assign(percent=(aug["fraction"] * 100).round().astype(int))
    wide = aug.pivot_table(index="strategy", columns="percent", values=cols, aggfunc="first", sort=False,
                           dropna=False)
    wide.columns = pd.MultiIndex.from_tuples([(c.removesuffix(f"_{stat}"), p) for c, p in wide.columns],
                                             names=["metric", "percent"])
    order = [s for s in dict.fromkeys(aug["strategy"]) if s != ORIGINAL] + [ORIGINAL]
    tables["augmentation"] = wide.reindex(index=[s for s in order if s in wide.index]).sort_index(axis=1)
    return tables


def deterministic_note(results: pd.DataFrame) -> str | None:
    """One sentence when some cells came out identical over every seed (a deterministic model on the
    same data, e.g. the linear baseline at 100%), or None."""
    summary = summarize_utility(results)
    if "deterministic" not in summary.columns or not summary["deterministic"].any():
        return None
    same = summary[summary["deterministic"]]
    seeds = sorted(set(same["n_ok"].astype(int)))
    where = sorted({f"{r['setting']} {round(100 * r['fraction'])}%" for r in same.to_dict("records")})
    return (f"{len(same)} of {len(summary)} utility cells ({', '.join(where)}) gave identical results over "
            f"{'/'.join(map(str, seeds))} seeds: the model is deterministic on the same data, so those cells "
            f"have no spread over seeds (std shown as NaN, not 0).")


def utility_intervals(predictions: pd.DataFrame, runs: pd.DataFrame, *, n_resamples: int = N_RESAMPLES,
                      seed: int = 0) -> dict[tuple[str, str, str, float, str], tuple[float, float, int]]:
    """The 95% interval of each utility cell's score: a seeded percentile bootstrap over the real test
    documents (:func:`tasks.intervals.bootstrap`) of the score averaged over the cell's ok seeds, each seed's
    predictions resampled with the same documents. Keyed (setting, strategy, variant, fraction, metric) ->
    (low, high, test documents), for the metrics of :data:`UNIT_STATISTICS` whose runs wrote predictions."""
    runs = _with_variant(runs)
    ok = runs.loc[runs["status"] == STATUS_OK, list(RUN_KEY)].assign(variant=lambda f: f["variant"].astype(str))
    kept = predictions.assign(variant=predictions["variant"].fillna("").astype(str)).merge(ok, on=list(RUN_KEY))
    out: dict[tuple[str, str, str, float, str], tuple[float, float, int]] = {}
    for (setting, strategy, variant, fraction), cell in kept.groupby(["setting", "strategy", "variant", "fraction"],
                                                                      sort=False):
        wide = cell.pivot_table(index="doc_id", columns="seed", values="prediction", aggfunc="first").dropna()
        truth = cell.drop_duplicates("doc_id").set_index("doc_id")["truth"].reindex(wide.index)
        codes = pd.factorize(np.concatenate([truth.to_numpy(str), wide.to_numpy(str).ravel()]))[0]
        rows = np.column_stack([codes[:len(truth)], codes[len(truth):].reshape(wide.shape)])
        for metric in [m for m in UNIT_STATISTICS if m in runs.columns]:
            statistic = UNIT_STATISTICS[metric]

            def averaged(sample: np.ndarray, statistic: Callable[[np.ndarray], float] = statistic) -> float:
                return float(np.mean([statistic(sample[:, [0, j]]) for j in range(1, sample.shape[1])]))

            low, high = bootstrap(rows, averaged, n_resamples=n_resamples, seed=seed)
            out[(str(setting), str(strategy), str(variant), float(fraction), metric)] = (low, high, len(rows))
    return out


def utility_summary_rows(results: pd.DataFrame, signature: str, predictions: pd.DataFrame | None = None, *,
                         n_resamples: int = N_RESAMPLES, seed: int = 0) -> pd.DataFrame:
    """Utility numbers as long score rows (level ``utility``; :data:`tasks.scores.SCORES`): one per
    (setting, fraction, strategy, variant, task metric) with the mean and std over seeds; the baseline rows
    are the ``original`` strategy, as in the article's tables. A deterministic cell (one result over several
    seeds) has std NaN and says so in ``reason``. With the runs' test ``predictions``, a score of
    :data:`UNIT_STATISTICS` carries its 95% interval over the test documents (:func:`utility_intervals`) and
    ``n`` counts those documents; otherwise ``n`` counts the ok seeds and the interval is null."""
    rows = []
    metrics = metric_columns(results) or ["score"]
    intervals = (utility_intervals(predictions, results, n_resamples=n_resamples, seed=seed)
                 if predictions is not None and not predictions.empty else {})
    for row in summarize_utility(results).to_dict("records"):
        reason = None if row["n_ok"] else _first_reason(results, row)
        if bool(row.get("deterministic", False)):
            reason = f"deterministic: identical over {int(row['n_ok'])} seeds"
        for metric in metrics:
            variant = row.get("variant") or ""
            low, high, n = intervals.get((row["setting"], row["strategy"], variant, float(row["fraction"]), metric),
                                         (float("nan"), float("nan"), int(row["n_ok"])))
            rows.append({"strategy": row["strategy"], "variant": variant, "level": "utility",
                         "metric": metric, "setting": row["setting"], "fraction": float(row["fraction"]),
                         "value": row.get(f"{metric}_mean", float("nan")), "std": row.get(f"{metric}_std", float("nan")),
                         "median": float("nan"), "n": n, "n_failed": int(row["n_failed"]), "ci_low": low,
                         "ci_high": high, "signature": signature, "reason": reason})
    return score_frame(rows, SCORES)


def run_one(corpus: pd.DataFrame, synthetic: pd.DataFrame | None, strategy: str, setting: str, fraction: float,
            seed: int, *, task: str = "post", model: str = "linear", label_col: str = "label",
            embed: Any = None, coverage: str = "timeline",
            predictions: list[pd.DataFrame] | None = None) -> pd.DataFrame:
    """One downstream run (the unit the flow caches): ``setting`` baseline (no synthetic table; strategy
    ``original``), substitution or augmentation at one training ``fraction`` and ``seed``; one model per
    variant present in ``synthetic``, a row each (column ``variant``). Post-level tasks undersample by
    post (as :func:`run_post_utility`). ``coverage``: how timeline coverage combines timelines.
    ``predictions`` collects the test predictions of the runs whose evaluator gives them (post tasks)."""
    if task == "post":
        corpus = corpus.assign(group_id=corpus["doc_id"])
    baseline = setting == "baseline"
    evaluate = evaluator_for(task, model=model, embed=embed, coverage=coverage)
    return run_utility(corpus, None if baseline else {strategy: synthetic}, evaluate,
                       settings=[] if baseline else [setting], fractions=[fraction], seeds=[seed], baseline=baseline,
                       label_col=label_col, predictions=predictions)


def utility_design(strategies: Sequence[str], settings: Sequence[str], fractions: Sequence[float],
                   seeds: Sequence[int]) -> list[tuple[str, str, float, int]]:
    """Every (strategy, setting, fraction, seed) run of an experiment: the baseline once (strategy
    ``original``, every fraction), substitution at 100% (as the article), augmentation at every fraction."""
    runs = [(ORIGINAL, "baseline", f, s) for f in fractions for s in seeds]
    for strategy in strategies:
        if "substitution" in settings:
            runs += [(strategy, "substitution", 1.0, s) for s in seeds]
        if "augmentation" in settings:
            runs += [(strategy, "augmentation", f, s) for f in fractions for s in seeds]
    return runs


def evaluator_for(task: str, *, model: str = "linear", embed: Any = None, coverage: str = "timeline") -> Evaluator:
    """The evaluator of a task level: post classification (macro F1), dialogue acts (SegWER/JointWER) or
    moments of change (coverage, per timeline then averaged unless ``coverage='pooled'``)."""
    if task == "post":
        return post_evaluator(model)
    if task == "dialogue":
        return dialogue_evaluator(embed=embed) if embed is not None else dialogue_evaluator()
    if task == "timeline":
        return timeline_evaluator(average=coverage, **({"embed": embed} if embed is not None else {}))
    raise ValueError(f"task must be post, dialogue or timeline, got {task!r}")


def _first_reason(results: pd.DataFrame, row: dict) -> str:
    """The first failure reason of the runs summarised by ``row`` (every run failed)."""
    results = _with_variant(results)
    part = results[(results["setting"] == row["setting"]) & (results["strategy"] == row["strategy"])
                   & (results["variant"] == row["variant"]) & (results["fraction"] == row["fraction"])]
    reasons = part["reason"].dropna()
    return f"every run failed: {reasons.iloc[0]}" if len(reasons) else "every run failed"
