"""``synthugc annotate``: the human-evaluation round trip (seed 004 guideline).

``export`` writes a blind rating sheet (CSV), an offline HTML form, the guideline and the key into
``<run>/human_eval/``; ``import`` reads the filled sheets back, writes agreement, per-strategy human
scores and the metric-human correlations there, and rebuilds the run's report with them. Bad input ends with exit
code 2 and one line naming file, row and column. Each command imports what it runs inside its function, on purpose,
as :mod:`flows.cli` does (the CLI starts fast).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from flows.cli.common import Command, Group, _fail, renamed
from tasks.errors import SynthUGCError

annotate_app = typer.Typer(help="Human evaluation: export a blind rating sheet, import the filled sheets.",
                           no_args_is_help=True, cls=Group)


def _number(value: object, digits: int = 3) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def format_agreement(agreement: pd.DataFrame) -> str:
    """The agreement table as aligned text lines (the reason, where a value is undefined, at the end)."""
    header = ["aspect", "alpha", "kappa", "items", "annotators", "note"]
    rows = [[str(r.aspect), _number(r.alpha), _number(r.kappa), str(r.n_items), str(r.n_annotators),
             "" if pd.isna(r.reason) else str(r.reason)] for r in agreement.itertuples(index=False)]
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for line in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, line[-1]]).rstrip())
    return "\n".join(lines)


@annotate_app.command("export", cls=Command)
def export(
    run_dir: Annotated[Path, typer.Argument(help="A finished run: <storage_root>/<experiment>.")],
    per_strategy: Annotated[int, typer.Option("--per-strategy", min=1,
                                              help="Items per strategy (and variant).")] = 20,
    seed: Annotated[int, typer.Option("--seed", help="Sampling and shuffling seed.")] = 0,
    attribute: Annotated[str | None, typer.Option("--attribute", help="Sensitive attribute annotators guess "
                                                  "(e.g. party or attr_party); default: the corpus's only "
                                                  "attr_* column.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a different earlier export (its filled "
                                            "sheets will no longer import).")] = False,
    _force: Annotated[bool, renamed("--force", "--overwrite")] = False,
) -> None:
    """Write a blind rating sheet (CSV), an offline HTML form and the guideline for a finished run."""
    from tasks.report.human_eval import export_sheet
    from tasks.report.run_files import RunFiles

    try:
        result = export_sheet(RunFiles.open(run_dir), per_strategy=per_strategy, seed=seed,
                              attribute=attribute, overwrite=overwrite)
    except SynthUGCError as exc:
        _fail(str(exc))
        return
    groups = ", ".join(f"{name}={n}" for name, n in result.per_group.items())
    typer.echo(f"{result.n_items} items ({groups}), shuffled under opaque ids")
    if result.attribute:
        typer.echo(f"attribute question: {result.attribute} ({'; '.join(result.choices)})")
    for line in result.short:
        typer.echo(f"note: {line}")
    typer.echo(f"sheet: {result.sheet}")
    typer.echo(f"form: {result.form}")
    typer.echo(f"guideline: {result.readme}")
    typer.echo(f"key (do not give it to annotators): {result.key}")
    typer.echo(f"import the filled sheets with: synthugc annotate import {run_dir} SHEET.csv [SHEET.csv ...]")


@annotate_app.command("import", cls=Command)
def import_(
    run_dir: Annotated[Path, typer.Argument(help="The run the sheets were exported from.")],
    sheets: Annotated[list[Path], typer.Argument(help="Filled sheets (CSV): one per annotator, or any with "
                                                 "an annotator column.")],
) -> None:
    """Read filled sheets, then write agreement, per-strategy human scores and metric correlations."""
    from tasks.report.human_eval import import_sheets
    from tasks.report.run_files import RunFiles

    try:
        run = RunFiles.open(run_dir)
        result = import_sheets(run, sheets)
    except SynthUGCError as exc:
        _fail(str(exc))
        return
    typer.echo(f"{len(result.annotations)} ratings from {len(result.annotators)} annotator(s): "
               f"{', '.join(result.annotators)}")
    typer.echo(format_agreement(result.agreement))
    if result.metric_human_correlations.empty:
        typer.echo("note: no sample-level metric scores in the run; no metric correlations")
    for name, path in result.paths.items():
        typer.echo(f"{name}: {path}")
    from tasks.report.rebuild import rebuild_report

    try:
        rebuilt = rebuild_report(run_dir)
    except SynthUGCError as exc:  # the ratings are saved; only the report could not be rebuilt
        typer.echo(f"note: report not rebuilt ({exc}); rebuild it with: synthugc report {run_dir}", err=True)
        return
    typer.echo(f"report rebuilt with the human evaluation: {rebuilt.html}")
