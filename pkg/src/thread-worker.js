// One thread of the threaded wasm: the same module on the same shared memory, running its part
// of every matmul until the pool ends (threads.js starts it). Node, Bun and Deno run it as a
// `node:worker_threads` Worker, browsers as a module Web Worker.
//
// Message in: { bindings: URL of the wasm-bindgen glue, module, memory, pool, part }.
// Messages out: { joined: true } once in the pool (then the thread blocks in it); { done: true }
// when the pool has ended; { error: string } when it could not join or its part failed.

/**
 * The channel to the thread that started this one.
 * @returns {Promise<{ post(m: unknown): void, first(): Promise<any>, close(): void }>}
 */
async function parent() {
  // Node, Bun and Deno all have `process`; a browser's worker has not.
  if (typeof process === 'object' && typeof process?.versions?.node === 'string') {
    const { parentPort } = await import('node:worker_threads');
    if (parentPort) {
      return {
        post: (m) => parentPort.postMessage(m),
        first: () => new Promise((resolve) => parentPort.once('message', resolve)),
        // Deno's parentPort has no close(): the parent ends the thread when it says done.
        close: () => parentPort.close?.(),
      };
    }
  }
  const scope = /** @type {any} */ (globalThis);
  return {
    post: (m) => scope.postMessage(m),
    first: () => new Promise((resolve) => { scope.onmessage = (/** @type {MessageEvent} */ e) => resolve(e.data); }),
    close: () => scope.close(),
  };
}

const port = await parent();
const { bindings, module, memory, pool, part } = await port.first();
const message = (/** @type {unknown} */ e) => (e instanceof Error ? e.message : String(e));
try {
  const ns = await import(bindings);
  ns.initSync({ module, memory, thread_stack_size: 8 << 20 });
  ns.threadsJoin(pool, part);
  port.post({ joined: true });
  // Blocks this thread until the pool ends; then frees this thread's stack and thread-locals.
  ns.threadsWork();
  ns.initSync().__wbindgen_thread_destroy?.();
  port.post({ done: true });
} catch (e) {
  port.post({ error: message(e) });
}
port.close();
