#!/usr/bin/env bash
# Installs everything the test suite runs against, at pinned versions, into the repository:
# real MCP servers from npm (tests/fixtures/package-lock.json) and PyPI (requirements files with
# ==), the SARIF validator the lint tests use, and the wasm32-wasip2 target plus the example
# plugins. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }

# c++: libFuzzer, which the fuzzing smoke links, is C++ built from source by libfuzzer-sys.
# xz: scripts/audit-deps.sh unpacks the vendored RustSec advisory database with it.
# openssl: scripts/pg-cluster.sh makes the test cluster's TLS certificate with it.
if ! need node || ! need npm || ! need git || ! need curl || ! need setpriv || ! need c++ || ! need xz || ! need openssl; then
  if need apt-get; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm git curl util-linux ca-certificates g++ xz-utils openssl >/dev/null
  else
    echo "install node, npm, git, curl, util-linux (setpriv), xz, openssl and a C++ compiler first" >&2
    exit 1
  fi
fi

# `cargo fmt --check` and `cargo clippy` run in scripts/test.sh: the toolchain's components.
if need rustup; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

npm ci --prefix tests/fixtures --no-audit --no-fund --loglevel=error
# The official MCP conformance suites (pinned, both revisions), the Node 22 they need (from the
# npm registry: Debian ships an older one) and our own fixture server (conformance/README.md).
npm ci --prefix conformance --no-audit --no-fund --loglevel=error

venv() { # venv DIR REQUIREMENTS
  if [ ! -x "$1/bin/python" ]; then
    python3 -m venv "$1"
  fi
  "$1/bin/pip" install -q --disable-pip-version-check -r "$2"
}
venv .venv tests/fixtures/requirements.txt
# mcp-server-everything-wrong needs the 1.x SDK, which cannot share a venv with the others.
venv .venv-wrong lint/tests/fixtures/requirements-everything-wrong.txt

if [ -f lint/tests/sarif-validator/package-lock.json ]; then
  npm ci --prefix lint/tests/sarif-validator --no-audit --no-fund --loglevel=error
fi

# The web console's browser tests (tests/console/): Debian's chromium, since no browser build can
# be downloaded here, and the locked playwright-core that drives it.
if ! need chromium; then
  if need apt-get; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "install chromium for the web console's browser tests" >&2
    exit 1
  fi
fi
npm ci --prefix tests/console --no-audit --no-fund --loglevel=error

if [ -x plugins/build-examples.sh ]; then
  plugins/build-examples.sh
fi

# Fuzzing (scripts/fuzz-smoke.sh): the pinned nightly, when missing and installable, and
# cargo-fuzz at its pinned version; both pins live in fuzz/toolchain.sh.
# shellcheck source=../fuzz/toolchain.sh
. fuzz/toolchain.sh
axp_fuzz_install
