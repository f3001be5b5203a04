// HostShim, the package's model API (src/shim.js), and loading the wasm.
import type { KnotByteSource } from './sources.js';
import type { ChatMessage, ChatTemplateOptions, ChatTemplateTools, GenerateOptions, GenerateTextOptions, HostShimOptions } from './options.js';
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
  /** Positions the context holds (under `memoryBudget`, as many as fit). */
  readonly contextLength: number;
  /** Threads this model's matmuls split across now (1 on the one-thread build). */
  readonly threads: number;
  /** Which wasm build runs this model: the threaded one, or the one-thread one. */
  readonly wasmBuild: 'threads' | 'single';
  /** The `maxSequences` option: how many generations run at once; undefined: one at a time. */
  readonly maxSequences: number | undefined;
  /** Generations running now and waiting for a slot (with `maxSequences`). */
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
  /**
   * Up to `n` tokens after `tokens`; ends after an end-of-text id (included). One generation runs
   * at a time: another one while it works is refused.
   */
  generate(tokens: Uint32Array | number[], n: number, options?: GenerateOptions): Promise<Uint32Array>;
  /** A string prompt is used as is; messages go through the chat template. */
  generateText(prompt: string | ChatMessage[] | Uint32Array, options?: GenerateTextOptions): Promise<GenerateTextResult>;
  /**
   * Text pieces as they are generated. A stream waiting for its consumer gives way to the next
   * generation (a stream dropped without `return()` blocks nothing); pulling it afterwards throws
   * a "superseded" Error.
   */
  stream(prompt: string | ChatMessage[] | Uint32Array, options?: GenerateTextOptions): AsyncGenerator<string, void, undefined>;
  /**
   * Every token as it is generated, with its text (an end-of-text token comes last, with no text
   * and `finishReason: 'stop'`); a Uint32Array prompt is token ids. Leaving the loop early ends
   * the generation cleanly. Gives way to the next generation as `stream` does.
   */
  streamTokens(prompt: string | ChatMessage[] | Uint32Array, options?: GenerateTextOptions):
    AsyncGenerator<GeneratedToken, void, undefined>;
  /**
   * Aborts the call in flight, whoever began it (it rejects with an AbortError, or its signal's
   * reason). No-op when idle.
   */
  abort(): void;
  /**
   * Takes the shim back from a call whose caller will never resume it — in Workers, a request
   * canceled when its client went away, unless its work was handed to `ctx.waitUntil`. Aborts the
   * call, waits up to `graceMs` (default 200) for it to unwind, else releases its place and
   * forgets its reads in flight. Resolves true when it had to take the shim back.
   */
  reclaim(options?: { graceMs?: number }): Promise<boolean>;
  /**
   * Prefills `prompt` (token ids) into a new prefill window pinned for `ttlMs` (default 15000);
   * a generation names it with the option `prefillWindow`. When `prefillWindows` are held
   * already, the least recently used is replaced (`replaced`). Runs a prefill, so it takes the
   * model as a generation does (`busy` while another works; a stream waiting for its consumer
   * is superseded). `invalid_argument` over `prefillWindowMaxTokens`; `disabled` with
   * `prefillWindows: 0`.
   */
  createPrefillWindow(prompt: Uint32Array | number[], options?: { ttlMs?: number }): Promise<PrefillWindowCreated>;
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
  updatePrefillWindow(id: string, update: { prompt?: Uint32Array | number[]; ttlMs?: number }): Promise<PrefillWindow>;
  /** Drops a window and frees its KV for the next; false when there was none. */
  deletePrefillWindow(id: string): boolean;
  /** Fetches a layer ahead of need; resolves once it is resident (queued behind earlier calls). */
  prefetchLayer(layer: number): Promise<void>;
  /** Works during a call too, with the counters from when that call began. */
  stats(): HostStats;
  info(): ModelInfo;
  /**
   * Idempotent; any later call throws. A call in flight is aborted (even one waiting on a read
   * that never settles) and rejects as used after dispose(); the promise resolves once the wasm
   * side is freed.
   */
  dispose(): Promise<void>;
  [Symbol.dispose](): void;
}

/** Loads and initializes the package's wasm once. */
export declare function loadWasm(): Promise<KnotWasmBindings>;

/** A token as a batch step hands it over (what `streamTokens` yields). */
export interface BatchToken {
  id: number;
  text: string;
  finishReason: 'stop' | 'length' | null;
  step: object;
  constraint?: object;
  health?: object;
}

/**
 * What a {@link SequenceBatch} steps: a host of several sequences. `WasmHost` opened with
 * `maxSequences` is one; so is a coordinator over stations (examples/worker/src/split.js).
 */
export interface SequenceTarget {
  admit(ids: Uint32Array, optionsJson: string): number;
  cancel(id: number): unknown;
  /** One step of every sequence: one event per sequence that made a token or ended. */
  step(): Promise<Array<{ sequence: number; token: BatchToken | null; done: boolean; error?: Error }>>;
  /** Ends what a step left in flight (reads, station calls). */
  drainReads(): Promise<unknown>;
}

/**
 * Many generations stepped together (HostShim's batching, opened with `maxSequences`): no pump
 * of its own — a generation waiting for a token runs the next step itself; past `max`,
 * generations wait in order for a slot; one leaving or aborting ends alone.
 */
export declare class SequenceBatch {
  static over(target: SequenceTarget, max: number): SequenceBatch;
  /** Sequences admitted and not yet ended. */
  readonly active: number;
  /** Generations waiting for a slot. */
  readonly waiting: number;
  /** One generation in the batch, token by token (`optionsJson`: the generation options). */
  run(ids: Uint32Array, optionsJson: string, signal?: AbortSignal): AsyncGenerator<BatchToken, void, undefined>;
}
