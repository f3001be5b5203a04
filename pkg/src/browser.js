// Entry for browsers (and bundlers targeting them): fetches the .wasm next to this package. A
// cross-origin isolated page (COOP/COEP: SharedArrayBuffer exists) runs models on the threaded
// build (dist/wasm-threads) with module Web Workers, at `navigator.hardwareConcurrency` threads
// (up to 8) unless `threads` says otherwise; other pages run the one-thread build.
import * as bindings from '../dist/wasm/host.js';
import { setWasmResolver } from './resolver.js';
import { setHelperBindings } from './helpers.js';
import { WasmThreads, pickBuild } from './threads.js';

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

const THREADED_GLUE = new URL('../dist/wasm-threads/host.js', import.meta.url);
const THREADED_WASM = new URL('../dist/wasm-threads/host_bg.wasm', import.meta.url);
const THREAD_WORKER = new URL('./thread-worker.js', import.meta.url);

/** @type {Promise<WasmThreads | undefined> | undefined} */
let threaded;

/**
 * Fetches, compiles and initializes the threaded build once (on this page; its workers get the
 * compiled module and the shared memory).
 * @returns {Promise<WasmThreads | undefined>}
 */
export function loadThreadedWasm() {
  threaded ??= (async () => {
    const ns = await import(THREADED_GLUE.href);
    const module = await WebAssembly.compileStreaming(fetch(THREADED_WASM));
    await ns.default({ module_or_path: module });
    return new WasmThreads(ns, {
      module,
      glue: THREADED_GLUE.href,
      spawn: () => {
        const w = new Worker(THREAD_WORKER, { type: 'module' });
        return {
          post: (m) => w.postMessage(m),
          onMessage: (f) => w.addEventListener('message', (e) => f(e.data)),
          onError: (f) => w.addEventListener('error', (e) => f(new Error(e.message || 'a thread failed to start'))),
          terminate: () => w.terminate(),
        };
      },
    });
  })();
  threaded.catch(() => {
    threaded = undefined;
  });
  return threaded;
}

setWasmResolver(async (wasm, threads) => {
  const t = threaded === undefined ? undefined : await threaded.catch(() => undefined);
  if (wasm !== undefined && wasm !== bindings && wasm !== t?.ns) return { ns: wasm, threads };
  return pickBuild({
    asked: threads,
    cores: globalThis.navigator?.hardwareConcurrency ?? 1,
    single: loadWasm,
    threaded: loadThreadedWasm,
  });
});

// Synchronous classes: usable once `await loadWasm()` has resolved (top-level await would block
// every importer on the download).
export const { CarrierMediumPipeline, ImageCarrierPipeline } = bindings;
