#!/usr/bin/env bash
# Mixtral-8x7B-Instruct (profiling role `profiling_llm`) with vLLM on a GPU worker.
# bf16 weights are ~93 GB: two 80 GB GPUs (TP=2) or four 40/48 GB GPUs (TP=4). The model allows 32k tokens;
# 8192 keeps the KV cache small and is ample for profiling prompts.
set -euo pipefail
export MODEL="${MODEL:-mistralai/Mixtral-8x7B-Instruct-v0.1}"
export SERVED_NAME="${SERVED_NAME:-mistralai/Mixtral-8x7B-Instruct-v0.1}"
export TP="${TP:-2}"
export GPU_UTIL="${GPU_UTIL:-0.90}"
export MAX_LEN="${MAX_LEN:-8192}"
export DTYPE="${DTYPE:-bfloat16}"
export PORT="${PORT:-8001}"
exec "$(dirname "$0")/_serve_common.sh"
