"""A local OpenAI-compatible server that answers every chat completion after a fixed delay, with a plausible
paraphrase list: stands in for a vLLM server in the executor benchmark and the flow tests (no model, no GPU).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
        text = body["messages"][-1]["content"][-80:]
        n = int(body.get("n") or 1)
        content = "1. " + text.upper() + "\n2. " + text.lower()
        self._send({"choices": [{"index": i, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"} for i in range(n)]})

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
