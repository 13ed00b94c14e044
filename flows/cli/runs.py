"""``synthugc run``, ``demo``, ``deploy`` and ``serve``: the commands that run the Prefect flow (here, with a
temporary server, or as deployments), and the console logging of a run.

Each command imports what it runs inside its own function, on purpose (the CLI starts fast; see
flows/cli/__init__.py).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flows import progress
from flows.cli.common import VerboseOption, _environment, _fail, _quiet_libraries, _say
from flows.cli.data import TIMELINE_FILES, datasets_timelines
from flows.cli.protect import protect, release
from tasks.errors import SynthUGCError
from tasks.protect.files import protect_paths

if TYPE_CHECKING:
    from flows.run_summary import RunSummary
    from flows.temporary_server import LaunchedServer

DEMO_CONFIG = Path(__file__).resolve().parent.parent.parent / "deployments" / "configs" / "demo.yaml"


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


def _silence_exit_noise() -> None:
    """After the run's own summary: the temporary Prefect server shutting down can still print cancelled-task
    tracebacks that say nothing about the run; send what is printed from here on to /dev/null."""
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - kept open until the interpreter exits


def _run_config(config: Path, overrides: list[str], verbose: bool = False, wait: bool = False,
                then: Callable[[], None] | None = None) -> None:
    """Validate, take the experiment's lock (refusing links out of the storage root and removing an interrupted
    run's partial files while holding it), then read a run whose every stage is cached without Prefect, or run with a
    temporary Prefect server bound to this process."""
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
        import time

        from flows.run_summary import cached_run

        started = time.perf_counter()
        summary: RunSummary | None = None
        try:
            summary = cached_run(cfg)
        except SynthUGCError:
            summary = None  # the flow says what is wrong, in its own words
        launched = None
        if summary is None:  # the server starts (3.5 s) while the flow's code, logging and task runner load
            from flows.temporary_server import end_orphaned_servers, launch_temporary_server

            for server, run in end_orphaned_servers():
                _say(f"ended the temporary Prefect server (pid {server}) left running by an interrupted run "
                     f"(pid {run})")
            launched = launch_temporary_server()
            if launched is not None:
                held.callback(launched.stop_unless_used)
        _run_locked(config, overrides, verbose, then, launched, summary, started)


def _run_locked(config: Path, overrides: list[str], verbose: bool, then: Callable[[], None] | None,
                launched: LaunchedServer | None, summary: RunSummary | None, started: float) -> None:
    """The run itself (``then``: what runs after it succeeds, before the exit noise is silenced), on the temporary
    server ``launched`` ahead of it, if any. A run whose every stage is cached (``summary``, read from the stages'
    caches) is listed without Prefect: no server, no logging set-up, no flow run."""
    import time

    from flows.run_summary import StageFailed

    error: str | None = None
    if summary is not None:  # nothing to compute (its stages are listed as a run lists them)
        for name, state in summary.stages.items():
            typer.echo(progress.stage_line(name, state, summary.seconds[name]), err=True)
        _say("every stage is cached with its artifacts intact: nothing to run, no Prefect flow run started")
    else:  # the flow's code loads while the server starts
        from prefect.logging.configuration import setup_logging

        from flows.experiment import experiment

        setup_logging()
        _quiet_user_error_tracebacks()
        if not verbose:  # one line per stage from the reporter; Prefect's own INFO lines still reach the API/UI
            _console_log_level(logging.ERROR)
            _quiet_libraries()
        if launched is not None:
            launched.wait_ready()
    bar = progress.RichStageBar() if sys.stderr.isatty() else progress.StageLines()
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
    except typer.Exit:
        raise
    except SynthUGCError as exc:
        _fail(str(exc))
    except Exception as exc:  # a bug: said before the exit noise is silenced below, which would swallow it
        if verbose:
            raise
        typer.echo(f"synthugc: internal error: {type(exc).__name__}: {exc} (--verbose shows the traceback)", err=True)
        raise typer.Exit(code=1) from None
    finally:
        if not verbose:
            _silence_exit_noise()


WaitOption = Annotated[bool, typer.Option("--wait", help="If the experiment is running already (same storage root), "
                                          "wait for it to end instead of exiting with code 2.")]


def run(config: Annotated[Path, typer.Argument(help="Experiment YAML file.")],
        set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.path=value (repeatable).")] = None,
        verbose: VerboseOption = False, wait: WaitOption = False) -> None:
    """Run an experiment: ingest, split, generate, metrics, privacy, utility, report."""
    _environment()
    _run_config(config, set_ or [], verbose, wait)


def demo(set_: Annotated[list[str] | None, typer.Option("--set", help="Override: key.path=value.")] = None,
         verbose: VerboseOption = False, wait: WaitOption = False) -> None:
    """Run the embedded demo: evaluate, then protect and release.

    The evaluation of deployments/configs/demo.yaml on the public 'debates' dataset, then
    protect the 'conventions' speakers' timelines at several meaning floors and release the
    chosen point."""
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


def deploy(
    prefect_file: Annotated[Path | None, typer.Option("--prefect-file", help="Deployments file "
                                                      "(default: deployments/prefect.yaml).")] = None,
    name: Annotated[list[str] | None, typer.Option("--name", help="Only this deployment (repeatable).")] = None,
) -> None:
    """Create the work pools and the deployments on the Prefect server.

    The pools synthugc-cpu and synthugc-gpu, on the server PREFECT_API_URL names; start
    workers with infra/prefect/worker.sh."""
    _environment()
    from flows.deployments import PREFECT_FILE
    from flows.deployments import deploy as deploy_all

    proc = deploy_all(prefect_file or PREFECT_FILE, names=name or None)
    if proc.returncode != 0:
        _fail("prefect deploy failed: " + ((proc.stderr or proc.stdout).strip().splitlines() or ["?"])[-1])
    typer.echo(proc.stdout.strip())


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
