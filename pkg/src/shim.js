// HostShim: the people-facing API, a thin class over the wasm-bindgen class `WasmHost`
// (crates/host/src/wasm/host.rs). The decode loop, its options, the prompt's rendering and
// encoding and the streamed text live in Rust: this class converts arguments (convert.js), puts
// every call that runs the model through its one line (scheduler.js: generations run together,
// `maxSequences` at once, each with prefix reuse and prefill windows of its own), and handles what
// only JS has (AbortSignal, callbacks). Every failure carries a stable `code` (errors.js,
// docs/errors.md).
//
// The WasmHost contract this class calls:
//   static open(source: KnotByteSource, optionsJson: string,
//               onProgress: ((p: object) => void) | undefined): Promise<WasmHost>
//   readonly vocabSize, layerCount, contextLength, maxSequences: number; eosIds: Uint32Array
//   readonly busy: boolean                      whether an async call has the host
//   dropReads(): number                         forgets reads in flight (after a reclaim)
//   encode(text): Uint32Array;  decode(ids: Uint32Array): string
//   chatPrompt(messagesJson, toolsJson?, addGenerationPrompt?): string
//   chatTemplateTools(): { takesTools, callTag }
//   admit(prompt: Uint32Array | string | { chat, tools?, addGenerationPrompt?, suffix? },
//     optionsJson): { id, promptTokens, prefix }   between steps; the prompt crosses once
//   countTokens(prompt): number
//   cancel(id): boolean;  step(): Promise<{ sequence, token, done, finishReason, report?, error? }[]>
//   reset(): void;  prefetchLayer(layer): Promise<void>;  drainReads(): Promise<void>
//   createPrefillWindow(prompt, optionsJson): Promise<{ id, tokens, expiresAt, replaced }>
//   updatePrefillWindow(id, prompt | undefined, optionsJson): Promise<{ id, tokens, expiresAt }>
//   prefillWindow(id): object | null;  prefillWindows(): object[];  deletePrefillWindow(id): boolean
//   stats(): object;  info(): object            (encode … info also answer during a call)
//   abort(): void                               the call in flight rejects (AbortError)
//   free(): void
import { coded } from './errors.js';
import {
  isPlainObject, messagesJson, optionsJson, toCallback, toJson, toPrompt, toSignal, toText, toTokenIds,
} from './convert.js';
import { Scheduler } from './scheduler.js';
import { resolveHostWasm, runtimeDefaults, wasmMemory } from './resolver.js';
import { checkThreads } from './threads.js';

/** The options HostShim.open keeps in JS (the rest go to Rust). */
const LINE_OPTIONS = ['maxWaiting', 'waitTimeoutMs', 'stallMs', 'preemptMs', 'requestScopedIo', 'onTurn'];

export class HostShim {
  /** @type {any} the wasm-bindgen WasmHost */
  #host;
  #disposed = false;
  /** Resolves once the wasm side is freed. */
  #freed;
  /** @type {() => void} */
  #resolveFreed = () => {};
  /** @type {Scheduler} the one line every call that runs the model goes through */
  #line;
  #vocabSize;
  #layerCount;
  #contextLength;
  #maxSequences;
  /** @type {WebAssembly.Memory | undefined} */
  #memory;
  /** @type {any} the wasm-bindgen namespace the host runs on */
  #ns;

  /**
   * Use HostShim.open.
   * @param {any} host @param {WebAssembly.Memory} [memory] @param {any} [ns]
   * @param {{ maxWaiting?: number, waitTimeoutMs?: number, stallMs?: number, preemptMs?: number,
   *   requestScopedIo?: boolean, onTurn?: (tag: unknown) => void }} [line]
   */
  constructor(host, memory, ns, line = {}) {
    this.#host = host;
    this.#memory = memory;
    this.#ns = ns;
    this.#freed = new Promise((resolve) => {
      this.#resolveFreed = () => resolve(undefined);
    });
    this.#vocabSize = host.vocabSize;
    this.#layerCount = host.layerCount;
    this.#contextLength = host.contextLength;
    this.#maxSequences = host.maxSequences ?? 1;
    const shim = this;
    // What the line runs calls on: the host while it lives.
    const target = {
      admit: (prompt, json) => shim.#live().admit(prompt, json),
      cancel: (id) => shim.#host?.cancel(id) ?? false,
      step: () => shim.#live().step(),
      drainReads: () => shim.#host?.drainReads() ?? Promise.resolve(),
      abort: () => shim.#host?.abort(),
      dropReads: () => shim.#host?.dropReads(),
      get busy() {
        return shim.#host?.busy ?? false;
      },
    };
    this.#line = new Scheduler(target, {
      slots: this.#maxSequences,
      ...line,
      requestScopedIo: line.requestScopedIo ?? runtimeDefaults().requestScopedIo,
      onIdle: () => {
        if (this.#disposed) this.#free();
      },
    });
  }

  /**
   * Opens a knot model. `wasm` (optional) is the wasm-bindgen namespace: omit it to use the
   * package's own (`import * as wasm from 'knot-wasm/wasm'` is the same one). The options are
   * checked in Rust (crates/host/src/options.rs), but for those that stay in JS: `onProgress`,
   * and the line's (`maxWaiting`, `waitTimeoutMs`, `stallMs`, `preemptMs`, `requestScopedIo`,
   * `onTurn`; see scheduler.js).
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
    /** @type {Record<string, any>} */
    const line = {};
    for (const key of LINE_OPTIONS) {
      if (!(key in rest)) continue;
      const v = rest[key];
      delete rest[key];
      const rule = key === 'requestScopedIo' ? 'true or false' : key === 'onTurn' ? 'a function' : 'an integer >= 0';
      const ok = key === 'requestScopedIo' ? typeof v === 'boolean' : key === 'onTurn' ? typeof v === 'function'
        : Number.isSafeInteger(v) && /** @type {number} */ (v) >= 0;
      if (!ok) throw coded('invalid_option', `HostShim.open: ${key} must be ${rule}, got ${String(v)}`);
      line[key] = v;
    }
    // Which build runs (threaded where threads exist and more than one is asked or available)
    // decides the threads the host is opened with.
    const asked = checkThreads(rest.threads);
    const json = optionsJson(rest);
    const { ns, threads } = await resolveHostWasm(wasm, asked);
    const opened = threads === undefined ? json : JSON.stringify({ ...JSON.parse(json), threads });
    const host = await ns.WasmHost.open(source, opened, progress);
    return new HostShim(host, wasmMemory(ns), ns, line);
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

  /** Positions a generation's context holds (under `memoryBudget`, as many as fit). */
  get contextLength() {
    return this.#contextLength;
  }

  /** The most generations that run at once (`maxSequences`; the others wait in line). */
  get maxSequences() {
    return this.#maxSequences;
  }

  /** Generations running now and waiting in line. */
  get sequences() {
    const s = this.#line.stats;
    return { active: s.active, waiting: s.waiting };
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
   * How many tokens `prompt` is (as a generation would run it: a chat rendered and encoded).
   * @param {Prompt} prompt
   * @returns {number}
   */
  countTokens(prompt) {
    return this.#live().countTokens(this.#prompt(prompt));
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
   * @param {Prompt} prompt text, chat messages (or `{ messages, tools }`), or token ids
   * @param {Record<string, unknown>} [options] sampling, moa, maxTokens (default 256), signal,
   *   onToken, onStep
   * @returns {Promise<{ text: string, tokens: Uint32Array, finishReason: 'stop' | 'length',
   *   steps: object[], constraint?: object, health?: object, promptTokens: number,
   *   prefix: object | null, report?: object }>}
   */
  async generateText(prompt, options = {}) {
    let text = '';
    const tokens = [];
    const steps = [];
    let finishReason = /** @type {'stop' | 'length'} */ ('length');
    /** @type {Record<string, unknown>} */
    const more = { promptTokens: 0, prefix: null };
    for await (const e of this.#pieces(prompt, options)) {
      text += e.text;
      steps.push(e.step);
      if (e.finishReason === 'stop') finishReason = 'stop';
      else tokens.push(e.id);
      if (e.prompt !== undefined) Object.assign(more, { promptTokens: e.prompt.tokens, prefix: e.prompt.prefix });
      for (const key of ['constraint', 'health', 'report']) {
        if (e[key] !== undefined) more[key] = e[key];
      }
    }
    return { text, tokens: Uint32Array.from(tokens), finishReason, steps, ...more };
  }

  /**
   * Streams text pieces as they are generated.
   * @param {Prompt} prompt
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
   * comes last, with no text and `finishReason: 'stop'`); the first also says how its prompt was
   * served (`prompt: { tokens, prefix }`), the last what the generation did (`report`, and
   * `constraint` / `health` when they ran). Leaving the loop early ends the generation cleanly.
   * @param {Prompt} prompt
   * @param {Record<string, unknown>} [options]
   * @returns {AsyncGenerator<{ id: number, text: string, finishReason: 'stop' | 'length' | null }>}
   */
  async *streamTokens(prompt, options = {}) {
    for await (const e of this.#pieces(prompt, options, true)) yield token(e);
  }

  /**
   * The prompt as the host's `admit` takes it: token ids, text, or chat messages (rendered and
   * encoded in Rust, so the prompt crosses into wasm once).
   * @param {unknown} prompt
   * @param {boolean} [addGenerationPrompt] for messages (default true)
   */
  #prompt(prompt, addGenerationPrompt) {
    return toPrompt(prompt, addGenerationPrompt);
  }

  /**
   * The tokens of a generation, `onToken` told of each (`{ id, text, finishReason }`, the
   * shape `streamTokens` yields), through the line.
   * @param {unknown} prompt
   * @param {unknown} options
   * @param {boolean} [preemptible] it gives way when its consumer stops pulling while others wait
   */
  async *#pieces(prompt, options, preemptible = false) {
    this.#live();
    const { onToken, onStep, signal, priority, tag, ...rest } = asOptions(options);
    const tell = toCallback(onToken, 'onToken');
    const step = toCallback(onStep, 'onStep');
    const abort = toSignal(signal);
    if (priority !== undefined && typeof priority !== 'boolean') throw coded('invalid_option', 'priority must be true or false');
    const p = this.#prompt(prompt);
    const json = optionsJson(rest);
    for await (const e of this.#line.generate(p, json, { signal: abort, priority: priority === true, preemptible, tag })) {
      if (step !== undefined) step(e.step);
      if (tell !== undefined) tell(token(e));
      yield e;
    }
  }

  /**
   * Prefills `prompt` into a new prefill window pinned for `ttlMs` (default 15000, checked in
   * Rust with any other key refused); a generation names it with the option `prefillWindow`. The
   * prompt is token ids, text, or chat messages (rendered without the assistant turn's opening:
   * the conversation so far). It runs at a step boundary, in line like a generation.
   * @param {Prompt} prompt
   * @param {{ ttlMs?: number, signal?: AbortSignal }} [options]
   * @returns {Promise<{ id: string, tokens: number, expiresAt: number, replaced: string | null }>}
   */
  async createPrefillWindow(prompt, options = {}) {
    this.#live();
    const { signal, tag, ...rest } = asOptions(options);
    const p = this.#prompt(prompt, false);
    const json = optionsJson(rest);
    return this.#line.exclusive(() => this.#live().createPrefillWindow(p, json), { signal: toSignal(signal), tag });
  }

  /**
   * Extends window `id` to `prompt` (which must start with its tokens; only the new ones are
   * prefilled) and/or gives it `ttlMs` more from now.
   * @param {string} id
   * @param {{ prompt?: Prompt, ttlMs?: number, signal?: AbortSignal }} [update]
   * @returns {Promise<{ id: string, tokens: number, expiresAt: number }>}
   */
  async updatePrefillWindow(id, update = {}) {
    this.#live();
    const key = windowId(id);
    const { prompt, signal, tag, ...rest } = asOptions(update);
    const p = prompt === undefined || prompt === null ? undefined : this.#prompt(prompt, false);
    const json = optionsJson(rest);
    return this.#line.exclusive(() => this.#live().updatePrefillWindow(key, p, json), { signal: toSignal(signal), tag });
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
   * Fetches a layer ahead of need; resolves once it is resident. In line like a generation.
   * @param {number} layer
   * @returns {Promise<void>}
   */
  async prefetchLayer(layer) {
    this.#live();
    if (typeof layer !== 'number') throw coded('invalid_argument', `prefetchLayer: layer must be a number, got ${typeof layer}`);
    await this.#line.exclusive(() => this.#live().prefetchLayer(layer));
  }

  /**
   * Forgets the conversations kept for prefix reuse and the prefill windows (cached layers and
   * running generations stay).
   */
  reset() {
    this.#live().reset();
  }

  /**
   * Aborts the call in flight, whoever began it: its reads are abandoned at once and it rejects
   * with an AbortError (a step aborted ends every generation in it). No-op when idle.
   */
  abort() {
    this.#live().abort();
  }

  /**
   * Cache, I/O, memory, sequences and prefix-reuse figures (see index.d.ts HostStats), the
   * line's (`queue`), and the wasm instance's memory size (it only grows, so it is also the
   * peak). Read now, during a step too.
   */
  stats() {
    const s = this.#live().stats();
    s.wasmMemoryBytes = this.#memory?.buffer.byteLength;
    s.queue = this.#line.stats;
    return s;
  }

  /** The model's name, architecture and hyperparameters. */
  info() {
    return this.#live().info();
  }

  /**
   * Frees the wasm-side model; idempotent. Generations waiting or running fail as used after
   * dispose(); a call in flight is aborted, and the model is freed once it has unwound, which the
   * returned promise waits for.
   * @returns {Promise<void>}
   */
  dispose() {
    if (!this.#disposed) {
      this.#disposed = true;
      this.#line.dispose(coded('disposed', 'HostShim: used after dispose()', Error));
      if (this.#host?.busy) this.#host.abort();
      else this.#free();
    }
    return this.#freed;
  }

  #free() {
    const host = this.#host;
    if (host === undefined) return;
    this.#host = undefined;
    host.free?.();
    this.#resolveFreed();
  }

  [Symbol.dispose]() {
    this.dispose();
  }
}

/**
 * @typedef {Uint32Array | string | { role: string, content: string | null }[] |
 *   { messages: { role: string, content: string | null }[], tools?: object[],
 *     addGenerationPrompt?: boolean, suffix?: string }} Prompt
 */

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
  const t = /** @type {any} */ (e);
  // On the first token: how the prompt was served; on the last: what COLTRANE did over the
  // generation (when a constraint ran), what the health monitor saw (when one watched), and the
  // generation's report.
  return {
    id: t.id, text: t.text, finishReason: t.finishReason,
    ...(t.prompt === undefined ? {} : { prompt: t.prompt }),
    ...(t.constraint === undefined ? {} : { constraint: t.constraint }),
    ...(t.health === undefined ? {} : { health: t.health }),
    ...(t.report === undefined ? {} : { report: t.report }),
  };
}
