// HostShim, the package's model API (src/shim.js), and loading the wasm.
import type { KnotByteSource } from './sources.js';
import type { ChatMessage, ChatTemplateOptions, ChatTemplateTools, GenerateOptions, GenerateTextOptions, HostShimOptions, Prompt } from './options.js';
import type { Backend } from './openai.js';
import type {
  GenerateTextResult, GeneratedToken, HostStats, ModelInfo, PrefillWindow, PrefillWindowCreated,
} from './reports.js';

/** The wasm-bindgen namespace (`import * as wasm from 'knot-wasm/wasm'`). */
export interface KnotWasmBindings {
  WasmHost: unknown;
}

export declare class HostShim implements Disposable, Backend {
  /**
   * `wasm` is the package's bindings namespace (`import * as wasm from 'knot-wasm/wasm'`, or what
   * `loadWasm()` returns); omit it to use the package's own.
   */
  static open(source: KnotByteSource, wasm: KnotWasmBindings | undefined, options: HostShimOptions): Promise<HostShim>;
  static open(source: KnotByteSource, wasm: KnotWasmBindings): Promise<HostShim>;
  static open(source: KnotByteSource, options?: HostShimOptions): Promise<HostShim>;
  readonly vocabSize: number;
  readonly layerCount: number;
  /** Positions a generation's context holds (under `memoryBudget`, as many as fit). */
  readonly contextLength: number;
  /** Threads this model's matmuls split across now (1 on the one-thread build). */
  readonly threads: number;
  /** Which wasm build runs this model: the threaded one, or the one-thread one. */
  readonly wasmBuild: 'threads' | 'single';
  /** How many generations run at once (`maxSequences`; the others wait in line). */
  readonly maxSequences: number;
  /** Generations running now and waiting in line. */
  readonly sequences: { active: number; waiting: number };
  encode(text: string): Uint32Array;
  decode(ids: Uint32Array | number[]): string;
  /**
   * Renders messages with the model's chat template (or `chatTemplate` given at open); `tools`
   * reach templates that take them.
   */
  applyChatTemplate(messages: ChatMessage[], options?: ChatTemplateOptions): string;
  /** How the chat template handles tools. */
  chatTemplateTools(): ChatTemplateTools;
  /** How many tokens a prompt is, as a generation would run it (a chat rendered and encoded). */
  countTokens(prompt: Prompt): number;
  /**
   * Up to `n` tokens after `tokens`; ends after an end-of-text id (included). Generations run
   * together, `maxSequences` at once; the others wait in line.
   */
  generate(tokens: Uint32Array | number[], n: number, options?: GenerateOptions): Promise<Uint32Array>;
  /** A string prompt is used as is; messages go through the chat template (in Rust). */
  generateText(prompt: Prompt, options?: GenerateTextOptions): Promise<GenerateTextResult>;
  /**
   * Text pieces as they are generated. A stream whose consumer stops pulling while other
   * generations wait for its slot gives way (after `preemptMs`); pulling it afterwards throws a
   * "superseded" Error.
   */
  stream(prompt: Prompt, options?: GenerateTextOptions): AsyncGenerator<string, void, undefined>;
  /**
   * Every token as it is generated, with its text (an end-of-text token comes last, with no text
   * and `finishReason: 'stop'`); the first says how the prompt was served (`prompt`), the last
   * what the generation did (`report`). Leaving the loop early ends the generation cleanly.
   * Gives way as `stream` does.
   */
  streamTokens(prompt: Prompt, options?: GenerateTextOptions):
    AsyncGenerator<GeneratedToken, void, undefined>;
  /**
   * Aborts the call in flight, whoever began it (it rejects with an AbortError; a step aborted
   * ends every generation in it). No-op when idle.
   */
  abort(): void;
  /**
   * Forgets the conversations kept for prefix reuse and the prefill windows; cached layers and
   * running generations stay.
   */
  reset(): void;
  /**
   * Prefills `prompt` (token ids, text, or chat messages — the conversation so far, without the
   * assistant turn's opening) into a new prefill window pinned for `ttlMs` (default 15000); a
   * generation names it with the option `prefillWindow`. When `prefillWindows` are held already,
   * the least recently used is replaced (`replaced`). It runs at a step boundary, in line like a
   * generation. `invalid_argument` over `prefillWindowMaxTokens`; `disabled` with
   * `prefillWindows: 0`.
   */
  createPrefillWindow(prompt: Prompt, options?: { ttlMs?: number; signal?: AbortSignal }): Promise<PrefillWindowCreated>;
  /** The window, or null when there is none with that id (deleted, replaced, expired). */
  prefillWindow(id: string): PrefillWindow | null;
  /** Every window held, oldest first. */
  prefillWindows(): PrefillWindow[];
  /**
   * Extends a window to `prompt` (which must start with its tokens: only the new ones are
   * prefilled; else `invalid_argument`) and/or gives it `ttlMs` more from now (an extension
   * alone keeps its expiry). `not_found` when there is none. Takes the model as
   * `createPrefillWindow` does.
   */
  updatePrefillWindow(id: string, update: { prompt?: Prompt; ttlMs?: number; signal?: AbortSignal }): Promise<PrefillWindow>;
  /** Drops a window and frees its KV for the next; false when there was none. */
  deletePrefillWindow(id: string): boolean;
  /** Fetches a layer ahead of need; resolves once it is resident (in line like a generation). */
  prefetchLayer(layer: number): Promise<void>;
  /** Read now, during a step too. */
  stats(): HostStats;
  info(): ModelInfo;
  /**
   * Idempotent; any later call throws. Generations waiting or running fail as used after
   * dispose(); a call in flight is aborted (even one waiting on a read that never settles); the
   * promise resolves once the wasm side is freed.
   */
  dispose(): Promise<void>;
  [Symbol.dispose](): void;
}

/** Loads and initializes the package's wasm once. */
export declare function loadWasm(): Promise<KnotWasmBindings>;

/**
 * The line in front of a model (src/scheduler.js): generations and jobs first come first served,
 * `slots` sequences at once, one step for all; HostShim and the stations backend each have one.
 */
export declare class Scheduler {
  constructor(target: SchedulerTarget, options: LineOptions & { slots: number; onIdle?: () => void });
  readonly slots: number;
  readonly stats: LineStats;
  readonly idle: boolean;
  generate(prompt: unknown, optionsJson: string, options?: { signal?: AbortSignal; priority?: boolean; preemptible?: boolean; tag?: unknown }):
    AsyncGenerator<GeneratedToken, void, undefined>;
  exclusive<T>(fn: (target: SchedulerTarget) => Promise<T>, options?: { signal?: AbortSignal; tag?: unknown }): Promise<T>;
  retryAfter(): number;
  dispose(error: unknown): void;
}

/** What a Scheduler runs calls on: a WasmHost, or the stations coordinator. */
export interface SchedulerTarget {
  admit(prompt: unknown, optionsJson: string): { id: number; promptTokens: number; prefix: object | null };
  cancel(id: number): unknown;
  step(): Promise<Array<{ sequence: number; token: GeneratedToken | null; done: boolean; finishReason: string | null; report?: object; error?: unknown }>>;
  drainReads?(): Promise<unknown>;
  abort?(): void;
  dropReads?(): unknown;
  readonly busy?: boolean;
}

/** The line's bounds and behaviour (HostShim.open options that stay in JS). */
export interface LineOptions {
  /** Requests that may wait; past it, QueueFull (429). Default unbounded. */
  maxWaiting?: number;
  /** The longest a request waits; then QueueTimeout (429). Default unbounded. */
  waitTimeoutMs?: number;
  /** A step in flight this long belongs to a request that went away: taken back. Default never. */
  stallMs?: number;
  /** A stream not pulled this long gives way when others wait for its slot. Default 500. */
  preemptMs?: number;
  /** A request's I/O and promises are its own (workerd): waiters poll, steps drain reads. Default: the entry point's. */
  requestScopedIo?: boolean;
  /** Before each turn, the tag of the call that runs it (what its I/O counts against). */
  onTurn?: (tag: unknown) => void;
}

/** The line's figures (`stats().queue`). */
export interface LineStats {
  slots: number;
  active: number;
  waiting: number;
  busy: boolean;
  served: number;
  rejected: number;
  timedOut: number;
  reclaimed: number;
  superseded: number;
  peakActive: number;
  peakWaiting: number;
  steps: number;
}

/** The line refused a newcomer (429, `code: 'busy'`). */
export declare class QueueFull extends Error {
  code: 'busy';
  retryAfter: number;
}
/** A newcomer waited past `waitTimeoutMs` (429). */
export declare class QueueTimeout extends Error {
  code: 'busy';
  retryAfter: number;
}
