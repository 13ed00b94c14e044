"""The ``synthugc`` command line: the Typer app (``flows.cli:app``, the console entry in pyproject.toml) and
its command table; the commands live in this package's modules, one per command group.

Bad config or data ends with exit code 2 and one line on stderr (no traceback); the full record still
goes to the Prefect API, so the UI shows it.

Each command imports what it runs inside its own function, on purpose: ``synthugc --help`` and the light commands
load no torch, Prefect or scikit-learn (``import flows.cli``: 30 project modules in 0.33-0.38 s with Typer, on 2
cores at load 0.7; 49 since the options' choices come from the modules that check them, tasks.training's
loading pydantic-settings: 0.78 s against 0.65 s before, at load 5).

The commands are registered here, in one table, so that ``synthugc --help`` lists them in this order; each with
flows/cli/common.py's command class (flags shown as flags). One name per concept across the commands (issue 59):
``--budget`` wherever a budget is given, ``--adversary`` for what the adversary holds, ``--overwrite`` to replace
an earlier output; tests/test_cli_help.py walks every command's help for these rules.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer

from flows.cli import data, evaluate, listing, protect, rewrite, runs
from flows.cli.annotate import annotate_app
from flows.cli.common import Command, Group

app = typer.Typer(help="Synthetic user-generated text: generate, evaluate, report.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False, cls=Group)
datasets_app = typer.Typer(help="Public datasets shipped inside packages.", no_args_is_help=True, cls=Group)
app.add_typer(datasets_app, name="datasets")
app.add_typer(annotate_app, name="annotate")


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version

        typer.echo(f"synthugc {version('synthugc')}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                help="Print synthugc's version and exit.")] = False) -> None:
    """Synthetic user-generated text: generate, evaluate, report."""


command = partial(app.command, cls=Command)

command()(runs.run)
command()(runs.demo)
command("import")(data.import_)
command()(rewrite.generate)
command()(protect.protect)
command("audit-dp")(rewrite.audit_dp)
command()(rewrite.pseudonymize)
command()(evaluate.score)
command()(evaluate.metaeval)
command()(evaluate.reidentify)
command()(evaluate.profile)
command()(evaluate.utility)
datasets_app.command("list", cls=Command)(data.datasets_list)
datasets_app.command("fetch", cls=Command)(data.datasets_fetch)
datasets_app.command("timelines", cls=Command)(data.datasets_timelines)
command()(evaluate.report)
command()(protect.release)
command()(runs.deploy)
command()(runs.serve)
command("metrics")(listing.metrics_catalogue)
command("strategies")(listing.strategies_catalogue)
command("attacks")(listing.attacks_catalogue)


def main() -> None:  # pragma: no cover - console entry
    app(prog_name="synthugc")
