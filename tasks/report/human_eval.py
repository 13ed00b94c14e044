"""Human evaluation of a finished run (seed 004 guideline): a blind rating sheet out, filled sheets back in.

``export_sheet`` samples ok synthetic rows of every (strategy, variant), on the same source documents
where it can, shuffles them under opaque ids (``item-0001`` ...) so annotators cannot tell the strategy,
and writes into ``<run>/human_eval/``:

- ``sheet.csv``   item_id, source_text, synthetic_text, fluency, meaning, attribute_guess, annotator, comment
- ``form.html``   the same items as an offline form (inline CSS and JS, progress kept in localStorage,
  a button that downloads a CSV with exactly the sheet's columns)
- ``README.txt``  the guideline (fluency and meaning scales, the attribute question) and the steps
- ``key.parquet`` which item is which document, strategy and variant, and its true attribute value
  (never given to annotators)
- ``export.json`` the export's settings and the allowed attribute guesses (read back by the import)

``import_sheets`` validates filled sheets (errors name file, row and column; rows are counted as a
spreadsheet shows them, the header is row 1), joins them with the key and writes ``annotations.parquet``,
``agreement.parquet`` (Krippendorff's alpha and mean pairwise Cohen's kappa), ``strategy_scores.parquet``
(mean human scores and the human profiling attack's accuracy per strategy) and
``metric_human_correlations.parquet`` (Spearman of each automatic sample-level metric with the mean human
scores). Nothing is written when any sheet is invalid.

The annotators' side (the sheet, the guideline, README.txt and the form) is in
:mod:`tasks.report.human_eval_sheet`, the agreement and summary statistics in
:mod:`tasks.report.human_eval_stats`; this module writes the export and reads the filled sheets back.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.corpus.schema import ATTR_PREFIX, STATUS_OK, attr_columns
from tasks.errors import InputError, shown
from tasks.report.human_eval_sheet import (
    CANT_TELL,
    SHEET_COLUMNS,
    _neutralize,
    _readme,
    _sheet_csv,
    _unneutralize,
    render_form,
    text_digest,
)
from tasks.report.human_eval_stats import (
    agreement_table,
    correlation_table,
    item_sample_scores,
    strategy_score_table,
)
from tasks.report.run_files import RunFiles
from tasks.report.tables import strategy_label
from tasks.store import ArtifactStore

REQUIRED_SHEET_COLUMNS: tuple[str, ...] = ("item_id", "fluency", "meaning")
#: What ``import_sheets`` writes (and a replacing export removes: those ratings were of other items).
RESULT_TABLES: tuple[str, ...] = ("annotations", "agreement", "strategy_scores", "metric_human_correlations")
KEY_COLUMNS: tuple[str, ...] = ("item_id", "doc_id", "strategy", "variant", "attribute", "attribute_value",
                                "text_digest")
ANNOTATION_COLUMNS: tuple[str, ...] = ("item_id", "annotator", "fluency", "meaning", "attribute_guess",
                                       "attribute_correct", "comment", "source_file", "source_row", "doc_id",
                                       "strategy", "variant", "attribute", "attribute_value")
_FREE_TEXT_COLUMNS = ("source_text", "synthetic_text", "annotator", "comment")
_SCORE = re.compile(r"^([1-5])(?:\.0*)?$")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})


@dataclass(frozen=True)
class ExportResult:
    """What ``export_sheet`` wrote: the files, the item count per (strategy, variant) and any shortfall."""

    directory: Path
    sheet: Path
    form: Path
    key: Path
    readme: Path
    settings: Path
    n_items: int
    attribute: str | None
    choices: tuple[str, ...]
    per_group: dict[str, int]
    short: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ImportResult:
    """What ``import_sheets`` read and wrote: the joined ratings and the three summary tables."""

    annotations: pd.DataFrame
    agreement: pd.DataFrame
    strategy_scores: pd.DataFrame
    metric_human_correlations: pd.DataFrame
    paths: dict[str, Path]

    @property
    def annotators(self) -> list[str]:
        """The annotators' names, sorted."""
        return sorted(self.annotations["annotator"].unique())


# ------------------------------------------------------------------------------------------------- export


def _resolve_attribute(corpus: pd.DataFrame, attribute: str | None) -> str | None:
    columns = attr_columns(corpus)
    if attribute is not None:
        name = attribute if attribute.startswith(ATTR_PREFIX) else ATTR_PREFIX + attribute
        if name not in columns:
            raise InputError(f"attribute {shown(attribute)} is not in the corpus; choose one of: "
                             f"{', '.join(columns) or '(the corpus has no attr_* column)'}")
        return name
    if len(columns) > 1:
        raise InputError(f"the corpus has several sensitive attributes ({', '.join(columns)}); "
                         "pick one with --attribute")
    return columns[0] if columns else None


def _attribute_choices(corpus: pd.DataFrame, attribute: str | None) -> tuple[str, ...]:
    if attribute is None:
        return ()
    values = corpus[attribute].dropna().astype(str).str.strip()
    values = sorted(set(values[values != ""]))
    if not values:
        raise InputError(f"attribute {attribute} has no values in the corpus; "
                         "choose another with --attribute")
    return (*values, CANT_TELL)


def _candidates(run: RunFiles, corpus_ids: set[str]) -> pd.DataFrame:
    """Every ok synthetic row with a non-empty text whose source is in the corpus, one per (strategy,
    variant, doc_id)."""
    labels = run.strategy_labels()
    if not labels:
        raise InputError(f"{run.root / 'generate'}: no generated shards; "
                         "the run has no synthetic text to rate")
    frames = []
    for label in labels:
        synthetic = run.read_synthetic(label)
        missing = [c for c in ("doc_id", "variant", "text", "status") if c not in synthetic.columns]
        if missing:
            raise InputError(f"{run.root / 'generate' / label}: shards lack column(s) {', '.join(missing)}")
        text = synthetic["text"].astype("string")
        ok = ((synthetic["status"].astype("string") == STATUS_OK) & (text.str.strip() != "")
              & synthetic["doc_id"].astype(str).isin(corpus_ids)).fillna(False).astype(bool)
        part = pd.DataFrame({
            "doc_id": synthetic["doc_id"].astype(str),
            "strategy": label,
            "variant": synthetic["variant"].astype("string").fillna(""),
            "synthetic_text": text,
        })[ok]
        frames.append(part.drop_duplicates(["strategy", "variant", "doc_id"]))
    return pd.concat(frames, ignore_index=True)


def _pick(candidates: pd.DataFrame, per_strategy: int, rng: np.random.Generator) -> pd.DataFrame:
    """``per_strategy`` rows of each (strategy, variant), taking first the documents that most groups have
    (annotators then compare strategies on the same sources), in a seeded random order among equals."""
    doc_ids = np.array(sorted(candidates["doc_id"].unique()), dtype=object)
    rank = dict(zip(doc_ids, rng.permutation(len(doc_ids)), strict=True))
    coverage = candidates.groupby("doc_id")["strategy"].size()
    ordered = sorted(doc_ids, key=lambda d: (-int(coverage[d]), int(rank[d])))
    position = {d: i for i, d in enumerate(ordered)}
    picked = []
    for _, group in candidates.groupby(["strategy", "variant"], sort=True):
        order = group["doc_id"].map(position).to_numpy()
        picked.append(group.iloc[np.argsort(order, kind="stable")[:per_strategy]])
    return pd.concat(picked, ignore_index=True)


def export_sheet(run: RunFiles, *, per_strategy: int = 20, seed: int = 0, attribute: str | None = None,
                 overwrite: bool = False) -> ExportResult:
    """Write a blind rating sheet, its offline form, the guideline and the key for a finished run.

    ``attribute`` names the sensitive attribute annotators guess (``party`` or ``attr_party``); by default
    the corpus's only ``attr_*`` column, and no question when there is none. The same ``seed`` gives the
    same items under the same ids. An existing, different export is kept unless ``overwrite`` (its filled
    sheets refer to its item ids).
    """
    if per_strategy < 1:
        raise InputError(f"per_strategy must be at least 1, got {per_strategy}")
    corpus_path = run.corpus()
    if not corpus_path.is_file():
        raise InputError(f"{corpus_path}: the run has no split corpus; did its split stage finish?")
    corpus = pd.read_parquet(corpus_path)
    attribute = _resolve_attribute(corpus, attribute)
    choices = _attribute_choices(corpus, attribute)
    corpus = corpus.assign(doc_id=corpus["doc_id"].astype(str)).drop_duplicates("doc_id").set_index("doc_id")
    rng = np.random.default_rng(seed)
    candidates = _candidates(run, set(corpus.index))
    if candidates.empty:
        raise InputError(f"{run.root / 'generate'}: no ok synthetic row with a source in the corpus; "
                         "nothing to rate")
    items = _pick(candidates, per_strategy, rng)
    items = items.iloc[rng.permutation(len(items))].reset_index(drop=True)
    width = max(4, len(str(len(items))))
    items.insert(0, "item_id", [f"item-{i:0{width}d}" for i in range(1, len(items) + 1)])
    items["source_text"] = corpus.loc[items["doc_id"], "text"].astype(str).to_numpy()
    items["text_digest"] = [text_digest(_neutralize(t)) for t in items["synthetic_text"]]
    items["attribute"] = attribute
    if attribute is None:
        items["attribute_value"] = None
    else:
        true = corpus.loc[items["doc_id"], attribute].astype("string").str.strip().to_numpy(dtype=object)
        items["attribute_value"] = [None if pd.isna(v) or v == "" else str(v) for v in true]

    key = pd.DataFrame({c: items[c].to_numpy(dtype=object) for c in KEY_COLUMNS}).astype("string")
    counts = items.groupby(["strategy", "variant"], sort=True).size()
    per_group = {strategy_label(s, v): int(n) for (s, v), n in counts.items()}
    short = [f"{name}: {n} of {per_strategy} items (fewer ok rows)" for name, n in per_group.items()
             if n < per_strategy]
    export_id = hashlib.sha256(key.to_csv(index=False).encode()).hexdigest()[:16]

    out = run.human_eval_dir
    previous = out / "key.parquet"
    replaced = previous.is_file() and not pd.read_parquet(previous).astype("string").equals(key)
    if replaced and not overwrite:
        raise InputError(f"{previous}: a different export is already there (filled sheets refer to its item "
                         "ids); import its sheets first, or overwrite it with --overwrite")
    if replaced:  # the imported ratings were of the old items: they must not reach the report any more
        for name in RESULT_TABLES:
            (out / f"{name}.parquet").unlink(missing_ok=True)
    # no strategy names here either: only key.parquet says which item is which
    settings = {"export_id": export_id, "per_strategy": per_strategy, "seed": seed, "attribute": attribute,
                "choices": list(choices), "n_items": len(items), "columns": list(SHEET_COLUMNS)}
    store = ArtifactStore(run.root)
    store.write_table(key, "human_eval", "key.parquet")
    store.write_text(_sheet_csv(items), "human_eval", "sheet.csv")
    store.write_text(render_form(items, attribute, choices, export_id), "human_eval", "form.html")
    store.write_text(_readme(attribute, choices, len(items)), "human_eval", "README.txt")
    store.write_text(json.dumps(settings, indent=2, sort_keys=True), "human_eval", "export.json")
    return ExportResult(directory=out, sheet=out / "sheet.csv", form=out / "form.html",
                        key=out / "key.parquet", readme=out / "README.txt", settings=out / "export.json",
                        n_items=len(items), attribute=attribute, choices=choices, per_group=per_group,
                        short=short)


# ------------------------------------------------------------------------------------------------- import


def _load_export(run: RunFiles) -> tuple[pd.DataFrame, dict]:
    key_path, settings_path = run.human_eval_dir / "key.parquet", run.human_eval_dir / "export.json"
    if not key_path.is_file() or not settings_path.is_file():
        raise InputError(f"{run.human_eval_dir}: no human-evaluation export; run "
                         f"`synthugc annotate export {run.root}` first")
    key = pd.read_parquet(key_path).astype("string")
    return key, json.loads(settings_path.read_text(encoding="utf-8"))


def _read_csv_rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header (lower-cased) and (spreadsheet row number, record) pairs; the header is row 1."""
    if not path.is_file():
        raise InputError("no such file", file=str(path))
    try:
        content = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 (byte {exc.start}); save the sheet as CSV UTF-8",
                         file=str(path)) from exc
    first_line = content.split("\n", 1)[0]
    delimiter = next((d for d in (",", ";", "\t") if d in first_line), ",")
    reader = csv.reader(io.StringIO(content, newline=""), delimiter=delimiter)
    try:
        header = [h.strip().lower() for h in next(reader)]
        records = [(number, dict(itertools.zip_longest(header, values, fillvalue="")))
                   for number, values in enumerate(reader, start=2)]
    except StopIteration:
        raise InputError("the file is empty (no header row)", file=str(path)) from None
    except csv.Error as exc:
        raise InputError(f"not a readable CSV: {exc}", file=str(path)) from exc
    missing = [c for c in REQUIRED_SHEET_COLUMNS if c not in header]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; expected the columns of sheet.csv: "
                         f"{', '.join(SHEET_COLUMNS)}", file=str(path))
    return header, records


def _parse_score(value: str, path: Path, row: int, column: str) -> int | None:
    if value == "":
        return None
    match = _SCORE.match(value)
    if not match:
        raise InputError(f"{column} must be a whole number from 1 to 5 (or empty = not rated), got {shown(value)}",
                         file=str(path), column=column, row=row)
    return int(match.group(1))


def _parse_guess(value: str, choices: Sequence[str], path: Path, row: int) -> str | None:
    if value == "":
        return None
    if not choices:
        raise InputError(f"this export asks no attribute question; leave attribute_guess empty, "
                         f"got {value!r}", file=str(path), column="attribute_guess", row=row)
    wanted = " ".join(value.translate(_APOSTROPHES).casefold().split())
    for choice in choices:
        if " ".join(choice.translate(_APOSTROPHES).casefold().split()) == wanted:
            return choice
    if wanted in ("cant tell", "cannot tell", "can not tell", "unknown", "?"):
        return CANT_TELL
    raise InputError(f"attribute_guess must be one of {'; '.join(choices)} (or empty), got {shown(value)}",
                     file=str(path), column="attribute_guess", row=row)


def read_sheets(sheets: Sequence[Path], key: pd.DataFrame, choices: Sequence[str]) -> pd.DataFrame:
    """The ratings of filled sheets, validated: one row per (item_id, annotator) with at least one rating or
    a comment, with the file and spreadsheet row it came from. Unrated rows are skipped."""
    digests = dict(zip(key["item_id"], key["text_digest"], strict=True))
    seen: dict[tuple[str, str], str] = {}
    records: list[dict] = []
    for raw_path in sheets:
        path = Path(raw_path)
        header, rows = _read_csv_rows(path)
        named = "annotator" in header and any(r.get("annotator", "").strip() for _, r in rows)
        for number, record in rows:
            raw = {c: (record.get(c) or "").strip() for c in SHEET_COLUMNS}
            cell = {c: _unneutralize(v) if c in _FREE_TEXT_COLUMNS else v for c, v in raw.items()}
            ratings = (cell["fluency"], cell["meaning"], cell["attribute_guess"])
            if not any(ratings) and not cell["comment"]:
                continue  # not rated (or a blank line)
            if cell["item_id"] not in digests:
                raise InputError(f"unknown item_id {shown(cell['item_id'])} (not in this run's export)",
                                 file=str(path), column="item_id", row=number)
            if raw["synthetic_text"] and text_digest(raw["synthetic_text"]) != digests[cell["item_id"]]:
                raise InputError(f"the text of {shown(cell['item_id'])} is not the one exported under that id: "
                                 "the sheet comes from an earlier export (or the cell was edited; empty it "
                                 "to skip this check)", file=str(path), column="synthetic_text", row=number)
            fluency = _parse_score(cell["fluency"], path, number, "fluency")
            meaning = _parse_score(cell["meaning"], path, number, "meaning")
            guess = _parse_guess(cell["attribute_guess"], choices, path, number)
            annotator = cell["annotator"] if named else path.stem
            if not annotator:
                raise InputError("missing annotator name (other rows of this file have one)", file=str(path),
                                 column="annotator", row=number)
            where = f"{path} row {number}"
            if (cell["item_id"], annotator) in seen:
                raise InputError(f"{shown(cell['item_id'])} is rated twice by annotator {shown(annotator)} (also at "
                                 f"{seen[(cell['item_id'], annotator)]}); with one file per annotator, name "
                                 "the annotator in the annotator column or in the file name",
                                 file=str(path), column="item_id", row=number)
            seen[(cell["item_id"], annotator)] = where
            records.append({"item_id": cell["item_id"], "annotator": annotator, "fluency": fluency,
                            "meaning": meaning, "attribute_guess": guess, "comment": cell["comment"] or None,
                            "source_file": str(path), "source_row": number})
    frame = pd.DataFrame.from_records(records, columns=["item_id", "annotator", "fluency", "meaning",
                                                        "attribute_guess", "comment", "source_file",
                                                        "source_row"])
    for column in ("fluency", "meaning", "source_row"):
        frame[column] = frame[column].astype("Int64")
    for column in ("item_id", "annotator", "attribute_guess", "comment", "source_file"):
        frame[column] = frame[column].astype("string")
    return frame


def _annotations(ratings: pd.DataFrame, key: pd.DataFrame) -> pd.DataFrame:
    joined = ratings.merge(key, on="item_id", how="left", validate="many_to_one")
    known = joined["attribute_guess"].notna() & joined["attribute_value"].notna()
    correct = pd.Series(pd.NA, index=joined.index, dtype="boolean")
    guess, truth = joined.loc[known, "attribute_guess"], joined.loc[known, "attribute_value"]
    correct[known] = (guess == truth).astype(bool)
    joined["attribute_correct"] = correct
    return joined[list(ANNOTATION_COLUMNS)].reset_index(drop=True)


def read_results(folder: Path) -> dict[str, pd.DataFrame]:
    """The imported human-evaluation tables in ``folder`` (annotations, agreement, strategy_scores,
    metric_human_correlations); empty when ``synthugc annotate import`` has not written all of them."""
    paths = {name: folder / f"{name}.parquet" for name in RESULT_TABLES}
    if not all(path.is_file() for path in paths.values()):
        return {}
    return {name: pd.read_parquet(path) for name, path in paths.items()}


def load_results(run: RunFiles) -> dict[str, pd.DataFrame]:
    """The imported human-evaluation tables of a run, for the report (see :func:`read_results`)."""
    return read_results(run.human_eval_dir)


def import_sheets(run: RunFiles, sheets: Sequence[Path]) -> ImportResult:
    """Read filled sheets (one per annotator, or any with an annotator column naming several), validate
    them against the run's export, and write annotations, agreement, per-strategy human scores and the
    metric-human correlations into ``<run>/human_eval/``. Nothing is written when a sheet is invalid."""
    key, settings = _load_export(run)
    if not sheets:
        raise InputError("give at least one filled sheet (CSV)")
    choices = tuple(settings.get("choices") or ())
    ratings = read_sheets(sheets, key, choices)
    if ratings.empty:
        raise InputError(f"no ratings in {', '.join(str(s) for s in sheets)}: every fluency, meaning and "
                         "attribute_guess cell is empty")
    annotations = _annotations(ratings, key)
    agreement = agreement_table(annotations, choices)
    strategy_scores = strategy_score_table(annotations, key)
    correlations = correlation_table(annotations, item_sample_scores(run, key))
    store = ArtifactStore(run.root)
    tables = dict(zip(RESULT_TABLES, (annotations, agreement, strategy_scores, correlations), strict=True))
    paths = {}
    for name, table in tables.items():
        store.write_table(table, "human_eval", f"{name}.parquet")
        paths[name] = run.human_eval_dir / f"{name}.parquet"
    return ImportResult(annotations=annotations, agreement=agreement, strategy_scores=strategy_scores,
                        metric_human_correlations=correlations, paths=paths)
