"""Benchmark of the generation strategies and of the LLM client, on CPU, on real public text.

1. Texts/s per strategy: ``generate_synthetic`` on N real sentences, half 2012 convention sentences, half
   2016 debate turns of 20-400 characters (``conventions`` / ``debates`` from tasks.corpus.datasets, file
   order, so the texts are the same on every run). Default N=200 for the offline strategies and N=4 with
   ``max_tokens`` 16 for the LLM-based ones (llm, paraphrase, dp: SmolLM2 in process). Each strategy is
   built, fitted and warmed up on 2 texts before the timed call, so model loading is reported apart.
2. The LLM client's overhead: the real CPU server (``python -m tasks.models.openai_server``) is started on a
   free port; the same M small requests (max_tokens 4, greedy, one at a time) go once as raw httpx POSTs and
   once through ``OpenAICompatibleClient`` (cache disabled, concurrency 1), alternating for R rounds; the
   ratio is client seconds / raw seconds (reference: raw httpx to the same server, same run). The server is
   stopped at the end.
3. The in-process ``TransformersBackend``'s generated tokens/s (greedy; one request at a time, then a batch).

Run: ``.venv/bin/python benchmarks/generate.py`` (see benchmarks/README.md).

It ends with one ``RESULT key=value ...`` line, recorded in benchmarks/results.jsonl
(:func:`benchmarks.results.record`).
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks.results import record  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tasks.corpus.datasets import fetch_dataset  # noqa: E402
from tasks.corpus.schema import STATUS_OK  # noqa: E402
from tasks.generate import available_strategies, build_strategy, generate_synthetic  # noqa: E402
from tasks.models.llm import ChatRequest, OpenAICompatibleClient, TransformersBackend  # noqa: E402
from tasks.models.registry import resolve_model  # noqa: E402

LLM_BASED = ("llm", "paraphrase", "dp")
REFERENCE = "raw httpx POSTs to the same server, same requests, same run"
PROMPTS = ("Name a colour.", "Say hello.", "Give one word for happy.", "Name a fruit.", "Name a city.",
           "Count to three.", "Name an animal.", "Say yes or no.")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def real_sentences(n: int, data_dir: str | Path) -> pd.DataFrame:
    """n real texts: convention sentences and debate turns (20-400 characters) interleaved, in file order."""
    conv = pd.read_parquet(fetch_dataset("conventions", data_dir))
    deb = pd.read_parquet(fetch_dataset("debates", data_dir))
    conv = conv[conv["text"].str.len() >= 20]
    deb = deb[deb["text"].str.len().between(20, 400)]
    half = (n + 1) // 2
    rows = pd.concat([conv.head(half).assign(_order=range(0, 2 * half, 2)),
                      deb.head(n - half).assign(_order=range(1, 2 * (n - half), 2))], ignore_index=True)
    cols = ["doc_id", "text", "author_id", "group_id", "position"]
    return rows.sort_values("_order")[cols].reset_index(drop=True)


def strategy_params(name: str, max_tokens: int, threads: int) -> dict[str, Any]:
    """Benchmark params: defaults, except the LLM-based strategies' max_tokens and torch threads."""
    if name == "dp":
        return {"epsilon": 20.0, "max_tokens": max_tokens, "backend": {"num_threads": threads}}
    if name in LLM_BASED:
        return {"max_tokens": max_tokens, "backend": {"num_threads": threads}}
    return {}


def time_strategy(name: str, texts: pd.DataFrame, params: dict[str, Any]) -> dict[str, Any]:
    """Build + fit + warm-up (untimed in the rate), then one timed generate_synthetic over ``texts``."""
    t0 = time.perf_counter()
    strategy = build_strategy(name, params)
    strategy.fit(texts)
    generate_synthetic(strategy, texts.head(2), seed=1)  # loads models, parsers, apertium pairs
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    table = generate_synthetic(strategy, texts, seed=0)
    seconds = time.perf_counter() - t0
    ok = int((table["status"] == STATUS_OK).sum())
    truncated = int(table["truncated"].fillna(False).sum()) if "truncated" in table.columns else 0
    return {"strategy": name, "texts": len(texts), "rows": len(table), "ok": ok, "failed": len(table) - ok,
            "truncated": truncated, "setup_s": setup_s, "seconds": seconds, "texts_per_s": len(texts) / seconds}


def print_strategy_table(rows: Sequence[dict[str, Any]]) -> None:
    print(f"\n{'strategy':<14}{'texts':>6}{'rows':>6}{'ok':>6}{'failed':>7}{'trunc':>6}"
          f"{'setup s':>9}{'gen s':>9}{'texts/s':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['strategy']:<14} not run: {r['error']}")
            continue
        print(f"{r['strategy']:<14}{r['texts']:>6}{r['rows']:>6}{r['ok']:>6}{r['failed']:>7}{r['truncated']:>6}"
              f"{r['setup_s']:>9.2f}{r['seconds']:>9.2f}{r['texts_per_s']:>10.2f}")


# ---------------------------------------------------------------- client overhead against raw HTTP


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(log: Path, threads: int, deadline_s: float = 300.0) -> tuple[subprocess.Popen[bytes], str, float]:
    """Start the CPU OpenAI-compatible server on a free port; (process, base url, seconds to healthy)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tasks.models.openai_server", "--model", "smollm2", "--served-model-name",
             "smollm2", "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    probe = OpenAICompatibleClient(url, "smollm2", max_retries=0)
    try:
        end = time.monotonic() + deadline_s
        while not probe.health(timeout_s=2):
            if proc.poll() is not None or time.monotonic() > end:
                stop_server(proc)
                raise RuntimeError(f"server did not come up (exit {proc.returncode}): {log.read_text()[-1500:]}")
            time.sleep(0.25)
    finally:
        probe.close()
    return proc, url, time.perf_counter() - t0


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def raw_requests(url: str, bodies: Sequence[dict[str, Any]]) -> float:
    """Seconds to POST every body one at a time with a plain httpx client (keep-alive), checking each answer."""
    import httpx

    with httpx.Client(timeout=300) as http:
        t0 = time.perf_counter()
        for body in bodies:
            response = http.post(f"{url}/chat/completions", json=body)
            response.raise_for_status()
            if not isinstance(response.json()["choices"][0]["message"]["content"], str):
                raise RuntimeError("raw request: no content")
        return time.perf_counter() - t0


def client_requests(client: OpenAICompatibleClient, requests: Sequence[ChatRequest]) -> float:
    """Seconds for ``client.complete`` over the same requests (concurrency 1, no cache), checking each result."""
    t0 = time.perf_counter()
    results = client.complete(requests)
    seconds = time.perf_counter() - t0
    bad = [r.error for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"client request failed: {bad[0]}")
    return seconds


def client_overhead(m: int, rounds: int, threads: int) -> None:
    requests = [ChatRequest([{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], temperature=0.0,
                            max_tokens=4) for i in range(m)]
    with tempfile.TemporaryDirectory(prefix="synthugc-bench-") as tmp:
        proc, url, start_s = start_server(Path(tmp) / "server.log", threads)
        try:
            print(f"\nLLM client overhead: server {url} (tasks.models.openai_server, smollm2, {threads} thread(s)) "
                  f"healthy after {start_s:.1f} s")
            client = OpenAICompatibleClient(url, "smollm2", timeout_s=300, max_retries=0, concurrency=1, cache=None)
            bodies = [client.payload(r) for r in requests]
            raw_requests(url, bodies[:1])  # warm-up: first generate, connection set-up
            client_requests(client, requests[:1])
            raw_s, client_s = [], []
            for _ in range(rounds):
                raw_s.append(raw_requests(url, bodies))
                client_s.append(client_requests(client, requests))
            client.close()
        finally:
            stop_server(proc)
    raw, ours = statistics.median(raw_s), statistics.median(client_s)
    print(f"  {m} requests (max_tokens 4, greedy, one at a time), median of {rounds} alternating rounds:")
    print(f"  reference  {REFERENCE}: {raw:8.3f} s  ({raw / m * 1000:.1f} ms/request; rounds "
          f"{', '.join(f'{x:.3f}' for x in raw_s)})")
    print(f"  client     OpenAICompatibleClient.complete, concurrency 1, cache disabled:     {ours:8.3f} s  "
          f"({ours / m * 1000:.1f} ms/request; rounds {', '.join(f'{x:.3f}' for x in client_s)})")
    print(f"  ratio      client / raw = {ours / raw:.3f}")
    print(f"  server stopped (exit code {proc.returncode})")


# ---------------------------------------------------------------- in-process tokens/s


def backend_tokens_per_s(max_tokens: int, batch: int, threads: int) -> None:
    """Generated tokens/s of TransformersBackend (SmolLM2, greedy), one request at a time and as one batch."""
    from tasks.models.loaders import load_causal_lm

    spec = resolve_model("llm")
    backend = TransformersBackend(spec, batch_size=batch, num_threads=threads)
    t0 = time.perf_counter()
    backend.load()
    tokenizer, _ = load_causal_lm(spec)
    print(f"\nin-process TransformersBackend ({backend.model}, {threads} torch thread(s)), model ready in "
          f"{time.perf_counter() - t0:.1f} s (0 when an LLM strategy above loaded it); greedy, max_tokens {max_tokens}:")
    prompt = [{"role": "user", "content": "Write a short story about a late bus and a rainy morning."}]
    requests = [ChatRequest(prompt, temperature=0.0, max_tokens=max_tokens) for _ in range(batch)]
    backend.generate(requests[:1])  # warm-up
    for label, chunks in (("one request at a time", [[r] for r in requests]), (f"batch of {batch}", [requests])):
        n_tokens, t0 = 0, time.perf_counter()
        for chunk in chunks:
            for texts in backend.generate(chunk):
                n_tokens += sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
        seconds = time.perf_counter() - t0
        print(f"  {label:<22} {n_tokens:5d} tokens in {seconds:7.2f} s = {n_tokens / seconds:7.1f} tokens/s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=None,
                        help=f"strategies to time (default: all: {', '.join(available_strategies())}); 'none' skips")
    parser.add_argument("--n", type=int, default=200, help="texts per offline strategy")
    parser.add_argument("--n-llm", type=int, default=4, help="texts per LLM-based strategy (llm, paraphrase, dp)")
    parser.add_argument("--llm-max-tokens", type=int, default=16, help="max_tokens of the LLM-based strategies")
    parser.add_argument("--requests", type=int, default=8, help="M requests for the client-overhead comparison")
    parser.add_argument("--rounds", type=int, default=3, help="alternating raw/client rounds (median reported)")
    parser.add_argument("--no-client", dest="client", action="store_false", help="skip the client-vs-raw comparison")
    parser.add_argument("--no-backend", dest="backend", action="store_false", help="skip the in-process tokens/s")
    parser.add_argument("--backend-tokens", type=int, default=32, help="max_tokens of the tokens/s measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (in process and the server)")
    parser.add_argument("--data-dir", default=str(ROOT / "data"))
    args = parser.parse_args(argv)
    known = available_strategies()
    names = known if args.strategies is None else ([] if args.strategies == ["none"] else args.strategies)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown strategies {unknown} (available: {', '.join(known)})")

    import torch

    torch.set_num_threads(args.threads)
    print(f"synthugc generation benchmark (CPU): python {platform.python_version()}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), {os.cpu_count()} cpus, load average at start {load_average()}")
    if names:
        n_max = max([args.n if n not in LLM_BASED else args.n_llm for n in names])
        texts = real_sentences(n_max, args.data_dir)
        print(f"texts: {len(texts)} real sentences (conventions + debates, 20-400 chars, mean "
              f"{texts['text'].str.len().mean():.0f} chars); offline strategies on {args.n}, LLM-based on "
              f"{args.n_llm} with max_tokens {args.llm_max_tokens}")
        rows = []
        for name in names:
            n = args.n_llm if name in LLM_BASED else args.n
            try:
                rows.append(time_strategy(name, texts.head(n), strategy_params(name, args.llm_max_tokens,
                                                                                args.threads)))
            except Exception as exc:  # a missing model/tool: say so, time the others
                rows.append({"strategy": name, "error": " ".join(f"{type(exc).__name__}: {exc}".split())[:200]})
            print(f"  {name} done ({load_average()})", flush=True)
        print_strategy_table(rows)
        result = " ".join(f"{r['strategy']}_texts_per_s={r['texts_per_s']:.2f}" for r in rows if "texts_per_s" in r)
    else:
        result = ""
    if args.client:
        client_overhead(args.requests, args.rounds, args.threads)
    if args.backend:
        backend_tokens_per_s(args.backend_tokens, 4, args.threads)
    print(f"\nload average at end {load_average()}")
    record("generate", f"{result} load={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
