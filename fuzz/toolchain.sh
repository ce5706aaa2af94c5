# shellcheck shell=bash
# The one place that pins what fuzzing is built with, sourced by scripts/fuzz-smoke.sh,
# scripts/fuzz-long.sh and scripts/install-test-deps.sh. cargo fuzz needs a nightly rustc
# (sanitizer-coverage flags); the pinned one is the nightly of 2026-05-20, whose rustc reports
# the version below. rustup may hold it under its dated name or, when it was installed as the
# moving `nightly` channel that day, under `nightly`: both are accepted when rustc says it is
# that build.

AXP_FUZZ_NIGHTLY=nightly-2026-05-20
AXP_FUZZ_NIGHTLY_RUSTC="rustc 1.97.0-nightly (e50aa6fba 2026-05-19)"
AXP_CARGO_FUZZ_VERSION=0.13.2

# Prints the installed rustup toolchain that is the pinned nightly; fails when there is none.
# Never installs anything (RUSTUP_AUTO_INSTALL=0 keeps `rustup run` from fetching one).
axp_fuzz_pinned_toolchain() {
  local name
  for name in "$AXP_FUZZ_NIGHTLY" nightly; do
    if rustup toolchain list | grep -q "^${name}-[a-z0-9_]*-unknown-linux-gnu" &&
      [ "$(RUSTUP_AUTO_INSTALL=0 rustup run "$name" rustc -V 2>/dev/null)" = "$AXP_FUZZ_NIGHTLY_RUSTC" ]; then
      echo "$name"
      return 0
    fi
  done
  return 1
}

# Sets AXP_FUZZ_TOOLCHAIN to the toolchain to build with. Without the pinned nightly (a machine
# that cannot download toolchains), it falls back to the default toolchain with
# RUSTC_BOOTSTRAP=1, which accepts the same nightly-only flags, and says so: the targets are
# then still built and run, only by another compiler than the pinned one.
axp_fuzz_select_toolchain() {
  if AXP_FUZZ_TOOLCHAIN=$(axp_fuzz_pinned_toolchain); then
    return 0
  fi
  AXP_FUZZ_TOOLCHAIN=$(rustup show active-toolchain | cut -d' ' -f1)
  export RUSTC_BOOTSTRAP=1
  echo "warning: the pinned $AXP_FUZZ_NIGHTLY ($AXP_FUZZ_NIGHTLY_RUSTC) is not installed;" \
    "building with $AXP_FUZZ_TOOLCHAIN and RUSTC_BOOTSTRAP=1 instead" >&2
}

# Installs the pinned nightly (when missing and installable) and cargo-fuzz at its pinned version.
axp_fuzz_install() {
  if ! axp_fuzz_pinned_toolchain >/dev/null; then
    rustup toolchain install "$AXP_FUZZ_NIGHTLY" --profile minimal ||
      echo "warning: cannot install $AXP_FUZZ_NIGHTLY; fuzzing will fall back to RUSTC_BOOTSTRAP=1" >&2
  fi
  if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $AXP_CARGO_FUZZ_VERSION" ]; then
    cargo install cargo-fuzz --version "$AXP_CARGO_FUZZ_VERSION" --locked
  fi
}
