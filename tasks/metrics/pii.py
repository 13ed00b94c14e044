"""``pii_leakage``: which direct identifiers of a source survive into its synthetic version.

For every PII span detected in a source text (:class:`~tasks.models.pii.PiiDetector`), the span leaks when
it occurs verbatim in the synthetic text, compared without case and whitespace runs and as whole tokens
("Jo" does not leak through "Joking"). A synthetic span is *invented* when its value does not occur in the
source (a made-up name or e-mail; after pseudonymisation every surrogate counts as invented).

- sample level (per pair): ``pii_leakage`` = leaked source spans / source spans (NaN with a reason when the
  source has none), ``pii_invented`` = invented spans; overall (``entity`` = ``all``) and per entity type;
- distribution level (per strategy and variant): ``pii_leakage`` = all leaked spans / all source spans
  (pooled, so a text with many identifiers weighs more) and ``pii_invented`` = all invented spans; again
  overall and per entity type, in rows with an ``entity`` column, never in the metric name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from tasks.corpus.schema import STATUS_OK
from tasks.intervals import wilson
from tasks.models.embeddings import EmbeddingCache
from tasks.models.pii import DetectedText, PiiDetector, occurs
from tasks.signatures import make_signature

ALL_ENTITIES = "all"
#: Per pair and entity: source spans, leaked source spans, invented synthetic spans.
COUNT_COLUMNS = ["doc_id", "strategy", "variant", "status", "entity", "source_spans", "leaked", "invented"]
ROW_COLUMNS = ["strategy", "variant", "level", "metric", "entity", "value", "std", "median", "n", "n_failed",
               "ci_low", "ci_high", "signature", "reason"]
NO_SOURCE_PII = "no PII detected in the source"


def pii_signature(metric: str, detector: PiiDetector) -> str:
    """The signature of a PII metric: detector, model, entity types, threshold and the comparison."""
    return make_signature(metric, **detector.signature_fields, match="casefold+space+token")


def pair_counts(source: str, source_found: DetectedText, synthetic: str,
                synthetic_found: DetectedText) -> dict[str, tuple[int, int, int]]:
    """entity -> (source spans, leaked, invented) for one pair (only the entity types present)."""
    counts: dict[str, list[int]] = {}
    for span in source_found.spans:
        entry = counts.setdefault(span.entity, [0, 0, 0])
        entry[0] += 1
        entry[1] += occurs(span.text, synthetic)
    for span in synthetic_found.spans:
        if not occurs(span.text, source):
            counts.setdefault(span.entity, [0, 0, 0])[2] += 1
    return {entity: (a, b, c) for entity, (a, b, c) in counts.items()}


def _pair_texts(pairs: pd.DataFrame) -> tuple[list[str], list[str], np.ndarray]:
    """(sources, outputs, positions of the ok pairs) as the counts read them."""
    ok = (pairs["status"] == STATUS_OK).to_numpy()
    return (pairs["source"].astype(str).tolist(), pairs["text"].astype("string").fillna("").tolist(),
            np.flatnonzero(ok))


def scanned_texts(pairs: pd.DataFrame) -> list[str]:
    """The distinct texts :func:`pii_counts` scans: the sources and outputs of the ok pairs."""
    sources, outputs, ok_index = _pair_texts(pairs)
    return list(dict.fromkeys([*(sources[i] for i in ok_index), *(outputs[i] for i in ok_index)]))


def pii_counts(pairs: pd.DataFrame, detector: PiiDetector, cache: EmbeddingCache | None = None) -> pd.DataFrame:
    """COUNT_COLUMNS for every pair (columns doc_id, strategy, variant, status, source, text): one row per
    pair with entity ``all`` (the totals; zeros included) and one per entity type present. Failed pairs
    get an ``all`` row with null counts. With a ``cache``, texts scanned before are not scanned again."""
    sources, outputs, ok_index = _pair_texts(pairs)
    texts = [sources[i] for i in ok_index] + [outputs[i] for i in ok_index]
    distinct = list(dict.fromkeys(texts))  # an output equal to its source (or a source shared by variants): once
    detected = dict(zip(distinct, detector.detect(distinct, cache=cache), strict=True))
    found = [detected[t] for t in texts]
    by_pair = {i: (found[j], found[len(ok_index) + j]) for j, i in enumerate(ok_index)}
    rows: list[dict[str, Any]] = []
    for i, row in enumerate(pairs[["doc_id", "strategy", "variant", "status"]].itertuples(index=False)):
        ids = {"doc_id": row.doc_id, "strategy": row.strategy, "variant": row.variant, "status": row.status}
        if i not in by_pair:
            rows.append({**ids, "entity": ALL_ENTITIES, "source_spans": None, "leaked": None, "invented": None})
            continue
        counts = pair_counts(sources[i], by_pair[i][0], outputs[i], by_pair[i][1])
        totals = [sum(c[k] for c in counts.values()) for k in range(3)]
        for entity, values in [(ALL_ENTITIES, totals), *sorted(counts.items())]:
            rows.append({**ids, "entity": entity, "source_spans": values[0], "leaked": values[1],
                         "invented": values[2]})
    out = pd.DataFrame(rows, columns=COUNT_COLUMNS)
    for col in ("source_spans", "leaked", "invented"):
        out[col] = out[col].astype("Int64")
    return out


def sample_scores(counts: pd.DataFrame) -> pd.DataFrame:
    """Per pair and entity: ``pii_leakage`` (share leaked; NaN + reason without source spans) and
    ``pii_invented``, with their reason columns."""
    out = counts[["doc_id", "strategy", "variant", "status", "entity"]].copy()
    spans = counts["source_spans"].astype("Float64")
    out["pii_leakage"] = (counts["leaked"].astype("Float64") / spans.where(spans > 0)).astype(float)
    out["pii_invented"] = counts["invented"].astype("Float64").astype(float)
    failed = (counts["status"] != STATUS_OK).tolist()
    no_spans = counts["source_spans"].fillna(0).eq(0).tolist()
    out["pii_leakage_reason"] = pd.Series(["generation failed" if f else NO_SOURCE_PII if z else None
                                           for f, z in zip(failed, no_spans, strict=True)], dtype="string")
    out["pii_invented_reason"] = pd.Series(["generation failed" if f else None for f in failed], dtype="string")
    return out


def distribution_rows(counts: pd.DataFrame, detector: PiiDetector) -> pd.DataFrame:
    """ROW_COLUMNS per (strategy, variant, entity): pooled share leaked (with the Wilson interval over source
    spans) and total invented spans (a count: no interval)."""
    rows = []
    for (strategy, variant), part in counts.groupby(["strategy", "variant"], sort=False):
        n_failed = int((part.loc[part["entity"] == ALL_ENTITIES, "status"] != STATUS_OK).sum())
        scored = part[part["status"] == STATUS_OK]
        n_pairs = int((scored["entity"] == ALL_ENTITIES).sum())
        entities = [ALL_ENTITIES, *sorted(set(scored["entity"]) - {ALL_ENTITIES})]
        for entity in entities:
            rows_e = scored[scored["entity"] == entity]
            spans, leaked = int(rows_e["source_spans"].sum()), int(rows_e["leaked"].sum())
            common = {"strategy": strategy, "variant": variant, "level": "distribution", "entity": entity,
                      "std": np.nan, "median": np.nan, "n_failed": n_failed}
            low, high = wilson(leaked, spans)
            rows.append({**common, "metric": "pii_leakage", "value": leaked / spans if spans else np.nan,
                         "n": spans, "ci_low": low, "ci_high": high, "signature": pii_signature("pii_leakage", detector),
                         "reason": None if spans else (NO_SOURCE_PII if n_pairs else "no scored pairs")})
            rows.append({**common, "metric": "pii_invented",
                         "value": float(rows_e["invented"].sum()) if n_pairs else np.nan, "n": n_pairs,
                         "ci_low": np.nan, "ci_high": np.nan,
                         "signature": pii_signature("pii_invented", detector),
                         "reason": None if n_pairs else "no scored pairs"})
    out = pd.DataFrame(rows, columns=ROW_COLUMNS)
    out["reason"] = out["reason"].astype("string")
    return out


def pii_leakage(sources: Sequence[str], outputs: Sequence[str], detector: PiiDetector | None = None,
                strategy: str = "", variant: str = "first") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Sample scores and distribution rows of aligned (source, synthetic) texts, for direct use."""
    detector = detector or PiiDetector()
    pairs = pd.DataFrame({"doc_id": [str(i) for i in range(len(sources))], "strategy": strategy,
                          "variant": variant, "status": STATUS_OK, "source": list(sources), "text": list(outputs)})
    counts = pii_counts(pairs, detector)
    return sample_scores(counts), distribution_rows(counts, detector)
