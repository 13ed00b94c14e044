"""The annotators' side of the human evaluation (:mod:`tasks.report.human_eval` writes the export and reads
the sheets back): the sheet's columns, seed 004's fluency and meaning scales and the attribute question
(the guideline), the sheet as CSV with user text kept from running as a spreadsheet formula, the digest
that ties a sheet to its export, README.txt and the offline form."""

from __future__ import annotations

import csv
import hashlib
import io
import unicodedata
from collections.abc import Sequence

import pandas as pd

from tasks.corpus.schema import ATTR_PREFIX
from tasks.report.templating import render

SHEET_COLUMNS: tuple[str, ...] = ("item_id", "source_text", "synthetic_text", "fluency", "meaning",
                                  "attribute_guess", "annotator", "comment")
CANT_TELL = "can't tell"

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


# ------------------------------------------------------------------------------------------------- the sheet


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

