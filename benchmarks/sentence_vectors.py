"""Benchmark of sentence vectors encoded on their own (:func:`tasks.models.embeddings.sentence_embeddings`, no
cache): our batches within the device's token budget on the SentenceTransformer's own ids and modules, against
the reference, the SentenceTransformer's ``encode`` in batches of 64 (what the function called before), on the
same texts in the same run, each way ``--rounds`` times alternating, medians compared. The texts are the first
``--n`` sentences of the 2012 convention speeches (``data/conventions.parquet``; ``synthugc datasets fetch
conventions``), the posts the embedding attack profiles in the demo's protect step.

    .venv/bin/python benchmarks/sentence_vectors.py            # 1,500 sentences, 3 rounds

Ends with ``RESULT texts=... ours_s=... encode_s=... speedup=... max_abs_diff=... load=...``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import record
from tasks.corpus.importers import read_corpus
from tasks.models.embeddings import SENTENCE_BATCH, sentence_embeddings
from tasks.models.loaders import load_sentence_encoder
from tasks.models.registry import resolve_model
from tasks.settings import get_settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1500, help="sentences (default 1500)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds each way (default 3)")
    args = parser.parse_args()
    corpus = Path(get_settings().data_dir) / "conventions.parquet"
    if not corpus.exists():
        sys.exit(f"{corpus} is missing: run `synthugc datasets fetch conventions`")
    texts = read_corpus(corpus).corpus["text"].astype(str).tolist()[:args.n]
    spec = resolve_model("sentence_encoder")
    encoder = load_sentence_encoder(spec)
    load = os.getloadavg()[0]
    print(f"sentence vectors benchmark: {len(texts)} sentences, {os.cpu_count()} cpus, load {load:.2f}")
    encoder.encode(texts[:64])  # warm-up: first-call allocations out of the timings
    sentence_embeddings(texts[:64], spec)
    ours_s, encode_s = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        ours = sentence_embeddings(texts, spec)
        ours_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        reference = encoder.encode(texts, batch_size=SENTENCE_BATCH, convert_to_numpy=True, show_progress_bar=False)
        encode_s.append(time.perf_counter() - t0)
    ours_med, encode_med = statistics.median(ours_s), statistics.median(encode_s)
    diff = float(np.abs(ours - reference).max())
    print(f"ours (token-budget batches): {', '.join(f'{s:.2f}' for s in ours_s)} s; SentenceTransformer.encode "
          f"(batches of {SENTENCE_BATCH}): {', '.join(f'{s:.2f}' for s in encode_s)} s; max |diff| {diff:.2e}")
    record("sentence_vectors", f"texts={len(texts)} ours_s={ours_med:.2f} encode_s={encode_med:.2f} "
          f"speedup={encode_med / ours_med:.2f} max_abs_diff={diff:.2e} load={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
