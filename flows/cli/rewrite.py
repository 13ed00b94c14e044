"""``synthugc generate``, ``audit-dp`` and ``pseudonymize``: rewrite a corpus without Prefect (one strategy, a DP
rewriter's audit, direct identifiers replaced), each output written atomically beside its failed inputs.

Each command imports what it runs inside its own function, on purpose (the CLI starts fast; see
flows/cli/__init__.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple

import typer

from flows.cli.common import _assignments, _environment, _fail, _writing, choice
from tasks.errors import SynthUGCError, shown
from tasks.generate.pseudonymize import SCOPE_COLUMNS
from tasks.protect.files import mapping_path

if TYPE_CHECKING:
    import pandas as pd

#: The span within which one value keeps one surrogate (tasks/generate/pseudonymize.py's SCOPE_COLUMNS).
Scope = choice(SCOPE_COLUMNS)


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
    """Audit a DP rewriter on a corpus against its nominal epsilon.

    DP-Prompt's exact privacy loss of every output against neighbouring documents, or DP-
    BART's distinguishing game with a Clopper-Pearson lower bound on epsilon."""
    _environment()
    from tasks.privacy.dp_audit import audit_strategy, audit_summary

    params = _assignments(set_, "--set")
    written = _corpus_to_table(corpus, out, lambda documents: audit_strategy(
        strategy, params, documents, neighbours=neighbours, trials=trials, seed=seed))
    typer.echo(f"{strategy}: {audit_summary(written.table)} -> {written.out} (failed inputs: {written.failed_inputs})")


def pseudonymize(
    corpus: Annotated[Path, typer.Option("--corpus", help="Corpus file (schema).")],
    out: Annotated[Path, typer.Option("--out", help="Pseudonymised corpus parquet to write (atomically).")],
    entities: Annotated[str | None, typer.Option("--entities", help="Comma-separated PII types (default: "
                                                 "the direct identifiers; see docs/privacy.md).")] = None,
    scope: Annotated[Scope, typer.Option("--scope", help="Same surrogate for the same value within one "
                                         "document, group or author.")] = "document",
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Replace direct identifiers by consistent surrogates; the mapping goes to a private folder beside --out."""
    _environment()
    from tasks.corpus.importers import read_corpus, write_corpus, write_parquet_atomic
    from tasks.corpus.schema import ValidatedCorpus
    from tasks.generate.pseudonymize import NAMES_SEARCHED_COLUMN, pseudonymize_corpus
    from tasks.models.pii import DEFAULT_ENTITIES, PiiDetector

    names = [e.strip() for e in entities.split(",") if e.strip()] if entities else list(DEFAULT_ENTITIES)
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
