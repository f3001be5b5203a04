// Which wasm a HostShim runs on: each entry point (node.js, browser.js, workerd.js) registers how
// it loads the package's own wasm; `HostShim.open` may pass another initialized namespace.

/** @type {((wasm: object | undefined) => Promise<object>) | undefined} */
let wasmResolver;

/**
 * Called by each entry point with the function that turns `wasm` (the namespace passed to open,
 * or undefined for the package's own) into an initialized wasm-bindgen namespace.
 * @param {(wasm: object | undefined) => Promise<object>} resolver
 */
export function setWasmResolver(resolver) {
  wasmResolver = resolver;
}

/**
 * The initialized namespace for `wasm`.
 * @param {object | undefined} wasm
 * @returns {Promise<any>}
 */
export async function resolveWasm(wasm) {
  if (wasmResolver === undefined) {
    throw new Error('HostShim.open: import HostShim from the package entry (knot-wasm), not from src/shim.js');
  }
  const ns = /** @type {any} */ (await wasmResolver(wasm));
  if (typeof ns?.WasmHost?.open !== 'function') {
    throw Object.assign(new TypeError('HostShim.open: wasm is not the knot-wasm bindings namespace (no WasmHost)'),
      { code: 'invalid_argument' });
  }
  return ns;
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
