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
