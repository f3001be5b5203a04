// Which wasm a HostShim runs on: each entry point (node.js, browser.js, workerd.js) registers how
// it loads the package's own builds (one-thread, and threaded where threads exist: threads.js);
// `HostShim.open` may pass another initialized namespace.

/**
 * Turns `wasm` (the namespace passed to open, or undefined for the package's own) and the
 * threads asked for (undefined: the default) into an initialized wasm-bindgen namespace and the
 * threads it runs at (undefined: as asked, for a namespace not the package's).
 * @typedef {(wasm: object | undefined, threads: number | undefined) =>
 *   Promise<{ ns: object, threads: number | undefined }>} WasmResolver
 */

/** @type {WasmResolver | undefined} */
let wasmResolver;

/**
 * What the entry point's runtime implies for a HostShim: `requestScopedIo` where a request's I/O
 * and promises belong to it (workerd), so the scheduler polls instead of awaiting other
 * requests' promises and drains reads every step.
 * @type {{ requestScopedIo: boolean }}
 */
let runtime = { requestScopedIo: false };

/**
 * Called by each entry point with its resolver and what its runtime implies.
 * @param {WasmResolver} resolver
 * @param {{ requestScopedIo?: boolean }} [defaults]
 */
export function setWasmResolver(resolver, defaults = {}) {
  wasmResolver = resolver;
  runtime = { requestScopedIo: defaults.requestScopedIo ?? false };
}

/** What the entry point's runtime implies (see setWasmResolver). */
export const runtimeDefaults = () => runtime;

/**
 * The initialized namespace for `wasm`, one-threaded for the package's own.
 * @param {object | undefined} wasm
 * @returns {Promise<any>}
 */
export async function resolveWasm(wasm) {
  return (await resolveHostWasm(wasm, 1)).ns;
}

/**
 * The namespace a HostShim runs on and the threads it asks the host for.
 * @param {object | undefined} wasm
 * @param {number | undefined} threads
 * @returns {Promise<{ ns: any, threads: number | undefined }>}
 */
export async function resolveHostWasm(wasm, threads) {
  if (wasmResolver === undefined) {
    throw new Error('HostShim.open: import HostShim from the package entry (knot-wasm), not from src/shim.js');
  }
  const got = await wasmResolver(wasm, threads);
  const ns = /** @type {any} */ (got.ns);
  if (typeof ns?.WasmHost?.open !== 'function') {
    throw Object.assign(new TypeError('HostShim.open: wasm is not the knot-wasm bindings namespace (no WasmHost)'),
      { code: 'invalid_argument' });
  }
  return { ns, threads: got.threads };
}

/**
 * The linear memory of an initialized wasm-bindgen namespace: its initSync returns the instance
 * exports without doing anything once the instance exists.
 * @param {any} ns
 * @returns {WebAssembly.Memory | undefined}
 */
export function wasmMemory(ns) {
  try {
    const memory = typeof ns.initSync === 'function' ? ns.initSync()?.memory : undefined;
    return memory instanceof WebAssembly.Memory ? memory : undefined;
  } catch {
    return undefined;
  }
}
