#!/usr/bin/env bash
# The web console's browser tests: installs the locked playwright-core (`npm ci`, no browser
# download: it drives Debian's chromium) and runs console.test.mjs with node's test runner
# against a real `axp serve` from ${AXP_BIN:-target/debug/axp} (relative to the repository root).
# Screenshots of each page land in tests/console/out/ (git-ignored).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

AXP_BIN=${AXP_BIN:-target/debug/axp}
case $AXP_BIN in /*) ;; *) AXP_BIN=$ROOT/$AXP_BIN ;; esac
if [[ ! -x $AXP_BIN ]]; then
  echo "tests/console/test.sh: no gateway binary at $AXP_BIN (build it with \`cargo build -p axp-gateway --bin axp\` or set AXP_BIN)" >&2
  exit 1
fi
export AXP_BIN
export AXP_CHROMIUM=${AXP_CHROMIUM:-$(command -v chromium || true)}
if [[ ! -x $AXP_CHROMIUM ]]; then
  echo "tests/console/test.sh: no chromium (scripts/install-test-deps.sh installs Debian's)" >&2
  exit 1
fi

npm ci --prefix "$HERE" --no-audit --no-fund --loglevel=error
rm -rf "$HERE/out"
cd "$HERE"
echo "== tests/console: the web console in headless $("$AXP_CHROMIUM" --version 2>/dev/null || echo chromium)"
node --test --test-concurrency=1 console.test.mjs
echo "tests/console: screenshots in $HERE/out/"
