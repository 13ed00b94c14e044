"""The LLM client against the simulated continuous-batching server, over real HTTP on 127.0.0.1: it keeps the
server's sequence slots full, hands results back as they complete, keeps request order in ``complete``,
records a refused request with its reason and sends nothing for a cache hit. No timed assertions: what the
server saw (sequences running at once, requests received) is counted by the server itself."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from tasks.generate.base import generate_synthetic
from tasks.generate.llm import LLMParams, LLMStrategy
from tasks.models.llm import (
    DEFAULT_MAX_NUM_SEQS,
    MAX_NUM_SEQS_ENV,
    ChatRequest,
    OpenAICompatibleClient,
    RequestCache,
    in_flight_for,
    llm_backend_for,
    request_key,
)
from tasks.models.simulated_server import (
    ServerParams,
    ServerStats,
    answer_text,
    continuous_batching_server,
    fixed_delay_server,
)

FAST = ServerParams(max_num_seqs=16, max_num_batched_tokens=512, max_model_len=512, step_base_s=0.002,
                    step_per_seq_s=0.00005)


def chat(i: int, max_tokens: int = 40) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": f"sentence number {i} about bikes"}],
                       temperature=0.0, max_tokens=max_tokens)


@pytest.fixture(scope="module")
def server():
    with continuous_batching_server(FAST) as srv:
        yield srv


@pytest.fixture
def fresh(server):
    server.stats = ServerStats()
    return server


def test_capacity_follows_from_the_limits() -> None:
    p = ServerParams(max_num_seqs=4, max_num_batched_tokens=100, step_base_s=0.01, step_per_seq_s=0.001)
    by_slots = p.capacity(prompt_tokens=10, max_tokens=4)  # 4 slots / 4 steps = 1 start per step; 13 tokens each
    assert by_slots.bound == "max_num_seqs" and by_slots.seqs_per_step == pytest.approx(4)
    assert by_slots.requests_per_s == pytest.approx(1 / 0.014) and by_slots.tokens_per_s == pytest.approx(4 / 0.014)
    by_budget = p.capacity(prompt_tokens=147, max_tokens=4)  # 150 tokens each: 2/3 start per step from the budget
    smaller = p.capacity(prompt_tokens=297, max_tokens=4)  # 300 tokens each: 1/3 start per step
    assert by_budget.bound == "max_num_batched_tokens" and smaller.bound == "max_num_batched_tokens"
    assert smaller.seqs_per_step == pytest.approx(by_budget.seqs_per_step / 2)


def test_default_client_fills_every_sequence_slot(fresh) -> None:
    requests = [chat(i, max_tokens=100) for i in range(48)]
    with OpenAICompatibleClient(fresh.url, "simulated", max_retries=0, max_num_seqs=FAST.max_num_seqs) as client:
        assert client.concurrency == in_flight_for(FAST.max_num_seqs) > FAST.max_num_seqs
        results = client.complete(requests)
    assert all(r.ok for r in results)
    assert [r.texts for r in results] == [[answer_text({"messages": q.messages})] for q in requests]  # request order
    assert fresh.stats.peak_running == FAST.max_num_seqs  # every slot busy at once, never more
    assert fresh.stats.peak_in_flight > FAST.max_num_seqs  # and requests waiting for the next free slot
    assert fresh.stats.requests_answered == 48 and fresh.stats.tokens_generated == 48 * 100


def test_old_fixed_concurrency_leaves_slots_empty(fresh) -> None:
    with OpenAICompatibleClient(fresh.url, "simulated", max_retries=0, concurrency=8) as client:
        results = client.complete([chat(i, max_tokens=5) for i in range(24)])
    assert all(r.ok for r in results)
    assert 1 <= fresh.stats.peak_running <= 8 < FAST.max_num_seqs


def test_stream_hands_back_short_answers_before_a_long_one_and_caches_each(fresh, tmp_path) -> None:
    cache = RequestCache(tmp_path / "cache.sqlite")
    requests = [chat(0, max_tokens=400)] + [chat(i, max_tokens=2) for i in range(1, 9)]
    with OpenAICompatibleClient(fresh.url, "simulated", max_retries=0, cache=cache) as client:
        order = []
        for i, result in client.stream(requests):
            assert result.ok
            assert cache.get(request_key("simulated", requests[i])) == result.texts  # cached on arrival
            if not order:
                assert cache.get(request_key("simulated", requests[0])) is None  # the long one still running
            order.append(i)
    assert sorted(order) == list(range(9)) and order[-1] == 0 and order[0] != 0


def test_refused_request_is_a_failed_result_with_the_server_reason(fresh) -> None:
    too_long = chat(1, max_tokens=FAST.max_model_len)  # prompt + max_tokens > max_model_len: vLLM answers 400
    with OpenAICompatibleClient(fresh.url, "simulated", max_retries=3, backoff_s=0.01) as client:
        results = client.complete([chat(0, 3), too_long, chat(2, 3)])
    assert results[0].ok and results[2].ok
    bad = results[1]
    assert not bad.ok and bad.texts is None and not bad.unreachable
    assert "HTTP 400" in bad.error and "maximum context length is 512" in bad.error and bad.attempts == 1
    assert fresh.stats.requests_refused == 1


def test_cache_hit_sends_no_request(fresh, tmp_path) -> None:
    cache = RequestCache(tmp_path / "cache.sqlite")
    requests = [chat(i, 3) for i in range(5)]
    with OpenAICompatibleClient(fresh.url, "simulated", max_retries=0, cache=cache) as client:
        first = client.complete(requests)
        sent = fresh.stats.requests_received
        again = client.complete([*requests, chat(99, 3)])
    assert sent == 5 and fresh.stats.requests_received == 6  # only the new request went out
    assert [r.texts for r in again[:5]] == [r.texts for r in first] and all(r.cached for r in again[:5])
    assert not again[5].cached and again[5].ok


def test_llm_strategy_output_is_the_same_as_through_the_old_client(server) -> None:
    """Same rows in the same order whether the answers come back in completion order (continuous batching,
    320 in flight) or from a fixed-delay server at concurrency 8."""
    batch = pd.DataFrame({"doc_id": [f"d{i}" for i in range(12)],
                          "text": [f"Text {i}: the council met on Tuesday about the bridge." for i in range(12)]})
    params = LLMParams(max_tokens=30, seed_mode="per_text")
    with OpenAICompatibleClient(server.url, "served", max_retries=0) as client:
        streamed = generate_synthetic(LLMStrategy(params, backend=client), batch, seed=3)
    with fixed_delay_server(0.0) as url, OpenAICompatibleClient(url, "served", max_retries=0, concurrency=8) as old:
        reference = generate_synthetic(LLMStrategy(params, backend=old), batch, seed=3)
    assert (streamed["status"] == "ok").all()
    pd.testing.assert_frame_equal(streamed, reference)


def test_factory_sizes_in_flight_from_max_num_seqs() -> None:
    default = llm_backend_for("llm", {"endpoint": "http://x:1/v1", "model": "m"}, env={})
    assert isinstance(default, OpenAICompatibleClient)
    assert default.concurrency == in_flight_for(DEFAULT_MAX_NUM_SEQS) >= DEFAULT_MAX_NUM_SEQS == 256
    sized = llm_backend_for("llm", {"endpoint": "http://x:1/v1", "model": "m", "max_num_seqs": 64}, env={})
    fixed = llm_backend_for("llm", {"endpoint": "http://x:1/v1", "model": "m", "concurrency": 8}, env={})
    assert isinstance(sized, OpenAICompatibleClient) and isinstance(fixed, OpenAICompatibleClient)
    assert sized.concurrency == in_flight_for(64) and 64 <= sized.concurrency < default.concurrency
    assert fixed.concurrency == 8
    from_env = llm_backend_for("llm", {"endpoint": "http://x:1/v1", "model": "m"}, env={MAX_NUM_SEQS_ENV: "128"})
    assert isinstance(from_env, OpenAICompatibleClient) and from_env.concurrency == in_flight_for(128)


def test_closing_the_stream_early_does_not_wait_for_the_rest() -> None:
    with continuous_batching_server(ServerParams(max_num_seqs=4, step_base_s=0.002)) as srv:
        requests = [chat(0, max_tokens=2)] + [chat(i, max_tokens=2000) for i in range(1, 4)]
        with OpenAICompatibleClient(srv.url, "simulated", max_retries=0) as client:
            for i, result in client.stream(requests):
                assert i == 0 and result.ok
                break
            assert srv.stats.requests_received == 4 and srv.stats.requests_answered == 1  # 3 still decoding
            assert client.complete([chat(5, max_tokens=2)])[0].ok  # the client still works afterwards
        for _ in range(500):  # the server notices the closed connections on its own loop
            if srv.stats.requests_aborted == 3:
                break
            time.sleep(0.01)
        assert srv.stats.requests_aborted == 3  # the server dropped what the client gave up on
