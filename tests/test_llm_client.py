"""OpenAI-compatible client and request cache against tiny local HTTP stubs (network behaviour only: retries,
timeouts, malformed answers, server down). Real generation is in test_llm_server.py."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tasks.errors import ConfigError, ModelUnavailable
from tasks.models.llm import (
    ChatRequest,
    OpenAICompatibleClient,
    RequestCache,
    TransformersBackend,
    llm_backend_for,
    normalise_base_url,
    raise_if_unreachable,
    request_key,
)

MESSAGES = [{"role": "user", "content": "Rewrite: I love my bike."}]


def ok_body(n: int, prefix: str = "text") -> dict:
    return {"choices": [{"index": i, "message": {"role": "assistant", "content": f"{prefix}-{i}"}} for i in range(n)]}


class Stub:
    """A local HTTP server whose /v1/chat/completions answer is ``behaviour(call_number, body)`` ->
    (status, body bytes, delay_s); counts the calls."""

    def __init__(self, behaviour: Callable[[int, dict], tuple[int, bytes, float]]) -> None:
        self.calls = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._send(200, json.dumps({"object": "list", "data": [{"id": "stub"}]}).encode())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.calls += 1
                status, payload, delay = behaviour(stub.calls, body)
                time.sleep(delay)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._send(status, payload)

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_factory() -> Iterator[Callable[..., Stub]]:
    stubs: list[Stub] = []

    def make(behaviour: Callable[[int, dict], tuple[int, bytes, float]]) -> Stub:
        stubs.append(Stub(behaviour))
        return stubs[-1]

    yield make
    for stub in stubs:
        stub.stop()


def echo_ok(call: int, body: dict) -> tuple[int, bytes, float]:
    return 200, json.dumps(ok_body(body.get("n", 1), body["messages"][-1]["content"])).encode(), 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------- key and cache


def test_request_key_covers_model_sampling_and_messages() -> None:
    base = ChatRequest(MESSAGES, temperature=0.7, seed=1)
    assert request_key("m", base) == request_key("m", ChatRequest(list(MESSAGES), temperature=0.7, seed=1))
    variants = [ChatRequest(MESSAGES, temperature=0.7, seed=2), ChatRequest(MESSAGES, temperature=0.7, seed=1, n=2),
                ChatRequest(MESSAGES, temperature=0.8, seed=1), ChatRequest(MESSAGES, temperature=0.7, seed=1, top_p=0.9),
                ChatRequest(MESSAGES, temperature=0.7, seed=1, max_tokens=10),
                ChatRequest(MESSAGES, temperature=0.7, seed=1, stop=["\n"]),
                ChatRequest([{"role": "user", "content": "other"}], temperature=0.7, seed=1)]
    keys = {request_key("m", v) for v in variants} | {request_key("m", base), request_key("other-model", base)}
    assert len(keys) == len(variants) + 2


def test_request_cache_persists(tmp_path) -> None:
    cache = RequestCache(tmp_path / "c.sqlite")
    cache.put("k", "m", ["a", "é"])
    cache.close()
    reopened = RequestCache(tmp_path / "c.sqlite")
    assert reopened.get("k") == ["a", "é"] and reopened.get("missing") is None and len(reopened) == 1
    assert reopened._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# ---------------------------------------------------------------- client behaviour


def test_normalise_base_url() -> None:
    assert normalise_base_url("http://h:8000") == normalise_base_url("http://h:8000/v1/") == "http://h:8000/v1"


def test_concurrent_requests_keep_order_and_n(stub_factory) -> None:
    stub = stub_factory(echo_ok)
    with OpenAICompatibleClient(stub.url, "stub", concurrency=4, max_retries=0) as client:
        assert client.health() and client.list_models() == ["stub"]
        requests = [ChatRequest([{"role": "user", "content": f"p{i}"}], n=1 + i % 3) for i in range(10)]
        results = client.complete(requests)
    assert [r.texts for r in results] == [[f"p{i}-{j}" for j in range(1 + i % 3)] for i in range(10)]
    assert all(r.ok and not r.cached and r.attempts == 1 for r in results)


def test_retry_on_503_then_success(stub_factory) -> None:
    stub = stub_factory(lambda call, body: (503, b"busy", 0.0) if call <= 2 else echo_ok(call, body))
    client = OpenAICompatibleClient(stub.url, "stub", max_retries=3, backoff_s=0.01)
    [result] = client.complete([ChatRequest(MESSAGES)])
    assert result.ok and result.attempts == 3 and stub.calls == 3


def test_retries_are_bounded(stub_factory) -> None:
    stub = stub_factory(lambda call, body: (429, b"slow down", 0.0))
    [result] = OpenAICompatibleClient(stub.url, "stub", max_retries=2, backoff_s=0.01).complete([ChatRequest(MESSAGES)])
    assert not result.ok and stub.calls == 3 and result.attempts == 3
    assert "HTTP 429" in (result.error or "") and stub.url in (result.error or "")


def test_4xx_is_not_retried(stub_factory) -> None:
    stub = stub_factory(lambda call, body: (400, b'{"error": "bad model"}', 0.0))
    [result] = OpenAICompatibleClient(stub.url, "stub", max_retries=3, backoff_s=0.01).complete([ChatRequest(MESSAGES)])
    assert stub.calls == 1 and "HTTP 400" in (result.error or "")
    assert not result.unreachable  # a bad request is the request's fault, not the server's
    raise_if_unreachable([result])  # so it does not fail the whole batch


@pytest.mark.parametrize(("payload", "reason"), [
    (b"<html>oops</html>", "not JSON"),
    (json.dumps({"id": "x"}).encode(), "no 'choices'"),
    (json.dumps(ok_body(1)).encode(), "expected 2 choice(s), got 1"),
    (json.dumps({"choices": [{"index": 0, "message": {}}, {"index": 1, "message": {}}]}).encode(), "message.content"),
])
def test_malformed_response_is_a_failed_result(stub_factory, payload: bytes, reason: str) -> None:
    stub = stub_factory(lambda call, body: (200, payload, 0.0))
    [result] = OpenAICompatibleClient(stub.url, "stub", max_retries=2).complete([ChatRequest(MESSAGES, n=2)])
    assert result.texts is None and reason in (result.error or "") and "\n" not in (result.error or "")
    assert stub.calls == 1  # a malformed answer is not retried


def test_timeout(stub_factory) -> None:
    stub = stub_factory(lambda call, body: (*echo_ok(call, body)[:2], 2.0))
    client = OpenAICompatibleClient(stub.url, "stub", timeout_s=0.2, max_retries=1, backoff_s=0.01)
    started = time.perf_counter()
    [result] = client.complete([ChatRequest(MESSAGES)])
    assert not result.ok and "timeout" in (result.error or "") and result.attempts == 2
    assert time.perf_counter() - started < 1.5


def test_server_down_fails_every_request_quickly_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = OpenAICompatibleClient(url, "m", max_retries=2, backoff_s=0.01, timeout_s=2)
    assert not client.health()
    started = time.perf_counter()
    results = client.complete([ChatRequest(MESSAGES, seed=i) for i in range(5)])
    assert time.perf_counter() - started < 3
    assert all(r.texts is None and r.attempts == 3 for r in results)
    assert all(f"{url}/chat/completions: connection error" in (r.error or "") for r in results)
    assert all("\n" not in (r.error or "") for r in results)
    assert all(r.unreachable for r in results)
    with pytest.raises(ModelUnavailable, match=r"LLM endpoint unreachable: .*connection error"):
        raise_if_unreachable(results)


def test_cache_hit_without_server(stub_factory, tmp_path) -> None:
    stub = stub_factory(echo_ok)
    requests = [ChatRequest([{"role": "user", "content": f"p{i}"}], n=2, seed=7) for i in range(3)]
    first = OpenAICompatibleClient(stub.url, "stub", cache=RequestCache(tmp_path / "llm.sqlite")).complete(requests)
    assert stub.calls == 3 and not any(r.cached for r in first)
    stub.stop()
    again = OpenAICompatibleClient(stub.url, "stub", max_retries=0,
                                   cache=RequestCache(tmp_path / "llm.sqlite")).complete(requests)
    assert all(r.cached for r in again) and [r.texts for r in again] == [r.texts for r in first]
    other_seed = OpenAICompatibleClient(stub.url, "stub", max_retries=0, cache=RequestCache(tmp_path / "llm.sqlite"))
    assert not other_seed.complete([ChatRequest(requests[0].messages, n=2, seed=8)])[0].ok  # not a hit


def test_failures_are_not_cached(stub_factory, tmp_path) -> None:
    stub = stub_factory(lambda call, body: (500, b"boom", 0.0) if call == 1 else echo_ok(call, body))
    cache = RequestCache(tmp_path / "llm.sqlite")
    client = OpenAICompatibleClient(stub.url, "stub", max_retries=0, cache=cache)
    assert not client.complete([ChatRequest(MESSAGES)])[0].ok and len(cache) == 0
    assert client.complete([ChatRequest(MESSAGES)])[0].ok and len(cache) == 1


# ---------------------------------------------------------------- factory


def test_backend_factory_picks_client_when_endpoint_configured(tmp_path) -> None:
    env = {"SYNTHUGC_LLM_ENDPOINT_PROFILING_LLM": "http://gpu1:8000", "SYNTHUGC_LLM_CACHE": str(tmp_path / "c.db")}
    backend = llm_backend_for("profiling_llm", env=env)
    assert isinstance(backend, OpenAICompatibleClient)
    assert backend.base_url == "http://gpu1:8000/v1" and backend.model == "mistralai/Mixtral-8x7B-Instruct-v0.1"
    assert backend.cache is not None
    named = llm_backend_for("llm", {"endpoint": "http://x:1/v1", "model": "served", "max_retries": 0}, env={})
    assert isinstance(named, OpenAICompatibleClient) and named.model == "served" and named.max_retries == 0


def test_backend_factory_falls_back_to_in_process(tmp_path) -> None:
    backend = llm_backend_for("llm", env={})  # resolves the offline default; loads nothing yet
    assert isinstance(backend, TransformersBackend) and backend.spec.name == "smollm2" and backend.cache is None
    with pytest.raises(ConfigError):
        llm_backend_for("paraphraser", env={})
