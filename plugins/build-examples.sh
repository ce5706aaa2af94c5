#!/usr/bin/env bash
# Builds the example plugins into plugins/examples/dist/<name>/ (artifact + axp-plugin.toml with
# its sha256), ready for `axp provider add plugins/examples/dist/<name>`. The plugin-host tests
# use these. Each example is a standalone Cargo project (its own Cargo.lock); they share one
# target directory: ${CARGO_TARGET_DIR:-<repo>/target}/plugin-examples.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
target="${CARGO_TARGET_DIR:-$repo/target}/plugin-examples"
dist="$here/examples/dist"
mkdir -p "$dist"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi

build() { # dir, target triple or "", extra cargo args...
    local dir="$1" triple="$2"; shift 2
    echo "building $dir${triple:+ ($triple)}" >&2
    (cd "$here/examples/$dir" && CARGO_TARGET_DIR="$target" cargo build --release --quiet ${triple:+--target "$triple"} "$@")
}

manifest() { # name, id, kind, artifact file, capabilities TOML, [abi]
    local name="$1" id="$2" kind="$3" artifact="$4" caps="$5" abi="${6:-0.1.0}"
    local sum
    sum="$(sha256sum "$dist/$name/$artifact" | cut -d' ' -f1)"
    cat > "$dist/$name/axp-plugin.toml" <<TOML
id = "$id"
version = "0.1.0"
abi = "$abi"
kind = "$kind"
artifact = "$artifact"
sha256 = "$sum"

[capabilities]
$caps
TOML
}

build hello-wasm wasm32-wasip2
build hostile-wasm wasm32-wasip2
build hello-native ""
build hostile-native ""

wasm="$target/wasm32-wasip2/release"
native="$target/release"
for d in hello hostile hello-native hostile-native overreach abi-mismatch; do
    rm -rf "${dist:?}/$d"; mkdir -p "$dist/$d"
done
cp "$wasm/axp_example_hello.wasm" "$dist/hello/hello.wasm"
manifest hello hello wasm hello.wasm 'net = ["api.example.test"]
secrets = ["HELLO_GREETING"]'
cp "$wasm/axp_example_hostile.wasm" "$dist/hostile/hostile.wasm"
manifest hostile hostile wasm hostile.wasm ''
cp "$native/libaxp_example_hello_native.so" "$dist/hello-native/hello_native.so"
manifest hello-native hello-native dylib hello_native.so ''
cp "$native/libaxp_example_hostile_native.so" "$dist/hostile-native/hostile_native.so"
manifest hostile-native hostile-native dylib hostile_native.so ''
# Hostile manifests around a good artifact: one asks for everything, one names another ABI.
cp "$dist/hello/hello.wasm" "$dist/overreach/hello.wasm"
manifest overreach overreach wasm hello.wasm 'net = ["*"]
fs = ["/etc"]'
cp "$dist/hello/hello.wasm" "$dist/abi-mismatch/hello.wasm"
manifest abi-mismatch abi-mismatch wasm hello.wasm '' 0.2.0
echo "example plugins are in $dist" >&2
