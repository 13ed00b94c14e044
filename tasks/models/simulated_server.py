"""Local OpenAI-compatible servers that stand in for vLLM (no model, no GPU), over real HTTP on 127.0.0.1.

- :func:`fixed_delay_server`: answers every chat completion after a fixed delay, however many arrive at once
  (the executor benchmark and the flow tests: stage concurrency, not server behaviour).
- :func:`continuous_batching_server`: schedules requests the way vLLM's engine does (continuous batching), so
  a client's throughput against it depends on how many requests it keeps in flight. A scheduler loop runs
  steps; each step has a token budget (``max_num_batched_tokens``) and a sequence limit (``max_num_seqs``):
  running sequences decode one token each, then waiting requests are admitted (FIFO) and prefill their prompt
  (chunked when the budget runs out). The prefill step yields a request's first token, each later step one
  more, until ``max_tokens``; then it is answered. A step lasts ``step_base_s + step_per_seq_s * n_seqs``.
  Requests beyond ``max_num_seqs`` wait in the queue; a client that disconnects has its sequences dropped. A
  prompt longer than ``max_model_len - max_tokens`` is refused with 400, as vLLM does. Prompt tokens are
  counted as whitespace-separated words of the messages. Its capacity at saturation follows from these
  parameters (:meth:`ServerParams.capacity`).

Both answer with a two-item numbered list built from the last user message, which the LLM strategies parse.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def answer_text(body: dict[str, Any]) -> str:
    """The stand-in answer: a numbered list of two paraphrases (upper- and lower-cased tail of the last message)."""
    text = str(body["messages"][-1]["content"])[-80:]
    return "1. " + text.upper() + "\n2. " + text.lower()


def completion_payload(body: dict[str, Any], n: int, usage: dict[str, int] | None = None) -> dict[str, Any]:
    """An OpenAI chat-completion response with ``n`` identical choices."""
    content = answer_text(body)
    payload: dict[str, Any] = {
        "object": "chat.completion", "model": body.get("model"),
        "choices": [{"index": i, "message": {"role": "assistant", "content": content}, "finish_reason": "length"}
                    for i in range(n)]}
    if usage is not None:
        payload["usage"] = usage
    return payload


# ---------------------------------------------------------------- fixed delay


class _Answers(BaseHTTPRequestHandler):
    delay = 0.25
    models: list[str]  # the model named by each request, in arrival order

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": "stub"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.models.append(str(body.get("model")))
        time.sleep(self.delay)
        self._send(completion_payload(body, int(body.get("n") or 1)))

    def _send(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)


@contextlib.contextmanager
def fixed_delay_server(delay: float, models: list[str] | None = None) -> Iterator[str]:
    """A local OpenAI-compatible server answering every chat completion after ``delay`` seconds; yields its
    base URL and appends the model each request names to ``models``."""
    handler = type("Answers", (_Answers,), {"delay": delay, "models": models if models is not None else []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- continuous batching


@dataclass(frozen=True)
class Capacity:
    """Throughput of a saturated server for a workload: requests/s, output tokens/s, and the sequences per step."""

    requests_per_s: float
    tokens_per_s: float
    seqs_per_step: float
    step_s: float
    bound: str  # "max_num_seqs" or "max_num_batched_tokens": which limit saturates first


@dataclass(frozen=True)
class ServerParams:
    """The scheduler's limits and step cost (defaults: vLLM's max_num_seqs 256 and max_num_batched_tokens 8192;
    a step of 10 ms + 0.1 ms per sequence, a small model's decode step on one GPU in spirit, not measured)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 4096
    step_base_s: float = 0.010
    step_per_seq_s: float = 0.0001
    catch_up_s: float = 1.0  # steps running late by up to this much are made up (see ContinuousBatchingServer)

    def step_s(self, n_seqs: int | float) -> float:
        """Duration of one scheduler step with ``n_seqs`` sequences in it."""
        return self.step_base_s + self.step_per_seq_s * n_seqs

    def capacity(self, prompt_tokens: float, max_tokens: float) -> Capacity:
        """Steady-state throughput when requests of ``prompt_tokens`` (mean) and ``max_tokens`` (mean) always wait.

        A request holds a sequence slot for ``max_tokens`` steps (the prefill step yields the first token) and
        costs ``prompt_tokens + max_tokens - 1`` batched tokens; so at most ``max_num_seqs / max_tokens`` requests
        start per step (slots) and at most ``max_num_batched_tokens / (prompt_tokens + max_tokens - 1)``
        (budget). With r starts per step, r * max_tokens sequences run in each step (Little's law)."""
        d = max(1.0, float(max_tokens))
        by_slots = self.max_num_seqs / d
        by_budget = self.max_num_batched_tokens / (max(1.0, float(prompt_tokens)) + d - 1)
        starts = min(by_slots, by_budget)
        seqs = starts * d
        step = self.step_s(seqs)
        return Capacity(requests_per_s=starts / step, tokens_per_s=seqs / step, seqs_per_step=seqs, step_s=step,
                        bound="max_num_seqs" if by_slots <= by_budget else "max_num_batched_tokens")


def prompt_tokens(body: dict[str, Any]) -> int:
    """The simulated prompt length: whitespace-separated words of every message's content (at least 1)."""
    return max(1, sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or []))


@dataclass
class _Sequence:
    prompt: int
    max_tokens: int
    done: asyncio.Future
    prefilled: int = 0
    generated: int = 0


@dataclass
class ServerStats:
    """What the server saw: requests received/answered/refused/aborted, steps run, the most sequences running in one
    step and the most sequences in flight (running + waiting), generated tokens, busy seconds."""

    requests_received: int = 0
    requests_answered: int = 0
    requests_refused: int = 0
    requests_aborted: int = 0  # the client disconnected before the answer: its sequences were dropped
    steps: int = 0
    peak_running: int = 0
    peak_in_flight: int = 0
    tokens_generated: int = 0
    busy_s: float = 0.0
    models: list[str] = field(default_factory=list)


class ContinuousBatchingServer:
    """The ASGI app and its scheduler (see the module doc); :func:`continuous_batching_server` serves it.

    Steps follow an engine clock: each starts when the previous one ended, so time this process loses to a busy
    CPU (HTTP parsing, other processes) is made up by running the late steps back to back, up to
    ``catch_up_s`` behind; what the client did not send in time still leaves those steps short of sequences."""

    def __init__(self, params: ServerParams, model: str = "simulated") -> None:
        self.params = params
        self.model = model
        self.stats = ServerStats()
        self.url = ""
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._wakeup: asyncio.Event | None = None
        self._scheduler: asyncio.Task | None = None

    # -- scheduler

    async def _schedule(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        p = self.params
        last_end: float | None = None
        while True:
            if not self._running and not self._waiting:
                self._wakeup.clear()
                await self._wakeup.wait()
                last_end = None
                continue
            budget = p.max_num_batched_tokens
            emits: list[_Sequence] = []
            for seq in self._running:  # decodes first, then unfinished (chunked) prefills
                if seq.prefilled >= seq.prompt and budget > 0:
                    budget -= 1
                    emits.append(seq)
            for seq in self._running:
                if seq.prefilled < seq.prompt and budget > 0:
                    budget -= self._prefill(seq, budget, emits)
            while self._waiting and len(self._running) < p.max_num_seqs and budget > 0:
                seq = self._waiting.popleft()
                self._running.append(seq)
                budget -= self._prefill(seq, budget, emits)
            n_seqs = len(self._running)
            self.stats.peak_running = max(self.stats.peak_running, n_seqs)
            now = loop.time()
            # The engine clock: a step starts when the last one ended, even if this loop got the CPU late (a GPU
            # engine does not wait for its API process); lateness beyond catch_up_s is lost.
            start = now if last_end is None or now - last_end > max(p.catch_up_s, p.step_base_s) else last_end
            last_end = start + p.step_s(n_seqs)
            await asyncio.sleep(max(0.0, last_end - loop.time()))
            self.stats.steps += 1
            self.stats.busy_s += p.step_s(n_seqs)
            for seq in emits:
                seq.generated += 1
                self.stats.tokens_generated += 1
            finished = [s for s in self._running if s.generated >= s.max_tokens]
            if finished:
                self._running = [s for s in self._running if s.generated < s.max_tokens]
                for seq in finished:
                    if not seq.done.done():
                        seq.done.set_result(None)

    @staticmethod
    def _prefill(seq: _Sequence, budget: int, emits: list[_Sequence]) -> int:
        chunk = min(seq.prompt - seq.prefilled, budget)
        seq.prefilled += chunk
        if seq.prefilled >= seq.prompt:
            emits.append(seq)  # the prefill step yields the first token
        return chunk

    @staticmethod
    async def _disconnected(receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _complete(self, body: dict[str, Any], receive: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return 400, {"error": {"message": "messages: a non-empty list is required", "type": "BadRequestError"}}
        p = self.params
        n_prompt = prompt_tokens(body)
        max_tokens = int(body.get("max_tokens") or 16)
        n = int(body.get("n") or 1)
        if n_prompt + max_tokens > p.max_model_len:
            self.stats.requests_refused += 1
            return 400, {"error": {"type": "BadRequestError", "message": (
                f"This model's maximum context length is {p.max_model_len} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion).")}}
        if self._scheduler is None:
            self._wakeup = asyncio.Event()
            self._scheduler = asyncio.get_running_loop().create_task(self._schedule())
        loop = asyncio.get_running_loop()
        seqs = [_Sequence(n_prompt, max_tokens, loop.create_future()) for _ in range(n)]
        self._waiting.extend(seqs)
        in_flight = len(self._waiting) + len(self._running)
        self.stats.peak_in_flight = max(self.stats.peak_in_flight, in_flight)
        assert self._wakeup is not None
        self._wakeup.set()
        finished = asyncio.gather(*(s.done for s in seqs))
        gone = loop.create_task(self._disconnected(receive))
        await asyncio.wait([finished, gone], return_when=asyncio.FIRST_COMPLETED)
        if not finished.done():  # the client went away: abort its sequences, as vLLM does
            finished.cancel()
            mine = {id(s) for s in seqs}
            self._waiting = deque(s for s in self._waiting if id(s) not in mine)
            self._running = [s for s in self._running if id(s) not in mine]
            self.stats.requests_aborted += 1
            return 499, {"error": {"message": "client disconnected", "type": "Aborted"}}
        gone.cancel()
        self.stats.requests_answered += 1
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n * max_tokens,
                 "total_tokens": n_prompt + n * max_tokens}
        return 200, completion_payload(body, n, usage)

    # -- ASGI

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"].rstrip("/"), scope["method"]
        if method == "GET" and path == "/v1/models":
            status, payload = 200, {"object": "list", "data": [{"id": self.model, "object": "model"}]}
        elif method in ("GET", "DELETE") and path == "/stats":  # DELETE: start counting afresh
            status, payload = 200, {"params": asdict(self.params), "stats": asdict(self.stats)}
            if method == "DELETE":
                self.stats = ServerStats()
        elif method == "POST" and path == "/v1/chat/completions":
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            try:
                body = json.loads(b"".join(chunks))
            except ValueError:
                status, payload = 400, {"error": {"message": "body is not JSON", "type": "BadRequestError"}}
            else:
                self.stats.requests_received += 1
                self.stats.models.append(str(body.get("model")))
                status, payload = await self._complete(body, receive)
        else:
            status, payload = 404, {"error": {"message": f"no route {method} {path}", "type": "NotFoundError"}}
        data = json.dumps(payload).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})


@contextlib.contextmanager
def continuous_batching_server(params: ServerParams | None = None,
                               model: str = "simulated") -> Iterator[ContinuousBatchingServer]:
    """Serve a :class:`ContinuousBatchingServer` (uvicorn, one thread, a free port on 127.0.0.1) for the
    duration of the block; yields it (``.url`` is its base URL, ``.stats`` what it saw)."""
    import uvicorn

    app = ContinuousBatchingServer(params or ServerParams(), model)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    app.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", loop="asyncio",
                            http="h11", backlog=4096, timeout_keep_alive=60,
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        sock.close()
        raise RuntimeError("simulated continuous-batching server did not start within 30 s")
    try:
        yield app
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def saturation_line(params: ServerParams, prompt: float, max_tokens: float) -> str:
    """One line saying the server's capacity for a workload and which limit binds."""
    cap = params.capacity(prompt, max_tokens)
    return (f"capacity {cap.requests_per_s:.1f} requests/s = {cap.tokens_per_s:.0f} output tokens/s at saturation "
            f"({cap.seqs_per_step:.0f} sequences per step of {cap.step_s * 1000:.1f} ms, bound by {cap.bound}; "
            f"max_num_seqs {params.max_num_seqs}, max_num_batched_tokens {params.max_num_batched_tokens}, "
            f"step {params.step_base_s * 1000:g} ms + {params.step_per_seq_s * 1000:g} ms/seq, "
            f"prompt {prompt:.1f} tokens, max_tokens {max_tokens:g})")



def main(argv: list[str] | None = None) -> None:
    """``python -m tasks.models.simulated_server [--port P] [--max-num-seqs ...]``: serve until interrupted;
    prints its base URL on the first line (``GET /stats`` says what it saw, ``DELETE /stats`` resets it)."""
    import argparse

    parser = argparse.ArgumentParser(description="simulated continuous-batching OpenAI-compatible server")
    defaults = ServerParams()
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    parser.add_argument("--step-base-ms", type=float, default=defaults.step_base_s * 1000)
    parser.add_argument("--step-per-seq-ms", type=float, default=defaults.step_per_seq_s * 1000)
    parser.add_argument("--catch-up-s", type=float, default=defaults.catch_up_s)
    parser.add_argument("--model", default="simulated")
    args = parser.parse_args(argv)
    params = ServerParams(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                          max_model_len=args.max_model_len, step_base_s=args.step_base_ms / 1000,
                          step_per_seq_s=args.step_per_seq_ms / 1000, catch_up_s=args.catch_up_s)
    with continuous_batching_server(params, args.model) as server:
        print(server.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
