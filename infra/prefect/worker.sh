#!/usr/bin/env bash
# A process worker: `infra/prefect/worker.sh cpu` on CPU machines, `infra/prefect/worker.sh gpu` on each GPU
# machine (one at a time there: --limit 1). Stop with two SIGTERMs (a worker may ignore the first) or Ctrl-C.
set -euo pipefail
. "$(dirname "$0")/env.sh"
kind="${1:-cpu}"
case "$kind" in
  cpu) pool=synthugc-cpu; limit="${WORKER_LIMIT:-2}" ;;
  gpu) pool=synthugc-gpu; limit="${WORKER_LIMIT:-1}" ;;
  *) echo "usage: $0 cpu|gpu" >&2; exit 2 ;;
esac
cd "$SYNTHUGC_REPO"
exec prefect worker start --pool "$pool" --type process --limit "$limit" --name "$pool-$(hostname)"
