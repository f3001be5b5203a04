// Entry for browsers (and bundlers targeting them): fetches the .wasm next to this package.
import * as bindings from '../dist/wasm/host.js';
import { setWasmResolver } from './resolver.js';
import { setHelperBindings } from './helpers.js';

export * from './index.js';

/** @type {Promise<object> | undefined} */
let own;

/**
 * Fetches, compiles and initializes the package's wasm once.
 * @returns {Promise<object>} the wasm-bindgen namespace (has WasmHost)
 */
export function loadWasm() {
  own ??= bindings
    .default({ module_or_path: fetch(new URL('../dist/wasm/host_bg.wasm', import.meta.url)) })
    .then(() => {
      setHelperBindings(bindings);
      return bindings;
    });
  own.catch(() => {
    own = undefined;
  });
  return own;
}

setWasmResolver(async (wasm) => (wasm === undefined || wasm === bindings ? loadWasm() : wasm));

// Synchronous classes: usable once `await loadWasm()` has resolved (top-level await would block
// every importer on the download).
export const { CarrierMediumPipeline, ImageCarrierPipeline } = bindings;
