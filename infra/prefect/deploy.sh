#!/usr/bin/env bash
# Create the work pools (synthugc-cpu, synthugc-gpu) and every deployment of deployments/prefect.yaml.
set -euo pipefail
. "$(dirname "$0")/env.sh"
cd "$SYNTHUGC_REPO"
exec synthugc deploy "$@"
