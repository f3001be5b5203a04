// HostShim: the people-facing API, a thin class over the wasm-bindgen class `WasmHost`.
// The decode loop, its options and the streamed text live in Rust (engine::decode): this file
// converts arguments (token arrays, the options object as JSON), serializes calls (one WasmHost
// runs one async call at a time), pumps tokens out of the loop and handles what only JS has
// (AbortSignal, callbacks).
//
// The WasmHost contract this wrapper calls (exported by crates/host's binding module):
//   static open(source: KnotByteSource, optionsJson: string,
//               onProgress: ((p: object) => void) | undefined): Promise<WasmHost>
//                                               the options (lruCapacity, kvCache, memoryBudget,
//                                               draftMode, …) validated in Rust
//   readonly vocabSize: number; readonly layerCount: number; readonly eosIds: Uint32Array
//   readonly contextLength: number              positions the context holds
//   readonly busy: boolean                      whether an async call has the host
//   dropReads(): number                         forgets reads in flight (after a reclaim)
//   encode(text: string): Uint32Array          decode(ids: Uint32Array): string  (lossy UTF-8)
//   chatPrompt(messagesJson: string): string   rendered with the model's template
//   start(ids: Uint32Array, optionsJson: string): Promise<void>
//                                               validates the options, runs the prompt
//   next(): Promise<{ id, text, finishReason, step, constraint? } | null>
//                                               one token of the generation; null once it ended
//   reset(): void                               forgets the conversation, keeps cached layers
//   prefetchLayer(layer: number): Promise<void> resolves once the layer is resident
//   stats(): object | string (JSON)             camelCase fields of host::Stats
//   info(): object                               name, architecture, config
//     (encode, decode, chatPrompt, stats and info also answer while an async call runs)
//   abort(): void                               the async call in flight rejects (AbortError)
//                                               within a layer; its reads are abandoned
//   free(): void
// and, on the namespace, initSync(): once initialized it returns the instance exports (memory).

const OPEN_OPTIONS = new Set(['lruCapacity', 'maxResidentBytes', 'prefetchDepth', 'draftMode', 'onProgress',
  'readTimeoutMs', 'readRetries', 'readBackoffMs', 'kvCache', 'maxContext', 'maxBatch', 'memoryBudget',
  'prefixWindows', 'prefixTtlMs', 'maxReadBytes']);

/** @type {((wasm: object | undefined) => Promise<object>) | undefined} */
let wasmResolver;

/**
 * Called by each entry point (node.js, browser.js, workerd.js) with the function that turns
 * `wasm` (the namespace passed to open, or undefined for the package's own) into an initialized
 * wasm-bindgen namespace.
 * @param {(wasm: object | undefined) => Promise<object>} resolver
 */
export function setWasmResolver(resolver) {
  wasmResolver = resolver;
}

/** @param {unknown} v */
const isPlainObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v) &&
  !ArrayBuffer.isView(v);

/**
 * @param {object} options
 * @param {Set<string>} known
 * @param {string} where
 */
function rejectUnknownOptions(options, known, where) {
  for (const key of Object.keys(options)) {
    if (!known.has(key)) throw new TypeError(`${where}: unknown option '${key}'`);
  }
}

/**
 * @param {unknown} f
 * @param {string} name
 */
function checkCallback(f, name) {
  if (f !== undefined && typeof f !== 'function') throw new TypeError(`${name} must be a function`);
}

/**
 * @param {unknown} value
 * @param {string} name
 * @param {number} min
 */
function checkInteger(value, name, min) {
  if (!Number.isSafeInteger(value) || /** @type {number} */ (value) < min) {
    throw new RangeError(`${name} must be an integer >= ${min}, got ${String(value)}`);
  }
  return /** @type {number} */ (value);
}

/** @param {Record<string, unknown>} options */
export function checkOpenOptions(options) {
  if (!isPlainObject(options)) throw new TypeError('HostShim.open: options must be an object');
  rejectUnknownOptions(options, OPEN_OPTIONS, 'HostShim.open');
  if (options.draftMode !== undefined && typeof options.draftMode !== 'boolean' &&
    !isPlainObject(options.draftMode)) {
    throw new TypeError(`draftMode must be true, false or { ngram, maxDraft, adaptive, margin }, got ${String(options.draftMode)}`);
  }
  /** @param {string} name @param {number} min */
  const optional = (name, min) => {
    if (options[name] !== undefined) checkInteger(options[name], name, min);
  };
  optional('lruCapacity', 1);
  optional('maxResidentBytes', 1);
  optional('prefetchDepth', 0);
  optional('readTimeoutMs', 0);
  optional('readRetries', 0);
  optional('readBackoffMs', 0);
  optional('maxContext', 1);
  optional('maxBatch', 1);
  optional('memoryBudget', 1);
  optional('prefixWindows', 1);
  optional('maxReadBytes', 1);
  if (options.kvCache !== undefined && options.kvCache !== 'f32' && options.kvCache !== 'f16') {
    throw new TypeError(`kvCache must be 'f32' or 'f16', got ${String(options.kvCache)}`);
  }
  if (options.prefixTtlMs !== undefined &&
    !(typeof options.prefixTtlMs === 'number' && Number.isFinite(options.prefixTtlMs) && options.prefixTtlMs >= 0)) {
    throw new RangeError(`prefixTtlMs must be a number >= 0, got ${String(options.prefixTtlMs)}`);
  }
  if (options.onProgress !== undefined && typeof options.onProgress !== 'function') {
    throw new TypeError('onProgress must be a function');
  }
  const { onProgress, ...rest } = options;
  return {
    onProgress: /** @type {((p: object) => void) | undefined} */ (onProgress),
    // The values are checked again in Rust (host::options::open_options), which names them.
    json: optionsJson(rest),
  };
}

/**
 * The options object as the JSON the Rust side validates (engine::decode::GenerateOptions).
 * JSON has no BigInt, NaN or Infinity: a BigInt goes as its decimal string, NaN and ±Infinity as
 * "NaN" / "Infinity" / "-Infinity", so Rust can name them in its errors.
 * @param {Record<string, unknown>} options
 * @returns {string}
 */
export function optionsJson(options) {
  return JSON.stringify(options, (_key, value) => {
    if (typeof value === 'bigint') return value.toString();
    if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
    return value;
  });
}

/**
 * @param {unknown} ids
 * @param {number | undefined} vocabSize
 * @returns {Uint32Array}
 */
export function toTokenIds(ids, vocabSize) {
  /** @type {Uint32Array} */
  let out;
  if (ids instanceof Uint32Array) {
    out = ids;
  } else if (Array.isArray(ids)) {
    out = new Uint32Array(ids.length);
    ids.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) {
        throw new TypeError(`token id at index ${i} must be an integer >= 0, got ${String(id)}`);
      }
      out[i] = id;
    });
  } else {
    throw new TypeError('token ids must be a Uint32Array or an array of integers');
  }
  if (vocabSize !== undefined) {
    const i = out.findIndex((id) => id >= vocabSize);
    if (i >= 0) throw new RangeError(`token id ${out[i]} at index ${i} is not below the vocabulary size ${vocabSize}`);
  }
  return out;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Text must be well-formed UTF-16: a lone surrogate cannot be encoded as UTF-8, and would
 * otherwise become U+FFFD silently (encode) or a JSON parse error (messages).
 * @param {string} text
 * @param {string} what
 */
export function checkText(text, what) {
  const wellFormed = typeof (/** @type {any} */ (text)).isWellFormed === 'function'
    ? /** @type {any} */ (text).isWellFormed()
    : !LONE_SURROGATE.test(text);
  if (!wellFormed) {
    const at = text.search(LONE_SURROGATE);
    const unit = text.charCodeAt(at).toString(16).toUpperCase();
    throw new TypeError(`${what} has a lone surrogate (\\u${unit}) at index ${at}: it is not valid Unicode text`);
  }
  return text;
}

/** @param {unknown} messages */
export function checkMessages(messages) {
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new TypeError('messages must be a non-empty array of { role, content }');
  }
  return messages.map((m, i) => {
    if (!isPlainObject(m) || typeof m.role !== 'string' || typeof m.content !== 'string') {
      throw new TypeError(`message ${i} must be { role: string, content: string }`);
    }
    return { role: checkText(m.role, `message ${i} role`), content: checkText(m.content, `message ${i} content`) };
  });
}

/**
 * A source's optional `size` must be a byte count when given.
 * @param {unknown} size
 */
export function checkSourceSize(size) {
  if (size === undefined || size === null) return;
  if (!Number.isSafeInteger(size) || /** @type {number} */ (size) < 0) {
    const shown = typeof size === 'number' ? String(size) : `a ${typeof size}`;
    throw new TypeError(`source.size must be a non-negative integer or undefined, got ${shown}`);
  }
}

/**
 * The linear memory of an initialized wasm-bindgen namespace: its initSync returns the instance
 * exports without doing anything once the instance exists.
 * @param {any} ns
 * @returns {WebAssembly.Memory | undefined}
 */
function wasmMemory(ns) {
  try {
    const memory = typeof ns.initSync === 'function' ? ns.initSync()?.memory : undefined;
    return memory instanceof WebAssembly.Memory ? memory : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The generation a HostShim is running. `suspended` while it waits for its consumer (a stream
 * between pulls); `superseded` once a later call took its place.
 * @typedef {{ suspended: boolean, superseded: boolean, epoch: number, preemptible: boolean,
 *   detach: () => void }} Run
 */

const SUPERSEDED = 'HostShim: this stream was superseded by a later call (a stream not pulled to its end gives way to the next generation)';

export class HostShim {
  /** @type {any} the wasm-bindgen WasmHost */
  #host;
  #disposed = false;
  /** Resolves once the wasm side is freed. */
  #freed;
  /** @type {() => void} */
  #resolveFreed = () => {};
  /** Serializes calls: WasmHost runs one async call at a time. */
  #queue = Promise.resolve();
  #busy = 0;
  /** @type {Run | undefined} the generation in progress */
  #generation;
  /** @type {Run | undefined} the generation whose wasm call is running now */
  #calling;
  #vocabSize;
  #layerCount;
  #contextLength;
  /**
   * Bumped by reclaim(): bookkeeping from a call begun before it (whose continuations may run
   * late, or never) no longer counts.
   */
  #epoch = 0;
  /** @type {Set<number>} */
  #eos;
  /** @type {WebAssembly.Memory | undefined} */
  #memory;

  /** Use HostShim.open. @param {any} host @param {WebAssembly.Memory} [memory] */
  constructor(host, memory) {
    this.#host = host;
    this.#memory = memory;
    this.#freed = new Promise((resolve) => {
      this.#resolveFreed = () => resolve(undefined);
    });
    this.#vocabSize = host.vocabSize;
    this.#layerCount = host.layerCount;
    this.#contextLength = host.contextLength;
    this.#eos = new Set(host.eosIds ?? []);
  }

  /**
   * Opens a knot model. `wasm` (optional) is the wasm-bindgen namespace: omit it to use the
   * package's own (`import * as wasm from 'knot-wasm/wasm'` is the same one).
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
    if (typeof source !== 'object' || source === null || typeof source.rangeGet !== 'function') {
      throw new TypeError('HostShim.open: source must implement rangeGet(start, end) (end inclusive)');
    }
    checkSourceSize(/** @type {any} */ (source).size);
    const opts = checkOpenOptions(/** @type {Record<string, unknown>} */ (options));
    if (wasmResolver === undefined) {
      throw new Error('HostShim.open: import HostShim from the package entry (knot-wasm), not from src/shim.js');
    }
    const ns = /** @type {any} */ (await wasmResolver(wasm));
    if (typeof ns?.WasmHost?.open !== 'function') {
      throw new TypeError('HostShim.open: wasm is not the knot-wasm bindings namespace (no WasmHost)');
    }
    const host = await ns.WasmHost.open(source, opts.json, opts.onProgress);
    return new HostShim(host, wasmMemory(ns));
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

  #live() {
    if (this.#disposed) throw new Error('HostShim: used after dispose()');
    return this.#host;
  }

  /**
   * Runs `fn` after every earlier call has finished. A call that dispose() cut short rejects
   * as used after dispose().
   * @template T
   * @param {(host: any) => Promise<T>} fn
   * @returns {Promise<T>}
   */
  #exclusive(fn) {
    const run = async () => {
      const epoch = this.#epoch;
      this.#busy++;
      try {
        return await fn(this.#live());
      } catch (err) {
        this.#live();
        throw err;
      } finally {
        if (epoch === this.#epoch) {
          this.#busy--;
          if (this.#disposed && this.#busy === 0) this.#free();
        }
      }
    };
    const result = this.#queue.then(run, run);
    this.#queue = result.then(() => undefined, () => undefined);
    return result;
  }

  /** @param {string} text @returns {Uint32Array} */
  encode(text) {
    if (typeof text !== 'string') throw new TypeError('encode: text must be a string');
    return this.#live().encode(checkText(text, 'encode: text'));
  }

  /** @param {Uint32Array | number[]} ids @returns {string} */
  decode(ids) {
    const host = this.#live();
    return host.decode(toTokenIds(ids, this.#vocabSize));
  }

  /** @param {{ role: string, content: string }[]} messages @returns {string} */
  applyChatTemplate(messages) {
    const host = this.#live();
    return host.chatPrompt(JSON.stringify(checkMessages(messages)));
  }

  /**
   * Generates up to `n` tokens after `tokens`; stops after an end-of-text id (included).
   * @param {Uint32Array | number[]} tokens
   * @param {number} n
   * @param {Record<string, unknown>} [options]
   * @returns {Promise<Uint32Array>}
   */
  async generate(tokens, n, options = {}) {
    if (!isPlainObject(options)) throw new TypeError('options must be an object');
    checkInteger(n, 'n (tokens to generate)', 0);
    if ('maxTokens' in options) {
      throw new TypeError('generate: give the token count as n; maxTokens is for generateText and stream');
    }
    const { onToken, ...rest } = options;
    checkCallback(onToken, 'onToken');
    const out = [];
    for await (const e of this.#run(tokens, { ...rest, maxTokens: n })) {
      out.push(e.id);
      if (typeof onToken === 'function') onToken(e.id);
    }
    return Uint32Array.from(out);
  }

  /**
   * @param {string | { role: string, content: string }[]} prompt text, or chat messages
   * @param {Record<string, unknown>} [options] sampling, moa, maxTokens (default 256), signal,
   *   onToken, onStep
   * @returns {Promise<{ text: string, tokens: Uint32Array, finishReason: 'stop' | 'length',
   *   steps: object[], constraint?: object }>}
   */
  async generateText(prompt, options = {}) {
    let text = '';
    const tokens = [];
    const steps = [];
    let finishReason = /** @type {'stop' | 'length'} */ ('length');
    /** @type {object | undefined} */
    let constraint;
    for await (const e of this.#pieces(prompt, options)) {
      text += e.text;
      steps.push(e.step);
      if (e.finishReason === 'stop') finishReason = 'stop';
      else tokens.push(e.id);
      if (e.constraint !== undefined) constraint = e.constraint;
    }
    return constraint === undefined
      ? { text, tokens: Uint32Array.from(tokens), finishReason, steps }
      : { text, tokens: Uint32Array.from(tokens), finishReason, steps, constraint };
  }

  /**
   * Streams text pieces as they are generated.
   * @param {string | { role: string, content: string }[]} prompt
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
   * @param {string | { role: string, content: string }[] | Uint32Array} prompt text, chat
   *   messages, or token ids
   * @param {Record<string, unknown>} [options]
   * @returns {AsyncGenerator<{ id: number, text: string, finishReason: 'stop' | 'length' | null }>}
   */
  async *streamTokens(prompt, options = {}) {
    for await (const e of this.#pieces(prompt, options, true)) {
      yield { id: e.id, text: e.text, finishReason: e.finishReason };
    }
  }

  /**
   * @param {string | { role: string, content: string }[] | Uint32Array} prompt
   * @param {Record<string, unknown>} options
   * @param {boolean} [preemptible] a later call may take over while the consumer is away
   */
  async *#pieces(prompt, options, preemptible = false) {
    const host = this.#live();
    if (!isPlainObject(options)) throw new TypeError('options must be an object');
    const ids = ArrayBuffer.isView(prompt)
      ? prompt
      : host.encode(typeof prompt === 'string'
        ? checkText(prompt, 'prompt')
        : host.chatPrompt(JSON.stringify(checkMessages(prompt))));
    const { onToken, ...rest } = options;
    checkCallback(onToken, 'onToken');
    for await (const e of this.#run(ids, rest, preemptible)) {
      if (typeof onToken === 'function') onToken(e.text, e.id);
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
   * @param {Uint32Array | number[]} tokens
   * @param {Record<string, unknown>} options
   * @param {boolean} [preemptible]
   * @returns {AsyncGenerator<{ id: number, text: string, finishReason: 'stop' | 'length' | null,
   *   step: object, constraint?: object }>}
   */
  async *#run(tokens, options, preemptible = false) {
    this.#live();
    const { signal, onStep, ...rest } = options;
    const ids = toTokenIds(tokens, this.#vocabSize);
    if (signal !== undefined && (typeof signal !== 'object' || signal === null ||
      typeof (/** @type {any} */ (signal).aborted) !== 'boolean')) {
      throw new TypeError('signal must be an AbortSignal');
    }
    const abort = /** @type {AbortSignal | undefined} */ (signal);
    checkCallback(onStep, 'onStep');
    const json = optionsJson(rest);

    abort?.throwIfAborted();
    const previous = this.#generation;
    if (previous !== undefined) {
      if (!(previous.preemptible && previous.suspended)) {
        throw new Error('HostShim: another generation is in progress; await it first');
      }
      previous.superseded = true;
      previous.detach();
    }
    const onAbort = () => {
      if (this.#calling === run) this.#host?.abort?.();
    };
    /** @type {Run} */
    const run = {
      suspended: false,
      superseded: false,
      epoch: this.#epoch,
      preemptible,
      detach: () => abort?.removeEventListener?.('abort', onAbort),
    };
    this.#generation = run;
    abort?.addEventListener?.('abort', onAbort);
    /**
     * One wasm call of this generation, queued behind earlier calls.
     * @template T
     * @param {(host: any) => Promise<T>} fn
     * @returns {Promise<T>}
     */
    const call = (fn) => this.#exclusive(async (host) => {
      if (run.superseded) throw new Error(SUPERSEDED);
      abort?.throwIfAborted();
      this.#calling = run;
      try {
        return await fn(host);
      } catch (err) {
        // Whatever the wasm side said, an aborted call rejects with the signal's reason.
        abort?.throwIfAborted();
        throw err;
      } finally {
        this.#calling = undefined;
      }
    });
    try {
      await call((host) => host.start(ids, json));
      for (;;) {
        const e = await call((host) => host.next());
        if (e === null) return;
        if (typeof onStep === 'function') onStep(e.step);
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
      if (!run.superseded && !this.#disposed && run.epoch === this.#epoch) {
        await this.#exclusive((host) => host.drainReads()).catch(() => {});
      }
      if (this.#generation === run) this.#generation = undefined;
    }
  }

  /**
   * Fetches a layer ahead of need; resolves once it is resident. Queued behind earlier calls.
   * @param {number} layer
   * @returns {Promise<void>}
   */
  async prefetchLayer(layer) {
    this.#live();
    if (!Number.isSafeInteger(layer) || layer < 0 || (this.#layerCount !== undefined && layer >= this.#layerCount)) {
      throw new RangeError(`prefetchLayer: layer must be an integer in [0, ${this.#layerCount}), got ${String(layer)}`);
    }
    await this.#exclusive((host) => host.prefetchLayer(layer));
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
    const graceMs = options.graceMs ?? 200;
    checkInteger(graceMs, 'graceMs', 0);
    if (this.#busy === 0 && this.#generation === undefined) return false;
    host.abort();
    const deadline = Date.now() + graceMs;
    // Timers of this caller's own, so the wait is this request's I/O in workerd.
    const tick = () => new Promise((resolve) => setTimeout(resolve, 5));
    do {
      if (this.#busy === 0 && (this.#generation === undefined || this.#generation.suspended)) {
        // It unwound (or is a stream waiting for its consumer): the next call may take over.
        if (this.#generation !== undefined) {
          this.#generation.superseded = true;
          this.#generation.detach();
          this.#generation = undefined;
        }
        return false;
      }
      await tick();
    } while (Date.now() < deadline);
    if (host.busy) {
      // The wasm side still has the call: it is awaiting something the abort did not reach.
      throw new Error('HostShim.reclaim: the call in flight did not unwind after abort()');
    }
    // The wasm side has unwound, but the JS continuations of the call never ran: release its
    // place here, and forget the reads it began (they can never complete).
    this.#epoch++;
    this.#busy = 0;
    this.#queue = Promise.resolve();
    this.#calling = undefined;
    if (this.#generation !== undefined) {
      this.#generation.superseded = true;
      this.#generation.detach();
      this.#generation = undefined;
    }
    host.dropReads();
    return true;
  }

  /**
   * Cache and timing counters (see index.d.ts HostStats), plus the wasm instance's memory size
   * (it only grows, so it is also the peak). During an async call, the counters are those from
   * when it began.
   */
  stats() {
    const raw = this.#live().stats();
    const s = typeof raw === 'string' ? JSON.parse(raw) : raw;
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
      if (this.#busy === 0) this.#free();
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
