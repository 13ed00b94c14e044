#!/usr/bin/env bash
# The Dask scheduler for metric shards; point the flows at it with SYNTHUGC_DASK_ADDRESS=tcp://<host>:8786.
set -euo pipefail
. "$(dirname "$0")/../prefect/env.sh"
exec dask scheduler --host "${DASK_HOST:-0.0.0.0}" --port "${DASK_PORT:-8786}" --dashboard-address "${DASK_DASHBOARD:-:8787}"
