"""LLM backends for the generation strategies and the LLM profiling attack.

One interface, :class:`LLMBackend`: ``complete(requests) -> results``, one :class:`ChatResult` per
:class:`ChatRequest`, in order. A request that fails becomes a result with ``error`` set (one line); it
never raises, so one bad prompt does not sink a batch of thousands.

- :class:`OpenAICompatibleClient` talks to any OpenAI-compatible server (vLLM on the GPU workers,
  ``tasks.models.openai_server`` on CPU) with httpx: enough requests in flight to fill a vLLM server
  (sized from its ``max_num_seqs``), results handed back as they complete (:meth:`LLMBackend.stream`),
  per-request timeout, bounded retries with exponential backoff on connection errors, timeouts, 429 and 5xx.
- :class:`TransformersBackend` runs the model in process (CPU default: SmolLM2-135M-Instruct).
- :class:`RequestCache` (SQLite, WAL) stores the texts of successful requests keyed by (model, sampling
  params, messages); both backends use it, so a rerun does not pay for the same prompt twice.
- :func:`llm_backend_for` picks the client when an endpoint is configured for a role, else in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.errors import ConfigError, ModelUnavailable
from tasks.models.embeddings import inference_batches
from tasks.models.registry import ModelSpec, model_id, production_models, resolve_model
from tasks.settings import LLM_CACHE_ENV, run_llm_cache

ENDPOINT_ENV = "SYNTHUGC_LLM_ENDPOINT_{role}"  # e.g. SYNTHUGC_LLM_ENDPOINT_PROFILING_LLM=http://gpu1:8000/v1
MODEL_ENV = "SYNTHUGC_LLM_MODEL_{role}"  # the served model name; default: the role's production model
API_KEY_ENV = "SYNTHUGC_LLM_API_KEY"
CACHE_ENV = LLM_CACHE_ENV  # path of the SQLite request cache
MAX_NUM_SEQS_ENV = "SYNTHUGC_LLM_MAX_NUM_SEQS"  # the served engine's --max-num-seqs: sizes the requests in flight


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion: OpenAI-style messages and sampling parameters (temperature 0 = greedy)."""

    messages: list[dict[str, str]]
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    n: int = 1
    seed: int | None = None
    stop: list[str] | None = None

    def sampling(self) -> dict[str, Any]:
        """The sampling parameters, as a JSON-ready dict (part of the cache key)."""
        return {"temperature": float(self.temperature), "top_p": float(self.top_p),
                "max_tokens": int(self.max_tokens), "n": int(self.n), "seed": self.seed,
                "stop": list(self.stop) if self.stop else None}


@dataclass
class ChatResult:
    """``texts`` (``n`` completions) on success; ``error`` (one line) on failure. ``attempts`` counts HTTP
    tries (0 for a cache hit or an in-process call)."""

    texts: list[str] | None
    error: str | None = None
    cached: bool = False
    latency_s: float = 0.0
    attempts: int = 0
    unreachable: bool = False  # the server could not be reached or kept failing (not a bad request)

    @property
    def ok(self) -> bool:
        return self.error is None and self.texts is not None


def raise_if_unreachable(results: Sequence[ChatResult]) -> None:
    """Raise ModelUnavailable when every request of a batch failed because the server was unreachable
    after bounded retries: the caller's stage then fails (and is retried later) instead of recording
    every row as failed and caching that as a result."""
    if results and all(r.unreachable for r in results):
        raise ModelUnavailable(f"LLM endpoint unreachable: {results[0].error}")


# ---------------------------------------------------------------- cache


def request_key(model: str, request: ChatRequest) -> str:
    """sha256 over the model id, the sampling parameters (n and seed included) and the messages."""
    payload = {"model": model, "sampling": request.sampling(),
               "messages": [{"role": m.get("role"), "content": m.get("content")} for m in request.messages]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class RequestCache:
    """SQLite (WAL) store of completed requests: key -> texts. Survives restarts; safe across threads (one
    connection behind a lock) and processes (SQLite locking, busy timeout)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, model TEXT NOT NULL, "
                           "texts TEXT NOT NULL, created REAL NOT NULL)")

    def get(self, key: str) -> list[str] | None:
        """The cached texts for ``key``, or None."""
        with self._lock:
            row = self._conn.execute("SELECT texts FROM completions WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, model: str, texts: list[str]) -> None:
        """Store (or replace) the texts for ``key``."""
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO completions (key, model, texts, created) VALUES (?, ?, ?, ?)",
                               (key, model, json.dumps(texts, ensure_ascii=False), time.time()))

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# ---------------------------------------------------------------- interface


class LLMBackend:
    """Base class: answers from the cache first, sends the rest to :meth:`_stream_uncached`, stores each success
    as it arrives. Subclasses set ``model`` (the id in cache keys) and implement ``_complete_uncached`` (all at
    once) or ``_stream_uncached`` (as they complete)."""

    model: str = ""
    cache: RequestCache | None = None

    def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """One result per request, in order; failures are results with ``error`` set."""
        results: list[ChatResult | None] = [None] * len(requests)
        for i, result in self.stream(requests):
            results[i] = result
        return [r for r in results if r is not None]

    def stream(self, requests: Sequence[ChatRequest]) -> Iterator[tuple[int, ChatResult]]:
        """``(index, result)`` for every request, as each completes (cache hits first): the caller can use a
        result, and the cache holds it, before the slowest request of the batch has answered."""
        keys = [request_key(self.model, r) for r in requests]
        pending: list[int] = []
        for i, key in enumerate(keys):
            texts = self.cache.get(key) if self.cache is not None else None
            if texts is not None:
                yield i, ChatResult(texts=texts, cached=True)
            else:
                pending.append(i)
        if pending:
            for j, result in self._stream_uncached([requests[i] for i in pending]):
                i = pending[j]
                if self.cache is not None and result.ok:
                    self.cache.put(keys[i], self.model, list(result.texts or []))
                yield i, result

    def _stream_uncached(self, requests: Sequence[ChatRequest]) -> Iterator[tuple[int, ChatResult]]:
        yield from enumerate(self._complete_uncached(requests))

    def _complete_uncached(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        raise NotImplementedError


# ---------------------------------------------------------------- OpenAI-compatible HTTP client


class _Retryable(Exception):
    """A failure worth another attempt (connection error, timeout, 429, 5xx)."""


class _Fatal(Exception):
    """A failure another attempt would repeat (4xx, malformed response)."""


def normalise_base_url(base_url: str) -> str:
    """``http://host:8000`` and ``http://host:8000/v1/`` both become ``http://host:8000/v1``."""
    url = base_url.strip().rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs: the sequences its scheduler runs in one step
IN_FLIGHT_HEADROOM = 1.25  # requests in flight per server sequence slot (2.0 measured slower: more connections)


def in_flight_for(max_num_seqs: int) -> int:
    """Requests to keep in flight against a server that runs ``max_num_seqs`` sequences per step: a few more
    than its slots, so a slot freed at the end of a step finds a request already waiting (no round trip lost)."""
    return max(1, math.ceil(max(1, max_num_seqs) * IN_FLIGHT_HEADROOM))


def _parse_choices(response: Any, n: int) -> list[str]:
    """The ``n`` message texts of a chat completion response, by choice index; raises _Retryable on 429 and
    5xx, _Fatal on another 4xx or a malformed body."""
    status = response.status_code
    if status == 429 or status >= 500:
        raise _Retryable(f"HTTP {status}: {_first_line(response.text)}")
    if status >= 400:
        raise _Fatal(f"HTTP {status}: {_first_line(response.text)}")
    try:
        data = response.json()
    except ValueError as exc:
        raise _Fatal(f"malformed response: not JSON ({_first_line(response.text)})") from exc
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        raise _Fatal("malformed response: no 'choices' list")
    if len(choices) != n:
        raise _Fatal(f"malformed response: expected {n} choice(s), got {len(choices)}")
    texts: list[str] = []
    for i, choice in enumerate(sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)):
        content = choice.get("message", {}).get("content") if isinstance(choice, dict) else None
        if not isinstance(content, str):
            raise _Fatal(f"malformed response: choice {i} has no message.content string")
        texts.append(content)
    return texts


def _stream_from_helper_loop(send: Callable[[queue.Queue[tuple[int, ChatResult] | BaseException]],
                                            Coroutine[Any, Any, None]],
                             count: int) -> Iterator[tuple[int, ChatResult]]:
    """Run ``send(done)`` on a new event loop in a helper thread and yield the ``count`` ``(index, result)``
    items it puts on ``done``, as they arrive (the client's bridge from its asyncio workers to a plain
    iterator). An exception escaping the loop (a bug, not a failed request) is raised here; closing the
    generator early cancels what is still in flight."""
    done: queue.Queue[tuple[int, ChatResult] | BaseException] = queue.Queue()
    loop = asyncio.new_event_loop()
    sending = loop.create_task(send(done)) if count else None

    def run() -> None:
        try:
            if sending is not None:
                loop.run_until_complete(sending)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # a bug, not a failed request: surfaces in the caller's thread
            done.put(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="llm-client", daemon=True)
    thread.start()
    try:
        for _ in range(count):
            item = done.get()
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        if sending is not None and not sending.done():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(sending.cancel)
        thread.join()


@dataclass
class OpenAICompatibleClient(LLMBackend):
    """Client of ``/v1/chat/completions`` (vLLM, ``tasks.models.openai_server``, ``transformers serve``).

    ``complete`` / ``stream`` keep up to ``concurrency`` requests in flight (default: sized from the server's
    ``max_num_seqs``, :func:`in_flight_for`; vLLM's default 256 gives 320), on one asyncio event loop in a
    helper thread, and hand each result back as it completes. Each attempt has ``timeout_s``; retries (at
    most ``max_retries`` after the first try) wait ``backoff_s * 2**k`` (capped at 30 s)."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 120.0
    max_retries: int = 3
    backoff_s: float = 0.5
    concurrency: int | None = None
    cache: RequestCache | None = None
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    _http: Any = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        import httpx

        self.base_url = normalise_base_url(self.base_url)
        if self.concurrency is None:
            self.concurrency = in_flight_for(self.max_num_seqs)
        self._headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.Client(headers=self._headers, timeout=self.timeout_s)  # health and model list

    def health(self, timeout_s: float = 5.0) -> bool:
        """True when ``GET /v1/models`` answers 200 with a model list."""
        try:
            self.list_models(timeout_s=timeout_s)
        except Exception:
            return False
        return True

    def list_models(self, timeout_s: float = 5.0) -> list[str]:
        """The ids the server serves (``GET /v1/models``); raises on any failure."""
        response = self._http.get(f"{self.base_url}/models", timeout=timeout_s)
        response.raise_for_status()
        return [m["id"] for m in response.json()["data"]]

    def wait_until_healthy(self, deadline_s: float = 120.0, poll_s: float = 0.5) -> bool:
        """Poll :meth:`health` until it answers or ``deadline_s`` passes."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.health(timeout_s=min(5.0, poll_s * 4)):
                return True
            time.sleep(poll_s)
        return False

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body of one request."""
        body: dict[str, Any] = {"model": self.model, "messages": list(request.messages), **request.sampling()}
        for key in ("seed", "stop"):
            if body[key] is None:
                del body[key]
        return body

    def _stream_uncached(self, requests: Sequence[ChatRequest]) -> Iterator[tuple[int, ChatResult]]:
        """Send ``requests`` from an event loop in a helper thread; yield ``(index, result)`` as they complete.
        Closing the generator early cancels what is still in flight."""
        yield from _stream_from_helper_loop(lambda done: self._send_all(requests, done), len(requests))

    async def _send_all(self, requests: Sequence[ChatRequest],
                        done: queue.Queue[tuple[int, ChatResult] | BaseException]) -> None:
        """``concurrency`` workers, each with its own one-connection httpx client (httpcore's pool scans every
        connection for every request: one pool of 320 cost ~30 ms of CPU per request, measured)."""
        import httpx

        width = max(1, min(int(self.concurrency or 1), len(requests)))
        one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        tls = httpx.create_ssl_context()  # built once, shared by the workers' clients
        todo = iter(range(len(requests)))

        async def worker() -> None:
            async with httpx.AsyncClient(headers=self._headers, timeout=self.timeout_s, limits=one, verify=tls) as http:
                for i in todo:  # one iterator shared by the workers (one thread: no race)
                    done.put((i, await self._one(http, requests[i])))

        await asyncio.gather(*(worker() for _ in range(width)))

    async def _one(self, http: Any, request: ChatRequest) -> ChatResult:
        import httpx

        url = f"{self.base_url}/chat/completions"
        start = time.perf_counter()
        body = self.payload(request)
        reason = "no attempt made"
        attempts = 0
        retryable = False
        for attempt in range(self.max_retries + 1):
            attempts = attempt + 1
            try:
                try:
                    response = await http.post(url, json=body)
                except httpx.TimeoutException as exc:
                    raise _Retryable(f"timeout after {self.timeout_s:g}s ({type(exc).__name__})") from exc
                except httpx.TransportError as exc:
                    raise _Retryable(f"connection error ({type(exc).__name__}: {_first_line(exc)})") from exc
                texts = _parse_choices(response, request.n)
                return ChatResult(texts=texts, latency_s=time.perf_counter() - start, attempts=attempts)
            except _Retryable as exc:
                reason, retryable = str(exc), True
            except _Fatal as exc:
                reason, retryable = str(exc), False
                break
            if attempt < self.max_retries:
                await asyncio.sleep(min(30.0, self.backoff_s * 2**attempt))
        return ChatResult(texts=None, error=f"{url}: {reason} after {attempts} attempt(s)",
                          latency_s=time.perf_counter() - start, attempts=attempts, unreachable=retryable)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAICompatibleClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_line(value: object, limit: int = 160) -> str:
    text = str(value).strip()
    return (text.splitlines() or [""])[0][:limit]


# ---------------------------------------------------------------- in-process transformers backend

#: Padded prompt characters one in-process batch may hold (~4k tokens): a long prompt is generated in a batch
#: of its own size instead of padding every short one up to it (attention cost grows with the padded length).
BATCH_PADDED_CHARS = 16_000
#: Rows one in-process batch may hold by default. On 2 CPU cores texts/s stops growing near 32 rows (SmolLM2,
#: paraphrase prompts, max_tokens 64: 1.91 texts/s at 32 rows, 1.93 at 64; benchmarks/llm_inprocess.py).
BATCH_ROWS = 32


class TransformersBackend(LLMBackend):
    """In-process generation with transformers (CPU by default).

    Requests that share sampling parameters (their seeds may differ) are generated together, up to
    ``batch_size`` at a time: prompts sorted by length (less padding), left padding, one KV-cached decode
    loop (:func:`decode_batch`) in inference mode; rows that end (EOS or a stop string) leave the batch.
    Each row samples from its own ``torch.Generator`` seeded with its request's seed, so a request's texts do
    not depend on which requests share its batch (nor does a greedy one), and ``seed_mode="per_text"``
    requests batch too. Batching used to need equal seeds: per-text seeds ran one request at a time."""

    def __init__(self, spec: ModelSpec, *, cache: RequestCache | None = None, batch_size: int = BATCH_ROWS,
                 num_threads: int | None = None) -> None:
        self.spec = spec
        self.model = model_id(spec)
        self.cache = cache
        self.batch_size = max(1, batch_size)
        self.num_threads = num_threads  # torch intra-op threads (process-wide); 1 is far faster on a busy box

    def load(self) -> None:
        """Load the model now (otherwise on the first request)."""
        # deferred: looked up at call time, so a replaced loader is the one used
        from tasks.models.loaders import load_causal_lm

        load_causal_lm(self.spec)

    def _complete_uncached(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        results: list[ChatResult | None] = [None] * len(requests)
        for chunk in self.batches(requests):
            t0 = time.perf_counter()
            try:
                outputs = self.generate([requests[i] for i in chunk])
            except Exception as exc:  # one bad batch fails its requests, not the call
                error = f"{self.model}: generation failed ({type(exc).__name__}: {_first_line(exc)})"
                for i in chunk:
                    results[i] = ChatResult(texts=None, error=error)
                continue
            per_request = (time.perf_counter() - t0) / len(chunk)
            for i, texts in zip(chunk, outputs, strict=True):
                results[i] = ChatResult(texts=texts, latency_s=per_request)
        return [r for r in results if r is not None]

    def batches(self, requests: Sequence[ChatRequest]) -> list[list[int]]:
        """Indices of ``requests`` in generation batches: grouped by sampling parameters other than the seed,
        longest prompt first within a group (neighbours pad little), at most ``batch_size`` rows and
        :data:`BATCH_PADDED_CHARS` padded prompt characters each (:func:`tasks.models.embeddings.inference_batches`)."""
        groups: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            params = {k: v for k, v in request.sampling().items() if k != "seed"}
            groups.setdefault(json.dumps(params, sort_keys=True), []).append(i)

        def length(i: int) -> int:
            return sum(len(str(m.get("content") or "")) for m in requests[i].messages)

        out: list[list[int]] = []
        for indices in groups.values():
            rows = max(1, requests[indices[0]].n)  # rows = requests x n
            padded = [rows * length(i) for i in indices]  # a request's share of a batch's padded characters
            out.extend([indices[j] for j in batch]
                       for batch in inference_batches(padded, BATCH_PADDED_CHARS, max(1, self.batch_size // rows)))
        return out

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[str]]:
        """Generate one batch of requests that share sampling parameters (seeds may differ); ``n`` texts per
        request, in request order."""
        import torch

        # deferred: looked up at call time, so a replaced loader is the one used
        from tasks.models.loaders import load_causal_lm

        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        tokenizer, model = load_causal_lm(self.spec)
        params = requests[0]
        rows = [(i, k) for i in range(len(requests)) for k in range(params.n)]
        prompts = [tokenizer.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True)
                   for r in requests]
        ids = tokenizer([prompts[i] for i, _ in rows], add_special_tokens=False)["input_ids"]
        prefix, input_ids, attention_mask = split_shared_prefix(ids, pad_id=tokenizer.pad_token_id or 0)
        generators = None
        if params.temperature > 0:
            generators = [_row_generator(requests[i].seed, k) for i, k in rows]
        stop = list(params.stop) if params.stop else None
        with torch.inference_mode():
            new = decode_batch(model, input_ids.to(model.device), attention_mask.to(model.device),
                               prefix_ids=prefix.to(model.device), max_new_tokens=params.max_tokens,
                               eos_ids=_eos_ids(tokenizer, model),
                               temperature=params.temperature, top_p=params.top_p, generators=generators,
                               stop_seen=(lambda ids: any(s in tokenizer.decode(ids, skip_special_tokens=True)
                                                          for s in stop)) if stop else None)
        decoded = [_cut_at_stop(tokenizer.decode(ids, skip_special_tokens=True), stop) for ids in new]
        return [decoded[i * params.n:(i + 1) * params.n] for i in range(len(requests))]


def _row_generator(seed: int | None, copy: int) -> Any:
    """The RNG of one generated row: the request's seed (copy k of n>1 gets its own stream); unseeded
    requests draw a fresh random seed."""
    import torch

    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed((int(seed) * 1_000_003 + copy) % (2**63 - 1) if copy else int(seed))
    return generator


def _eos_ids(tokenizer: Any, model: Any) -> list[int]:
    """Token ids that end an answer: the generation config's EOS id(s) and the tokenizer's."""
    found = model.generation_config.eos_token_id
    ids = list(found) if isinstance(found, list | tuple) else ([found] if found is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return sorted({int(i) for i in ids})


def sample_next(logits: Any, *, temperature: float, top_p: float, generators: Sequence[Any] | None) -> Any:
    """Next token per row: argmax when ``generators`` is None (greedy), else a draw per row with its own
    generator from the temperature-scaled distribution cut to the top-p nucleus (the distribution of
    :func:`nucleus_scores`, drawn by inverse CDF over the nucleus alone: one uniform per row)."""
    import torch

    if generators is None:
        return logits.argmax(dim=-1)
    probs, tokens = nucleus_probs(logits, temperature=temperature, top_p=top_p)
    cdf = probs.cumsum(dim=-1)
    u = torch.cat([torch.rand(1, generator=g, dtype=cdf.dtype) for g in generators]) * cdf[:, -1]
    pos = torch.searchsorted(cdf, u[:, None]).clamp(max=cdf.shape[-1] - 1)
    return tokens.gather(1, pos).squeeze(1)


def nucleus_probs(logits: Any, *, temperature: float, top_p: float) -> tuple[Any, Any]:
    """(probabilities, token ids) of each row's most likely tokens in descending order, 0 past the top-p
    nucleus: a token stays while the mass of the tokens above it is below ``top_p`` (the rule of
    :func:`nucleus_scores`). Only as many tokens as the widest nucleus needs are sorted (a top-k, widened
    until it holds every row's nucleus), not the whole vocabulary."""
    probs = (logits / temperature).softmax(dim=-1)
    vocab = probs.shape[-1]
    k = min(vocab, 256) if top_p < 1.0 else vocab
    while True:
        top, tokens = probs.topk(k, dim=-1) if k < vocab else probs.sort(dim=-1, descending=True)
        if k == vocab or bool((top.sum(dim=-1) >= top_p).all()):
            break
        k = min(vocab, k * 8)
    if top_p < 1.0:
        top = top.masked_fill(top.cumsum(dim=-1) - top >= top_p, 0.0)
    return top, tokens


def nucleus_scores(logits: Any, *, temperature: float, top_p: float) -> Any:
    """``logits / temperature`` with the tokens outside the top-p nucleus set to -inf."""
    import torch

    scores = logits / temperature
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False, dim=-1)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1 - top_p)
        remove_sorted[..., -1:] = False  # keep at least the most likely token
        scores = scores.masked_fill(remove_sorted.scatter(1, order, remove_sorted), float("-inf"))
    return scores


def split_shared_prefix(ids: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any, Any]:
    """(prefix, suffixes, mask) of token id lists: the leading tokens all rows share (the chat template and the
    instruction; at least one token of each row is left out of it) as a 1 x P tensor, the rest of each row
    left-padded to B x S, and the B x (P + S) attention mask of prefix + suffix (pads in the middle)."""
    import torch

    shortest = min(len(row) for row in ids)
    shared = 0
    while shared < shortest - 1 and all(row[shared] == ids[0][shared] for row in ids):
        shared += 1
    tails = [list(row[shared:]) for row in ids]
    width = max(len(t) for t in tails)
    suffixes = torch.tensor([[pad_id] * (width - len(t)) + t for t in tails], dtype=torch.long)
    mask = torch.tensor([[1] * shared + [0] * (width - len(t)) + [1] * len(t) for t in tails], dtype=torch.long)
    return torch.tensor([list(ids[0][:shared])], dtype=torch.long), suffixes, mask


def decode_batch(model: Any, input_ids: Any, attention_mask: Any, *, max_new_tokens: int, eos_ids: Sequence[int],
                 prefix_ids: Any = None, temperature: float = 0.0, top_p: float = 1.0,
                 generators: Sequence[Any] | None = None, stop_seen: Any = None) -> list[list[int]]:
    """The new token ids of each row of a left-padded batch: prefill once, then one token per step with the
    KV cache. ``prefix_ids`` (1 x P, the tokens every row starts with; ``attention_mask`` then covers prefix
    and rows) is prefilled once for all rows. A row ends at an EOS id (not returned), when ``stop_seen(ids)``
    says its text holds a stop string, or at ``max_new_tokens``; ended rows leave the batch (their cache rows
    are dropped), so the last long answer does not drag finished ones through every step. Greedy unless
    ``generators`` (one ``torch.Generator`` per row) is given. Only the last position's logits are computed."""
    import torch

    n_rows = input_ids.shape[0]
    new: list[list[int]] = [[] for _ in range(n_rows)]
    active = list(range(n_rows))  # original row of each batch row
    gens = list(generators) if generators is not None else None
    eos = torch.tensor(list(eos_ids), dtype=torch.long)
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    shared = 0 if prefix_ids is None else prefix_ids.shape[1]
    cache = None
    if shared:
        cache = model(input_ids=prefix_ids, position_ids=positions[:1, :shared], use_cache=True,
                      logits_to_keep=1).past_key_values
        cache.batch_repeat_interleave(n_rows)
    step_ids, step_positions, mask = input_ids, positions[:, shared:], attention_mask
    for _ in range(max_new_tokens):
        out = model(input_ids=step_ids, attention_mask=mask, position_ids=step_positions, past_key_values=cache,
                    use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        tokens = sample_next(out.logits[:, -1, :].float(), temperature=temperature, top_p=top_p, generators=gens)
        ended = torch.isin(tokens, eos).tolist()
        for b, token in enumerate(tokens.tolist()):
            if not ended[b]:
                new[active[b]].append(token)
                if stop_seen is not None and stop_seen(new[active[b]]):
                    ended[b] = True
        keep = [b for b in range(len(active)) if not ended[b]]
        if not keep:
            break
        step_positions = step_positions[:, -1:] + 1
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        step_ids = tokens[:, None]
        if len(keep) < len(active):
            index = torch.tensor(keep, dtype=torch.long)
            cache.batch_select_indices(index)
            step_ids, step_positions, mask = step_ids[index], step_positions[index], mask[index]
            active = [active[b] for b in keep]
            gens = [gens[b] for b in keep] if gens is not None else None
    return new


def _cut_at_stop(text: str, stop: Sequence[str] | None) -> str:
    """OpenAI semantics: the text ends before the first stop string (which is not included)."""
    if stop:
        cuts = [text.find(s) for s in stop if s and s in text]
        if cuts:
            text = text[:min(cuts)]
    return text


# ---------------------------------------------------------------- factory


def llm_role_settings(role: str, configured_model: str | None = None,
                      env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a run's ``role`` (``llm`` or ``profiling_llm``) resolves to: the endpoint from
    ``SYNTHUGC_LLM_ENDPOINT_<ROLE>`` and the model from the config's ``models.<role>``, else
    ``SYNTHUGC_LLM_MODEL_<ROLE>`` (served models only), else the role's default. Read once when a run is planned
    and passed to the stages, so the endpoint and the model are part of their cache keys."""
    env = os.environ if env is None else env
    suffix = role.upper()
    endpoint = env.get(ENDPOINT_ENV.format(role=suffix))
    if endpoint:
        model = configured_model or env.get(MODEL_ENV.format(role=suffix)) or production_models()[role]
        return {"endpoint": str(endpoint), "model": str(model)}
    return {"model": configured_model} if configured_model else {}


def llm_backend_for(role: str, settings: Mapping[str, Any] | None = None,
                    env: Mapping[str, str] | None = None) -> LLMBackend:
    """The backend for ``role`` (``llm`` or ``profiling_llm``).

    With an endpoint (``settings['endpoint']`` or ``SYNTHUGC_LLM_ENDPOINT_<ROLE>``) it is an
    :class:`OpenAICompatibleClient` for ``settings['model']`` / ``SYNTHUGC_LLM_MODEL_<ROLE>`` (default: the
    role's production model, as vLLM serves it); otherwise a :class:`TransformersBackend` for
    ``settings['model']`` or the role's offline default. ``settings`` may also set api_key, timeout_s,
    max_retries, backoff_s, concurrency (requests in flight; default from max_num_seqs, the server's sequences per
    step: ``SYNTHUGC_LLM_MAX_NUM_SEQS``, else vLLM's default 256), batch_size, num_threads and cache_path (or
    ``SYNTHUGC_LLM_CACHE``)."""
    if role not in ("llm", "profiling_llm"):
        raise ConfigError(f"llm backend: role must be 'llm' or 'profiling_llm', not {role!r}")
    settings = dict(settings or {})
    env = os.environ if env is None else env
    suffix = role.upper()
    cache_path = settings.get("cache_path") or run_llm_cache(env)  # a stage's: the one its run's plan named
    cache = RequestCache(cache_path) if cache_path else None
    endpoint = settings.get("endpoint") or env.get(ENDPOINT_ENV.format(role=suffix))
    if endpoint:
        model = settings.get("model") or env.get(MODEL_ENV.format(role=suffix)) or production_models()[role]
        return OpenAICompatibleClient(
            str(endpoint), str(model), api_key=settings.get("api_key") or env.get(API_KEY_ENV),
            timeout_s=float(settings.get("timeout_s", 120.0)), max_retries=int(settings.get("max_retries", 3)),
            backoff_s=float(settings.get("backoff_s", 0.5)),
            concurrency=int(settings["concurrency"]) if settings.get("concurrency") else None, cache=cache,
            max_num_seqs=int(settings.get("max_num_seqs") or env.get(MAX_NUM_SEQS_ENV) or DEFAULT_MAX_NUM_SEQS),
        )
    spec = resolve_model(role, settings.get("model"))
    threads = settings.get("num_threads")
    return TransformersBackend(spec, cache=cache, batch_size=int(settings.get("batch_size", BATCH_ROWS)),
                               num_threads=int(threads) if threads else None)
