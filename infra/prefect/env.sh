#!/usr/bin/env bash
# Shared environment for every synthugc process (source it: `. infra/prefect/env.sh`).
# Values already set in the environment win. docs/architecture.md ("Environment facts") says why each is here.
export SYNTHUGC_REPO="${SYNTHUGC_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
export PREFECT_SERVER_HOST="${PREFECT_SERVER_HOST:-127.0.0.1}"     # bind address of `prefect server start`
export PREFECT_SERVER_PORT="${PREFECT_SERVER_PORT:-4200}"
# the UI calls the API at these (without them it calls port 4200 whatever --port says)
export PREFECT_SERVER_API_HOST="${PREFECT_SERVER_API_HOST:-$PREFECT_SERVER_HOST}"
export PREFECT_SERVER_API_PORT="${PREFECT_SERVER_API_PORT:-$PREFECT_SERVER_PORT}"
export PREFECT_API_URL="${PREFECT_API_URL:-http://$PREFECT_SERVER_API_HOST:$PREFECT_SERVER_API_PORT/api}"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export DO_NOT_TRACK=1
export PREFECT_CLIENT_MAX_RETRIES="${PREFECT_CLIENT_MAX_RETRIES:-8}"  # ride out a server restart
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
export TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
export TOKENIZERS_PARALLELISM=false
# shared artifact storage: a path every machine mounts at the same place, or an fsspec URL (s3://bucket/runs)
export SYNTHUGC_STORAGE_ROOT="${SYNTHUGC_STORAGE_ROOT:-$SYNTHUGC_REPO/runs}"
# Prefect cache records: must be shared too, or a retry on another worker recomputes cached stages
export SYNTHUGC_CACHE_DIR="${SYNTHUGC_CACHE_DIR:-$SYNTHUGC_REPO/.cache/synthugc}"
# export SYNTHUGC_DASK_ADDRESS=tcp://dask-scheduler:8786          # metrics fan out there (infra/dask)
# export SYNTHUGC_LLM_ENDPOINT_LLM=http://gpu1:8000/v1             # vLLM (infra/vllm)
# export SYNTHUGC_LLM_ENDPOINT_PROFILING_LLM=http://gpu2:8001/v1
VENV_BIN="${VENV_BIN:-$SYNTHUGC_REPO/.venv/bin}"
export PATH="$VENV_BIN:$PATH"
