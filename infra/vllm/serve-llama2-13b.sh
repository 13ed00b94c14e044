#!/usr/bin/env bash
# LLaMA-2-13B-chat (generation role `llm`) with vLLM on a GPU worker.
# fp16/bf16 weights are ~26 GB: one 80 GB GPU (TP=1) or two 40/48 GB GPUs (TP=2). Context is 4096 tokens.
# Override any of these from the environment, e.g. TP=2 PORT=8001 ./serve-llama2-13b.sh
set -euo pipefail
export MODEL="${MODEL:-meta-llama/Llama-2-13b-chat-hf}"
export SERVED_NAME="${SERVED_NAME:-meta-llama/Llama-2-13b-chat-hf}"
export TP="${TP:-1}"
export GPU_UTIL="${GPU_UTIL:-0.90}"
export MAX_LEN="${MAX_LEN:-4096}"
export DTYPE="${DTYPE:-bfloat16}"   # float16 on pre-Ampere GPUs (V100, T4)
export PORT="${PORT:-8000}"
exec "$(dirname "$0")/_serve_common.sh"
