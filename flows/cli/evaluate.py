"""``synthugc score``, ``metaeval``, ``reidentify``, ``profile``, ``utility`` and ``report``: one evaluation step
on files without Prefect (each writes what the flow's stage writes), and a finished run's report rebuilt.

Each command imports what it runs inside its own function, on purpose (the CLI starts fast; see
flows/cli/__init__.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import (
    Adversary,
    DecideOn,
    _assignments,
    _environment,
    _fail,
    _say,
    _writing,
    adversary_settings,
    choice,
    choices,
    renamed,
)
from tasks.budgets import RUN_EXAMPLE
from tasks.errors import InputError, SynthUGCError, key_path, shown
from tasks.limits import MAX_SEED, MAX_UTILITY_SEEDS
from tasks.protect.settings import EVERY_ATTACK
from tasks.training.task_metrics import COVERAGE_AVERAGES
from tasks.training.utility import SETTINGS as UTILITY_SETTINGS

#: The options whose choices no task module names as a constant (flows/config_sections.py spells the same Literals).
Model = choice(("linear", "encoder"))
Level = choice(("post", "author"))
UtilityTask = choice(("post", "dialogue", "timeline"))
Coverage = choice(COVERAGE_AVERAGES)
#: What the synthetic texts do in training: replace the real ones or join them (the baseline is always trained).
Scheme = choices("Scheme", [s for s in UTILITY_SETTINGS if s != "baseline"])


def _read_corpus_and_options(corpus: Path, seed: int, bag_group: str):
    from tasks.corpus.importers import read_corpus
    from tasks.metrics.suite import MetricOptions
    from tasks.models.registry import resolve_model

    validated = read_corpus(corpus)
    options = MetricOptions(token_encoder=resolve_model("token_encoder"),
                            sentence_encoder=resolve_model("sentence_encoder"),
                            pos_tagger=resolve_model("pos_tagger"), bag_group=bag_group, seed=seed)
    return validated.corpus, options


def _metric_names(metrics: str | None, default: tuple[str, ...]) -> list[str]:
    from tasks.metrics.suite import check_metric_names

    if metrics is None:
        return list(default)
    names = [m.strip() for m in metrics.split(",") if m.strip()]
    if not names:
        _fail(f"--metrics {shown(metrics)} names no metric (leave it out for all of them)")
    try:
        return check_metric_names(names)
    except ValueError as exc:
        _fail(f"--metrics: {exc}")
        raise  # unreachable: _fail exits


def score(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) with the source texts.")],
    synthetic: Annotated[Path, typer.Option("--synthetic", help="Synthetic parquet/CSV/JSONL (schema).")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    metrics: Annotated[str | None, typer.Option("--metrics", help="Comma-separated metric names (default: all).")] = None,
    bag_group: Annotated[str, typer.Option("--bag-group", help="Column forming bags.")] = "group_id",
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Score synthetic text against its sources without Prefect: sample and distribution scores."""
    _environment()
    from tasks.corpus.importers import read_synthetic
    from tasks.layout import folder_writer, stage_kind
    from tasks.metrics.suite import ALL_METRICS, metric_correlation_matrix, score_synthetic
    from tasks.parallel import dask_client
    from tasks.paths import check_output_folder
    from tasks.settings import get_settings

    names = _metric_names(metrics, ALL_METRICS)
    try:
        check_output_folder(out)
        source, options = _read_corpus_and_options(corpus, seed, bag_group)
        synth = read_synthetic(synthetic, source["doc_id"])
        settings = get_settings()
        with dask_client(settings.dask_address) as client:
            result = score_synthetic(source, synth, names, options, settings.cache_dir / "embeddings.sqlite",
                                     client=client)
    except SynthUGCError as exc:
        _fail(str(exc))
    writer = folder_writer(out, "metrics", label="")
    correlations = Path(stage_kind("report").output("strategy_metric_correlations").file).name
    with _writing(out):  # the metrics stage's files, and the report's correlation table beside them
        writer.table("sample_scores", result.sample_scores)
        writer.table("distribution_scores", result.distribution_scores)
        writer.table("distributions", result.distributions)
        writer.store.write_table(metric_correlation_matrix(result.distribution_scores), correlations)
    typer.echo(f"{len(result.sample_scores)} sample rows, {len(result.distribution_scores)} distribution rows -> {out}")


def metaeval(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) to draw reference bags from.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    metrics: Annotated[str | None, typer.Option("--metrics", help="Comma-separated metric names "
                                                "(distribution and bag level; default: all of them).")] = None,
    bag_size: Annotated[int, typer.Option("--bag-size")] = 100,
    bags: Annotated[int, typer.Option("--bags", help="Reference bags to average over.")] = 1,
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Check the metrics themselves (seed 003 §4.2).

    Spearman of each metric with the true ranking of increasingly manipulated bags, and the
    correlations between metrics."""
    _environment()
    from tasks.layout import folder_writer
    from tasks.metrics.suite import BAG_METRICS, DISTRIBUTION_METRICS, metaeval_metrics
    from tasks.paths import check_output_folder
    from tasks.settings import get_settings

    names = _metric_names(metrics, DISTRIBUTION_METRICS + BAG_METRICS)
    try:
        check_output_folder(out)
        source, options = _read_corpus_and_options(corpus, seed, "group_id")
        result = metaeval_metrics(source["text"].tolist(), names, options, get_settings().cache_dir / "embeddings.sqlite",
                                  bag_size=bag_size, bags=bags, seed=seed)
    except (SynthUGCError, ValueError) as exc:
        _fail(str(exc))
    writer = folder_writer(out, "metaeval")
    summary = result.summary
    with _writing(out):  # the metaeval stage's files
        writer.table("rows", result.rows)
        writer.table("summary", summary)
        writer.table("metric_pair_correlations", result.correlations)
    typer.echo(summary.to_string(index=False))
    typer.echo(f"-> {out}")


def reidentify(
    histories: Annotated[Path, typer.Option("--histories", help="Adversary's posting histories parquet (author_id, text; doc_id for disjoint).")],
    synthetic: Annotated[Path, typer.Option("--synthetic", help="Synthetic table (schema) with author_id.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    attack: Annotated[str, typer.Option("--attack", help="A registered attack (`synthugc attacks` lists them) or "
                                        "all, as a run does (one too slow here is named, with why).")] = EVERY_ATTACK,
    adversary: Annotated[Adversary, typer.Option("--adversary", help="What the adversary holds: the originals too "
                                                 "(full) or the users' other posts only (needs doc_id in both "
                                                 "files); a run measures both.")] = "full",
    set_: Annotated[list[str] | None, typer.Option("--set", help="Attack parameter: attack.key=value (YAML value), "
                                                   "e.g. minhash.k=64 or stylometric.mode=exact.")] = None,
    timeline_posts: Annotated[int | None, typer.Option("--timeline-posts", min=1, help="Attack runs of at most this "
                                                       "many consecutive posts of each timeline, each on its own "
                                                       "(more trials, narrower intervals).")] = None,
) -> None:
    """Re-identification: attribute each synthetic timeline to a history user.

    Seed 000 §5.3.2. Writes what the flow's reidentify stage writes (per-timeline
    attributions and the long score table) and summary.json."""
    from tasks.corpus.importers import check_parquet_file, read_synthetic
    from tasks.layout import folder_writer
    from tasks.paths import check_output_folder
    from tasks.privacy.attacks import attack_synthetic, build_attack, plan_attacks
    from tasks.privacy.reidentify import history_rows

    params: dict[str, dict] = {}
    for key, value in _assignments(set_, "--set").items():
        name, _, field = key.partition(".")
        if not field:
            _fail(f"--set {shown(f'{key}={value}')}: expected attack.key=value")
        params.setdefault(name, {})[field] = value
    try:
        check_parquet_file(histories)
        plan = plan_attacks(attack, history_rows(histories))
        names, settings = list(plan.names), list(adversary_settings(adversary))
        unasked = sorted(set(params) - set(names))
        if unasked:
            raise ValueError(f"--set {key_path([unasked[0]])}.…: attack {shown(unasked[0])} is not run "
                             f"(--attack {shown(attack)})")
        attacks = [build_attack(name, params.get(name), root="--set ") for name in names]
        check_output_folder(out)
        synth = read_synthetic(synthetic)
        if "author_id" not in synth.columns:
            raise InputError("required column is missing", file=str(synthetic), column="author_id")
        skipped = {n: why for n, why in plan.left_out.items() if attack == EVERY_ATTACK}  # --attack NAME: the others unasked
        for line in plan.lines() if attack == EVERY_ATTACK else []:
            _say(f"attack left out: {line}")
        tables = [attack_synthetic(str(histories), part, str(label), attacks, settings, timeline_posts=timeline_posts,
                                   left_out=skipped)
                  for label, part in synth.groupby("strategy", sort=True)]
    except (SynthUGCError, FileNotFoundError, ValueError) as exc:
        _fail(str(exc).splitlines()[0])
    import pandas as pd

    writer = folder_writer(out, "reidentify", label="")
    summaries = [s for t in tables for s in t.summaries]
    with _writing(out):
        writer.table("per_timeline", pd.concat([t.per_timeline for t in tables], ignore_index=True))
        writer.table("scores", pd.concat([t.scores for t in tables], ignore_index=True))
        writer.store.write_text(json.dumps(summaries, indent=2, default=str), "summary.json")
    from tasks.privacy.audit import NOTHING_MEASURABLE

    def ci(s: dict, key: str) -> str:
        return f"{s[key]:.4f} [{s[key + '_ci_low']:.4f}, {s[key + '_ci_high']:.4f}]"

    for s in summaries:
        risk = (f"residual risk over chance {ci(s, 'risk')}" if s["risk"] > 0 else
                f"residual risk: {NOTHING_MEASURABLE}")
        typer.echo(f"{s['strategy']}/{s['variant']} {s['attack']}/{s['adversary']}: n={s['n_timelines']} timelines, "
                   f"accuracy@1 {ci(s, 'accuracy_at_1')}, @10 {ci(s, 'accuracy_at_10')}, MRR {ci(s, 'mrr')} "
                   f"(95% intervals; chance {s['chance']:.2e}); {risk}" + (f"; {s['reason']}" if s.get("reason") else ""))
    typer.echo(f"-> {out}")


def profile(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) with attr_* columns and splits.")],
    attr: Annotated[str, typer.Option("--attr", help="Attribute name (without attr_).")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    synthetic: Annotated[Path | None, typer.Option("--synthetic", help="Synthetic table to evaluate on.")] = None,
    model: Annotated[Model, typer.Option("--model", help="The attribute classifier.")] = "linear",
    level: Annotated[Level, typer.Option("--level", help="Guess from each post, or from an author's posts "
                                         "together.")] = "post",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    resamples: Annotated[int, typer.Option("--resamples", min=1, help="Bootstrap resamples of the macro-F1 "
                                           "interval.")] = 1000,
) -> None:
    """Attribute profiling: guess a sensitive attribute from real and synthetic text.

    Train on the real train split, score on the real test split and its synthetic version,
    each figure with its 95% interval."""
    _environment()
    from tasks.corpus.importers import read_corpus, read_synthetic
    from tasks.paths import check_output_folder
    from tasks.privacy.profiling import profile_attribute
    from tasks.store import ArtifactStore

    try:
        check_output_folder(out)
        real = read_corpus(corpus).corpus
        sets = None
        if synthetic is not None:
            synth = read_synthetic(synthetic, real["doc_id"])
            sets = {name: part for name, part in synth.groupby("strategy", sort=True)}
        result = profile_attribute(real, attr, synthetic=sets, model=model, level=level, seed=seed,  # type: ignore[arg-type]
                                   n_resamples=resamples)
    except (SynthUGCError, ValueError) as exc:
        _fail(str(exc).splitlines()[0])
    store = ArtifactStore(out)
    with _writing(out):
        for name in ("scores", "predictions", "top_words", "word_bins"):
            store.write_table(getattr(result, name), f"{name}.parquet")
    typer.echo(result.scores[["set", "n_units", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "macro_f1",
                              "macro_f1_ci_low", "macro_f1_ci_high", "advantage", "advantage_ci_low",
                              "advantage_ci_high", "reduction", "chance"]].to_string(index=False))
    typer.echo("95% intervals: Wilson (accuracy), percentile bootstrap over units (macro-F1), Anonymeter's residual "
               "risk over the majority class (advantage; nan: nothing measurable)")
    typer.echo(f"-> {out}")


def _seeds(text: str) -> list[int]:
    """``--seeds 0,1,2``: the seeds, or exit 2 naming what is wrong."""
    seeds: list[int] = []
    for item in (t.strip() for t in text.split(",")):
        if not item.isdigit() or int(item) > MAX_SEED:
            _fail(f"--seeds {shown(text)}: {shown(item)} is not a seed (a whole number from 0 to {MAX_SEED}); "
                  "e.g. --seeds 0,1,2")
        seeds.append(int(item))
    if len(set(seeds)) != len(seeds) or len(seeds) > MAX_UTILITY_SEEDS:
        _fail(f"--seeds {shown(text)}: at most {MAX_UTILITY_SEEDS} seeds, each once")
    return seeds


def utility(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) with labels and splits.")],
    synthetic: Annotated[Path, typer.Option("--synthetic", help="Synthetic table (schema).")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    task: Annotated[UtilityTask, typer.Option("--task", help="The task trained and tested.")] = "post",
    scheme: Annotated[list[Scheme] | None, typer.Option("--scheme", help="Synthetic texts replace the real ones "
                                                        "or join them (repeatable; default: both).")] = None,
    fractions: Annotated[str, typer.Option("--fractions", help="Training fractions, comma-separated.")] = "0.1,0.5,1.0",
    seeds: Annotated[str, typer.Option("--seeds", help="The seeds, comma-separated (one repeat each), as the "
                                       "config's utility.seeds.")] = "0,1,2,3,4",
    model: Annotated[Model, typer.Option("--model", help="The post task's classifier.")] = "linear",
    label: Annotated[str, typer.Option("--label", help="Label column.")] = "label",
    coverage: Annotated[Coverage, typer.Option("--coverage", help="Timeline coverage per timeline then averaged "
                                               "(the task's script), or pooled.")] = "timeline",
    _setting: Annotated[str | None, renamed("--setting", "--scheme")] = None,
) -> None:
    """Train on synthetic, test on real: substitution and augmentation against the real baseline."""
    _environment()
    from tasks.corpus.importers import read_corpus, read_synthetic
    from tasks.paths import check_output_folder
    from tasks.store import ArtifactStore
    from tasks.training.utility import deterministic_note, evaluator_for, run_utility, utility_tables

    settings = [s.value for s in scheme] if scheme else [s.value for s in Scheme]
    try:
        shares = [float(f) for f in fractions.split(",")]
    except ValueError:
        _fail(f"--fractions {shown(fractions)}: expected numbers like 0.1,0.5,1.0")
    repeats = _seeds(seeds)
    _say(f"utility: seeds {','.join(map(str, repeats))} (--seeds lists the seeds; it is not a count)")
    try:
        check_output_folder(out)
        real = read_corpus(corpus).corpus  # keeps seg_tags, the dialogue task's word-level gold
        if task == "post":
            real = real.assign(group_id=real["doc_id"])
        synth = read_synthetic(synthetic, real["doc_id"])
        sets = {name: part for name, part in synth.groupby("strategy", sort=True)}
        embed = None
        if task != "post":  # the flow's sentence embedder and embedding cache: the same inputs, the same numbers
            from tasks.models.embeddings import EmbeddingCache
            from tasks.settings import get_settings
            from tasks.training.dialogue import sentence_embedder

            embed = sentence_embedder(cache=EmbeddingCache(get_settings().cache_dir.resolve() / "embeddings.sqlite"))
        results = run_utility(real, sets, evaluator_for(task, model=model, embed=embed, coverage=coverage),
                              settings=settings, fractions=shares, seeds=repeats, label_col=label)
    except (SynthUGCError, ValueError) as exc:
        _fail(str(exc).splitlines()[0])
    store = ArtifactStore(out)
    with _writing(out):
        store.write_table(results, "utility_runs.parquet")
        for name, table in utility_tables(results).items():
            store.write_table(table.reset_index() if table.index.name else table, f"{name}.parquet")
            typer.echo(f"{name}:\n{table.to_string()}")
    if note := deterministic_note(results):
        typer.echo(note)
    typer.echo(f"-> {out}")


def report(
    run_dir: Annotated[Path, typer.Argument(help="A finished run: <storage_root>/<experiment> (has manifest.json).")],
    goal: Annotated[list[str] | None, typer.Option("--goal", help="Rank the strategies for this goal instead of the "
                                                   "config's (repeatable): a preset such as share-data, or "
                                                   "use_case[,dp][,longitudinal] (docs/report.md).")] = None,
    examples: Annotated[int | None, typer.Option("--examples", help="Example outputs to show (0 = off; they show "
                                                  "real text). Default: the run's config.")] = None,
    budget: Annotated[str | None, typer.Option("--budget", help=f"e.g. '{RUN_EXAMPLE}': list the strategies "
                                               "that meet it under the worst-case attack, and by how much the others "
                                               "miss it. Default: the run's report.budget.")] = None,
    decide_on: Annotated[DecideOn | None, typer.Option("--decide-on", help="The budget decided on the 95% interval's "
                                                       "bound (a straddled budget is undecided) or the point estimate. "
                                                       "Default: the run's report.decide_on.")] = None,
    _require: Annotated[str | None, renamed("--require", "--budget")] = None,
) -> None:
    """Rebuild a finished run's report.md and report.html from its artifacts.

    Recomputes nothing: after `synthugc annotate import`, or to rank for another goal or
    budget."""
    from tasks.report.rebuild import rebuild_report

    try:
        from tasks.budgets import parse_budget

        if budget is not None:
            parse_budget(budget, where="--budget")  # the same check as the config's report.budget
        rebuilt = rebuild_report(run_dir, goals=goal, examples=examples, require=budget, decide_on=decide_on)
    except SynthUGCError as exc:
        _fail(str(exc))
    if rebuilt.budget is not None:
        for row in rebuilt.budget.itertuples(index=False):
            said = "meets    " if row.meets else "undecided" if row.undecided else "misses   "
            typer.echo(f"{said} {row.strategy}: {row.verdict}")
    typer.echo(f"{rebuilt.markdown}\n{rebuilt.html}")
