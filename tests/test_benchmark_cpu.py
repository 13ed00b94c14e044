"""The demo benchmark's CPU reading (benchmarks/flow.py ``busy_cpu_seconds``): the machine's busy CPU-seconds, which
two readings around a run turn into what the run used and the floor of its wall time with every core busy."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

FLOW = Path(__file__).resolve().parent.parent / "benchmarks" / "flow.py"


def _flow_module():
    spec = importlib.util.spec_from_file_location("benchmark_flow", FLOW)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_busy_cpu_seconds_count_at_least_what_this_process_burns_and_no_more_than_every_core_can():
    busy = _flow_module().busy_cpu_seconds
    before, wall, cpu = busy(), time.monotonic(), time.process_time()
    while time.process_time() - cpu < 0.5:  # half a CPU-second of work in this process
        pass
    used, elapsed = busy() - before, time.monotonic() - wall
    assert used >= 0.5 - 0.05  # the clock ticks are 10 ms: a few may fall on either side
    assert used <= elapsed * (os.cpu_count() or 1) + 0.05


def test_the_meaning_benchmarks_flop_count_equals_torchs_flop_counter_on_the_encoder():
    """benchmarks/meaning_floor.py's FLOPs of forward batches equal what torch's FlopCounterMode counts when the
    encoder runs them with its attention as plain matrix products (the pooler's one product on each [CLS] row
    aside: BERTScore does not use it, the count leaves it out)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModel

    from tasks.models.registry import resolve_model

    spec = importlib.util.spec_from_file_location("benchmark_meaning_floor", FLOW.parent / "meaning_floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = AutoModel.from_pretrained(resolve_model("token_encoder").path, attn_implementation="eager").eval()
    config = model.config
    batches = [[40, 37, 25, 12], [25, 9]]  # unpadded lengths; each batch padded to its longest
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        for lengths in batches:
            width = max(lengths)
            mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
            model(torch.randint(1000, 2000, (len(lengths), width)), attention_mask=mask)
    rows = sum(len(lengths) for lengths in batches)
    pooler = 2 * rows * config.hidden_size * config.hidden_size
    shapes = [(len(lengths), max(lengths)) for lengths in batches]
    counted = module.forward_flops(shapes, config.num_hidden_layers, config.hidden_size, config.intermediate_size)
    assert counted == counter.get_total_flops() - pooler
