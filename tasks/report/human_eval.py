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
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import re
import unicodedata
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from tasks.corpus.schema import ATTR_PREFIX, STATUS_OK, attr_columns
from tasks.errors import InputError, shown
from tasks.report.run_files import RunFiles
from tasks.report.tables import strategy_label
from tasks.report.templating import render
from tasks.scores import SAMPLE_SCORES
from tasks.store import ArtifactStore

SHEET_COLUMNS: tuple[str, ...] = ("item_id", "source_text", "synthetic_text", "fluency", "meaning",
                                  "attribute_guess", "annotator", "comment")
REQUIRED_SHEET_COLUMNS: tuple[str, ...] = ("item_id", "fluency", "meaning")
#: What ``import_sheets`` writes (and a replacing export removes: those ratings were of other items).
RESULT_TABLES: tuple[str, ...] = ("annotations", "agreement", "strategy_scores", "metric_human_correlations")
KEY_COLUMNS: tuple[str, ...] = ("item_id", "doc_id", "strategy", "variant", "attribute", "attribute_value",
                                "text_digest")
ANNOTATION_COLUMNS: tuple[str, ...] = ("item_id", "annotator", "fluency", "meaning", "attribute_guess",
                                       "attribute_correct", "comment", "source_file", "source_row", "doc_id",
                                       "strategy", "variant", "attribute", "attribute_value")
AGREEMENT_COLUMNS: tuple[str, ...] = ("aspect", "level", "alpha", "kappa", "kappa_weights", "n_items",
                                      "n_annotators", "n_pairs", "reason")
STRATEGY_SCORE_COLUMNS: tuple[str, ...] = ("strategy", "variant", "n_items", "n_ratings", "fluency_mean",
                                           "fluency_std", "fluency_n", "meaning_mean", "meaning_std",
                                           "meaning_n", "attribute_accuracy", "attribute_n",
                                           "attribute_cant_tell", "attribute_majority_baseline")
CORRELATION_COLUMNS: tuple[str, ...] = ("metric", "aspect", "rho", "p_value", "n", "reason")
SCALE_ASPECTS: tuple[str, ...] = ("fluency", "meaning")
ASPECTS: tuple[str, ...] = (*SCALE_ASPECTS, "attribute_guess")
CANT_TELL = "can't tell"
MIN_CORRELATION_ITEMS = 3

#: Seed 004, appendix A: fluency of the rewritten text, 5 (best) to 1.
FLUENCY_SCALE: dict[int, str] = {
    5: "Without any grammatical error.",
    4: "Fluent and has one or two minor grammatical errors that do not affect understanding.",
    3: "Basically fluent and has three or more minor grammatical errors, or one serious grammatical error "
       "that does not have a strong impact on understanding.",
    2: "Cannot understand what the meaning is, but is still in the form of human language.",
    1: "Not in the form of human language.",
}
#: Seed 004, appendix A: how much of the source's meaning the rewritten text keeps, 5 (best) to 1.
MEANING_SCALE: dict[int, str] = {
    5: "Accurate paraphrase with exactly the same meaning as the source sentence.",
    4: "Basically the same meaning as the source sentence, but does not cover some minor content.",
    3: "Covers part of the content of the source sentence and has serious information loss.",
    2: "Topic relevant, but fails to cover most of the content of the source sentence.",
    1: "Topic irrelevant, or cannot even understand what it means.",
}

#: A cell starting with one of these is run as a formula by spreadsheet programs (CSV injection): real user
#: text is written with a leading apostrophe instead, and the import takes it off again.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
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


# ----------------------------------------------------------------------------------------------- guideline


def attribute_display_name(attribute: str) -> str:
    """``attr_party`` -> ``party``: the name annotators read."""
    return attribute.removeprefix(ATTR_PREFIX).replace("_", " ")


def attribute_question(attribute: str, choices: Sequence[str]) -> str:
    """The sensitive-attribute question of seed 004 (\"judge whether they are from democratic or republican
    members\"), for this run's attribute and its observed values."""
    values = [c for c in choices if c != CANT_TELL]
    listed = ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else ", ".join(values)
    return (f"Judge the {attribute_display_name(attribute)} of the author from the rewritten text alone: "
            f"{listed}. Answer \"{CANT_TELL}\" when the text gives no clue. Make this guess before you read "
            "the source text.")


def guideline_text(attribute: str | None, choices: Sequence[str]) -> str:
    """The guideline as plain text (README.txt); the form shows the same scales."""
    lines = ["Please judge the rewritten (synthetic) text by the following criteria.", "",
             "Fluency (the rewritten text on its own):"]
    lines += [f"  {score}: {text}" for score, text in FLUENCY_SCALE.items()]
    lines += ["", "Meaning (the rewritten text against the source text):"]
    lines += [f"  {score}: {text}" for score, text in MEANING_SCALE.items()]
    if attribute:
        lines += ["", f"Sensitive attribute ({attribute_display_name(attribute)}):",
                  f"  {attribute_question(attribute, choices)}",
                  "  Allowed answers: " + "; ".join(choices)]
    return "\n".join(lines)


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


def _neutralize(value: str) -> str:
    """Keep a spreadsheet from running user text as a formula (leading apostrophe; see _FORMULA_START)."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def _unneutralize(value: str) -> str:
    return value[1:] if value.startswith("'") and value[1:].startswith(_FORMULA_START) else value


def text_digest(cell: str) -> str:
    """A short digest of a synthetic_text cell as the sheet or the form writes it, blind to what a
    spreadsheet or a browser may change (Unicode form, line ends, runs of white space): an import checks
    it, so a sheet from an earlier export (same item ids, other items) cannot be read as this one."""
    normal = " ".join(unicodedata.normalize("NFC", cell).split())
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()[:16]


def _sheet_csv(items: pd.DataFrame) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(SHEET_COLUMNS)
    for row in items.itertuples(index=False):
        writer.writerow([row.item_id, _neutralize(row.source_text), _neutralize(row.synthetic_text),
                         "", "", "", "", ""])
    return "\ufeff" + buffer.getvalue()  # the BOM makes spreadsheet programs read the file as UTF-8


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
                         "ids); import its sheets first, or overwrite it with --force")
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


def _readme(attribute: str | None, choices: Sequence[str], n_items: int) -> str:
    columns = [
        "item_id          the item (do not change it)",
        "source_text      the original text",
        "synthetic_text   the rewritten text you rate",
        "fluency          1-5, see the scale below (leave empty to skip)",
        "meaning          1-5, see the scale below (leave empty to skip)",
        "attribute_guess  " + ("one of: " + "; ".join(choices) if attribute else "(not asked in this study: "
                                                                               "leave empty)"),
        "annotator        your name (or leave empty and name the file after yourself)",
        "comment          anything worth saying about the item (optional)",
    ]
    return "\n".join([
        "HUMAN EVALUATION SHEET",
        "",
        f"{n_items} rewritten texts, in random order. Rate each one on its own; the items do not say",
        "how they were made, and that is on purpose.",
        "",
        "Two ways to fill it in:",
        "  - open form.html in a browser (works offline; your answers are kept in that browser as you go),",
        "    type your name, rate the items and press \"Download filled CSV\"; or",
        "  - fill sheet.csv in a spreadsheet program and save it as CSV (UTF-8).",
        "Send the CSV back. Annotators get form.html or sheet.csv and this README only: key.parquet says",
        "which item is which.",
        "",
        "Columns of the sheet:",
        *[f"  {c}" for c in columns],
        "",
        "GUIDELINE (seed 004)",
        "",
        guideline_text(attribute, choices),
        "",
        "Import the filled sheets with: synthugc annotate import RUN_DIR SHEET.csv [SHEET.csv ...]",
        "(errors name the file, the column and the row as a spreadsheet shows it: the header is row 1).",
        "",
    ])


# ------------------------------------------------------------------------------------------------ the form


def render_form(items: pd.DataFrame, attribute: str | None, choices: Sequence[str], export_id: str) -> str:
    """The offline form (template ``human_eval_form.html.j2``): guideline, then each item (rewritten text,
    fluency, attribute guess, the source behind a fold, meaning, comment). Every text is HTML-escaped; the
    page loads nothing from the network."""
    return render(
        "human_eval_form.html.j2", fluency_scale=FLUENCY_SCALE, meaning_scale=MEANING_SCALE,
        attribute_name=attribute_display_name(attribute) if attribute else None,
        attribute_question=attribute_question(attribute, choices) if attribute else None, choices=list(choices),
        items=items[["item_id", "synthetic_text", "source_text"]].to_dict("records"),
        columns=list(SHEET_COLUMNS), required=["fluency", "meaning", *(["attribute_guess"] if attribute else [])],
        store_key=f"synthugc-human-eval-{export_id}")


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


# -------------------------------------------------------------------------------------------- statistics


def krippendorff_alpha(ratings: np.ndarray, level: Literal["nominal", "ordinal"] = "nominal") -> float:
    """Krippendorff's alpha (the ``krippendorff`` package) of an (annotators x items) matrix of numeric codes,
    NaN = not rated; items with one rating do not count. ``ordinal`` codes must be ordered. NaN when no
    item has two ratings or when the values of the items rated twice or more do not vary (alpha is
    undefined then; the package raises)."""
    data = np.asarray(ratings, dtype=float)
    if data.ndim != 2:
        raise ValueError(f"ratings must be annotators x items, got shape {data.shape}")
    pairable = data[:, (~np.isnan(data)).sum(axis=0) >= 2]
    if np.unique(pairable[~np.isnan(pairable)]).size < 2:
        return float("nan")
    import krippendorff  # deferred on purpose: every run imports this module, few rate

    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


def cohen_kappa(a: Sequence, b: Sequence, labels: Sequence,
                weights: Literal["quadratic"] | None = None) -> float:
    """Cohen's kappa (scikit-learn's ``cohen_kappa_score``) of two annotators' ratings of the same items,
    over the given label order (quadratic weights use the labels' positions, so 1-5 scores weigh
    (i - j)^2). NaN when there is no item or chance agreement is total (both gave one and the same label
    to every item)."""
    if len(a) == 0:
        return float("nan")
    from sklearn.exceptions import UndefinedMetricWarning  # deferred on purpose, as krippendorff above
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():  # the undefined case is answered with NaN, which callers report
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return float(cohen_kappa_score(list(a), list(b), labels=list(labels), weights=weights,
                                       replace_undefined_by=np.nan))


def _aspect_matrix(annotations: pd.DataFrame, aspect: str, labels: Sequence) -> pd.DataFrame:
    """annotators x items, the rating's position in ``labels`` (NaN = not rated)."""
    rated = annotations[annotations[aspect].notna()]
    codes = rated[aspect].map({label: float(i) for i, label in enumerate(labels)}).astype(float)
    frame = pd.DataFrame({"annotator": rated["annotator"].astype(str),
                          "item_id": rated["item_id"].astype(str), "code": codes.to_numpy()})
    return frame.pivot(index="annotator", columns="item_id", values="code")


def agreement_table(annotations: pd.DataFrame, choices: Sequence[str]) -> pd.DataFrame:
    """Per aspect: Krippendorff's alpha (ordinal for the 1-5 scales, nominal for the attribute guess), mean
    pairwise Cohen's kappa (quadratic weights / unweighted), items rated by two or more annotators, the
    annotators who rated the aspect, the annotator pairs with a defined kappa, and why a value is NaN."""
    rows = []
    aspects: list[tuple[str, str, Sequence, Literal["quadratic"] | None]] = [
        ("fluency", "ordinal", range(1, 6), "quadratic"), ("meaning", "ordinal", range(1, 6), "quadratic"),
        ("attribute_guess", "nominal", list(choices), None)]
    for aspect, level, labels, weights in aspects:
        if not labels:
            rows.append({"aspect": aspect, "level": level, "alpha": float("nan"), "kappa": float("nan"),
                         "kappa_weights": "none", "n_items": 0, "n_annotators": 0, "n_pairs": 0,
                         "reason": "this export asks no attribute question"})
            continue
        matrix = _aspect_matrix(annotations, aspect, list(labels))
        n_annotators = len(matrix.index)
        shared = matrix.notna().sum(axis=0) >= 2
        n_items = int(shared.sum())
        alpha = kappa = float("nan")
        n_pairs = 0
        reason = None
        if n_annotators == 0:
            reason = f"no {aspect} ratings"
        elif n_annotators == 1:
            reason = f"only one annotator ({matrix.index[0]}) rated {aspect}"
        elif n_items == 0:
            reason = f"no item has {aspect} ratings from two or more annotators"
        else:
            alpha = krippendorff_alpha(matrix.to_numpy(), level)  # type: ignore[arg-type]
            kappas = []
            for first, second in itertools.combinations(matrix.index, 2):
                both = matrix.loc[[first, second]].dropna(axis=1)
                if both.shape[1]:
                    value = cohen_kappa(both.iloc[0].astype(int), both.iloc[1].astype(int),
                                        range(len(labels)), weights)
                    if not math.isnan(value):
                        kappas.append(value)
            n_pairs = len(kappas)
            kappa = float(np.mean(kappas)) if kappas else float("nan")
            problems = []
            if math.isnan(alpha):
                problems.append(f"alpha: no variation in the {aspect} ratings of the items rated twice "
                                "or more")
            if not kappas:
                problems.append("kappa: no annotator pair with shared items and varying ratings")
            reason = "; ".join(problems) or None
        rows.append({"aspect": aspect, "level": level, "alpha": alpha, "kappa": kappa,
                     "kappa_weights": weights or "none", "n_items": n_items, "n_annotators": n_annotators,
                     "n_pairs": n_pairs, "reason": reason})
    table = pd.DataFrame(rows, columns=list(AGREEMENT_COLUMNS))
    return table.astype({"aspect": "string", "level": "string", "alpha": float, "kappa": float,
                         "kappa_weights": "string", "n_items": "int64", "n_annotators": "int64",
                         "n_pairs": "int64", "reason": "string"})


def strategy_score_table(annotations: pd.DataFrame, key: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, variant) of the export: mean and std of fluency and meaning over all ratings, and the
    human profiling attack: attribute-guess accuracy against the true value (\"can't tell\" counts as
    wrong), its guess count, the \"can't tell\" count, and the accuracy of always guessing the most common
    true value of the exported items (the chance line the accuracy should be read against)."""
    values = key["attribute_value"].dropna()
    majority = values.value_counts().sort_index().idxmax() if len(values) else None
    rows = []
    for (strategy, variant), items in key.groupby(["strategy", "variant"], sort=True, dropna=False):
        part = annotations[(annotations["strategy"] == strategy) & (annotations["variant"] == variant)]
        row = {"strategy": strategy, "variant": variant, "n_items": len(items),
               "n_ratings": int(part[list(ASPECTS)].notna().any(axis=1).sum())}
        for aspect in SCALE_ASPECTS:
            scores = part[aspect].dropna().astype(float)
            row[f"{aspect}_mean"] = float(scores.mean()) if len(scores) else float("nan")
            row[f"{aspect}_std"] = float(scores.std(ddof=1)) if len(scores) > 1 else float("nan")
            row[f"{aspect}_n"] = len(scores)
        scored = part[part["attribute_correct"].notna()]
        row["attribute_n"] = len(scored)
        row["attribute_accuracy"] = float(scored["attribute_correct"].astype(bool).mean()) if len(scored) \
            else float("nan")
        row["attribute_cant_tell"] = int((scored["attribute_guess"] == CANT_TELL).sum())
        row["attribute_majority_baseline"] = float((scored["attribute_value"] == majority).mean()) \
            if len(scored) else float("nan")
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(STRATEGY_SCORE_COLUMNS))
    return table.astype({"strategy": "string", "variant": "string", "n_items": "int64", "n_ratings": "int64",
                         "fluency_n": "int64", "meaning_n": "int64", "attribute_n": "int64",
                         "attribute_cant_tell": "int64", "fluency_mean": float, "fluency_std": float,
                         "meaning_mean": float, "meaning_std": float, "attribute_accuracy": float,
                         "attribute_majority_baseline": float})


def item_sample_scores(run: RunFiles, key: pd.DataFrame) -> pd.DataFrame:
    """The automatic sample-level scores of each exported item (item_id + one column per numeric metric),
    from the run's ``metrics/<strategy>/sample_scores.parquet``; strategies without scores are left out."""
    frames = []
    for strategy in sorted(key["strategy"].dropna().unique()):
        path = run.sample_scores(strategy)
        if not path.is_file():
            continue
        scores = pd.read_parquet(path)
        metric_columns = [c for c in scores.columns
                          if c not in SAMPLE_SCORES.columns
                          and not c.endswith("_reason")
                          and pd.api.types.is_numeric_dtype(scores[c])
                          and not pd.api.types.is_bool_dtype(scores[c])]
        scores = pd.DataFrame({
            "doc_id": scores["doc_id"].astype(str).to_numpy(),
            "variant": scores["variant"].astype("string").fillna("").to_numpy(dtype=object),
            **{c: pd.to_numeric(scores[c], errors="coerce").astype(float).to_numpy() for c in metric_columns},
        }).drop_duplicates(["doc_id", "variant"])
        items = key.loc[key["strategy"] == strategy, ["item_id", "doc_id", "variant"]].astype(object)
        joined = items.merge(scores, on=["doc_id", "variant"], how="inner")
        frames.append(joined.drop(columns=["doc_id", "variant"]))
    if not frames:
        return pd.DataFrame({"item_id": pd.Series(dtype="string")})
    return pd.concat(frames, ignore_index=True)


def correlation_table(annotations: pd.DataFrame, item_scores: pd.DataFrame) -> pd.DataFrame:
    """Spearman rho (and p-value) of each automatic metric with each item's mean human fluency and meaning
    over annotators, on the items where both are finite; NaN with a reason when fewer than 3 items or
    either side is constant."""
    from scipy.stats import spearmanr  # deferred on purpose (0.5 s), as krippendorff above

    rows = []
    metrics = [c for c in item_scores.columns if c != "item_id"]
    for aspect in SCALE_ASPECTS:
        human = annotations.dropna(subset=[aspect]).groupby("item_id")[aspect].mean().astype(float)
        human.index = human.index.astype(str)
        for metric in metrics:
            automatic = pd.Series(item_scores[metric].to_numpy(dtype=float),
                                  index=item_scores["item_id"].astype(str))
            pair = pd.concat([automatic.rename("metric"), human.rename("human")], axis=1, join="inner")
            pair = pair[np.isfinite(pair["metric"]) & np.isfinite(pair["human"])]
            n = len(pair)
            rho = p_value = float("nan")
            if n < MIN_CORRELATION_ITEMS:
                reason = (f"{n} rated item(s) with a finite {metric}; Spearman needs at least "
                          f"{MIN_CORRELATION_ITEMS}")
            elif pair["metric"].nunique() == 1:
                reason = f"{metric} is constant over the {n} rated items"
            elif pair["human"].nunique() == 1:
                reason = f"mean human {aspect} is constant over the {n} items"
            else:
                result = spearmanr(pair["metric"], pair["human"])
                rho, p_value, reason = float(result.statistic), float(result.pvalue), None
            rows.append({"metric": metric, "aspect": aspect, "rho": rho, "p_value": p_value, "n": n,
                         "reason": reason})
    table = pd.DataFrame(rows, columns=list(CORRELATION_COLUMNS))
    return table.astype({"metric": "string", "aspect": "string", "rho": float, "p_value": float, "n": "int64",
                         "reason": "string"})


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
