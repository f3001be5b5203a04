// Entry for Cloudflare Workers (workerd) and bundlers with wasm-module imports: Workers accept
// only wasm compiled at deploy time, so the module is imported statically.
import * as bindings from '../dist/wasm/host.js';
import wasmModule from '../dist/wasm/host_bg.wasm';
import { setWasmResolver } from './resolver.js';
import { setHelperBindings } from './helpers.js';

export * from './index.js';

/**
 * Initializes the package's wasm (synchronously; idempotent).
 * @returns {Promise<object>} the wasm-bindgen namespace (has WasmHost)
 */
export async function loadWasm() {
  bindings.initSync({ module: wasmModule });
  return bindings;
}

// Workers have no threads: the one-thread build, whatever `threads` asks. A request's I/O and
// promises belong to it: a shim's waiters poll instead of awaiting each other, and each step
// drains its reads (scheduler.js).
setWasmResolver(async (wasm, threads) => (wasm === undefined || wasm === bindings
  ? { ns: await loadWasm(), threads: 1 }
  : { ns: wasm, threads }), { requestScopedIo: true });

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
