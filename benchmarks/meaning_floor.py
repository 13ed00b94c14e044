"""How fast the meaning check can be on this machine: the BERTScore encoder's forward (``bertscore``, no cache, as
protect's rounds run it) against this CPU's matrix-multiply roofline, measured in the same run, and what bfloat16
would buy and cost. Protect's later rounds at full scale check the meaning of ~1,700 moved documents; if the
forward already runs near the roofline, no fp32 code change makes that check much faster on these cores.

The reference: ``torch.nn.Linear`` on one forward batch's worth of tokens (the device's token budget) in the
encoder's own shapes (hidden -> hidden, hidden -> intermediate, intermediate -> hidden), weighted as one layer
uses them, in GFLOP/s. The check's rate is the FLOPs of the forward batches it ran (recorded as they run, padding
included: the linear layers and the attention products of every layer) over the whole check's time, tokenising
and the greedy matching included, so it is a lower bound on the forward's own rate. bfloat16 (``torch.autocast``) is timed on the same texts, and
its BERTScore F1 is compared with fp32's: the largest and mean difference, and how many of protect's meaning-floor
decisions (the default floor) it would flip. Texts: the first ``--n`` documents of at least 8 words of the
embedded debates corpus (``data/debates.parquet``, 721 of them), each cut to ``--words`` words; candidates drop every fourth word of their reference.

    .venv/bin/python benchmarks/meaning_floor.py              # up to 1,000 documents of 60 words, 3 rounds each way

Ends with ``RESULT texts=... tokens=... fp32_s=... check_gflops=... roofline_gflops=... check_over_roofline=...
bf16_s=... bf16_speedup=... bf16_roofline_gflops=... bf16_max_abs_df1=... bf16_mean_abs_df1=... bf16_flips=...
floor=... load=...``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import record
from tasks.corpus.importers import read_corpus
from tasks.metrics.meaning import bertscore
from tasks.models import embeddings
from tasks.models.embeddings import token_budget
from tasks.models.loaders import load_token_encoder
from tasks.models.registry import resolve_model
from tasks.protect.settings import ProtectSettings
from tasks.settings import get_settings


def _precision(bf16: bool) -> contextlib.AbstractContextManager:
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


@contextlib.contextmanager
def _recorded_forward(bf16: bool, shapes: list[tuple[int, int]], tokens: list[int]) -> Iterator[None]:
    """While inside, the encoder's forward passes (:func:`tasks.models.embeddings._forward`) run in bfloat16 when
    ``bf16`` (the rest of BERTScore, the greedy matching, stays fp32), and each appends its padded (rows, width)
    to ``shapes`` and its unpadded token count to ``tokens``: the batches the check really ran, for
    :func:`forward_flops`."""
    original = embeddings._forward

    def forward(model: Any, rows: Any, *args: Any, **kwargs: Any) -> Any:
        shapes.append((len(rows), max(len(r) for r in rows)))
        tokens.append(sum(len(r) for r in rows))
        with _precision(bf16):
            return original(model, rows, *args, **kwargs)

    embeddings._forward = forward
    try:
        yield
    finally:
        embeddings._forward = original


def roofline_gflops(hidden: int, intermediate: int, tokens: int, bf16: bool, repeats: int = 30) -> float:
    """GFLOP/s of one encoder layer's linear products (4 x hidden->hidden, hidden->intermediate,
    intermediate->hidden) on ``tokens`` rows, as the layer weights them."""
    import torch

    shapes = [(hidden, hidden)] * 4 + [(hidden, intermediate), (intermediate, hidden)]
    layers = [torch.nn.Linear(i, o) for i, o in shapes]
    inputs = {i: torch.randn(tokens, i) for i, _ in shapes}
    flops = sum(2 * tokens * i * o for i, o in shapes)
    with torch.inference_mode(), _precision(bf16):
        for layer, (i, _) in zip(layers, shapes, strict=True):  # warm-up: first-call allocations
            layer(inputs[i])
        t0 = time.perf_counter()
        for _ in range(repeats):
            for layer, (i, _) in zip(layers, shapes, strict=True):
                layer(inputs[i])
        seconds = time.perf_counter() - t0
    return flops * repeats / seconds / 1e9


def forward_flops(shapes: Sequence[tuple[int, int]], layers: int, hidden: int, intermediate: int) -> float:
    """FLOPs of forward batches of these padded (rows, width) shapes: per layer, the linear products of every
    padded token and the two attention products (scores, weighted values)."""
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * intermediate)
    return float(sum(layers * (rows * width * per_token + 2 * 2 * rows * width * width * hidden)
                     for rows, width in shapes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="documents (default 1000)")
    parser.add_argument("--words", type=int, default=60, help="words kept of each document (default 60)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds each way (default 3)")
    args = parser.parse_args()
    corpus = Path(get_settings().data_dir) / "debates.parquet"
    texts = [" ".join(t.split()[: args.words]) for t in read_corpus(corpus).corpus["text"].astype(str)]
    references = [t for t in texts if len(t.split()) >= 8][: args.n]
    candidates = [" ".join(w for i, w in enumerate(r.split()) if i % 4 != 3) for r in references]
    spec = resolve_model("token_encoder")
    model = load_token_encoder(spec)[1]
    config = model.config
    hidden, intermediate, layers = int(config.hidden_size), int(config.intermediate_size), int(config.num_hidden_layers)
    budget = token_budget(model)
    import torch

    print(f"meaning floor benchmark: {len(references)} pairs, {os.cpu_count()} cpus, {torch.get_num_threads()} torch "
          f"threads, token budget {budget}, load {os.getloadavg()[0]:.2f}")
    bertscore(candidates[:16], references[:16], spec=spec)  # warm-up: the model's load and first calls
    roof = {bf16: roofline_gflops(hidden, intermediate, budget, bf16) for bf16 in (False, True)}
    seconds: dict[bool, list[float]] = {False: [], True: []}
    f1: dict[bool, np.ndarray] = {}
    shapes: list[tuple[int, int]] = []
    tokens: list[int] = []
    for _ in range(args.rounds):
        for bf16 in (False, True):
            shapes.clear()
            tokens.clear()
            with _recorded_forward(bf16, shapes, tokens):
                t0 = time.perf_counter()
                scores = bertscore(candidates, references, spec=spec)
                seconds[bf16].append(time.perf_counter() - t0)
            f1[bf16] = scores.scores["bertscore_f1"].to_numpy(float)
    fp32_s, bf16_s = statistics.median(seconds[False]), statistics.median(seconds[True])
    check = forward_flops(shapes, layers, hidden, intermediate) / fp32_s / 1e9  # every round runs the same batches
    diff = np.abs(f1[True] - f1[False])
    floor = ProtectSettings().meaning_floor
    flips = int(((f1[True] >= floor) != (f1[False] >= floor)).sum())
    print(f"fp32: {', '.join(f'{s:.2f}' for s in seconds[False])} s over {sum(tokens):,} tokens in {len(shapes)} "
          f"forward batches ({check:.1f} GFLOP/s of the forward's FLOPs over the whole check's time; the linear "
          f"roofline {roof[False]:.1f} GFLOP/s: {check / roof[False]:.2f} of it)")
    print(f"bf16: {', '.join(f'{s:.2f}' for s in seconds[True])} s ({fp32_s / bf16_s:.2f}x; its linear roofline "
          f"{roof[True]:.1f} GFLOP/s); BERTScore F1 against fp32: max |diff| {diff.max():.4f}, mean "
          f"{diff.mean():.5f}; decisions at the floor {floor} flipped: {flips} of {len(diff)}")
    record("meaning_floor", f"texts={len(references)} tokens={sum(tokens)} fp32_s={fp32_s:.2f} check_gflops={check:.1f} "
          f"roofline_gflops={roof[False]:.1f} check_over_roofline={check / roof[False]:.2f} bf16_s={bf16_s:.2f} "
          f"bf16_speedup={fp32_s / bf16_s:.2f} bf16_roofline_gflops={roof[True]:.1f} "
          f"bf16_max_abs_df1={diff.max():.4f} bf16_mean_abs_df1={diff.mean():.5f} bf16_flips={flips} floor={floor} "
          f"load={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
