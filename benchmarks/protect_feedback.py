"""Measure whether the protect loop's feedback should mask the classifier attack's evidence too: the same
conventions timelines protected with feedback ``stylometric`` and with ``stylometric`` + ``classifier``, ladder
``mask-evidence`` only (one rung per round), and the certificate's figures (every registered attack on the full histories) and the
documents' meaning compared.

    .venv/bin/python benchmarks/protect_feedback.py --timelines 60 --max-rounds 2

The conventions speakers (``data/conventions.parquet``) are split by :func:`tasks.corpus.splits.author_timelines`
(5 posts per timeline, seed 0); the first ``--timelines`` timelines are protected against the others' posts (the
histories; ``--skip N`` takes the next ones after N). Start move ``mask-evidence`` (no evidence yet at round 0: nothing changes, no NER model), default
meaning floor and judge, ``--on-fail keep`` so both are certified on every timeline; the embedding attack is kept off the CPU (``SYNTHUGC_CPU_ATTACK_POSTS=0``).
The reference is the stylometric feedback, measured in the same run: the last line, ``RESULT ...``, gives each
setting's worst certificate figure (accuracy@1 over the attacks), their ratio and the mean meaning kept.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import record

DATA = Path(__file__).resolve().parent.parent / "data" / "conventions.parquet"
FEEDBACKS = {"stylometric": (("stylometric", {}),),
             "stylometric+classifier": (("stylometric", {}), ("classifier", {}))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timelines", type=int, default=60)
    parser.add_argument("--skip", type=int, default=0, help="timelines passed over first (another sample)")
    parser.add_argument("--max-rounds", type=int, default=2)
    parser.add_argument("--on-fail", default="keep", help="keep (default: every timeline certified, so both feedbacks "
                        "are read over the same documents) or drop (the loop's default)")
    args = parser.parse_args()
    os.environ.setdefault("SYNTHUGC_CPU_ATTACK_POSTS", "0")
    work = Path(tempfile.mkdtemp(prefix="protect-feedback-"))
    os.environ.setdefault("SYNTHUGC_CACHE_DIR", str(work / "cache"))

    from tasks.corpus.splits import author_timelines
    from tasks.protect.loop import protect_corpus
    from tasks.protect.moves import MASK_EVIDENCE, Move
    from tasks.protect.settings import ProtectSettings
    from tasks.store import fingerprint_file

    timelines, histories = author_timelines(pd.read_parquet(DATA), 5, seed=0)
    corpus = timelines[timelines["group_id"].isin(timelines["group_id"].unique()[args.skip:args.skip + args.timelines])]
    corpus = corpus.drop(columns=["source_group_id"]).reset_index(drop=True)
    corpus_path, hist_path = work / "corpus.parquet", work / "histories.parquet"
    corpus.to_parquet(corpus_path, index=False)
    histories[histories["author_id"].notna()].to_parquet(hist_path, index=False)  # an author-less post: no one's
    print(f"{len(corpus)} documents of {corpus['author_id'].nunique()} timelines; {len(histories)} history posts")
    rows = []
    for label, feedback in FEEDBACKS.items():
        settings = ProtectSettings(start=MASK_EVIDENCE, ladder=(Move(MASK_EVIDENCE),) * args.max_rounds,
                                   max_rounds=args.max_rounds, feedback=feedback, on_fail=args.on_fail)
        started = time.perf_counter()
        result = protect_corpus(corpus, hist_path, settings, cache_dir=work / "protect",
                                corpus_fingerprint=fingerprint_file(corpus_path),
                                histories_fingerprint=fingerprint_file(hist_path),
                                log=lambda line, label=label: print(f"  [{label}] {line}", flush=True))
        seconds = time.perf_counter() - started
        cert = result.rounds[result.rounds["role"] == "certificate"].set_index("attack")["accuracy_at_1"]
        last = result.rounds[result.rounds["role"] == "judge"]
        last = last[last["round"] == last["round"].max()].set_index("attack")["accuracy_at_1"]
        rows.append({"feedback": label, **{f"cert_{a}": cert.get(a) for a in ("classifier", "stylometric", "delta",
                                                                               "minhash")},
                     "judge_classifier": last.get("classifier"), "judge_stylometric": last.get("stylometric"),
                     "rounds": int(result.rounds["round"].max()),
                     "kept": len(result.table), "failed": len(result.failures),
                     "meaning": result.summary["meaning"]["value"],
                     "rewritten": int((result.table["round"] > 0).sum()) if "round" in result.table else None,
                     "seconds": round(seconds, 1)})
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    cert = [c for c in table.columns if c.startswith("cert_")]
    worst = table.set_index("feedback")[cert].max(axis=1)
    meaning = table.set_index("feedback")["meaning"]
    reference, other = list(FEEDBACKS)
    load = ",".join(f"{v:.2f}" for v in os.getloadavg())
    record("protect_feedback", f"worst_reference={worst[reference]:.4f} worst_with_classifier={worst[other]:.4f} "
          f"worst_ratio_vs_reference={worst[other] / worst[reference]:.3f} meaning_reference={meaning[reference]:.4f} "
          f"meaning_with_classifier={meaning[other]:.4f} seconds={table['seconds'].sum():.1f} load={load}")


if __name__ == "__main__":
    main()
