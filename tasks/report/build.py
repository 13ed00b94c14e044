"""Everything the report shows, gathered from a run's stage results (:class:`~tasks.layout.RunLayout`)
without recomputing any metric, attack or model: the report stage and ``synthugc report RUN_DIR`` both call
:func:`collect_report_data` and :func:`render_report`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.budgets import Bound, parse_budget
from tasks.corpus.schema import STATUS_OK
from tasks.intervals import N_RESAMPLES
from tasks.layout import RunLayout
from tasks.metrics import catalogue
from tasks.metrics.suite import metric_correlation_matrix
from tasks.protect.files import CURVE_COLUMNS, MOVE_COLUMN, PROFILING_ATTACK
from tasks.report.human_eval import read_results
from tasks.report.verdict import Trials, read_trials
from tasks.scores import BASELINE_ROWS, CHANCE, SCORE_KEY, SCORES, score_frame
from tasks.store import ArtifactRef
from tasks.training.utility import deterministic_note, utility_summary_rows

ReadTable = Callable[[ArtifactRef], pd.DataFrame]
ReadText = Callable[[ArtifactRef], str]

#: Levels whose metrics the correlation heatmap relates across strategies (seed 000 Fig. 5: sample-level
#: and distribution-level metrics).
CORRELATED_LEVELS = ("sample-mean", "distribution")
#: How long an example text may be in the report before it is cut (the table stays readable).
EXAMPLE_MAX_CHARS = 400
#: The examples' source column in a pseudonymising run (else ``original``): the text the strategies rewrote.
PSEUDONYMISED_SOURCE = "source (pseudonymised)"


@dataclass
class HumanEvaluation:
    """The imported human ratings' summaries (``synthugc annotate import``)."""

    agreement: pd.DataFrame
    strategy_scores: pd.DataFrame
    metric_human_correlations: pd.DataFrame
    n_annotations: int


@dataclass
class Protection:
    """What the run's protect stage did (``generate/protect``: rounds.parquet, protect.json), as read."""

    rounds: pd.DataFrame  # tasks.protect.files.ROUNDS_COLUMNS: one row per round, role, attack and adversary
    curve: pd.DataFrame  # PROTECT_CURVE_COLUMNS: each role's worst case per round
    moves: dict[str, int]  # move label -> documents of the protected output it last changed
    budget: str
    limit: float | None  # the budget's bound on the curve's figure (its line), if it has one
    verdict: str  # the loop's verdict, its notes included
    met: bool
    figure: str = "reidentification"  # what the curve draws: a key of CURVE_COLUMNS
    frontier: pd.DataFrame | None = None  # tasks.protect.files.FRONTIER_COLUMNS: one certified point per meaning floor
    frontier_notes: tuple[str, ...] = ()  # where the frontier is not monotone in its floors


@dataclass
class ReportData:
    """What the report shows; every frame comes from an artifact of the run."""

    title: str
    facts: dict[str, str]
    summary: pd.DataFrame  # long scores of the declared table tasks.scores.SCORES
    level: str = "post"
    families: dict[str, str] = field(default_factory=dict)  # strategy label -> registered strategy name
    failed_stages: dict[str, str] = field(default_factory=dict)
    distributions: pd.DataFrame | None = None  # strategy, variant, metric, series, values (FCSD plot series)
    correlations: pd.DataFrame | None = None  # metric x metric |Spearman| across strategies (Fig. 5)
    metaeval: pd.DataFrame | None = None  # metric, manipulation, rho_mean, rho_std, n_bags, n_defined, reason
    utility_runs: pd.DataFrame | None = None  # one row per downstream run (setting x fraction x strategy x seed)
    human: HumanEvaluation | None = None
    examples: pd.DataFrame | None = None  # doc_id, original, one column per strategy label
    goals: list = field(default_factory=list)  # tasks.report.goals.Goal, in the order the report shows them
    budget: str | None = None  # "reidentification<=0.10,utility>=0.90": the strategies that meet it are listed
    decide_on: str = "bound"  # the budget is decided on the interval's bound or on the point estimate
    budget_adversaries: tuple[str, ...] | None = None  # the budget's threat model (None: every setting measured)
    dp_audits: dict[str, pd.DataFrame] = field(default_factory=dict)  # strategy label -> its audit-dp table
    protection: Protection | None = None  # the run's protect stage, when it has one
    trials: Trials = field(default_factory=Trials)  # what one re-identification trial is (turns, posts, timelines)

    @property
    def order(self) -> list[str]:
        return list(self.families)


def utility_runs(layout: RunLayout, read: ReadTable, output: str = "run") -> pd.DataFrame | None:
    """Every downstream run (one row per setting x fraction x strategy x seed), or with ``output='predictions'``
    their test predictions (runs of a post task; older runs wrote none), or None without any."""
    refs = [ref for _, ref in sorted((r.name, r[output]) for r in layout.of("utility") if output in r.outputs)]
    return pd.concat([read(ref) for ref in refs], ignore_index=True) if refs else None


#: The stages whose ``scores``-like output feeds the run's long score table, in the order they are read.
SCORE_OUTPUTS: tuple[tuple[str, str], ...] = (("metrics", "distribution_scores"), ("privacy", "scores"),
                                              ("reidentify", "scores"), ("llm-profile", "scores"))


def score_summary(layout: RunLayout, read: ReadTable, *, runs: pd.DataFrame | None = None,
                  utility_signature: str = "", n_bootstrap: int = N_RESAMPLES, seed: int = 0) -> pd.DataFrame:
    """The long score table of the run: metrics, privacy attacks and the utility ``runs``' means over seeds
    (with their 95% intervals over the test documents where the runs wrote predictions: ``n_bootstrap``
    resamples, ``seed``). The ``original`` and ``chance`` rows that every strategy's privacy table repeats are
    kept once."""
    frames = [read(ref) for kind, output in SCORE_OUTPUTS
              for _, ref in sorted(layout.by_label(kind, output).items())]
    if runs is not None:
        frames.append(utility_summary_rows(runs, utility_signature, utility_runs(layout, read, "predictions"),
                                           n_resamples=n_bootstrap, seed=seed))
    frames = [score_frame(f, SCORES) for f in frames if not f.empty]
    if not frames:
        return score_frame([], SCORES)
    summary = pd.concat(frames, ignore_index=True)
    summary["variant"] = summary["variant"].fillna("")
    return with_variant_epsilon(baselines_once(summary))


def baselines_once(summary: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with each score once. The ``original`` and ``chance`` rows that every strategy's table repeats
    can differ between strategies whose released documents differ (a strategy that failed on some documents
    leaves them in the disjoint adversary's histories). A baseline with a value is kept over one without (that
    strategy's attack had nothing to attack), and two different values leave the baseline empty, with the values in
    its reason: no one of them stands for every strategy, and each strategy's residual risk is over its own."""
    key = list(SCORE_KEY)
    summary = summary.reset_index(drop=True)
    is_baseline = summary["strategy"].isin(BASELINE_ROWS)
    kept = [summary[~is_baseline].drop_duplicates(key)]
    for _, group in summary[is_baseline].groupby(key, dropna=False, sort=False):
        valued = group[group["value"].notna()]
        row = (valued if len(valued) else group).iloc[[0]].copy()
        if valued["value"].nunique() > 1:
            row[[c for c in ("value", "std", "median", "ci_low", "ci_high") if c in row]] = math.nan
            values = ", ".join(f"{v:.3g}" for v in sorted(valued["value"].unique()))
            row["reason"] = f"differs between strategies ({values}): each strategy's residual risk is over its own"
        kept.append(row)
    return pd.concat(kept).sort_index().reset_index(drop=True)


def with_variant_epsilon(summary: pd.DataFrame) -> pd.DataFrame:
    """Every row of a (strategy, variant) carries the DP epsilon that any of its rows carries: the
    variant's budget is one fact, whichever stage wrote the row (utility rows have no variant)."""
    known = summary.dropna(subset=["epsilon"]).drop_duplicates(["strategy", "variant"])
    if known.empty:
        return summary
    budget = {(s, v): e for s, v, e in known[["strategy", "variant", "epsilon"]].itertuples(index=False, name=None)}
    keys = zip(summary["strategy"], summary["variant"], strict=True)
    summary["epsilon"] = [budget.get(k, e) for k, e in zip(keys, summary["epsilon"], strict=True)]
    return summary


def read_human_evaluation(folder: Path) -> HumanEvaluation | None:
    """The summaries ``synthugc annotate import`` wrote into ``<run>/human_eval``, if any."""
    frames = read_results(folder)
    if not frames:
        return None
    return HumanEvaluation(agreement=frames["agreement"], strategy_scores=frames["strategy_scores"],
                           metric_human_correlations=frames["metric_human_correlations"],
                           n_annotations=len(frames["annotations"]))


def human_evaluation_files(folder: Path) -> list[Path]:
    """The human-evaluation files the report reads (their contents are part of the report's cache key)."""
    return sorted(folder.glob("*.parquet")) if folder.is_dir() else []


def example_outputs(layout: RunLayout, read: ReadTable, *, n: int, seed: int,
                    order: Sequence[str] = ()) -> pd.DataFrame | None:
    """Appendix A.3: ``n`` source texts (seeded) that every strategy rewrote, with each strategy's output.
    Strategies with several variants get a column per variant. In a pseudonymising run the source column is
    the pseudonymised text (``PSEUDONYMISED_SOURCE``) and strategies that rewrote the original texts are left
    out: no detected identifier of the input reaches the report."""
    pseudonymised = layout.one("pseudonymize", "corpus")
    corpus_ref = pseudonymised or layout.one("split", "corpus")
    if n <= 0 or corpus_ref is None:
        return None
    corpus = read(corpus_ref)
    shards = layout.shards(public=True)
    if not shards:
        return None
    labels = [s for s in order if s in shards] + sorted(set(shards) - set(order))
    outputs: dict[str, pd.Series] = {}
    for label in labels:
        synthetic = pd.concat([read(r) for r in shards[label]], ignore_index=True)
        synthetic = synthetic[synthetic["status"] == STATUS_OK]
        variants = list(dict.fromkeys(synthetic["variant"].astype(str)))
        for variant in variants:
            column = label if len(variants) == 1 else f"{label} ({variant})"
            part = synthetic[synthetic["variant"].astype(str) == variant].drop_duplicates("doc_id")
            outputs[column] = part.set_index("doc_id")["text"]
    common = set(corpus["doc_id"])
    for series in outputs.values():
        common &= set(series.index)
    if not common:
        return None
    rng = np.random.default_rng(seed)
    chosen = sorted(common)
    chosen = [chosen[i] for i in sorted(rng.choice(len(chosen), size=min(n, len(chosen)), replace=False))]
    source = corpus.drop_duplicates("doc_id").set_index("doc_id")["text"]
    frame = pd.DataFrame({"doc_id": chosen,
                          PSEUDONYMISED_SOURCE if pseudonymised else "original": [source[d] for d in chosen]})
    for column, series in outputs.items():
        frame[column] = [series[d] for d in chosen]
    return frame


#: The columns of :attr:`Protection.curve`: per round and role (feedback or judge), the worst attack's
#: accuracy@1 and residual risk over chance with their 95% intervals and the round's mean meaning (BERTScore F1).
PROTECT_CURVE_COLUMNS = ["round", "role", "attack", "adversary", "accuracy_at_1", "accuracy_at_1_ci_low",
                         "accuracy_at_1_ci_high", "residual_risk", "residual_risk_ci_low", "residual_risk_ci_high",
                         "meaning"]


def protect_curve(rounds: pd.DataFrame, decide_on: str, figure: str = "reidentification") -> pd.DataFrame:
    """Each role's worst re-identification case per round: the (attack, adversary) whose ``figure``
    (:data:`CURVE_COLUMNS`) has the highest upper bound (or value, ``decide_on`` point), as the protect loop
    decides its budget on the judge's."""
    # deferred: loads llvmlite, numba, yaml only when this runs
    from tasks.privacy.attacks import worst_case

    rounds = rounds[~rounds["attack"].astype(str).str.startswith(PROFILING_ATTACK)]  # the curve: re-identification
    rounds = rounds.reindex(columns=list(dict.fromkeys([*rounds.columns, *PROTECT_CURVE_COLUMNS])))
    if rounds.empty:
        return pd.DataFrame(columns=PROTECT_CURVE_COLUMNS)
    column = CURVE_COLUMNS[figure]
    by = f"{column}_ci_high" if decide_on == "bound" and rounds[f"{column}_ci_high"].notna().any() else column
    ranked = rounds.assign(_rank=rounds[by].fillna(rounds[column]).astype(float))
    worst = worst_case(ranked, metric="_rank", by=("round", "role"))
    return worst[["round", "role", "attack", "adversary"]].merge(ranked, on=["round", "role", "attack", "adversary"])[
        PROTECT_CURVE_COLUMNS].sort_values(["role", "round"], kind="stable").reset_index(drop=True)


def curve_budget(bounds: Sequence[Bound]) -> tuple[str, float | None]:
    """What the protect curve draws and its budget line: a ``reidentification`` bound's accuracy@1, else a
    ``reidentification_risk`` bound's residual risk, else accuracy@1 without a line."""
    by_figure = {b.column: b.limit for b in bounds}
    for figure in CURVE_COLUMNS:
        if figure in by_figure:
            return figure, by_figure[figure]
    return "reidentification", None


def protection(layout: RunLayout, read: ReadTable, read_text: ReadText) -> Protection | None:
    """The protect stage's rounds, moves and verdict from its artifacts, or None without a protect stage."""
    import json

    rounds_ref, summary_ref = layout.one("protect", "rounds"), layout.one("protect", "summary")
    if rounds_ref is None or summary_ref is None:
        return None
    rounds, summary = read(rounds_ref), json.loads(read_text(summary_ref))
    moves = summary.get("moves")
    if moves is None and (table := layout.one("protect", "shard")) is not None:
        moves = read(table)[MOVE_COLUMN].value_counts().to_dict()
    figure, limit = curve_budget(parse_budget(summary["budget"], "budget", protect=True))
    frontier_ref = layout.one("protect", "frontier")
    return Protection(rounds=rounds, curve=protect_curve(rounds, summary["decide_on"], figure),
                      moves={str(k): int(v) for k, v in (moves or {}).items()}, budget=summary["budget"],
                      limit=limit, verdict=summary["verdict"], met=bool(summary["met"]), figure=figure,
                      frontier=read(frontier_ref) if frontier_ref is not None else None,
                      frontier_notes=tuple((summary.get("frontier") or {}).get("notes") or ()))


def _read_local_text(ref: ArtifactRef) -> str:
    return Path(ref.path).read_text(encoding="utf-8")


def collect_report_data(layout: RunLayout, read: ReadTable, *, title: str,
                        facts: Mapping[str, str], level: str, families: Mapping[str, str],
                        failed_stages: Mapping[str, str] | None = None, utility_signature: str = "",
                        human_eval_dir: Path | None = None, examples: int = 0, seed: int = 0,
                        goals: Sequence = (), budget: str | None = None, decide_on: str = "bound",
                        n_bootstrap: int = N_RESAMPLES, budget_adversaries: Sequence[str] | None = None,
                        read_text: ReadText = _read_local_text) -> ReportData:
    """Gather the report's inputs from the run's artifacts (no metric, attack or model is recomputed; the
    utility scores' intervals are resampled from the runs' predictions); ``read_text`` reads the text
    artifacts (the protect summary)."""
    runs = utility_runs(layout, read)
    summary = score_summary(layout, read, runs=runs, utility_signature=utility_signature, n_bootstrap=n_bootstrap,
                            seed=seed)
    facts = dict(facts)
    if runs is not None and (note := deterministic_note(runs)):
        facts["utility seeds"] = note
    series = [read(ref) for _, ref in sorted(layout.by_label("metrics", "distributions").items())]
    series = [s for s in series if not s.empty]
    intrinsic = summary[summary["level"].isin(CORRELATED_LEVELS)]
    correlations = metric_correlation_matrix(intrinsic) if not intrinsic.empty else None
    has_correlations = correlations is not None and not correlations.empty
    metaeval_ref = layout.one("metaeval", "summary")
    metaeval = read(metaeval_ref) if metaeval_ref is not None else None
    return ReportData(
        title=title, facts=facts, summary=summary, level=level, families=dict(families),
        failed_stages=dict(failed_stages or {}),
        distributions=pd.concat(series, ignore_index=True) if series else None,
        correlations=correlations if has_correlations else None, metaeval=metaeval, utility_runs=runs,
        human=read_human_evaluation(human_eval_dir) if human_eval_dir is not None else None,
        examples=example_outputs(layout, read, n=examples, seed=seed, order=list(families)),
        goals=list(goals), budget=budget, decide_on=decide_on,
        budget_adversaries=tuple(budget_adversaries) if budget_adversaries else None,
        dp_audits={label: read(ref) for label, ref in sorted(layout.by_label("audit-dp", "audit").items())},
        protection=protection(layout, read, read_text), trials=read_trials(layout, read, facts.get("level", "")))


#: A figure and its 95% interval, as the long score table holds them.
INTERVAL = ["value", "ci_low", "ci_high"]


def aspect_points(summary: pd.DataFrame) -> pd.DataFrame:
    """Per strategy: meaning (BERTScore F1), divergence (1 − BLEU/100), re-identification (the worst attack),
    each with its 95% interval (``<aspect>_ci_low``/``_ci_high``), and the chance rate: the numbers of the
    trade-off and re-identification plots. Strategies match on label across levels."""
    def pick(metric: str, level: str) -> pd.DataFrame:
        part = summary[(summary["level"] == level) & (summary["metric"] == metric)]
        return part.set_index(["strategy", "variant"]).reindex(columns=INTERVAL).astype(float)

    # each aspect's sample-level headline metric in the catalogue (meaning: BERTScore F1, divergence: 1 − BLEU)
    aspects = {aspect: pick(catalogue.headline_metrics(aspect, "sample")[0].name, "sample-mean")
               for aspect in ("meaning", "divergence")}
    reid = summary[(summary["level"] == "privacy") & (summary["metric"] == "reid_accuracy")]
    keys = [k for k in dict.fromkeys([*aspects["meaning"].index, *aspects["divergence"].index])
            if k[0] not in BASELINE_ROWS]
    chance = reid.loc[reid["strategy"] == CHANCE, "value"]
    # several attacks and adversary settings: the worst case (the highest share re-identified) counts
    measured = reid[reid["value"].notna()]
    worst = measured.loc[measured.groupby(["strategy", "variant"])["value"].idxmax()] if len(measured) else measured
    aspects["reidentification"] = worst.set_index(["strategy", "variant"]).reindex(columns=INTERVAL)
    columns = [f"{aspect}{part}" for aspect in aspects for part in ("", "_ci_low", "_ci_high")]
    rows = []
    for strategy, variant in keys:
        row: dict[str, object] = {"strategy": strategy, "variant": variant}
        for aspect, frame in aspects.items():
            found = (strategy, variant) in frame.index
            for part, column in (("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high")):
                row[f"{aspect}{part}"] = float(frame.loc[(strategy, variant), column]) if found else math.nan
        rows.append({**row, "chance": float(chance.iloc[0]) if len(chance) else math.nan})
    return pd.DataFrame(rows, columns=["strategy", "variant", *columns, "chance"])
