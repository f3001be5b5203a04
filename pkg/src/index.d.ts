// Public TypeScript surface of knot-wasm (every entry point exports the same names; FileKnotSource
// only from the Node/Bun/Deno entry).

/**
 * Anything that can read byte ranges of a .knot file. `end` is INCLUSIVE. The host bounds every
 * read (`readTimeoutMs`) and retries failed ones (`readRetries`); to say that retrying cannot
 * help, throw or reject with an Error whose `permanent` property is `true`.
 */
export interface KnotByteSource {
  rangeGet(start: number, end: number): Promise<Uint8Array>;
  /**
   * Optional: writes bytes start..end (inclusive) into `target` (exactly that long) and resolves
   * to the number written. The host then reads layers straight into wasm memory (`target` is a
   * view of it) instead of copying each `rangeGet` array in. Nothing may be written into
   * `target` after the promise settles; if wasm memory grows while a read is in flight, `target`
   * detaches and the host reads the range again.
   */
  rangeGetInto?(start: number, end: number, target: Uint8Array): Promise<number>;
  /** File size in bytes, when known: a non-negative integer, or undefined / null. */
  readonly size?: number | null | undefined;
}

export declare class BufferKnotSource implements KnotByteSource {
  constructor(bytes: Uint8Array | ArrayBuffer);
  readonly size: number;
  /** A view into the buffer, not a copy. */
  rangeGet(start: number, end: number): Promise<Uint8Array>;
  /** Copies the range into `target`. */
  rangeGetInto(start: number, end: number, target: Uint8Array): Promise<number>;
}

/** Node, Bun and Deno only. */
export declare class FileKnotSource implements KnotByteSource, AsyncDisposable {
  static open(path: string | URL): Promise<FileKnotSource>;
  readonly size: number;
  rangeGet(start: number, end: number): Promise<Uint8Array>;
  /** Positional reads straight into `target`. */
  rangeGetInto(start: number, end: number, target: Uint8Array): Promise<number>;
  /** Idempotent. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface HttpKnotSourceOptions {
  /** Defaults to globalThis.fetch. */
  fetch?: typeof fetch;
  /** Sent with every request (e.g. Authorization). */
  headers?: Record<string, string>;
  /** Further attempts after a network error, 408, 429 or 5xx. Default 3. */
  retries?: number;
  /** First backoff delay, doubled per attempt (capped at 5 s). Default 200. */
  retryDelayMs?: number;
  /** The file size, if known in advance. */
  size?: number;
}

/**
 * Reads with `Range: bytes=a-b`; accepts a 206 whose Content-Range is exactly `a-b/total`, and a
 * 200 only when the request covers the whole file.
 */
export declare class HttpKnotSource implements KnotByteSource {
  constructor(url: string | URL, options?: HttpKnotSourceOptions);
  /** Constructs and learns the size (HEAD, else a `bytes=0-0` probe). */
  static open(url: string | URL, options?: HttpKnotSourceOptions): Promise<HttpKnotSource>;
  readonly url: string;
  readonly size: number | undefined;
  /**
   * What names this version of the file once a response told it (`etag "…"`, else
   * `last-modified …`); a read answered with another one rejects (the file was replaced).
   */
  readonly validator: string | undefined;
  probeSize(): Promise<number>;
  rangeGet(start: number, end: number): Promise<Uint8Array>;
}

/** Why a CachedKnotSource stopped caching (its reads go on, uncached). */
export interface CacheNotice {
  /** `quota`: the storage quota is full; `cache-error`: the cache failed otherwise. */
  kind: 'quota' | 'cache-error';
  message: string;
  error: unknown;
}

export interface CachedKnotSourceOptions {
  /** Default 'knot-spans'. */
  cacheName?: string;
  /** Default globalThis.caches. */
  caches?: CacheStorage;
  /** What the spans are keyed under (an http(s) URL). Default: the inner source's url. */
  url?: string | URL;
  /** What names this version of the file. Default: its size and the inner source's validator. */
  version?: string;
  /** Called once, when caching stops. */
  onNotice?: (notice: CacheNotice) => void;
}

/**
 * Keeps every span read in a Cache (the Cache API), so a later visit reads the model from the
 * cache; a cache that fails (quota) never fails a read, it stops caching and says so once.
 */
export declare class CachedKnotSource implements KnotByteSource {
  static open(inner: KnotByteSource & { url?: string; validator?: string }, options?: CachedKnotSourceOptions): Promise<CachedKnotSource>;
  /** Deletes the whole cache. Resolves whether there was one. */
  static clear(options?: { cacheName?: string; caches?: CacheStorage }): Promise<boolean>;
  readonly size: number | null | undefined;
  readonly url: string;
  /** False once the cache failed. */
  readonly caching: boolean;
  readonly notice: CacheNotice | undefined;
  stats(): { hits: number; misses: number; bytesFromCache: number; bytesFromSource: number; stored: number; caching: boolean };
  rangeGet(start: number, end: number): Promise<Uint8Array>;
  /** Resolves once every span read so far is stored (or failed to be). */
  flush(): Promise<void>;
}

/** Passed to `onProgress` after every completed range read (open and layer fetches). */
export interface HostProgress {
  /** Bytes read from the source so far. */
  bytesLoaded: number;
  /** Range reads completed so far. */
  rangeReads: number;
}

export interface HostShimOptions {
  /** Layers kept in memory (integer >= 1). Default: all layers. */
  lruCapacity?: number;
  /** Optional bound on the bytes of cached layers. */
  maxResidentBytes?: number;
  /**
   * Layers fetched ahead of the one computing, so several range reads are in flight at once
   * (0 disables prefetch). Default: as many as the cache has room for (`lruCapacity - 1`, at
   * least 1).
   */
  prefetchDepth?: number;
  /**
   * Speculative decoding for every generation that does not set its own (docs/speculative.md):
   * `true` for the defaults (prompt lookup, `{ ngram: 3, maxDraft: 8, adaptive: true }`), or
   * its settings. The tokens are the same as without it; copy-heavy work needs fewer forward
   * passes and, when layers stream, fewer layer reads per token. Default: off.
   */
  draftMode?: boolean | DraftModeOptions;
  onProgress?: (progress: HostProgress) => void;
  /**
   * Longest wait for one range read, in ms, counted from when the host first waits for it; a
   * read that takes longer is abandoned (what it brings later is dropped) and counts as a
   * transient failure. 0 waits forever. Default 30000.
   */
  readTimeoutMs?: number;
  /**
   * Further attempts after a transient failure: a rejection or throw, a timeout, an answer of the
   * wrong length. An error with `permanent: true` (HttpKnotSource: a 4xx other than 408/429, a
   * wrong Content-Range) is not retried. The last failure is reported with the attempt count.
   * Default 2.
   */
  readRetries?: number;
  /** Wait before the first retry, in ms, doubled for each later one (capped at 5 s). Default 100. */
  readBackoffMs?: number;
  /** How the KV cache stores keys and values: 'f16' takes half the memory. Default 'f32'. */
  kvCache?: 'f32' | 'f16';
  /** Positions the context may hold (capped by the model's). Default 4096. */
  maxContext?: number;
  /**
   * Most positions one forward pass runs: a longer prompt is prefilled in chunks of it, which
   * bounds the activations (each chunk reads every layer not cached). Default: the whole prompt
   * at once, or 256 with `memoryBudget`.
   */
  maxBatch?: number;
  /**
   * Bytes of wasm memory the model may take (resident tensors, layer cache, KV caches of every
   * prefix window, activations). `open` checks the plan before reading the tensors and rejects
   * a model that does not fit, naming the numbers; the context becomes the largest up to
   * `maxContext` that fits (see `contextLength`), and the KV cache is allocated up front.
   */
  memoryBudget?: number;
  /** Conversations whose KV caches are kept for `reusePrefix` (1..16). Default 1. */
  prefixWindows?: number;
  /** A prefix window unused for this long (ms) is forgotten instead of reused. Default: never. */
  prefixTtlMs?: number;
  /**
   * The longest single read at open: the tokenizer and resident tensors (tens of MB) come in
   * pieces of this size, so the source never hands over one huge buffer (in a Worker, JS buffers
   * count against the isolate's memory until collected). Default: one read.
   */
  maxReadBytes?: number;
}

export interface DraftModeOptions {
  /** Longest n-gram matched in the conversation (1..8, default 3; shorter ones are tried next). */
  ngram?: number;
  /** Most draft tokens verified in one pass (1..32, default 8). */
  maxDraft?: number;
  /** Size drafts from the acceptance measured so far and the cost of a pass (default true). */
  adaptive?: boolean;
  /**
   * The margin rule's τ: keep going past a kept draft token only where the verifier's top-1 minus
   * top-2 logit margin is at least 2τ. Default: none (the verify pass is bit-identical to
   * step-by-step decoding here).
   */
  margin?: number;
}

export interface SamplingOptions {
  /** 0 (default) is greedy. Not with `moa`. */
  temperature?: number;
  /** 0 (default) disables top-k. Not with `moa`. */
  topK?: number;
  /** 1 (default) disables top-p. Not with `moa`. */
  topP?: number;
  /** 0 (default) disables min-p. Not with `moa`. */
  minP?: number;
  /** 1 (default) disables the penalty. */
  repeatPenalty?: number;
  /** How many recent tokens the penalty looks at. Default 64. */
  repeatLastN?: number;
  /** OpenAI's presence penalty, -2..2: subtracted once from every token generated so far. */
  presencePenalty?: number;
  /** OpenAI's frequency penalty, -2..2: subtracted once per time a token was generated. */
  frequencyPenalty?: number;
  seed?: number | bigint;
  /**
   * MOA ensemble sampling (docs/moa.md): `true` for the defaults, or its settings. MOA picks the
   * token, so `temperature`, `topK`, `topP` and `minP` are rejected alongside it.
   */
  moa?: boolean | MoaOptions;
  /** COLTRANE token-mask constraints (docs/coltrane.md). */
  coltrane?: false | ColtraneOptions;
  /** Speculative decoding for this call (overrides `HostShim.open`'s `draftMode`). */
  draftMode?: boolean | DraftModeOptions;
}

/** JSON Schema (the subset in docs/coltrane.md). */
export type JsonSchema = boolean | { [keyword: string]: unknown };

export interface ColtraneOptions {
  /**
   * `json`: exactly one JSON value, then end-of-text (with `schema`: valid against it);
   * `json_schema`: same, `schema` required; `balanced`: brackets and quotes balance, end only
   * when closed. Hard presets (json) never fall back; `balanced` does.
   */
  preset?: 'json' | 'json_schema' | 'balanced';
  schema?: JsonSchema;
  /** Break repetition loops: `true`, or the longest loop period and the repeats that count. */
  eddy?: boolean | { ngram?: number; repeats?: number };
  /** Deepest bracket nesting `balanced` allows (1..64, default 16). */
  maxDepth?: number;
  /** Soft rules relax when the allowed tokens hold less of the model's probability (default 0.05). */
  fallbackMass?: number;
  /** Near the token limit, lean toward ending the sentence. Default 'off'. */
  prosody?: 'off' | 'observe' | 'bias';
}

/** What COLTRANE did at a step (on the `coltrane` entry of `StepInfo.stages`). */
export interface ColtraneStepReport {
  /** Tokens the final mask allowed. */
  allowed: number;
  /** Soft tiers relaxed because the mask held too little probability. */
  relaxed: number;
  /** The step used the unmasked distribution. */
  fallback: boolean;
  /** The model's top token was masked out. */
  prevented: boolean;
  eddyBans: number;
  prosodyBias: number;
  maskUs: number;
}

/** What COLTRANE did over a generation (`generateText`'s `constraint`). */
export interface ColtraneMetrics {
  steps: number;
  violationsPrevented: number;
  fallbacks: number;
  unmasked: number;
  eddiesBroken: number;
  eddiesReturned: number;
  foldViolations: number;
  maxDepth: number;
  budgetSteps: number;
  /** The schema's required parts could not fit in the token budget. */
  overBudget: boolean;
  prosodySteps: number;
  /** The structure is closed at the end: JSON complete, folds balanced. */
  closed: boolean;
  sentenceEnd: boolean;
  maskUsP50: number;
  maskUsP99: number;
}

export type MoaMerge = 'deficit' | 'uniform' | 'vote';

export interface MoaOptions {
  /** Agents (temperature views of the same logits), 1..32. Default 3. */
  k?: number;
  /** Default 0.7. */
  baseTemperature?: number;
  /** Agent i of k runs at base + spread·(i/(k−1) − ½). Default 0.4. */
  temperatureSpread?: number;
  /** Default 0.01. */
  minTemperature?: number;
  /** Candidates every agent sees (0 = the whole vocabulary). Default 40. */
  topK?: number;
  /** Default 'deficit'. */
  merge?: MoaMerge;
  /** Deficit merge: distance by KL instead of L2. Default false. */
  useKl?: boolean;
  /** INTERFERE gain, 0..1 (0 keeps the spread fixed). Default 0.1. */
  sensitivity?: number;
  /** INTERFERE target for exp(H_hot − H_cold), >= 1. Default φ ≈ 1.618. */
  target?: number;
}

/** What MOA did at a step (present when `picker` is 'moa'). */
export interface MoaStepReport {
  temperatures: number[];
  /** Indices of the agents whose view was finite. */
  survivors: number[];
  /** Fold weight per agent (0 for one raced out). */
  weights: number[];
  /** (survivors − 1) + (vocabulary − candidates when topK > 0). */
  deficit: number;
  /** Entropy of the merged distribution, in nats. */
  entropy: number;
  /** The temperature spread this step ran with. */
  spread: number;
  /** INTERFERE's measurement exp(H_hot − H_cold); null when the step was not measured. */
  ratio: number | null;
  /** No agent survived: the raw argmax was taken. */
  fallback: boolean;
  /** INTERFERE's valve widened the spread after this step. */
  valve: boolean;
}

/** Per-step metadata of the decode pipeline. */
export type StepInfo = {
  token: number;
  /** Logits stages that ran before the pick, and how many logits each changed. */
  stages: ({ stage: string; changed: number } & Partial<ColtraneStepReport>)[];
  /** Tokens the pick could have drawn. */
  candidates: number;
} & ({ picker: 'greedy' } | { picker: 'sample' } | ({ picker: 'moa' } & MoaStepReport));

export interface GenerateOptions extends SamplingOptions {
  signal?: AbortSignal;
  /** Appends to the current conversation instead of starting afresh. */
  continue?: boolean;
  /**
   * The prompt is the whole conversation: the KV cache of the prefix window that shares the most
   * with it is kept, and only the rest is prefilled (see `stats().prefix`). Not with `continue`.
   */
  reusePrefix?: boolean;
  /** Keep generating past end-of-text tokens (benchmarks). */
  ignoreEos?: boolean;
  onToken?: (id: number) => void;
  onStep?: (step: StepInfo) => void;
}

export interface GenerateTextOptions extends SamplingOptions {
  /** Default 256. */
  maxTokens?: number;
  signal?: AbortSignal;
  continue?: boolean;
  reusePrefix?: boolean;
  ignoreEos?: boolean;
  /** Called with each text piece ('' while a character is incomplete) and its token id. */
  onToken?: (piece: string, id: number) => void;
  onStep?: (step: StepInfo) => void;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | (string & {});
  content: string;
}

export interface GenerateTextResult {
  text: string;
  /** The text's tokens (an end-of-text token is not included). */
  tokens: Uint32Array;
  /** 'stop' at an end-of-text token, 'length' at maxTokens or a full context. */
  finishReason: 'stop' | 'length';
  /** One per generated token, the end-of-text one included. */
  steps: StepInfo[];
  /** What the constraint did, when `coltrane` was set. */
  constraint?: ColtraneMetrics;
}

export interface HostStats {
  /** Layer lookups served from the cache or an in-flight prefetch. */
  hits: number;
  /** Layer lookups that had to start a read. */
  misses: number;
  evictions: number;
  residentLayers: number;
  residentLayerBytes: number;
  /** Most layer bytes cached at once (including a layer being prefetched). */
  peakLayerBytes: number;
  bytesFetched: number;
  rangeReads: number;
  residentBytes: number;
  peakResidentBytes: number;
  /** Bytes the KV caches of every prefix window have allocated. */
  kvCacheBytes: number;
  /** Positions the context holds. */
  contextLength: number;
  /** How the last prompt used the prefix windows (with `reusePrefix`), else null. */
  prefix: PrefixReport | null;
  /** The plan `open` checked against `memoryBudget` (null without one). */
  memoryPlan: MemoryPlan | null;
  openMs: number;
  prefillMs: number;
  prefillTokens: number;
  /** Wall time of each decode step since the last prompt. */
  tokenMs: number[];
  /** The last generation: tokens generated, and the forward passes they took. */
  decodeTokens: number;
  forwardPasses: number;
  /** Forward passes that verified a draft; draft tokens verified and kept. */
  verifyPasses: number;
  drafted: number;
  accepted: number;
  /** `decodeTokens / forwardPasses` (the first token comes from the prompt's pass). */
  tokensPerPass: number;
  /** Layer range reads since the prompt, per generated token (0 with every layer resident). */
  layerReadsPerToken: number;
  /** Reads issued again after a transient failure (they count in `rangeReads` too). */
  readRetries: number;
  /** Read attempts that hit `readTimeoutMs`. */
  readTimeouts: number;
  decodeLayerReads: number;
  /** Size of the wasm instance's linear memory (it never shrinks: also its peak). */
  wasmMemoryBytes: number | undefined;
  [key: string]: unknown;
}

/** How a prompt's prefill used the prefix windows. */
export interface PrefixReport {
  /**
   * 'hit': a window held a prefix of the prompt; 'mismatch': the best window's conversation went
   * another way (the tokens they share were still kept); 'miss': no window held anything;
   * 'expired': the window that would have served it had outlived `prefixTtlMs`.
   */
  status: 'hit' | 'miss' | 'mismatch' | 'expired';
  /** Prompt tokens whose KV came from the window. */
  reused: number;
  /** Prompt tokens prefilled. */
  prefilled: number;
  window: number;
}

/** What `open` planned under `memoryBudget`, in bytes. */
export interface MemoryPlan {
  resident: number;
  tokenizer: number;
  layers: number;
  kvCache: number;
  activations: number;
  logits: number;
  overhead: number;
  total: number;
  context: number;
  maxBatch: number;
  logitsRows: number;
}

export interface ModelInfo {
  name: string;
  architecture: string;
  config: Record<string, unknown>;
  contextLength: number;
}

/** The wasm-bindgen namespace (`import * as wasm from 'knot-wasm/wasm'`). */
export interface KnotWasmBindings {
  WasmHost: unknown;
}

export declare class HostShim implements Disposable {
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
  encode(text: string): Uint32Array;
  decode(ids: Uint32Array | number[]): string;
  /** Renders messages with the model's chat template. */
  applyChatTemplate(messages: ChatMessage[]): string;
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
    AsyncGenerator<{ id: number; text: string; finishReason: 'stop' | 'length' | null }, void, undefined>;
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

// ---- MOA and COLTRANE helpers (docs/moa.md, docs/coltrane.md), pure functions over the same
// Rust code the decode loop runs.
// Node, Bun, Deno and Workers initialize the wasm on import; in browsers `await loadWasm()` first.

/**
 * The `coltrane` option for an OpenAI `response_format` (`json_object` → `{ preset: 'json' }`,
 * `json_schema` → `{ preset: 'json', schema }`, `text` → null).
 */
export declare function coltraneFromResponseFormat(responseFormat: {
  type: 'text' | 'json_object' | 'json_schema';
  json_schema?: { name?: string; schema?: JsonSchema; strict?: boolean };
}): { preset: 'json'; schema?: JsonSchema } | null;

/** The agents' temperatures: max(minTemperature, base + spread·(i/(k−1) − ½)) for i in 0..k. */
export declare function createMoaAgents(options?: {
  k?: number;
  baseTemperature?: number;
  temperatureSpread?: number;
  minTemperature?: number;
}): number[];

/**
 * Deficit-weighted (or uniform) fold of distributions; ones holding NaN or ±Infinity are raced
 * out with weight 0, the rest scaled to sum 1 first. `deficit` is survivors − 1.
 */
export declare function deficitWeightedMerge(
  dists: number[][],
  options?: { strategy?: 'deficit' | 'uniform'; useKl?: boolean },
): { merged: number[]; weights: number[]; deficit: number };

// ---- Carrier medium (docs/carrier.md): quantization readings with fiber and copy-index witnesses.
// Not a learned model; it reconstructs no pixels. Node, Bun, Deno and Workers initialize the wasm
// on import; in browsers `await loadWasm()` before constructing a pipeline.

export type CarrierReadingKind = 'resolution' | 'evolution';

export interface CarrierReading {
  observerBandwidth: number;
  /** `resolution`: the observer holds the value exactly; `evolution`: its carrier must gain symbols. */
  reading: CarrierReadingKind;
  observerPosition: number;
  copyIndex: number;
  fiberStart: number;
  fiberSize: number;
  /** Whether the copy index fits the observer's bandwidth (fiberSize <= observerBandwidth). */
  copyIndexRepresentable: boolean;
}

export interface CarrierCell {
  id: string;
  /** In [0, 1]. */
  unitValue: number;
}

export interface CarrierCellAnalysis extends CarrierCell {
  sourcePosition: number;
  readings: CarrierReading[];
}

export interface CarrierMediumAnalysis {
  sourceBandwidth: number;
  observerBandwidths: number[];
  cells: CarrierCellAnalysis[];
}

export interface FiberStates {
  observerBandwidth: number;
  observerPosition: number;
  fiberStart: number;
  fiberSize: number;
  /** Source positions compatible with the observation (listed for fibers up to 2^20). */
  positions: number[];
  /** Their representative unit values k / S. */
  unitValues: number[];
  /** [lo, hi): every unit value compatible with the observation. */
  interval: [number, number];
}

export declare class CarrierMediumPipeline {
  constructor(options: { sourceBandwidth: number; observerBandwidths: number[] });
  analyze(input: { cells: CarrierCell[] }): CarrierMediumAnalysis;
  fiberStates(reading: CarrierReading): FiberStates;
  free(): void;
}

export type SampleRange = 'unit' | 'byte' | [number, number];

export interface CarrierImage {
  width: number;
  height: number;
  channels: number;
  sampleRange: SampleRange;
  /** Row-major, channels interleaved; length = width * height * channels. */
  data: Float32Array | Uint8Array | Uint8ClampedArray;
}

export interface CarrierPatch {
  id: string;
  patchIndex: number;
  x: number;
  y: number;
  width: number;
  height: number;
  channel: number;
  /** Cut by the right or bottom edge. */
  partial: boolean;
  unitValue: number;
  sourcePosition: number;
  readings: CarrierReading[];
}

export interface ImageCarrierAnalysis {
  carrierBandwidth: number;
  observerBandwidths: number[];
  patches: CarrierPatch[];
  [grid: string]: unknown;
}

/** Cell i = patch * channels + channel; per-observer columns are laid out [observer][cell]. */
export interface ImageCarrierColumns {
  cellCount: number;
  carrierBandwidth: number;
  observerBandwidths: Uint32Array;
  grid: unknown;
  sourcePositions: Uint32Array;
  observerPositions: Uint32Array;
  copyIndices: Uint32Array;
  /** 1 = resolution, 0 = evolution. */
  readings: Uint8Array;
}

export declare class ImageCarrierPipeline {
  constructor(options: { carrierBandwidth: number; observerBandwidths: number[]; patchSize: number });
  analyze(image: CarrierImage): ImageCarrierAnalysis;
  analyzeColumnar(image: CarrierImage): ImageCarrierColumns;
  free(): void;
}

// Workers entry only (`workerd` condition): the stations of a model split across Durable
// Objects, and the coordinator that drives them (see examples/worker, stations mode).
export {
  WasmLayerStation,
  WasmHeadStation,
  WasmCoordinator,
} from '../dist/wasm/host.js';
/** Bytes of this isolate's wasm memory, its high-water mark (Workers entry only). */
export declare function wasmMemoryBytes(): number;
