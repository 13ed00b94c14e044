#!/usr/bin/env bash
# A Dask worker (needs this repo's venv: it imports tasks.metrics and loads its own models).
#   infra/dask/worker.sh tcp://scheduler:8786     (NTHREADS, MEMORY_LIMIT optional)
set -euo pipefail
. "$(dirname "$0")/../prefect/env.sh"
address="${1:-${SYNTHUGC_DASK_ADDRESS:?give the scheduler address or set SYNTHUGC_DASK_ADDRESS}}"
cd "$SYNTHUGC_REPO"
exec dask worker "$address" --nworkers 1 --nthreads "${NTHREADS:-$(nproc)}" --memory-limit "${MEMORY_LIMIT:-auto}" \
  --name "dask-$(hostname)-$$"
