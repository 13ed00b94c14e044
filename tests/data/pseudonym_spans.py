"""Builds the pseudonymiser's precision fixture (tests/test_pseudonym_precision.py; issue 58, item 5).

    .venv/bin/python tests/data/pseudonym_spans.py            # (re)build: new spans come unlabelled
    .venv/bin/python tests/data/pseudonym_spans.py --score    # precision and recall now

samples :data:`CONVENTIONS_ROWS` rows of data/conventions.parquet and :data:`DEBATES_ROWS` of
data/debates.parquet (seed :data:`SEED`) into ``pseudonym_spans.rows.jsonl``, and writes every span the
pseudonymiser replaces in them (as protect round 0 runs it: the default detector, then
:func:`pseudonymize_corpus` with scope ``author``) to ``pseudonym_spans.jsonl``, with 80 characters of context
each side. A span already in that file keeps its hand label (``is_pii_name_or_identifier``, and ``note`` where
the call needs one); a new one comes with ``null``, to be labelled by hand. Spans no longer replaced are kept:
they are the misses that recall counts.

Labels: true for a person's name (a first name, a surname, a public figure, an eponym such as "the Buffett
rule"), a place or organisation named by its proper name, and an e-mail, URL, phone number or other direct
identifier; false for a deity ("God"), a word of another language ("Buenas" of "Buenas noches"), a kinship word
("Mom", "Dad"), a group of people ("Mormons"), a common noun capitalised at a sentence's start ("Wildfires"),
a pronoun ("I."), and a brand or team name that identifies no one ("Twitter", "Brewers").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from tasks.models.pii import DetectedText

FOLDER = Path(__file__).resolve().parent
ROWS = FOLDER / "pseudonym_spans.rows.jsonl"
SPANS = FOLDER / "pseudonym_spans.jsonl"
SEED = 58
CONVENTIONS_ROWS = 900
DEBATES_ROWS = 200
SCOPE = "author"
ROW_COLUMNS = ["dataset", "doc_id", "author_id", "group_id", "text"]


def load_rows() -> pd.DataFrame:
    """The fixture's rows (dataset, doc_id, author_id, group_id, text)."""
    return pd.read_json(ROWS, lines=True, dtype=False)[ROW_COLUMNS]


def replaced(rows: pd.DataFrame, seed: int = 0, detected: Sequence[DetectedText] | None = None) -> list[dict]:
    """Every span the pseudonymiser replaces in ``rows`` (as protect round 0: default detector, scope author),
    with its replacement; ``detected`` reuses a detection of the rows' texts."""
    from tasks.generate.pseudonymize import Pseudonymizer, scope_keys, spans_to_replace
    from tasks.models.pii import PiiDetector

    found = spans_to_replace(rows, scope=SCOPE, detector=PiiDetector(), detected=detected)
    pseudonymizer = Pseudonymizer(seed)
    out = []
    for row, detected, key in zip(rows.itertuples(index=False), found, scope_keys(rows, SCOPE), strict=True):
        for span in detected.spans:
            out.append({"doc_id": row.doc_id, "start": span.start, "end": span.end, "span": span.text,
                        "entity": span.entity, "replacement": pseudonymizer.surrogate(span, key)})
    return out


def load_spans() -> list[dict]:
    """The fixture's spans, each with its hand label ``is_pii_name_or_identifier``."""
    return [json.loads(line) for line in SPANS.read_text().splitlines()]


def score(rows: pd.DataFrame, labelled: list[dict],
          detected: Sequence[DetectedText] | None = None) -> dict[str, Any]:
    """Precision of the spans the pseudonymiser replaces now in ``rows`` against the hand labels (a span replaced
    and labelled false, or not labelled at all, is a false positive) and recall of the spans labelled true (one
    no longer replaced is a miss)."""
    labels = {(r["doc_id"], r["start"], r["end"]): r["is_pii_name_or_identifier"] for r in labelled}
    now = {(s["doc_id"], s["start"], s["end"]): s for s in replaced(rows, detected=detected)}
    false_positives = [now[k] for k in now if labels.get(k) is not True]
    true = [k for k, label in labels.items() if label is True]
    misses = [r for r in labelled if (r["doc_id"], r["start"], r["end"]) in set(true) - now.keys()]
    return {"replaced": len(now), "false_positives": false_positives, "labelled_true": len(true), "misses": misses,
            "precision": 1 - len(false_positives) / len(now) if now else float("nan"),
            "recall": 1 - len(misses) / len(true) if true else float("nan")}


def main() -> None:
    frames = [pd.read_parquet(f"data/{name}.parquet").sample(n, random_state=SEED).assign(dataset=name)
              for name, n in (("conventions", CONVENTIONS_ROWS), ("debates", DEBATES_ROWS))]
    rows = pd.concat(frames, ignore_index=True)[ROW_COLUMNS]
    rows.to_json(ROWS, orient="records", lines=True, force_ascii=False)
    rows = load_rows()
    texts = dict(zip(rows["doc_id"], rows["text"], strict=True))
    old = {}
    if SPANS.exists():
        old = {(r["doc_id"], r["start"], r["end"]): r for r in map(json.loads, SPANS.read_text().splitlines())}
    new = {(s["doc_id"], s["start"], s["end"]): s for s in replaced(rows)}
    records = []
    for key in sorted(old.keys() | new.keys(), key=lambda k: (list(texts).index(k[0]), k[1], k[2])):
        record = {**old.get(key, {}), **new.get(key, {})}
        record.setdefault("is_pii_name_or_identifier", None)
        text = texts[key[0]]
        record["context"] = text[max(0, key[1] - 80):key[2] + 80]
        records.append(record)
    SPANS.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    print(f"{len(rows)} rows, {len(new)} spans replaced, {len(records)} in {SPANS.name}, "
          f"{sum(r['is_pii_name_or_identifier'] is None for r in records)} unlabelled")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--score"]:
        result = score(load_rows(), load_spans())
        print(f"precision {result['precision']:.4f} ({result['replaced']} replaced, "
              f"{len(result['false_positives'])} false positives); recall {result['recall']:.4f} "
              f"({result['labelled_true']} labelled true, {len(result['misses'])} missed)")
        for kind in ("false_positives", "misses"):
            for r in result[kind]:
                print(f"  {kind}: {r['span']!r} in {r['doc_id']}")
    else:
        main()
