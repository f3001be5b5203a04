// Entry for Cloudflare Workers (workerd) and bundlers with wasm-module imports: Workers accept
// only wasm compiled at deploy time, so the module is imported statically.
import * as bindings from '../dist/wasm/host.js';
import wasmModule from '../dist/wasm/host_bg.wasm';
import { setWasmResolver } from './resolver.js';
import { setHelperBindings } from './helpers.js';
import { setRequestScopedIo } from './batch.js';

export * from './index.js';

/**
 * Initializes the package's wasm (synchronously; idempotent).
 * @returns {Promise<object>} the wasm-bindgen namespace (has WasmHost)
 */
export async function loadWasm() {
  bindings.initSync({ module: wasmModule });
  return bindings;
}

// A request's I/O and promises belong to it: generations run together poll instead of awaiting
// each other, and drain their reads every step (batch.js).
setRequestScopedIo(true);

// Workers have no threads: the one-thread build, whatever `threads` asks.
setWasmResolver(async (wasm, threads) => (wasm === undefined || wasm === bindings
  ? { ns: await loadWasm(), threads: 1 }
  : { ns: wasm, threads }));

// Synchronous classes: initialized at import (the module is already compiled in Workers).
bindings.initSync({ module: wasmModule });
setHelperBindings(bindings);
export const { CarrierMediumPipeline, ImageCarrierPipeline } = bindings;
// A model split across Durable Objects (examples/worker, stations mode): the layer and head
// stations and the coordinator that drives them.
export const { WasmLayerStation, WasmHeadStation, WasmCoordinator } = bindings;

/** Bytes of this isolate's wasm memory (it never shrinks: the high-water mark). */
export function wasmMemoryBytes() {
  return bindings.initSync({ module: wasmModule }).memory.buffer.byteLength;
}
