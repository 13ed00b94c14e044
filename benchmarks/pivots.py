"""Measurements behind two generation defaults, on real debate text (not timings):

1. Back-translation pivots: round-trip divergence (1 - sacrebleu corpus BLEU of eng -> pivot -> eng against
   the source) of every apertium pair with English that goes both ways, on N debate sentences (40-200
   characters, from the 2016 debate turns, seeded sample). The closest and the farthest pivot are the
   ``backtranslate`` defaults. Each pivot's divergence is also printed as a ratio to the Spanish pivot
   (the previous default, reference measured in the same run), with a bootstrap std over sentences.
2. The unchanged share per strategy (``unchanged`` column: output equals source up to whitespace) on M
   debate turns (20-400 characters, seeded sample): stymask; syntr keeping the texts no transform applies
   to (reference, the old behaviour) and rewriting them as SynOrig (default); synsim/syndiff/synorig with
   the old back-translation candidates (the single ``spa`` pivot, reference, same run) and with the
   default close and far pivots.

Run: ``.venv/bin/python benchmarks/pivots.py [--sentences 200] [--turns 100]``. Needs apertium and the
pairs of infra/apt-packages.sh. Ends with one ``RESULT`` line.

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks.results import record  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tasks.corpus.datasets import fetch_dataset  # noqa: E402
from tasks.corpus.schema import STATUS_OK  # noqa: E402
from tasks.generate import build_strategy, generate_synthetic  # noqa: E402
from tasks.generate.backtranslate import DEFAULT_PIVOTS  # noqa: E402

#: apertium pivots with both directions to and from English in Debian (eu, isl, mkd have only X -> English).
ROUND_TRIP_PIVOTS = ("spa", "cat", "gl", "eo", "hbs")
REFERENCE_PIVOT = "spa"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def debate_sentences(n: int, data_dir: str, seed: int) -> list[str]:
    """n sentences of 40-200 characters from the debate turns, a seeded sample."""
    turns = pd.read_parquet(fetch_dataset("debates", data_dir))["text"].astype(str)
    sents = [s.strip() for t in turns for s in re.split(r"(?<=[.!?])\s+", t.replace("\n", " "))
             if 40 <= len(s.strip()) <= 200]
    idx = np.random.default_rng(seed).choice(len(sents), size=min(n, len(sents)), replace=False)
    return [sents[i] for i in sorted(idx)]


def debate_turns(m: int, data_dir: str, seed: int) -> pd.DataFrame:
    """m debate turns of 20-400 characters (corpus rows), a seeded sample."""
    corpus = pd.read_parquet(fetch_dataset("debates", data_dir))
    short = corpus[corpus["text"].str.len().between(20, 400)]
    return short.sample(n=min(m, len(short)), random_state=seed).sort_index().reset_index(drop=True)


def divergence(hyps: list[str], refs: list[str]) -> float:
    import sacrebleu

    return 1.0 - sacrebleu.corpus_bleu(hyps, [refs]).score / 100.0


def measure_pivots(sentences: list[str], seed: int) -> dict[str, tuple[float, float, float]]:
    """pivot -> (divergence, bootstrap std, unchanged share)."""
    frame = pd.DataFrame({"doc_id": [f"s{i}" for i in range(len(sentences))], "text": sentences})
    strategy = build_strategy("backtranslate", {"pivots": list(ROUND_TRIP_PIVOTS)})
    table = generate_synthetic(strategy, frame, seed=seed)
    rng = np.random.default_rng(seed)
    boots = [rng.integers(0, len(sentences), len(sentences)) for _ in range(200)]
    out = {}
    for pivot in ROUND_TRIP_PIVOTS:
        part = table[table["variant"] == f"pivot-{pivot}"]
        ok = part["status"] == STATUS_OK
        hyps = part["text"].fillna("").tolist()
        value = divergence(hyps, sentences)
        std = float(np.std([divergence([hyps[i] for i in b], [sentences[i] for i in b]) for b in boots], ddof=1))
        out[pivot] = (value, std, float(part.loc[ok, "unchanged"].mean()))
    return out


def unchanged_shares(turns: pd.DataFrame, seed: int) -> list[tuple[str, str, float, int, float]]:
    """(strategy, candidates, unchanged share of ok rows, ok rows, seconds) per configuration."""
    configs: list[tuple[str, str, dict]] = [("stymask", "-", {}),
                                            ("syntr", "keep (reference)", {"on_no_transform": "keep"}),
                                            ("syntr", "synorig fallback (default)", {})]
    for name in ("synsim", "syndiff", "synorig"):
        configs += [(name, f"pivots {REFERENCE_PIVOT} (reference)", {"pivots": [REFERENCE_PIVOT]}),
                    (name, f"pivots {'+'.join(DEFAULT_PIVOTS)} (default)", {})]
    rows = []
    for name, label, params in configs:
        t0 = time.perf_counter()
        table = generate_synthetic(build_strategy(name, params), turns, seed=seed)
        ok = table["status"] == STATUS_OK
        rows.append((name, label, float(table.loc[ok, "unchanged"].mean()), int(ok.sum()), time.perf_counter() - t0))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=str(ROOT / "data"))
    args = parser.parse_args()
    print(f"pivots benchmark ({os.cpu_count()} cpus, load average at start {load_average()}; "
          "the machine is shared with other jobs)")

    sentences = debate_sentences(args.sentences, args.data_dir, args.seed)
    pivots = measure_pivots(sentences, args.seed)
    ref = pivots[REFERENCE_PIVOT][0]
    print(f"\n1. round-trip divergence (1 - corpus BLEU), {len(sentences)} debate sentences; "
          f"ratio to the {REFERENCE_PIVOT} pivot (reference, same run)")
    print(f"{'pivot':<6} {'divergence':>10} {'boot std':>9} {'ratio':>6} {'unchanged':>9}")
    for pivot, (value, std, same) in sorted(pivots.items(), key=lambda kv: kv[1][0]):
        print(f"{pivot:<6} {value:>10.3f} {std:>9.3f} {value / ref:>6.2f} {same:>9.3f}")
    close = min(pivots, key=lambda p: pivots[p][0])
    far = max(pivots, key=lambda p: pivots[p][0])
    print(f"closest: {close}, farthest: {far} (defaults: {', '.join(DEFAULT_PIVOTS)})")

    turns = debate_turns(args.turns, args.data_dir, args.seed)
    print(f"\n2. unchanged share of ok rows, {len(turns)} debate turns (20-400 characters)")
    print(f"{'strategy':<9} {'candidates':<28} {'unchanged':>9} {'ok rows':>7} {'seconds':>8}")
    shares = unchanged_shares(turns, args.seed)
    for name, label, share, n_ok, secs in shares:
        print(f"{name:<9} {label:<28} {share:>9.3f} {n_ok:>7} {secs:>8.1f}")
    print(f"\nload average at end {load_average()}")
    by = {(n, lab.split(" (")[-1].rstrip(")")): s for n, lab, s, _, _ in shares}
    record("pivots", " ".join([f"close={close}", f"far={far}", f"div_close={pivots[close][0]:.3f}",
                                f"div_far={pivots[far][0]:.3f}", f"div_ratio_far_vs_spa={pivots[far][0] / ref:.2f}",
                                f"unchanged_stymask={by[('stymask', '-')]:.3f}",
                                *(f"unchanged_{n}_ref={by[(n, 'reference')]:.3f} unchanged_{n}={by[(n, 'default')]:.3f}"
                                  for n in ("syntr", "synsim", "syndiff", "synorig"))]))


if __name__ == "__main__":
    main()
