"""The dataset card of a ``synthugc release`` folder (Hugging Face's format: a YAML header, then the template's
sections) and what it says in words: the fields, the example rows, the documents held back by plain reason (the
protect summary's ``withheld`` list, else its failures file), the source data and its licence, the adversaries.

:mod:`tasks.protect.release` reads the input and makes the released rows; this module only words them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.budgets import BUDGET_METRICS, number
from tasks.corpus.schema import STATUS_OK
from tasks.metrics import catalogue
from tasks.report.render import escape_markdown, with_interval
from tasks.report.templating import render

CARD_TEMPLATE = "dataset_card.md.j2"
#: The release's data file: one train split in Hugging Face's layout.
DATA_FILE = "data/train-00000-of-00001.parquet"
#: Identifiers released only as keyed-hash pseudonyms.
PSEUDONYMISED: tuple[str, ...] = ("doc_id", "author_id", "group_id")
#: The figures a release states about what its texts leak, by the score table's metric behind each: the
#: privacy budget columns (profiling: the advantage over guessing the most common value), and the profiling
#: accuracy itself.
LEAK_METRICS: dict[str, str] = {**BUDGET_METRICS, "profiling_accuracy": "profiling_accuracy"}
#: How many released rows the card shows, and how much of each text.
EXAMPLE_ROWS, EXAMPLE_CHARS = 3, 300
#: Hugging Face's ``size_categories`` buckets: (upper bound, name); the last has none.
SIZE_CATEGORIES: tuple[tuple[float, str], ...] = (
    (1e3, "n<1K"), (1e4, "1K<n<10K"), (1e5, "10K<n<100K"), (1e6, "100K<n<1M"), (1e7, "1M<n<10M"),
    (1e8, "10M<n<100M"), (1e9, "100M<n<1B"), (1e10, "1B<n<10B"), (1e11, "10B<n<100B"), (1e12, "100B<n<1T"),
    (math.inf, "n>1T"))



#: A held-back document's reason as the protect loop, the input validation or a strategy writes it (a pattern
#: searched at a word's start in the reason, lower case) and the plain words the card says instead, in this order.
PLAIN_REASONS: tuple[tuple[str, str], ...] = (
    ("lost too much meaning", "every rewrite that protects it lost too much meaning or fluency"),
    ("or read worse", "every rewrite that protects it lost too much meaning or fluency"),
    ("reads worse than its source", "it reads worse than its source beyond the fluency floor"),
    ("not both met", "no rewrite met both the privacy budget and the meaning floor"),
    ("floor", "every rewrite fell below the meaning floor"),
    ("below", "every rewrite fell below the meaning floor"),
    ("pii", "still leaks personal information (PII) after every rewrite"),
    ("personal information", "still leaks personal information (PII) after every rewrite"),
    ("run of its source", "still holds a run of its source text after every rewrite"),
    ("input row", "failed input validation"),
    ("validation", "failed input validation"),
)
#: The reason of a released row's source-text run, which the release itself leaves out.
VERBATIM_REASON = "holds a run of {chars} or more characters of its source text (the user's own words)"


def plain_reason(reason: object, other: str | None = None) -> str:
    """A held-back document's reason in plain words (:data:`PLAIN_REASONS`); one that matches none: ``other``, or
    the reason itself on one line (cut at 100 characters)."""
    said = text(reason) if isinstance(reason, str) and reason.strip() else ""
    lowered = said.lower()
    for pattern, words in PLAIN_REASONS:
        if re.search(rf"\b{re.escape(pattern)}", lowered):
            return words
    if other is not None or not said:
        return other or "no reason recorded"
    return said if len(said) <= 100 else said[:99] + "…"


def count_reasons(reasons: Sequence[object], other: str | None = None) -> list[tuple[str, int]]:
    """(plain reason, documents) per reason of ``reasons`` (:func:`plain_reason`), most first, then by reason."""
    counts: dict[str, int] = {}
    for reason in reasons:
        words = plain_reason(reason, other)
        counts[words] = counts.get(words, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def merged_counts(*parts: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Reason counts added up by reason, most first."""
    counts: dict[str, int] = {}
    for part in parts:
        for reason, n in part:
            counts[reason] = counts.get(reason, 0) + int(n)
    return sorted(((r, n) for r, n in counts.items() if n), key=lambda kv: (-kv[1], kv[0]))


def summary_withheld(summary: Mapping[str, Any]) -> list[tuple[str, int]] | None:
    """The protect summary's own ``withheld`` list ({reason, count} each), its reasons in plain words; None where it
    has none (or not a list of such entries)."""
    listed = summary.get("withheld")
    if not isinstance(listed, list) or not all(isinstance(e, Mapping) and "count" in e for e in listed):
        return None
    return merged_counts([(plain_reason(e.get("reason")), int(number(e.get("count")) or 0)) for e in listed
                    if math.isfinite(number(e.get("count")))])


def failed_rows(table: pd.DataFrame, other: str | None = None) -> list[tuple[str, int]]:
    """The rows of ``table`` that are not ok, counted by plain reason."""
    failed = table[table["status"] != STATUS_OK]
    reasons = failed["reason"].tolist() if "reason" in failed.columns else [None] * len(failed)
    return count_reasons(reasons, other)


def protect_withheld(summary: Mapping[str, Any], table: pd.DataFrame,
                      failures: Path | None) -> tuple[list[tuple[str, int]], int]:
    """What a protect output held back, by plain reason, and how many of those documents are not rows of ``table``:
    the summary's ``withheld`` list where it has one, else the failures file (``failures``) read for its doc ids
    and reasons (the ones not ok in ``table``: failed rows of the table count by the table's reason), else the
    summary's document counts; the table's failed rows."""
    in_table = set(table["doc_id"].astype(str))
    ok = set(table.loc[table["status"] == STATUS_OK, "doc_id"].astype(str))
    failed = failed_rows(table)
    listed = summary_withheld(summary)
    if listed is not None:
        return merged_counts(listed, failed), sum(n for _, n in listed)
    if failures is not None and failures.is_file():
        frame = pd.read_parquet(failures, columns=None)
        if {"doc_id", "reason"} <= set(frame.columns):
            outside = frame[~frame["doc_id"].astype(str).isin(in_table | ok)]
            return merged_counts(count_reasons(outside["reason"].tolist()), failed), len(outside)
    documents = summary.get("documents") or {}
    n_failed = int(number(documents.get("failed")) or 0) if math.isfinite(number(documents.get("failed"))) else 0
    n_invalid = int(number(documents.get("invalid")) or 0) if math.isfinite(number(documents.get("invalid"))) else 0
    outside_failed = max(n_failed - len(table) + len(ok), 0) if n_failed else 0
    counted = [("held back by the protect loop (its failures file gives each reason)", outside_failed),
               ("failed input validation", n_invalid)]
    return merged_counts(counted, failed), outside_failed + n_invalid


def summary_fluency(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The protect summary's ``fluency`` figure (value, ci_low, ci_high, floor), where it has one with a value."""
    figure = summary.get("fluency")
    if not isinstance(figure, Mapping) or not math.isfinite(number(figure.get("value"))):
        return None
    return {key: number(figure.get(key)) for key in ("value", "ci_low", "ci_high", "floor", "n")}


def source_info(name: object = None, path: object = None, licence: object = None,
                description: object = None) -> dict[str, str]:
    """The source corpus in words: a public dataset by ``name`` (its description and licence from
    :mod:`tasks.corpus.datasets`), or a local file by its name only (not its folder), with ``licence`` and
    ``description`` where given. Empty where nothing is known."""
    from tasks.corpus.datasets import dataset_info
    from tasks.errors import ConfigError

    out: dict[str, str] = {}
    if isinstance(name, str) and name:
        out["name"] = name
        try:
            info = dataset_info(name)
            out.update(description=info.description, license=info.license)
        except ConfigError:
            pass
    elif isinstance(path, str | Path) and str(path):
        out["name"] = f"a local corpus file ({Path(path).name})"
    if isinstance(licence, str) and licence:
        out["license"] = licence
    if isinstance(description, str) and description:
        out["description"] = description
    return {k: text(v) for k, v in out.items()}


def summary_source(summary: Mapping[str, Any]) -> dict[str, str]:
    """The source corpus a protect summary names (``source``: a dataset name, or {name, license, description}; or
    ``corpus``: its file), where it names one."""
    named = summary.get("source")
    if isinstance(named, Mapping):
        return source_info(named.get("name") or named.get("dataset"), named.get("path"), named.get("license"),
                           named.get("description"))
    if isinstance(named, str):
        return source_info(named)
    return source_info(path=summary.get("corpus")) if isinstance(summary.get("corpus"), str) else {}


def summary_notes(summary: Mapping[str, Any]) -> list[str]:
    """A protect summary's limitations in words: documents still caught but kept, and the loop's notes."""
    notes = []
    still = number((summary.get("documents") or {}).get("still_caught_kept"))
    if math.isfinite(still) and still > 0:
        notes.append(f"{int(still):,} released documents were still caught by the protect loop's attacks when it "
                     "stopped (they were kept: the certificate judges the output they are part of)")
    notes += [text(n) for n in summary.get("notes") or [] if isinstance(n, str) and n]
    return notes


# -------------------------------------------------------------------------------------------------- card
def size_category(n: int) -> str:
    """Hugging Face's ``size_categories`` bucket of ``n`` rows."""
    return next(name for bound, name in SIZE_CATEGORIES if n < bound)


@dataclass(frozen=True)
class CardOptions:
    """The card's metadata a user chooses (the YAML header)."""

    pretty_name: str
    license: str = "other"
    language: tuple[str, ...] = ("en",)
    task_category: str | None = None  # default: text-classification with labels kept, else text-generation


#: What each adversary setting holds, in words (the card names the ones its figures were measured under).
ADVERSARIES: dict[str, str] = {
    "full": "holds the users' other posts and the source texts of the released rows (the strongest case: it has "
            "the originals)",
    "disjoint": "holds only the users' other posts, not the source texts",
}
#: What a released column holds, by name (a column not named here was kept from the input as it was).
FIELDS: dict[str, str] = {
    "doc_id": "the document's pseudonym (a keyed hash of its id; the key was not kept)",
    "text": "the synthetic text: a rewrite of one source document, not the document itself",
    "label": "the source document's label, kept as it was (what a classifier is trained to predict)",
    "author_id": "the author's pseudonym: the same on every row of one author",
    "group_id": "the pseudonym of the conversation, thread or timeline the document belongs to",
    "position": "the document's position within its group",
    "split": "the source corpus's split (train, val or test) the document belongs to",
    "strategy": "the strategy that made the text",
    "variant": "the strategy's variant",
    "round": "the protect round that made the text (0: the starting strategy)",
    "move": "the protect move that last changed the text",
}


def field_type(dtype: object) -> str:
    """A column's type in words: string, integer, float, boolean (else pandas' name)."""
    if pd.api.types.is_bool_dtype(dtype):
        return "boolean"
    if pd.api.types.is_integer_dtype(dtype):
        return "integer"
    if pd.api.types.is_float_dtype(dtype):
        return "float"
    if pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype):
        return "string"
    return str(dtype)


def field_meaning(column: str) -> str:
    """What a released column holds, in words (:data:`FIELDS`; ``attr_*``: a sensitive attribute)."""
    if column in FIELDS:
        return FIELDS[column]
    if column.startswith("attr_"):
        return (f"the author's {column.removeprefix('attr_')}, a sensitive attribute kept from the source: profiling "
                "attacks try to infer it from the text")
    return "kept from the input as it was (`--keep`)"


def plain_count(n: object) -> str:
    """A count as a person writes it: an integer with thousands separators; – where unknown."""
    value = number(n)
    return "–" if not math.isfinite(value) else f"{round(value):,}"


def tool_name(version: object) -> str:
    """``synthugc <version>``, whether ``version`` already names the tool or not."""
    said = text(version)
    return said if said.startswith("synthugc") else f"synthugc {said}"


def withheld_rows(release: Any, rows: Any) -> list[tuple[str, int]]:
    """Every document of the input that is not released, by plain reason (most first): what the input held back
    (:attr:`ReleaseInput.withheld`, its failed rows included) and the rows the release leaves out for holding a
    run of their source."""
    verbatim = [] if rows.verbatim_kept else [(VERBATIM_REASON.format(chars=rows.verbatim_chars), rows.n_verbatim)]
    return merged_counts(release.withheld, verbatim)


def example_cell(value: object) -> str:
    """A value of an example row as one markdown table cell: cut at :data:`EXAMPLE_CHARS`, escaped."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "–"
    said = str(value)
    return escape_markdown(said if len(said) <= EXAMPLE_CHARS else said[:EXAMPLE_CHARS - 1] + "…")


def render_card(release: Any, rows: Any, verdict: Any, options: CardOptions, *, forced: bool, decide_on: str,
                dp_audit: str | None = None) -> str:
    """The dataset card (``README.md``): Hugging Face's YAML header, then its sections (description, uses,
    structure with each field and three example rows, creation with the source data and what was held back and
    why, personal information with what the texts keep and leak, the budget, bias and limitations, citation).
    ``release``, ``rows`` and ``verdict``: :mod:`tasks.protect.release`'s ReleaseInput, ReleaseTable and Verdict
    (the report layer reads them by their attributes; it imports nothing of protect but its file names)."""
    task = options.task_category or ("text-classification" if "label" in rows.table.columns else "text-generation")

    def shown_figure(figure: Mapping[str, Any]) -> str:
        return with_interval(number(figure.get("value")), number(figure.get("ci_low")), number(figure.get("ci_high")))

    def worst(figure: Mapping[str, Any]) -> str:
        parts = [f"{key} {figure[key]}" for key in ("attack", "adversary", "attribute") if figure.get(key)]
        return text(", ".join(parts)) or "–"

    def describe(name: str) -> str:
        metric = catalogue.lookup(LEAK_METRICS.get(name, name))
        return metric.description if metric is not None else ""

    columns = list(rows.table.columns)
    settings = [*(str(f.get("adversary") or "") for f in release.leaks.values()),
                *(str(a.get("adversary") or "") for a in release.attacks)]
    named = [a for a in ADVERSARIES if any(s == a or s.startswith(f"{a} ") for s in settings)]
    examples = rows.examples if rows.examples is not None else rows.table.head(EXAMPLE_ROWS)
    withheld = withheld_rows(release, rows)
    n_input = release.n_input if release.n_input is not None else rows.n_input
    version = text(release.tool_version).removeprefix("synthugc").strip().split(" ")[0] or "unknown"
    reid = release.leaks.get("reidentification") or {}
    chance = next((number(a.get("chance")) for a in release.attacks if math.isfinite(number(a.get("chance")))),
                  math.nan)
    return render(CARD_TEMPLATE, meta={"pretty_name": options.pretty_name, "language": list(options.language),
                                       "license": options.license, "size_categories": [size_category(len(rows.table))],
                                       "task_categories": [task]},
                  release=release, rows=rows, verdict=verdict, forced=forced, decide_on=decide_on, text=text,
                  figure=shown_figure, count=plain_count, worst=worst, describe=describe, columns=columns,
                  pseudonymised=[c for c in PSEUDONYMISED if c in columns], dp_audit=dp_audit, data_file=DATA_FILE,
                  fields=[(c, field_type(rows.table[c].dtype), field_meaning(c)) for c in columns],
                  examples=[[example_cell(v) for v in row] for row in examples.itertuples(index=False)],
                  example_columns=list(examples.columns), withheld=withheld, n_input=n_input,
                  n_withheld=sum(n for _, n in withheld), adversaries=[(a, words, a in named) for a, words in ADVERSARIES.items()],
                  tool=tool_name(release.tool_version), version=version, reid=reid, chance=chance,
                  trials="posts" if release.unit == "post" else "timelines")


def text(value: object) -> str:
    """A value as one line of markdown: whitespace collapsed, no backticks or table bars to break the card."""
    return " ".join(str(value).split()).replace("`", "'").replace("|", "/")


