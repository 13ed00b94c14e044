"""A minimal OpenAI-compatible server over :class:`TransformersBackend` (FastAPI + uvicorn, CPU).

Why not ``transformers serve`` (5.23): it needs the ``openai`` package (+ jiter, distro), its
``/v1/models`` fails without a Hugging Face cache folder and lists only hub-cache models, it ignores ``n``
(one choice comes back), and it ignores temperature/top_p unless the model's generation_config sets
``do_sample``; its seed is the global torch seed. This server is the CPU stand-in for vLLM in tests and
the CPU fallback: ``GET /v1/models``, ``GET /health``, ``POST /v1/chat/completions`` (non-streaming;
``n``, ``temperature``, ``top_p``, ``max_tokens``, ``seed``, ``stop``). Concurrent requests are gathered
for up to ``batch_wait_s`` and generated together in one batch.

    python -m tasks.models.openai_server --model smollm2 --host 127.0.0.1 --port 8000 --threads 1
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from typing import Any

from tasks.models.hf_export import export_hf_folder
from tasks.models.llm import ChatRequest, ChatResult, TransformersBackend
from tasks.models.registry import resolve_model


class Batcher:
    """Gathers requests from concurrent HTTP handlers and runs them through the backend in batches, on one
    worker thread (generation is CPU-bound; one batch at a time is the fastest on CPU)."""

    def __init__(self, backend: TransformersBackend, max_batch: int = 8, wait_s: float = 0.02) -> None:
        self.backend, self.max_batch, self.wait_s = backend, max_batch, wait_s
        self._queue: queue.Queue[tuple[ChatRequest, Future[ChatResult]]] = queue.Queue()
        threading.Thread(target=self._run, name="llm-batcher", daemon=True).start()

    def submit(self, request: ChatRequest) -> Future[ChatResult]:
        future: Future[ChatResult] = Future()
        self._queue.put((request, future))
        return future

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            end = time.monotonic() + self.wait_s
            while len(items) < self.max_batch:
                try:
                    items.append(self._queue.get(timeout=max(0.0, end - time.monotonic())))
                except queue.Empty:
                    break
            try:
                results = self.backend.complete([r for r, _ in items])
            except Exception as exc:  # complete() should not raise; never leave a handler hanging
                results = [ChatResult(texts=None, error=f"{type(exc).__name__}: {exc}") for _ in items]
            for (_, future), result in zip(items, results, strict=True):
                future.set_result(result)


def create_app(backend: TransformersBackend, served_name: str, *, max_batch: int = 8,
               batch_wait_s: float = 0.02) -> Any:
    """The FastAPI app serving ``backend`` under the model name ``served_name``."""
    from fastapi import FastAPI, HTTPException
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse

    app = FastAPI(title="synthugc OpenAI-compatible server")
    batcher = Batcher(backend, max_batch=max_batch, wait_s=batch_wait_s)
    created = int(time.time())

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "created": created,
                                            "owned_by": "synthugc", "root": backend.model}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: dict[str, Any]) -> Any:
        if body.get("stream"):
            raise HTTPException(status_code=400, detail="stream=true is not supported")
        if body.get("model") not in (served_name, backend.model, None):
            raise HTTPException(status_code=404, detail=f"model {body.get('model')!r} is not served; "
                                                        f"this server serves {served_name!r}")
        try:
            request = _request_from_body(body)
        except (KeyError, TypeError, ValueError) as exc:
            raise HTTPException(status_code=400, detail=f"bad request: {exc}") from exc
        result = await run_in_threadpool(batcher.submit(request).result)
        if not result.ok:
            return JSONResponse(status_code=500, content={"error": {"message": result.error}})
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": served_name,
            "choices": [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        for i, text in enumerate(result.texts or [])],
        }

    return app


def _request_from_body(body: dict[str, Any]) -> ChatRequest:
    messages = body["messages"]
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m for m in messages):
        raise ValueError("messages must be a list of {role, content}")
    stop = body.get("stop")
    n, max_tokens = int(body.get("n") or 1), int(body.get("max_tokens") or body.get("max_completion_tokens") or 256)
    if not 1 <= n <= 64 or max_tokens < 1:
        raise ValueError("n must be 1..64 and max_tokens >= 1")
    return ChatRequest(
        messages=[{"role": str(m.get("role", "user")), "content": str(m["content"])} for m in messages],
        temperature=float(body["temperature"]) if body.get("temperature") is not None else 1.0,
        top_p=float(body["top_p"]) if body.get("top_p") is not None else 1.0,
        max_tokens=max_tokens, n=n,
        seed=int(body["seed"]) if body.get("seed") is not None else None,
        stop=[stop] if isinstance(stop, str) else (list(stop) if stop else None),
    )


def main(argv: list[str] | None = None) -> None:
    """Load the model, then listen (so /v1/models answers only once generation can start)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="short name, local folder/.gguf or hub id (default: smollm2)")
    parser.add_argument("--served-model-name", default=None, help="name clients send (default: --model or smollm2)")
    parser.add_argument("--export-dir", default=None,
                        help="export a GGUF model here as a plain HF folder first (later starts load in <1 s)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)

    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import uvicorn

    spec = resolve_model("llm", args.model)
    if args.export_dir and spec.kind == "gguf-causal-lm":
        folder = export_hf_folder(spec, args.export_dir)
        spec = resolve_model("llm", str(folder))
    backend = TransformersBackend(spec, batch_size=args.max_batch, num_threads=args.threads)
    started = time.perf_counter()
    backend.load()
    print(f"loaded {backend.model} in {time.perf_counter() - started:.1f}s", flush=True)
    app = create_app(backend, args.served_model_name or args.model or "smollm2", max_batch=args.max_batch)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
