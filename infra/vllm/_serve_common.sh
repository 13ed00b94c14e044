#!/usr/bin/env bash
# Shared by serve-*.sh: start `vllm serve` from its own venv and wait for /v1/models.
# Inputs (env): MODEL, SERVED_NAME, TP, GPU_UTIL, MAX_LEN, DTYPE, PORT, HOST, VLLM_VENV, VLLM_API_KEY,
# HEALTH_DEADLINE_S, EXTRA_ARGS.
set -euo pipefail

VLLM_VERSION="${VLLM_VERSION:-0.33.0}"
VLLM_VENV="${VLLM_VENV:-$HOME/venvs/vllm-${VLLM_VERSION}}"
HOST="${HOST:-0.0.0.0}"
PORT="${PORT:-8000}"
HEALTH_DEADLINE_S="${HEALTH_DEADLINE_S:-900}"
LOG="${LOG:-$HOME/vllm-${SERVED_NAME}-${PORT}.log}"

if [[ ! -x "$VLLM_VENV/bin/vllm" ]]; then
  echo "vllm ${VLLM_VERSION} not found in $VLLM_VENV; create it with:" >&2
  echo "  python3 -m venv $VLLM_VENV && $VLLM_VENV/bin/pip install 'vllm==${VLLM_VERSION}'" >&2
  exit 2
fi

args=(serve "$MODEL"
  --served-model-name "$SERVED_NAME"
  --host "$HOST" --port "$PORT"
  --tensor-parallel-size "$TP"
  --gpu-memory-utilization "$GPU_UTIL"
  --max-model-len "$MAX_LEN"
  --dtype "$DTYPE"
  --seed 0)
if [[ -n "${VLLM_API_KEY:-}" ]]; then args+=(--api-key "$VLLM_API_KEY"); fi
# shellcheck disable=SC2206
if [[ -n "${EXTRA_ARGS:-}" ]]; then args+=($EXTRA_ARGS); fi

echo "starting: $VLLM_VENV/bin/vllm ${args[*]}  (log: $LOG)"
"$VLLM_VENV/bin/vllm" "${args[@]}" >"$LOG" 2>&1 &
pid=$!
echo "$pid" >"${LOG%.log}.pid"

auth=()
if [[ -n "${VLLM_API_KEY:-}" ]]; then auth=(-H "Authorization: Bearer $VLLM_API_KEY"); fi
deadline=$((SECONDS + HEALTH_DEADLINE_S))
until curl -sf "${auth[@]}" "http://127.0.0.1:${PORT}/v1/models" >/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null; then echo "vllm exited; last log lines:" >&2; tail -n 30 "$LOG" >&2; exit 1; fi
  if (( SECONDS > deadline )); then echo "vllm not healthy after ${HEALTH_DEADLINE_S}s (pid $pid, log $LOG)" >&2; exit 1; fi
  sleep 5
done
echo "ready: http://$(hostname -f):${PORT}/v1 serves '${SERVED_NAME}' (pid $pid)"
curl -s "${auth[@]}" "http://127.0.0.1:${PORT}/v1/models"; echo
