//! `cfg(threads)`: this build splits work across threads. Natively the pool starts its own; in
//! wasm only a build with shared memory and atomics (the package's threaded artifact) has
//! threads, and JS starts the workers that join the pool.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(threads)");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    if arch != "wasm32" || features.split(',').any(|f| f == "atomics") {
        println!("cargo::rustc-cfg=threads");
    }
}
