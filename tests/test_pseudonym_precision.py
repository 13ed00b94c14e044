"""Names only where there are names (issue 58, item 5): the pseudonymiser, run as protect round 0 runs it (the
default detector, then :func:`pseudonymize_corpus` with scope ``author``), on a seeded sample of the conventions
and debates, against a hand label for every span it replaced before the fix or replaces now
(tests/data/pseudonym_spans.jsonl; tests/data/pseudonym_spans.py builds it and prints the scores).

Before the fix: precision 0.951 (411 spans replaced, 20 labelled no one's name: "God" 11 times, "Buenas" twice,
"Mom", "Dad", "Mormons", "Wildfires", "I.", "Brewers", "Twitter"), recall 1 (by construction). After: precision
0.995 (393 replaced, "Mormons" and "Brewers" left), recall 1 (none of the 391 true spans lost). The issue asks
for 0.95; the floors below hold the fix to what it measures, less a margin.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from tasks.generate.pseudonymize import REPLACED_COLUMN, pseudonymize_corpus
from tasks.models.pii import PiiDetector

BUILDER = Path(__file__).parent / "data" / "pseudonym_spans.py"
PRECISION_FLOOR = 0.98
RECALL_FLOOR = 0.98


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pseudonym_spans", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fixture() -> ModuleType:
    return _builder()


def test_the_fixture_is_a_hand_labelled_sample_of_both_datasets(fixture: ModuleType) -> None:
    rows, spans = fixture.load_rows(), fixture.load_spans()
    assert set(rows["dataset"]) == {"conventions", "debates"} and rows["doc_id"].is_unique
    texts = dict(zip(rows["doc_id"], rows["text"], strict=True))
    assert len(spans) >= 120
    assert all(isinstance(s["is_pii_name_or_identifier"], bool) for s in spans)  # every span labelled by hand
    assert all(texts[s["doc_id"]][s["start"]:s["end"]] == s["span"] for s in spans)
    labels = [s["is_pii_name_or_identifier"] for s in spans]
    assert labels.count(True) >= 100 and labels.count(False) >= 10
    assert {s["span"] for s in spans if not s["is_pii_name_or_identifier"]} >= {"God", "Buenas"}


def test_precision_and_recall_of_the_pseudonymiser_on_the_hand_labelled_fixture(fixture: ModuleType) -> None:
    rows = fixture.load_rows()
    detected = PiiDetector().detect(rows["text"].astype(str).tolist())
    result = fixture.score(rows, fixture.load_spans(), detected=detected)
    shown = json.dumps({k: result[k] for k in ("precision", "recall")}) + "; false positives: " + \
        ", ".join(f"{r['span']!r} ({r['doc_id']})" for r in result["false_positives"]) + "; misses: " + \
        ", ".join(f"{r['span']!r} ({r['doc_id']})" for r in result["misses"])
    assert result["precision"] >= PRECISION_FLOOR, shown
    assert result["recall"] >= RECALL_FLOOR, shown
    # the spans scored are those pseudonymize_corpus replaces, and what it leaves reads as before
    out, mapping = pseudonymize_corpus(rows, scope=fixture.SCOPE, seed=0, detected=detected)
    assert int(out[REPLACED_COLUMN].sum()) == result["replaced"]
    assert not {"god", "buenas", "mom", "dad"} & {o.casefold() for o in mapping["original"]}
    texts = dict(zip(rows["doc_id"], out["text"], strict=True))
    assert texts["conventions-144-0004"] == "Buenas noches, Florida."
    assert texts["conventions-186-0082"] == "God bless America."
