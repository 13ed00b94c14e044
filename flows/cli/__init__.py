"""The ``synthugc`` command line: the Typer app (``flows.cli:app``, the console entry in pyproject.toml) and
its command table; the commands live in this package's modules, one per command group.

Bad config or data ends with exit code 2 and one line on stderr (no traceback); the full record still
goes to the Prefect API, so the UI shows it.

Each command imports what it runs inside its own function, on purpose: ``synthugc --help`` and the light commands
load no torch, Prefect or scikit-learn (``import flows.cli``: 30 project modules in 0.33-0.38 s with Typer, on 2
cores at load 0.7).

The commands are registered here, in one table, so that ``synthugc --help`` lists them in this order.
"""

from __future__ import annotations

import typer

from flows.annotate_cli import annotate_app
from flows.cli import data, evaluate, listing, protect, rewrite, runs

app = typer.Typer(help="Synthetic user-generated text: generate, evaluate, report.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
datasets_app = typer.Typer(help="Public datasets shipped inside packages.", no_args_is_help=True)
app.add_typer(datasets_app, name="datasets")
app.add_typer(annotate_app, name="annotate")

app.command()(runs.run)
app.command()(runs.demo)
app.command("import")(data.import_)
app.command()(rewrite.generate)
app.command()(protect.protect)
app.command("audit-dp")(rewrite.audit_dp)
app.command()(rewrite.pseudonymize)
app.command()(evaluate.score)
app.command()(evaluate.metaeval)
app.command()(evaluate.reidentify)
app.command()(evaluate.profile)
app.command()(evaluate.utility)
datasets_app.command("list")(data.datasets_list)
datasets_app.command("fetch")(data.datasets_fetch)
datasets_app.command("timelines")(data.datasets_timelines)
app.command()(evaluate.report)
app.command()(protect.release)
app.command()(runs.deploy)
app.command()(runs.serve)
app.command("metrics")(listing.metrics_catalogue)
app.command("strategies")(listing.strategies_catalogue)
app.command("attacks")(listing.attacks_catalogue)


def main() -> None:  # pragma: no cover - console entry
    app(prog_name="synthugc")
