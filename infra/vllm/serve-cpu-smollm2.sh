#!/usr/bin/env bash
# CPU stand-in for vLLM (same API): SmolLM2-135M-Instruct served by tasks.models.openai_server from the
# project's venv. First start exports the GGUF to a plain HF folder (~30 s); later starts load it in ~5 s.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
exec .venv/bin/python -m tasks.models.openai_server --model smollm2 --served-model-name smollm2 \
  --export-dir "${EXPORT_DIR:-$HOME/.cache/synthugc/smollm2-hf}" \
  --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" --threads "${THREADS:-1}"
