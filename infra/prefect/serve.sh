#!/usr/bin/env bash
# One machine, no pools or workers: serve every deployment from this process (schedules included).
set -euo pipefail
. "$(dirname "$0")/env.sh"
cd "$SYNTHUGC_REPO"
exec synthugc serve "$@"
