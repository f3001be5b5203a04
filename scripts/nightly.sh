# The nightly toolchain the project pins, by date (sourced by fuzz.sh, build-wasm.sh, test.sh).
# cargo-fuzz and the threaded wasm build (-Z build-std with atomics) need nightly; the product
# and its tests build on the stable pin (rust-toolchain.toml).
NIGHTLY=nightly-2026-05-20

# Installs the pinned nightly with rust-src (build-std compiles std from it) when missing.
install_nightly() {
  local sysroot
  sysroot=$(rustup run "$NIGHTLY" rustc --print sysroot 2>/dev/null || true)
  if [[ -z "$sysroot" || ! -d "$sysroot/lib/rustlib/src/rust/library/std" ]]; then
    rustup toolchain install "$NIGHTLY" --profile minimal --component rust-src >&2
  fi
}
