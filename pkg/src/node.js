// Entry for Node >= 20, Bun and Deno: reads the .wasm beside the bindings with node:fs and
// instantiates it synchronously (wasm-bindgen `web` target + initSync works in all three).
import { readFile } from 'node:fs/promises';
import { setWasmResolver } from './resolver.js';
import { setHelperBindings } from './helpers.js';

export * from './index.js';
export { FileKnotSource } from './file.js';
export { convertGgufFile } from './convert-gguf-file.js';

const WASM_URL = new URL('../dist/wasm/host_bg.wasm', import.meta.url);

/** @type {Promise<object> | undefined} */
let own;

/**
 * Loads and initializes the package's wasm once; later calls return the same namespace.
 * @returns {Promise<object>} the wasm-bindgen namespace (has WasmHost)
 */
export function loadWasm() {
  own ??= (async () => {
    // Imported lazily so that the sources work before the wasm has been built.
    const bindings = await import('../dist/wasm/host.js');
    const bytes = await readFile(WASM_URL);
    bindings.initSync({ module: bytes });
    return bindings;
  })();
  own.catch(() => {
    own = undefined;
  });
  return own;
}

// The carrier pipelines are plain synchronous classes: initialize on import so that
// `new CarrierMediumPipeline(...)` works right away.
const ready = await loadWasm();
setHelperBindings(ready);
export const { CarrierMediumPipeline, ImageCarrierPipeline } = ready;
// A model split across processes (examples/worker's stations) runs here too: the layer and head
// stations and the coordinator that drives them.
export const { WasmLayerStation, WasmHeadStation, WasmCoordinator } = ready;

/** Bytes of this process's wasm memory (it never shrinks: the high-water mark). */
export function wasmMemoryBytes() {
  // initSync returns the instance's exports once initialized (it is, at import).
  return ready.initSync().memory.buffer.byteLength;
}

setWasmResolver(async (wasm) => {
  const ownNs = await loadWasm();
  // A namespace other than ours must have been initialized by whoever built it.
  return wasm ?? ownNs;
});
