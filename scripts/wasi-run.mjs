// Cargo runner for wasm32-wasip1 test and bench binaries: runs them inside Node's WASI so the
// engine's tests execute as wasm with SIMD128, the way the wasm package will run them.
// Usage: node scripts/wasi-run.mjs FILE.wasm [args...]
import { WASI } from 'node:wasi';
import { readFileSync } from 'node:fs';

const [wasmPath, ...args] = process.argv.slice(2);
if (!wasmPath) {
  console.error('usage: wasi-run.mjs FILE.wasm [args...]');
  process.exit(2);
}
const wasi = new WASI({
  version: 'preview1',
  args: [wasmPath, ...args],
  env: process.env,
  // The whole filesystem is visible; wasm tests open fixtures by absolute path
  // (env!("CARGO_MANIFEST_DIR")), since WASI has no working directory of its own.
  preopens: { '/': '/' },
  returnOnExit: true,
});
const module = await WebAssembly.compile(readFileSync(wasmPath));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
process.exitCode = wasi.start(instance);
