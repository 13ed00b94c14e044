"""Real generation with SmolLM2: the HF export, the in-process backend, and the client against a real
OpenAI-compatible server (tasks.models.openai_server) started here as a subprocess on a free port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.models.llm import ChatRequest, OpenAICompatibleClient, RequestCache, TransformersBackend
from tasks.models.registry import resolve_model
from tasks.settings import get_settings

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PROMPT = [{"role": "user", "content": "Rewrite in other words: I love my new bike, it is so fast!"}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``python -m tasks.models.openai_server`` on 127.0.0.1:<free port>; ready when /v1/models answers."""

    def __init__(self, model: str, log: Path, deadline_s: float = 180.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        self._log = log.open("w")
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tasks.models.openai_server", "--model", model, "--served-model-name", "smollm2",
             "--host", "127.0.0.1", "--port", str(self.port), "--threads", "1"],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )
        probe = OpenAICompatibleClient(self.url, "smollm2", max_retries=0)
        end = time.monotonic() + deadline_s
        while not probe.health(timeout_s=2):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                pytest.fail(f"server did not come up (exit {self.proc.returncode}): {log.read_text()[-2000:]}")
            time.sleep(0.25)
        probe.close()
        self.start_s = time.perf_counter() - started

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    from tasks.models.hf_export import export_hf_folder

    return export_hf_folder(resolve_model("llm"), tmp_path_factory.mktemp("export") / "smollm2-hf")


@pytest.fixture(scope="module")
def server(hf_folder: Path, tmp_path_factory) -> Iterator[ServerProcess]:
    proc = ServerProcess(str(hf_folder), tmp_path_factory.mktemp("server") / "server.log")
    print(f"\nserver start: {proc.start_s:.1f}s")
    yield proc
    proc.stop()


def test_export_is_complete_and_cached(hf_folder: Path) -> None:
    from tasks.models.hf_export import MARKER, export_hf_folder

    for name in ("config.json", "model.safetensors", "tokenizer_config.json", MARKER):
        assert (hf_folder / name).is_file()
    assert "quantization_config" not in (hf_folder / "config.json").read_text()
    assert not [p for p in hf_folder.parent.iterdir() if p.name.startswith(".")]  # no temp dir left behind
    started = time.perf_counter()
    assert export_hf_folder(resolve_model("llm"), hf_folder) == hf_folder
    assert time.perf_counter() - started < 1.0


def test_the_loaders_read_the_gguf_models_export_the_same_weights_and_tokens(tmp_path, monkeypatch) -> None:
    """On a fresh cache folder (a fresh clone's), an export for a server writes the loaders' export first and
    copies it, parsing the GGUF file once; the loaders then read that export, which is the GGUF file's model:
    the same token ids and the same logits as transformers' own GGUF load."""
    import torch

    import tasks.models.loaders as loaders
    from tasks.models.hf_export import export_complete, export_hf_folder

    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    parsed = []
    real = loaders.load_gguf_causal_lm
    monkeypatch.setattr(loaders, "load_gguf_causal_lm", lambda spec: parsed.append(real(spec)) or parsed[-1])
    loaders.load_causal_lm.cache_clear()
    loaders.load_tokenizer.cache_clear()
    spec = resolve_model("llm")
    try:
        served = export_hf_folder(spec, tmp_path / "served")
        folder = loaders.gguf_export(spec)
        assert folder.is_relative_to(get_settings().cache_dir.resolve()) and len(parsed) == 1
        assert export_complete(served, spec) and export_complete(folder, spec)
        tokenizer, model = loaders.load_causal_lm(spec)
        assert len(parsed) == 1  # read from the export
    finally:  # the other tests load from the suite's cache folder again
        loaders.load_causal_lm.cache_clear()
        loaders.load_tokenizer.cache_clear()
    gguf_tokenizer, gguf_model = parsed[0]
    text = "Reply with one word: is the sky blue? Ünïcode, 2012, e-mail@example.org"
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    assert ids.tolist() == gguf_tokenizer(text, return_tensors="pt")["input_ids"].tolist()
    assert tokenizer.pad_token == gguf_tokenizer.pad_token is not None
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, gguf_model(ids).logits)


def test_the_export_folder_stays_in_the_cache_whatever_the_models_name(tmp_path, monkeypatch) -> None:
    """The user's model name (a path as given: ``../models/x.gguf``) never becomes part of the export's path."""
    from dataclasses import replace

    from tasks.models.loaders import gguf_export_folder

    monkeypatch.setenv("SYNTHUGC_CACHE_DIR", str(tmp_path / "cache"))
    spec = resolve_model("llm")
    for name in ("../../escaped", "/etc/x.gguf", "a/b"):
        folder = gguf_export_folder(replace(spec, name=name))
        assert folder.parent == (tmp_path / "cache" / "models").resolve() and folder.name.startswith("gguf-")
    assert gguf_export_folder(spec) == gguf_export_folder(replace(spec, name="other"))  # the file decides


def test_generation_through_server(server: ServerProcess) -> None:
    client = OpenAICompatibleClient(server.url, "smollm2", timeout_s=300, max_retries=1, concurrency=4)
    assert client.list_models() == ["smollm2"]
    requests = [ChatRequest(PROMPT, temperature=0.0, max_tokens=16),
                ChatRequest(PROMPT, temperature=0.9, top_p=0.95, max_tokens=16, n=2, seed=3),
                ChatRequest([{"role": "user", "content": "Name a colour."}], temperature=0.0, max_tokens=8)]
    results = client.complete(requests)
    assert all(r.ok for r in results), [r.error for r in results]
    assert [len(r.texts or []) for r in results] == [1, 2, 1]
    assert all(t.strip() for r in results for t in r.texts or [])
    again = client.complete([requests[0]])[0]
    assert again.texts == results[0].texts  # greedy is deterministic
    bad = OpenAICompatibleClient(server.url, "no-such-model", max_retries=2).complete([requests[0]])[0]
    assert bad.attempts == 1 and "HTTP 404" in (bad.error or "")


def test_in_process_backend_matches_server(server: ServerProcess, hf_folder: Path) -> None:
    request = ChatRequest(PROMPT, temperature=0.0, max_tokens=16)
    backend = TransformersBackend(resolve_model("llm", str(hf_folder)), num_threads=1)
    [local] = backend.complete([request])
    [remote] = OpenAICompatibleClient(server.url, "smollm2", timeout_s=300).complete([request])
    assert local.ok and local.texts == remote.texts
    sampled = [ChatRequest(PROMPT, temperature=1.0, max_tokens=12, n=2, seed=11)]
    first, second = backend.complete(sampled)[0], backend.complete(sampled)[0]
    assert first.texts == second.texts and len(first.texts or []) == 2  # same seed, same batch -> same texts
    stopped = backend.complete([ChatRequest(PROMPT, temperature=0.0, max_tokens=16, stop=[","])])[0]
    assert stopped.ok and "," not in (stopped.texts or ["x,"])[0]


def test_cache_hit_after_server_stops(server: ServerProcess, tmp_path) -> None:
    """Runs last: stops the module's server."""
    requests = [ChatRequest(PROMPT, temperature=0.8, max_tokens=12, n=2, seed=5),
                ChatRequest(PROMPT, temperature=0.0, max_tokens=12)]
    client = OpenAICompatibleClient(server.url, "smollm2", timeout_s=300, cache=RequestCache(tmp_path / "llm.db"))
    first = client.complete(requests)
    assert all(r.ok and not r.cached for r in first), [r.error for r in first]
    server.stop()
    restarted = OpenAICompatibleClient(server.url, "smollm2", max_retries=1, backoff_s=0.01,
                                       cache=RequestCache(tmp_path / "llm.db"))
    assert not restarted.health()
    again = restarted.complete(requests)
    assert all(r.cached for r in again) and [r.texts for r in again] == [r.texts for r in first]
    [miss] = restarted.complete([ChatRequest(PROMPT, temperature=0.8, max_tokens=12, n=2, seed=6)])
    assert miss.texts is None and server.url in (miss.error or "")
