// Entry for Node >= 20, Bun and Deno: reads the .wasm beside the bindings with node:fs and
// instantiates it synchronously (wasm-bindgen `web` target + initSync works in all three). A
// model runs on the threaded build (dist/wasm-threads, workers from node:worker_threads) unless
// `threads: 1` is asked for or the machine has one core.
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { setWasmResolver } from './resolver.js';
import { setHelperBindings } from './helpers.js';
import { WasmThreads, pickBuild } from './threads.js';

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

const THREADED_GLUE = new URL('../dist/wasm-threads/host.js', import.meta.url);
const THREADED_WASM = new URL('../dist/wasm-threads/host_bg.wasm', import.meta.url);
const THREAD_WORKER = new URL('./thread-worker.js', import.meta.url);

/** @type {Promise<WasmThreads | undefined> | undefined} */
let threaded;

/**
 * Loads the threaded build once (undefined when it was not built: the one-thread build runs).
 * @returns {Promise<WasmThreads | undefined>}
 */
export function loadThreadedWasm() {
  threaded ??= (async () => {
    let bytes;
    try {
      bytes = await readFile(THREADED_WASM);
    } catch {
      return undefined;
    }
    const bindings = await import(THREADED_GLUE.href);
    const module = await WebAssembly.compile(bytes);
    bindings.initSync({ module });
    const { Worker } = await import('node:worker_threads');
    return new WasmThreads(bindings, {
      module,
      glue: THREADED_GLUE.href,
      spawn: () => {
        const w = new Worker(THREAD_WORKER);
        return {
          post: (m) => w.postMessage(m),
          onMessage: (f) => w.on('message', f),
          // A pool's threads never keep the process alive once they have joined.
          detach: () => w.unref(),
          onError: (f) => {
            w.on('error', f);
            w.on('exit', (code) => f(new Error(`a thread exited (${code}) before joining`)));
          },
          terminate: () => void w.terminate(),
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
  const t = await threaded;
  if (wasm !== undefined && wasm !== ready && wasm !== t?.ns) {
    // A namespace other than ours must have been initialized by whoever built it.
    return { ns: wasm, threads };
  }
  // Deno: the threaded build's async calls are woken through Atomics.waitAsync, which Deno's
  // event loop does not count as pending work (a program with nothing else pending ends early),
  // so there it runs threaded only when `threads` asks for it.
  const cores = 'Deno' in globalThis ? 1 : availableParallelism();
  return pickBuild({ asked: threads, cores, single: loadWasm, threaded: loadThreadedWasm });
});
