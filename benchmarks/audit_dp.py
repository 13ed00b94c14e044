"""Benchmark of `synthugc audit-dp` on DP-Prompt (SmolLM2-135M in process, the offline default): audit time
against generation time, N real documents at several per-document epsilons.

Per epsilon, on the same documents (``real_sentences`` of benchmarks/generate.py: convention sentences and
debate turns, file order), in the same process (model loaded once, before timing):

- generation: ``generate_synthetic`` with the ``dp`` strategy (what ``synthugc generate`` runs);
- audit: :func:`tasks.privacy.dp_audit.audit_dp_prompt` (replays the same outputs, then teacher-forces each
  under its document and ``--neighbours`` others).

Prints documents/s of both, their ratio (target: audit <= 3x generation), and nominal against audited
epsilon (largest privacy loss) and the violations per epsilon; ends with
``RESULT docs=... audit_docs_per_s=... generation_docs_per_s=... ratio=... max_ratio=... violations=... device=...``
(ratio over all epsilons; max_ratio the worst epsilon). The machine is shared: quote the load.

The model runs on the GPU when torch sees one (:func:`tasks.models.loaders.device`; ``device=cuda`` in the
RESULT line), else on ``--threads`` CPU threads; ``--batch-size`` texts are decoded together (the strategy's
default, 8, unless given; a GPU takes more). On a shared 2-core box generation alone is
slow (``audit_dp`` in docs/performance.md): run the full 200 documents on a GPU.

Run: ``.venv/bin/python benchmarks/audit_dp.py [--docs 200] [--epsilons 1,8,50] [--max-tokens 64]
[--neighbours 3] [--threads 2] [--batch-size 8]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # the model loaders keep the hub offline

from generate import load_average, real_sentences  # noqa: E402

from benchmarks.results import record  # noqa: E402
from tasks.generate import build_strategy, generate_synthetic  # noqa: E402
from tasks.models.loaders import device, load_causal_lm  # noqa: E402
from tasks.privacy.dp_audit import audit_dp_prompt  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200, help="real documents")
    parser.add_argument("--epsilons", default="1,8,50", help="per-document epsilons, comma-separated")
    parser.add_argument("--max-tokens", type=int, default=64, help="the strategy's token budget")
    parser.add_argument("--neighbours", type=int, default=3, help="neighbouring documents per output")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (CPU)")
    parser.add_argument("--batch-size", type=int, default=None, help="texts decoded together (default: the "
                                                                     "strategy's)")
    parser.add_argument("--data-dir", default=str(ROOT / "data"))
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    docs = real_sentences(args.docs, args.data_dir)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    batch = {"batch_size": args.batch_size} if args.batch_size else {}
    strategies = [build_strategy("dp", {"epsilon": e, "max_tokens": args.max_tokens, **batch}) for e in epsilons]
    where = device()
    named = f"cuda ({torch.cuda.get_device_name()})" if where == "cuda" else f"cpu, {args.threads} torch thread(s)"
    t0 = time.perf_counter()
    load_causal_lm(strategies[0].spec)
    print(f"model loaded on {named} in {time.perf_counter() - t0:.1f} s; {len(docs)} documents, max_tokens "
          f"{args.max_tokens}, batch {strategies[0].params.batch_size}, {args.neighbours} neighbours; load average "
          f"before: {load_average()}")

    def finished() -> float:
        """Now, once the GPU's queued work is done (so a stage's time includes it)."""
        if where == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    gen_total = audit_total = 0.0
    ratios, violations = [], 0
    print("| epsilon (nominal) | per token | audited (largest loss) | violations | generation docs/s | "
          "audit docs/s | audit / generation |")
    print("|---|---|---|---|---|---|---|")
    for eps, strategy in zip(epsilons, strategies, strict=True):
        t0 = finished()
        generate_synthetic(strategy, docs, seed=0)
        gen_s = finished() - t0
        t0 = finished()
        table = audit_dp_prompt(strategy, docs, neighbours=args.neighbours, seed=0)
        audit_s = finished() - t0
        gen_total, audit_total = gen_total + gen_s, audit_total + audit_s
        ratios.append(audit_s / gen_s)
        violations += int(table["violation"].sum())
        print(f"| {eps:g} | {strategy.epsilon_token:.4g} | {table['privacy_loss_max'].max():.4g} | "
              f"{int(table['violation'].sum())} | {len(docs) / gen_s:.3f} | {len(docs) / audit_s:.3f} | "
              f"{audit_s / gen_s:.2f} |", flush=True)
    n = len(docs) * len(epsilons)
    print(f"load average after: {load_average()}")
    record("audit_dp", f"docs={len(docs)} epsilons={args.epsilons} audit_docs_per_s={n / audit_total:.3f} "
          f"generation_docs_per_s={n / gen_total:.3f} ratio={audit_total / gen_total:.2f} "
          f"max_ratio={max(ratios):.2f} violations={violations} load={load_average().replace(' ', ',')} "
          f"device={where}")


if __name__ == "__main__":
    main()
