// HostShim: the people-facing API, a thin class over the wasm-bindgen class `WasmHost`
// (crates/host/src/wasm/host.rs). The decode loop, its options and the streamed text live in
// Rust: this class converts arguments (convert.js), runs its wasm calls in order (queue.js),
// pumps tokens out of the loop, and handles what only JS has (AbortSignal, callbacks). Every
// failure carries a stable `code` (errors.js, docs/errors.md).
//
// The WasmHost contract this class calls:
//   static open(source: KnotByteSource, optionsJson: string,
//               onProgress: ((p: object) => void) | undefined): Promise<WasmHost>
//   readonly vocabSize, layerCount, contextLength: number; readonly eosIds: Uint32Array
//   readonly busy: boolean                      whether an async call has the host
//   dropReads(): number                         forgets reads in flight (after a reclaim)
//   encode(text): Uint32Array;  decode(ids: Uint32Array): string
//   chatPrompt(messagesJson, toolsJson?): string;  chatTemplateTools(): { takesTools, callTag }
//   start(ids: Uint32Array, optionsJson: string): Promise<void>
//   next(): Promise<{ id, text, finishReason, step, constraint? } | null>
//   reset(): void;  prefetchLayer(layer: number): Promise<void>;  drainReads(): Promise<void>
//   createPrefillWindow(ids: Uint32Array, optionsJson): Promise<{ id, tokens, expiresAt, replaced }>
//   updatePrefillWindow(id, ids: Uint32Array | undefined, optionsJson): Promise<{ id, tokens, expiresAt }>
//   prefillWindow(id): object | null;  prefillWindows(): object[];  deletePrefillWindow(id): boolean
//   stats(): object;  info(): object            (encode … info also answer during a call)
//   abort(): void                               the call in flight rejects (AbortError)
//   readonly maxSequences: number | undefined   opened with maxSequences: many generations
//   admit(ids: Uint32Array, optionsJson): number;  cancel(sequence: number): boolean
//   step(): Promise<{ sequence, token: object | null, done, finishReason, error? }[]>
//   free(): void
import { coded } from './errors.js';
import {
  isPlainObject, messagesJson, optionsJson, toCallback, toJson, toSignal, toText, toTokenIds,
} from './convert.js';
import { CallQueue, SUPERSEDED } from './queue.js';
import { SequenceBatch } from './batch.js';
import { resolveHostWasm, wasmMemory } from './resolver.js';
import { checkThreads } from './threads.js';

export class HostShim {
  /** @type {any} the wasm-bindgen WasmHost */
  #host;
  #disposed = false;
  /** Resolves once the wasm side is freed. */
  #freed;
  /** @type {() => void} */
  #resolveFreed = () => {};
  #calls = new CallQueue(
    () => this.#live(),
    () => {
      if (this.#disposed) this.#free();
    },
  );
  #vocabSize;
  #layerCount;
  #contextLength;
  /** @type {WebAssembly.Memory | undefined} */
  #memory;
  /** @type {SequenceBatch | undefined} generations run together (opened with maxSequences) */
  #batch;

  /** @type {any} the wasm-bindgen namespace the host runs on */
  #ns;

  /** Use HostShim.open. @param {any} host @param {WebAssembly.Memory} [memory] @param {any} [ns] */
  constructor(host, memory, ns) {
    this.#host = host;
    this.#memory = memory;
    this.#ns = ns;
    this.#freed = new Promise((resolve) => {
      this.#resolveFreed = () => resolve(undefined);
    });
    this.#vocabSize = host.vocabSize;
    this.#layerCount = host.layerCount;
    this.#contextLength = host.contextLength;
    const max = host.maxSequences;
    if (typeof max === 'number') this.#batch = new SequenceBatch(this.#calls, max);
  }

  /**
   * Opens a knot model. `wasm` (optional) is the wasm-bindgen namespace: omit it to use the
   * package's own (`import * as wasm from 'knot-wasm/wasm'` is the same one). The options are
   * checked in Rust (crates/host/src/options.rs); `onProgress` is the one that stays in JS.
   * @param {{ rangeGet(start: number, end: number): Promise<Uint8Array> }} source
   * @param {object} [wasmOrOptions]
   * @param {object} [maybeOptions]
   * @returns {Promise<HostShim>}
   */
  static async open(source, wasmOrOptions, maybeOptions) {
    let wasm;
    let options;
    if (maybeOptions !== undefined) {
      wasm = wasmOrOptions ?? undefined;
      options = maybeOptions;
    } else if (wasmOrOptions !== undefined && wasmOrOptions !== null &&
      typeof (/** @type {any} */ (wasmOrOptions).WasmHost) === 'function') {
      wasm = wasmOrOptions;
      options = {};
    } else {
      options = wasmOrOptions ?? {};
    }
    if (!isPlainObject(options)) throw coded('invalid_argument', 'HostShim.open: options must be an object');
    const { onProgress, ...rest } = /** @type {Record<string, unknown>} */ (options);
    const progress = toCallback(onProgress, 'onProgress');
    // Which build runs (threaded where threads exist and more than one is asked or available)
    // decides the threads the host is opened with.
    const asked = checkThreads(rest.threads);
    const json = optionsJson(rest);
    const { ns, threads } = await resolveHostWasm(wasm, asked);
    const opened = threads === undefined ? json : JSON.stringify({ ...JSON.parse(json), threads });
    const host = await ns.WasmHost.open(source, opened, progress);
    return new HostShim(host, wasmMemory(ns), ns);
  }

  /**
   * Threads this model's matmuls split across now (the pool is the wasm instance's: the last
   * open's `threads` sets it). 1 on the one-thread build.
   */
  get threads() {
    return this.#ns?.threadsCount?.() ?? 1;
  }

  /** Which wasm build runs this model: 'threads' (shared memory, workers) or 'single'. */
  get wasmBuild() {
    return this.#ns?.threadsBuild?.() ? 'threads' : 'single';
  }

  get vocabSize() {
    return this.#vocabSize;
  }

  get layerCount() {
    return this.#layerCount;
  }

  /** Positions the context holds (under `memoryBudget`, as many as fit). */
  get contextLength() {
    return this.#contextLength;
  }

  /**
   * The most generations that run at once (the `maxSequences` option); undefined when the shim
   * runs one at a time.
   * @returns {number | undefined}
   */
  get maxSequences() {
    return this.#host?.maxSequences;
  }

  /** Generations running now and waiting for a slot (with `maxSequences`). */
  get sequences() {
    return { active: this.#batch?.active ?? 0, waiting: this.#batch?.waiting ?? 0 };
  }

  #live() {
    if (this.#disposed) throw coded('disposed', 'HostShim: used after dispose()', Error);
    return this.#host;
  }

  /** @param {string} text @returns {Uint32Array} */
  encode(text) {
    return this.#live().encode(toText(text, 'encode: text'));
  }

  /** @param {Uint32Array | number[]} ids @returns {string} */
  decode(ids) {
    return this.#live().decode(toTokenIds(ids));
  }

  /**
   * Renders chat messages with the model's template (or the `chatTemplate` given at open).
   * `tools` (OpenAI's list) reaches templates that take them; messages may carry `tool_calls`
   * (arguments as objects, as Hugging Face templates expect) and `tool_call_id`.
   * `addGenerationPrompt: false` leaves out the assistant turn's opening: the conversation so
   * far, a prefix of the prompts that continue it.
   * @param {{ role: string, content: string | null }[]} messages
   * @param {{ tools?: object[], addGenerationPrompt?: boolean }} [options]
   * @returns {string}
   */
  applyChatTemplate(messages, options = {}) {
    const { tools, addGenerationPrompt } = options ?? {};
    if (addGenerationPrompt !== undefined && typeof addGenerationPrompt !== 'boolean') {
      throw coded('invalid_argument', 'applyChatTemplate: addGenerationPrompt must be true or false');
    }
    return this.#live().chatPrompt(messagesJson(messages), tools === undefined ? undefined : toJson(tools), addGenerationPrompt);
  }

  /**
   * How the chat template handles tools: whether it takes a `tools` list, and the tag a call
   * opens with (`<tool_call>`) when the template writes one.
   * @returns {{ takesTools: boolean, callTag: string | null }}
   */
  chatTemplateTools() {
    return this.#live().chatTemplateTools();
  }

  /**
   * Generates up to `n` tokens after `tokens`; stops after an end-of-text id (included).
   * @param {Uint32Array | number[]} tokens
   * @param {number} n
   * @param {Record<string, unknown>} [options]
   * @returns {Promise<Uint32Array>}
   */
  async generate(tokens, n, options = {}) {
    if (!Number.isSafeInteger(n) || n < 0) {
      throw coded('invalid_argument', `n (tokens to generate) must be an integer >= 0, got ${String(n)}`, RangeError);
    }
    if (isPlainObject(options) && 'maxTokens' in options) {
      throw coded('invalid_argument', 'generate: give the token count as n; maxTokens is for generateText and stream');
    }
    const ids = toTokenIds(tokens);
    const out = [];
    for await (const e of this.#pieces(ids, { ...asOptions(options), maxTokens: n })) out.push(e.id);
    return Uint32Array.from(out);
  }

  /**
   * @param {string | { role: string, content: string }[] | Uint32Array} prompt text, chat
   *   messages, or token ids
   * @param {Record<string, unknown>} [options] sampling, moa, maxTokens (default 256), signal,
   *   onToken, onStep
   * @returns {Promise<{ text: string, tokens: Uint32Array, finishReason: 'stop' | 'length',
   *   steps: object[], constraint?: object, health?: object }>}
   */
  async generateText(prompt, options = {}) {
    let text = '';
    const tokens = [];
    const steps = [];
    let finishReason = /** @type {'stop' | 'length'} */ ('length');
    /** @type {object | undefined} */
    let constraint;
    /** @type {object | undefined} */
    let health;
    for await (const e of this.#pieces(prompt, options)) {
      text += e.text;
      steps.push(e.step);
      if (e.finishReason === 'stop') finishReason = 'stop';
      else tokens.push(e.id);
      if (e.constraint !== undefined) constraint = e.constraint;
      if (e.health !== undefined) health = e.health;
    }
    return {
      text, tokens: Uint32Array.from(tokens), finishReason, steps,
      ...(constraint === undefined ? {} : { constraint }),
      ...(health === undefined ? {} : { health }),
    };
  }

  /**
   * Streams text pieces as they are generated.
   * @param {string | { role: string, content: string }[] | Uint32Array} prompt
   * @param {Record<string, unknown>} [options]
   * @returns {AsyncGenerator<string>}
   */
  async *stream(prompt, options = {}) {
    for await (const e of this.#pieces(prompt, options, true)) {
      if (e.text !== '') yield e.text;
    }
  }

  /**
   * Streams every token as it is generated: `{ id, text, finishReason }` (an end-of-text token
   * comes last, with no text and `finishReason: 'stop'`). Leaving the loop early ends the
   * generation cleanly.
   * @param {string | { role: string, content: string }[] | Uint32Array} prompt
   * @param {Record<string, unknown>} [options]
   * @returns {AsyncGenerator<{ id: number, text: string, finishReason: 'stop' | 'length' | null }>}
   */
  async *streamTokens(prompt, options = {}) {
    for await (const e of this.#pieces(prompt, options, true)) yield token(e);
  }

  /**
   * The tokens of a generation, `onToken` told of each (`{ id, text, finishReason }`, the
   * shape `streamTokens` yields). The prompt is token ids, text, or chat messages.
   * @param {unknown} prompt
   * @param {unknown} options
   * @param {boolean} [preemptible] a later call may take over while the consumer is away
   */
  async *#pieces(prompt, options, preemptible = false) {
    const host = this.#live();
    const { onToken, ...rest } = asOptions(options);
    const tell = toCallback(onToken, 'onToken');
    const ids = ArrayBuffer.isView(prompt)
      ? toTokenIds(prompt)
      : host.encode(typeof prompt === 'string'
        ? toText(prompt, 'prompt')
        : host.chatPrompt(messagesJson(prompt)));
    for await (const e of this.#run(ids, rest, preemptible)) {
      if (tell !== undefined) tell(token(e));
      yield e;
    }
  }

  /**
   * The decode loop, run in Rust: `start` (options checked there, prompt prefilled), then one
   * `next` per token until the loop says it finished, one call into wasm at a time.
   *
   * One generation runs at a time. A second one is refused while the first is working, but a
   * preemptible one (a stream) that is waiting for its consumer gives way: its iterator then
   * throws a "superseded" error, so a stream dropped without `return()` blocks nothing. An
   * AbortSignal aborts the wasm call in flight (its reads are abandoned at once) and the
   * generation rejects with the signal's reason.
   * @param {Uint32Array} ids
   * @param {Record<string, unknown>} options
   * @param {boolean} preemptible
   * @returns {AsyncGenerator<{ id: number, text: string, finishReason: 'stop' | 'length' | null,
   *   step: object, constraint?: object }>}
   */
  async *#run(ids, options, preemptible) {
    this.#live();
    if (this.#batch !== undefined) {
      yield* this.#runTogether(this.#batch, ids, options);
      return;
    }
    const { signal, onStep, ...rest } = options;
    const abort = toSignal(signal);
    const step = toCallback(onStep, 'onStep');
    const json = optionsJson(rest);
    abort?.throwIfAborted();
    const onAbort = () => {
      if (this.#calls.calling === run) this.#host?.abort?.();
    };
    const run = this.#calls.begin(preemptible, () => abort?.removeEventListener?.('abort', onAbort));
    abort?.addEventListener?.('abort', onAbort);
    /** @param {(host: any) => Promise<any>} fn */
    const call = (fn) => this.#calls.call(run, fn, abort);
    try {
      await call((host) => host.start(ids, json));
      for (;;) {
        const e = await call((host) => host.next());
        if (e === null) return;
        if (step !== undefined) step(e.step);
        run.suspended = true;
        yield e;
        run.suspended = false;
        if (run.superseded) throw new Error(SUPERSEDED);
        if (e.finishReason !== null) return;
      }
    } finally {
      run.detach();
      // Reads still in flight (layers prefetched for a token that never came) finish within
      // this generation: in workerd a read begun by one request can never complete inside the
      // next, so none may outlive the request that started it. What they bring stays cached.
      if (this.#calls.current(run) && !this.#disposed) {
        await this.#calls.run((host) => host.drainReads()).catch(() => {});
      }
      this.#calls.end(run);
    }
  }

  /**
   * The decode loop of a shim opened with `maxSequences`: the generation is one sequence of
   * the batch (batch.js), stepped with the others; its signal or its consumer leaving ends it
   * alone (cancelled at the next step), and a failure of its own ends it alone.
   * @param {SequenceBatch} batch
   * @param {Uint32Array} ids
   * @param {Record<string, unknown>} options
   */
  async *#runTogether(batch, ids, options) {
    const { signal, onStep, ...rest } = options;
    const abort = toSignal(signal);
    const step = toCallback(onStep, 'onStep');
    for await (const e of batch.run(ids, optionsJson(rest), abort)) {
      if (step !== undefined) step(e.step);
      yield e;
    }
  }

  /**
   * Prefills `prompt` (token ids) into a new prefill window pinned for `ttlMs` (default 15000,
   * checked in Rust with any other key refused); a generation names it with the option
   * `prefillWindow`. It runs a prefill, so it takes the model as a generation does.
   * @param {Uint32Array | number[]} prompt
   * @param {{ ttlMs?: number }} [options]
   * @returns {Promise<{ id: string, tokens: number, expiresAt: number, replaced: string | null }>}
   */
  async createPrefillWindow(prompt, options = {}) {
    this.#live();
    const ids = toTokenIds(prompt);
    const json = optionsJson(asOptions(options));
    return this.#prefill((host) => host.createPrefillWindow(ids, json));
  }

  /**
   * Extends window `id` to `prompt` (which must start with its tokens; only the new ones are
   * prefilled) and/or gives it `ttlMs` more from now.
   * @param {string} id
   * @param {{ prompt?: Uint32Array | number[], ttlMs?: number }} [update]
   * @returns {Promise<{ id: string, tokens: number, expiresAt: number }>}
   */
  async updatePrefillWindow(id, update = {}) {
    this.#live();
    const key = windowId(id);
    const { prompt, ...rest } = asOptions(update);
    const ids = prompt === undefined || prompt === null ? undefined : toTokenIds(prompt);
    const json = optionsJson(rest);
    return this.#prefill((host) => host.updatePrefillWindow(key, ids, json));
  }

  /**
   * Window `id` (`{ id, tokens, expiresAt }`, expiresAt in ms since the epoch), or null.
   * @param {string} id
   */
  prefillWindow(id) {
    return this.#live().prefillWindow(windowId(id));
  }

  /** Every prefill window held, oldest first. */
  prefillWindows() {
    return this.#live().prefillWindows();
  }

  /**
   * Drops window `id`, freeing its KV for the next; false when there was none.
   * @param {string} id
   * @returns {boolean}
   */
  deletePrefillWindow(id) {
    return this.#live().deletePrefillWindow(windowId(id));
  }

  /**
   * A call that runs a prefill outside a generation: it takes the model as a generation does
   * (refused while another works, superseding a stream waiting for its consumer), and its reads
   * in flight end with it.
   * @template T
   * @param {(host: any) => Promise<T>} fn
   * @returns {Promise<T>}
   */
  async #prefill(fn) {
    const run = this.#calls.begin(false, () => {});
    try {
      return await this.#calls.call(run, fn);
    } finally {
      if (this.#calls.current(run) && !this.#disposed) {
        await this.#calls.run((host) => host.drainReads()).catch(() => {});
      }
      this.#calls.end(run);
    }
  }

  /**
   * Fetches a layer ahead of need; resolves once it is resident. Queued behind earlier calls.
   * @param {number} layer
   * @returns {Promise<void>}
   */
  async prefetchLayer(layer) {
    this.#live();
    if (typeof layer !== 'number') throw coded('invalid_argument', `prefetchLayer: layer must be a number, got ${typeof layer}`);
    await this.#calls.run((host) => host.prefetchLayer(layer));
  }

  /**
   * Aborts the call in flight, whoever began it: its reads are abandoned at once and it
   * rejects with an AbortError (a generation with its signal's reason, if it has one). No-op
   * when idle.
   */
  abort() {
    this.#live().abort();
  }

  /**
   * Takes the shim back from a call whose caller will never resume it. In Cloudflare Workers a
   * request's pending work is canceled when its client goes away (unless it was handed to
   * `ctx.waitUntil`): a generation it was running then never ends, and the shim would stay busy
   * forever. `reclaim()` aborts the call in flight, waits (up to `graceMs`) for it to unwind on
   * its own, and otherwise releases its place itself and forgets its reads in flight, so the
   * next call runs normally. Resolves true when it had to take the shim back, false when there
   * was nothing to take or the call unwound by itself.
   * @param {{ graceMs?: number }} [options]
   * @returns {Promise<boolean>}
   */
  async reclaim(options = {}) {
    const host = this.#live();
    const graceMs = asOptions(options).graceMs ?? 200;
    if (!Number.isSafeInteger(graceMs) || /** @type {number} */ (graceMs) < 0) {
      throw coded('invalid_argument', `graceMs must be an integer >= 0, got ${String(graceMs)}`, RangeError);
    }
    if (this.#calls.idle) return false;
    host.abort();
    const deadline = Date.now() + /** @type {number} */ (graceMs);
    // Timers of this caller's own, so the wait is this request's I/O in workerd.
    const tick = () => new Promise((resolve) => setTimeout(resolve, 5));
    do {
      if (this.#calls.settled) {
        // It unwound (or is a stream waiting for its consumer): the next call may take over.
        this.#calls.supersede();
        return false;
      }
      await tick();
    } while (Date.now() < deadline);
    if (host.busy) {
      // The wasm side still has the call: it is awaiting something the abort did not reach.
      throw coded('busy', 'HostShim.reclaim: the call in flight did not unwind after abort()', Error);
    }
    // The wasm side has unwound, but the JS continuations of the call never ran: release its
    // place here, and forget the reads it began (they can never complete).
    this.#calls.release();
    host.dropReads();
    return true;
  }

  /**
   * Cache and timing counters (see index.d.ts HostStats), plus the wasm instance's memory size
   * (it only grows, so it is also the peak). During an async call, the counters are those from
   * when it began.
   */
  stats() {
    const s = this.#live().stats();
    s.wasmMemoryBytes = this.#memory?.buffer.byteLength;
    return s;
  }

  /** The model's name, architecture and hyperparameters. */
  info() {
    return this.#live().info();
  }

  /**
   * Frees the wasm-side model; idempotent. A call in flight is aborted (its reads abandoned, even
   * one that never settles) and rejects as used after dispose(); the model is freed once it has
   * unwound, which the returned promise waits for.
   * @returns {Promise<void>}
   */
  dispose() {
    if (!this.#disposed) {
      this.#disposed = true;
      if (this.#calls.pending === 0) this.#free();
      else this.#host?.abort?.();
    }
    return this.#freed;
  }

  #free() {
    const host = this.#host;
    this.#host = undefined;
    host?.free?.();
    this.#resolveFreed();
  }

  [Symbol.dispose]() {
    this.dispose();
  }
}

/**
 * An options argument: an object (absent is empty).
 * @param {unknown} options
 * @returns {Record<string, unknown>}
 */
function asOptions(options) {
  if (options === undefined) return {};
  if (!isPlainObject(options)) throw coded('invalid_argument', 'options must be an object');
  return /** @type {Record<string, unknown>} */ (options);
}

/**
 * A prefill window's id: a string (what it means, Rust checks).
 * @param {unknown} id
 * @returns {string}
 */
function windowId(id) {
  if (typeof id !== 'string') throw coded('invalid_argument', `a prefill window id must be a string, got ${typeof id}`);
  return id;
}

/**
 * What a caller sees of a generated token.
 * @param {{ id: number, text: string, finishReason: 'stop' | 'length' | null }} e
 */
function token(e) {
  const t = { id: e.id, text: e.text, finishReason: e.finishReason };
  // On the last token: what COLTRANE did over the generation (when a constraint ran) and what
  // the health monitor saw (when one watched).
  return {
    ...t,
    ...(e.constraint === undefined ? {} : { constraint: e.constraint }),
    ...(e.health === undefined ? {} : { health: e.health }),
  };
}
