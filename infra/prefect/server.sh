#!/usr/bin/env bash
# The Prefect server (API + UI, SQLite under $PREFECT_HOME). One per installation.
#   PREFECT_SERVER_HOST=0.0.0.0 PREFECT_SERVER_API_HOST=<public name> infra/prefect/server.sh
set -euo pipefail
. "$(dirname "$0")/env.sh"
export PREFECT_HOME="${PREFECT_HOME:-$HOME/.prefect}"
exec prefect server start --host "$PREFECT_SERVER_HOST" --port "$PREFECT_SERVER_PORT"
