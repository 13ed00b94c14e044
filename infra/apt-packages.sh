#!/usr/bin/env bash
# Debian packages the features need: apertium + its English pairs for the offline back-translation strategy
# (eo-en and hbs-eng: the measured closest and farthest pivots, its defaults; eng-spa: the syntax tests' pivot),
# and chromium (headless) for the report's browser test.
# Skipped with one line where apt is not available (backtranslate then says what is missing; the browser
# test skips outside CI).
set -euo pipefail
PACKAGES=(apertium apertium-eng-spa apertium-eo-en apertium-hbs-eng chromium)
have_all() {
  command -v apertium >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1 || return 1
  local pairs
  pairs="$(apertium -l 2>/dev/null || true)"
  [[ "$pairs" == *eng-spa* && "$pairs" == *en-eo* && "$pairs" == *eng-hbs* ]]
}
if have_all; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "synthugc setup: apt-get not available, skipping Debian packages ${PACKAGES[*]} (backtranslate with backend=apertium and the browser test will not run)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "synthugc setup: not root and no passwordless sudo, skipping Debian packages ${PACKAGES[*]} (install them by hand: apt-get install ${PACKAGES[*]})"
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
echo "synthugc setup: installed ${PACKAGES[*]}"
