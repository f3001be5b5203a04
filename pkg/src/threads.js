// The threaded wasm (shared memory and atomics; dist/wasm-threads): when it runs and how its
// workers start. Each entry point says how to load it and how to start a thread in its runtime
// (node.js: `node:worker_threads` in Node, Bun and Deno; browser.js: module Web Workers); Workers
// (workerd) have no threads and always run the one-thread build (dist/wasm).
//
// The pool is the wasm instance's, as natively it is the process's: `threads` of the last
// HostShim.open sets it for every model on that instance. Output is identical at every count.
import { coded } from './errors.js';
import { wasmMemory } from './resolver.js';

/** The most threads taken when `threads` is not given (past this, matmuls gain little). */
export const MAX_DEFAULT_THREADS = 8;
/** How long starting threads may take before the open gives up on them. */
const JOIN_TIMEOUT_MS = 60_000;
/** The most threads that may be asked for (the engine's MAX_THREADS). */
export const MAX_THREADS = 256;

/**
 * A started thread, whatever the runtime (`detach`: it no longer keeps the process alive).
 * @typedef {{ post(m: unknown): void, onMessage(f: (m: any) => void): void,
 *   onError(f: (e: Error) => void): void, terminate(): void, detach?(): void }} Thread
 */

/**
 * Whether this context can run the threaded build: shared memory exists and (in browsers) the
 * page is cross-origin isolated (COOP/COEP), which SharedArrayBuffer needs there.
 */
export function threadsPossible() {
  const g = /** @type {any} */ (globalThis);
  if (typeof SharedArrayBuffer !== 'function') return false;
  if (g.crossOriginIsolated === false) return false;
  try {
    new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
    return true;
  } catch {
    return false;
  }
}

/** `threads` as given to HostShim.open, checked: undefined or an integer in 1..=MAX_THREADS. */
export function checkThreads(/** @type {unknown} */ threads) {
  if (threads === undefined) return undefined;
  if (typeof threads === 'number' && Number.isInteger(threads) && threads >= 1 && threads <= MAX_THREADS) {
    return threads;
  }
  throw Object.assign(
    coded('invalid_option', `HostShim.open: threads must be an integer in 1..=${MAX_THREADS}, got ${JSON.stringify(threads) ?? String(threads)}`),
    { param: 'threads' },
  );
}

/** The threaded build's instance and its workers. */
export class WasmThreads {
  /** @type {any} */
  #ns;
  #module;
  #memory;
  #glue;
  #spawn;
  /** @type {Thread[]} the running pool's workers */
  #workers = [];
  /** @type {Promise<unknown>} changes of count, one at a time */
  #changing = Promise.resolve();

  /**
   * @param {any} ns the threaded build's wasm-bindgen namespace, initialized on this thread
   * @param {{ module: WebAssembly.Module, glue: string, spawn: () => Thread | Promise<Thread> }} how
   *   the compiled module each worker instantiates (on `ns`'s shared memory), the glue's URL,
   *   and how to start a thread running thread-worker.js
   */
  constructor(ns, how) {
    const memory = wasmMemory(ns);
    if (memory === undefined) throw new Error('knot-wasm: the threaded build has no shared memory');
    this.#ns = ns;
    this.#module = how.module;
    this.#memory = memory;
    this.#glue = how.glue;
    this.#spawn = how.spawn;
  }

  get ns() {
    return this.#ns;
  }

  /** Threads the matmuls split across now. */
  get count() {
    return this.#ns.threadsCount();
  }

  /**
   * Makes the pool `n` threads: starts `n - 1` workers, waits until each has joined, then
   * switches (the old pool's workers end). Rejects with `invalid_option` if a worker cannot
   * start, leaving the pool as it was.
   * @param {number} n
   */
  use(n) {
    const next = this.#changing.then(() => this.#use(n));
    this.#changing = next.catch(() => {});
    return next;
  }

  /**
   * Sends thread `t` what it needs to join part `part` of pool `pool`; resolves once it has.
   * @param {Thread} t @param {number} pool @param {number} part
   */
  #join(t, pool, part) {
    return new Promise((resolve, reject) => {
      t.onMessage((m) => {
        if (m?.joined) resolve(undefined);
        else if (m?.done) t.terminate();
        else if (m?.error) reject(new Error(m.error));
      });
      t.onError(reject);
      t.post({ bindings: this.#glue, module: this.#module, memory: this.#memory, pool, part });
    });
  }

  /** @param {number} n */
  async #use(n) {
    // The instance's own count: a host opened at 1 thread ends the pool too.
    if (n === this.count) return;
    const old = this.#workers;
    if (n === 1) {
      this.#ns.threadsSet(1);
      this.#workers = [];
    } else {
      const pool = this.#ns.threadsBegin(n);
      /** @type {Thread[]} */
      const started = [];
      // The wait for the workers holds a timer: some runtimes (Deno) do not count a starting
      // worker as pending work, and a thread that never joins must not hang the open.
      let timer;
      const late = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`not every thread joined within ${JOIN_TIMEOUT_MS / 1000} s`)), JOIN_TIMEOUT_MS);
      });
      try {
        await Promise.race([late, Promise.all(Array.from({ length: n - 1 }, async (_, i) => {
          const t = await this.#spawn();
          started.push(t);
          await this.#join(t, pool, i + 1);
        }))]);
        this.#ns.threadsUse(pool);
        for (const t of started) t.detach?.();
      } catch (e) {
        for (const t of started) t.terminate();
        throw coded('invalid_option',
          `HostShim.open: ${n} threads could not start: ${e instanceof Error ? e.message : String(e)}`);
      } finally {
        clearTimeout(timer);
      }
      this.#workers = started;
    }
    // The old pool has ended: its workers return from their loop and say done (then end);
    // terminate any that cannot.
    for (const t of old) setTimeout(() => t.terminate(), 1000).unref?.();
  }
}

/**
 * Which build a HostShim runs on, and at how many threads.
 * @param {{ asked: number | undefined, cores: number, single: () => Promise<any>,
 *   threaded: () => Promise<WasmThreads | undefined> }} how
 * @returns {Promise<{ ns: any, threads: number }>}
 */
export async function pickBuild({ asked, cores, single, threaded }) {
  const n = asked ?? Math.max(1, Math.min(cores, MAX_DEFAULT_THREADS));
  if (n > 1 && threadsPossible()) {
    try {
      const t = await threaded();
      if (t !== undefined) {
        await t.use(n);
        return { ns: t.ns, threads: n };
      }
    } catch (e) {
      // Threads asked for and impossible here: say so. Unasked: one thread.
      if (asked !== undefined) throw e;
    }
  }
  return { ns: await single(), threads: 1 };
}
