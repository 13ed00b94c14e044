"""Benchmark: does the LLM client keep a vLLM-like server full?

Starts the simulated continuous-batching server (``python -m tasks.models.simulated_server``: max_num_seqs, a
token budget per step, a step of ``base + per_seq * n_seqs``) in its own process on a free port, and sends it the llm strategy's requests
(the article's prompt, ``tasks.generate.llm.build_requests``) for N real sentences (2012 convention speeches,
file order) through ``OpenAICompatibleClient.stream`` with its default in-flight count (sized from
max_num_seqs). Prints the server's capacity for this workload (computed from its parameters), the client's
requests/s and their ratio; then the same with concurrency 8 (the client's old default: the reference, same
server, same run, fewer requests since it is slow). Also when the first result reached the caller.

Run: ``.venv/bin/python benchmarks/llm_client.py`` (see benchmarks/README.md). Ends with one ``RESULT`` line.

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.results import record  # noqa: E402
from tasks.corpus.datasets import fetch_dataset  # noqa: E402
from tasks.generate.llm import ARTICLE_TEMPLATE, LLMParams, build_requests  # noqa: E402
from tasks.models.llm import ChatRequest, OpenAICompatibleClient  # noqa: E402
from tasks.models.simulated_server import ServerParams, prompt_tokens, saturation_line  # noqa: E402

REFERENCE_CONCURRENCY = 8  # the client's fixed in-flight count before issue 16


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def workload(n: int, max_tokens: int, data_dir: str | Path) -> list[ChatRequest]:
    """The llm strategy's requests (article prompt, default sampling, ``max_tokens``) for n convention sentences."""
    texts = pd.read_parquet(fetch_dataset("conventions", data_dir))["text"]
    texts = texts[texts.str.len() >= 20].head(n).tolist()
    if len(texts) < n:
        raise SystemExit(f"only {len(texts)} convention sentences of 20+ characters; ask for --requests <= that")
    requests, _ = build_requests(texts, LLMParams(max_tokens=max_tokens), seed=0, n=2, template=ARTICLE_TEMPLATE)
    return requests


@contextlib.contextmanager
def server_process(params: ServerParams) -> Iterator[str]:
    """The simulated server in its own process (as vLLM's engine is: the client's CPU work does not delay its
    steps); yields its base URL, stops it at the end."""
    command = [sys.executable, "-m", "tasks.models.simulated_server",
               "--max-num-seqs", str(params.max_num_seqs), "--max-num-batched-tokens", str(params.max_num_batched_tokens),
               "--step-base-ms", repr(params.step_base_s * 1000), "--step-per-seq-ms", repr(params.step_per_seq_s * 1000),
               "--catch-up-s", repr(params.catch_up_s)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        url = proc.stdout.readline().strip() if proc.stdout else ""
        if not url.startswith("http"):
            raise SystemExit(f"simulated server did not start (exit code {proc.poll()})")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run(url: str, requests: list[ChatRequest], concurrency: int | None, max_num_seqs: int) -> dict[str, float]:
    """Stream ``requests`` through a fresh client; seconds, when the first result arrived, what the server saw."""
    stats_url = url.removesuffix("/v1") + "/stats"
    httpx.delete(stats_url).raise_for_status()
    client = OpenAICompatibleClient(url, "simulated", max_retries=0, cache=None, concurrency=concurrency,
                                    max_num_seqs=max_num_seqs)
    arrivals: list[float] = []
    failed: list[str] = []
    start = time.perf_counter()
    for _, result in client.stream(requests):
        arrivals.append(time.perf_counter() - start)
        if not result.ok:
            failed.append(str(result.error))
    seconds = time.perf_counter() - start
    client.close()
    seen = httpx.get(stats_url).json()["stats"]
    if failed:
        raise SystemExit(f"{len(failed)} request(s) failed, first: {failed[0]}")
    return {"in_flight": float(client.concurrency or 0), "requests": len(requests), "seconds": seconds,
            "first_s": arrivals[0], "median_s": statistics.median(arrivals), "rps": len(requests) / seconds,
            "peak_running": seen["peak_running"], "steps": seen["steps"], "busy_s": seen["busy_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests with the default in-flight count")
    parser.add_argument("--reference-requests", type=int, default=160, help="requests at concurrency 8")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens of every request (decode steps)")
    parser.add_argument("--max-num-seqs", type=int, default=256, help="server's sequences per step (vLLM default)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192, help="server's token budget per step")
    parser.add_argument("--step-base-ms", type=float, default=10.0, help="step cost with no sequence")
    parser.add_argument("--step-per-seq-ms", type=float, default=0.1, help="added step cost per sequence")
    parser.add_argument("--catch-up-s", type=float, default=1.0,
                        help="server steps late by up to this much (busy CPU) are made up; 0: lateness is lost")
    parser.add_argument("--data-dir", default=str(ROOT / "data"))
    args = parser.parse_args()

    params = ServerParams(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                          step_base_s=args.step_base_ms / 1000, step_per_seq_s=args.step_per_seq_ms / 1000,
                          catch_up_s=args.catch_up_s)
    requests = workload(max(args.requests, args.reference_requests), args.max_tokens, args.data_dir)
    mean_prompt = statistics.fmean(prompt_tokens({"messages": r.messages}) for r in requests[:args.requests])
    capacity = params.capacity(mean_prompt, args.max_tokens)
    print(f"llm client benchmark: {os.cpu_count()} cpus, load {load_average()} (machine shared with other agents)")
    print(f"server: simulated continuous batching; {saturation_line(params, mean_prompt, args.max_tokens)}")
    rows = []
    with server_process(params) as url:
        for label, concurrency, n in (("default (sized from max_num_seqs)", None, args.requests),
                                      (f"reference: concurrency {REFERENCE_CONCURRENCY}", REFERENCE_CONCURRENCY,
                                       args.reference_requests)):
            row = run(url, requests[:n], concurrency, args.max_num_seqs)
            row["label"] = label
            row["ratio"] = row["rps"] / capacity.requests_per_s
            rows.append(row)
    print(f"\n{'client setting':<36}{'in flight':>10}{'requests':>9}{'seconds':>9}{'first s':>8}{'median s':>9}"
          f"{'req/s':>8}{'tok/s':>8}{'/capacity':>10}{'peak seqs':>10}{'steps':>7}{'busy s':>8}")
    for r in rows:
        print(f"{r['label']:<36}{r['in_flight']:>10.0f}{r['requests']:>9.0f}{r['seconds']:>9.2f}{r['first_s']:>8.2f}"
              f"{r['median_s']:>9.2f}{r['rps']:>8.1f}{r['rps'] * args.max_tokens:>8.0f}{r['ratio']:>10.3f}"
              f"{r['peak_running']:>10.0f}{r['steps']:>7.0f}{r['busy_s']:>8.2f}")
    ours, ref = rows
    print(f"\nclient throughput / server capacity = {ours['ratio']:.3f} (target >= 0.90: "
          f"{'met' if ours['ratio'] >= 0.90 else 'NOT met'}); reference (concurrency {REFERENCE_CONCURRENCY}) "
          f"{ref['ratio']:.3f}; speedup {ours['rps'] / ref['rps']:.1f}x; load now {load_average()}")
    record("llm_client", f"ratio={ours['ratio']:.3f} throughput={ours['rps']:.1f} capacity={capacity.requests_per_s:.1f} "
          f"reference_ratio={ref['ratio']:.3f} in_flight={ours['in_flight']:.0f} requests={ours['requests']:.0f} "
          f"load={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
