"""Benchmark and evaluation of PII detection and pseudonymisation (tasks/models/pii.py, tasks/generate/pseudonymize.py).

1. Detection quality: precision and recall per entity type on the hand-labelled set
   tests/data/pii_labelled.jsonl (62 social-media-like texts, 108 labelled spans; exact span match on type
   and normalised text).
2. Cost: seconds per 1,000 texts for detection (Presidio + spaCy NER + langid gate) and for
   ``pseudonymize_corpus`` (detection + surrogates), on N real texts (2016 debate turns, file order), against
   the reference: the same spaCy pipeline alone (``nlp.pipe``, what Presidio's NER step runs), same texts,
   same run. The analyzer is built and warmed up before timing; its load time is reported apart.

Run: ``.venv/bin/python benchmarks/pii.py [--n 1000]``. The machine is shared: quote the load average.

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402
from tasks.corpus.datasets import fetch_dataset  # noqa: E402
from tasks.generate.pseudonymize import pseudonymize_corpus  # noqa: E402
from tasks.models.pii import SPACY_MODEL, PiiDetector, detection_scores  # noqa: E402

LABELLED = ROOT / "tests" / "data" / "pii_labelled.jsonl"
REFERENCE = f"spaCy {SPACY_MODEL} nlp.pipe alone on the same texts, same run"


def read_labelled(path: Path = LABELLED) -> tuple[list[str], list[list[tuple[str, str]]]]:
    """Texts and their (entity, text) labels."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r["text"] for r in records], [[tuple(s) for s in r["spans"]] for r in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="real texts to time")
    parser.add_argument("--data-dir", default=os.environ.get("SYNTHUGC_DATA_DIR", "data"))
    args = parser.parse_args()
    print(f"PII benchmark ({os.cpu_count()} cpus, load average at start "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; the machine is shared with other jobs)")

    start = time.perf_counter()
    detector = PiiDetector()
    texts, labels = read_labelled()
    detected = detector.detect(texts)
    load_s = time.perf_counter() - start
    scores = pd.DataFrame(detection_scores(labels, detected))
    print(f"\n1. detection on {LABELLED.name}: {len(texts)} texts, {sum(map(len, labels))} labelled spans "
          f"(analyzer load + first pass {load_s:.1f} s)")
    print(scores.to_string(index=False, float_format=lambda x: f"{x:.2f}"))

    debates = pd.read_parquet(fetch_dataset("debates", args.data_dir))
    corpus = debates.head(args.n).reset_index(drop=True)
    real = corpus["text"].astype(str).tolist()
    import spacy

    nlp = spacy.load(SPACY_MODEL)
    start = time.perf_counter()
    for _ in nlp.pipe(real, batch_size=64):
        pass
    spacy_s = time.perf_counter() - start
    start = time.perf_counter()
    found = detector.detect(real)
    detect_s = time.perf_counter() - start
    start = time.perf_counter()
    pseudonymize_corpus(corpus, scope="group", seed=0, detector=detector)
    pseudo_s = time.perf_counter() - start
    per_k = 1000 / len(real)
    print(f"\n2. cost on {len(real)} debate turns (mean {sum(map(len, real)) / len(real):.0f} chars), "
          f"{sum(len(d.spans) for d in found)} spans found:")
    print(f"   reference ({REFERENCE}): {spacy_s * per_k:.1f} s / 1,000 texts")
    print(f"   detection: {detect_s * per_k:.1f} s / 1,000 texts ({detect_s / spacy_s:.2f}x the reference)")
    print(f"   pseudonymize_corpus (detection + surrogates): {pseudo_s * per_k:.1f} s / 1,000 texts "
          f"({pseudo_s / spacy_s:.2f}x the reference)")
    overall = scores[scores["entity"] == "all"].iloc[0]
    print(f"load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    record("pii", f"precision={overall['precision']:.3f} recall={overall['recall']:.3f} "
          f"labelled_spans={sum(map(len, labels))} detect_s_per_1k={detect_s * per_k:.2f} "
          f"pseudonymize_s_per_1k={pseudo_s * per_k:.2f} spacy_s_per_1k={spacy_s * per_k:.2f} "
          f"ratio_vs_spacy={detect_s / spacy_s:.2f} n={len(real)} load1={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
