"""Training throughput of the downstream classifiers on CPU (not a test).

Trains the fine-tuned encoder (the registry's classifier backbone, MiniLM offline; seed 000 A.6 recipe)
and the linear TF-IDF baseline on the same real texts (2012 convention sentences, label = party), and
prints training examples/s for each, prediction examples/s, macro F1 on held-out sentences, and the
encoder's throughput as a ratio against the linear baseline measured in the same run.

    .venv/bin/python benchmarks/training.py [--train 512] [--test 256] [--epochs 1] [--threads 1]

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd

from benchmarks.results import record
from tasks.corpus.datasets import fetch_dataset
from tasks.training.classifiers import EncoderClassifier, LinearTextClassifier
from tasks.training.task_metrics import macro_f1


def load_texts(data_dir: Path, n_train: int, n_test: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Balanced-ish random sentences with a party label, split into train and test."""
    corpus = pd.read_parquet(fetch_dataset("conventions", data_dir))
    corpus = corpus[corpus["label"].notna() & (corpus["text"].str.len() > 20)]
    sample = corpus.sample(n=min(len(corpus), n_train + n_test), random_state=seed)
    return sample.iloc[:n_train], sample.iloc[n_train:]


def timed_fit_predict(model: object, train: pd.DataFrame, test: pd.DataFrame, epochs: int) -> dict[str, float]:
    """Fit and predict once; examples/s count every training example seen (x epochs)."""
    started = time.perf_counter()
    model.fit(train["text"].tolist(), train["label"].tolist())  # type: ignore[attr-defined]
    fit_s = time.perf_counter() - started
    started = time.perf_counter()
    predicted = model.predict(test["text"].tolist())  # type: ignore[attr-defined]
    predict_s = time.perf_counter() - started
    return {"fit_s": fit_s, "train_ex_per_s": len(train) * epochs / fit_s, "predict_ex_per_s": len(test) / predict_s,
            "macro_f1": macro_f1(test["label"].tolist(), list(predicted))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--test", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=1, help="Encoder epochs (the article's recipe uses 3).")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for the encoder.")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    train, test = load_texts(args.data_dir, args.train, args.test, args.seed)
    print(f"synthugc training benchmark (CPU, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}): "
          f"{len(train)} train / {len(test)} test convention sentences, label = party")
    linear = timed_fit_predict(LinearTextClassifier(seed=args.seed), train, test, epochs=1)
    encoder = timed_fit_predict(EncoderClassifier(epochs=args.epochs, seed=args.seed, num_threads=args.threads),
                                train, test, epochs=args.epochs)
    print(f"{'model':44} {'fit s':>8} {'train ex/s':>11} {'predict ex/s':>13} {'macro F1':>9}")
    for name, row in (("linear TF-IDF + logistic regression", linear),
                      (f"encoder MiniLM fine-tuned ({args.epochs} epoch(s), batch 32)", encoder)):
        print(f"{name:44} {row['fit_s']:8.2f} {row['train_ex_per_s']:11.1f} {row['predict_ex_per_s']:13.1f} "
              f"{row['macro_f1']:9.3f}")
    print(f"ratio encoder / linear training throughput (reference: the linear baseline, same texts, same run): "
          f"{encoder['train_ex_per_s'] / linear['train_ex_per_s']:.4f}")
    print(f"load at end {os.getloadavg()[0]:.2f}")
    record("training", f"linear_train_ex_per_s={linear['train_ex_per_s']:.1f} encoder_train_ex_per_s="
          f"{encoder['train_ex_per_s']:.1f} ratio={encoder['train_ex_per_s'] / linear['train_ex_per_s']:.4f} "
          f"linear_f1={linear['macro_f1']:.3f} encoder_f1={encoder['macro_f1']:.3f} load={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
