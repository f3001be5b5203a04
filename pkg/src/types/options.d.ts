// What HostShim.open and each generation accept. The options are checked in Rust
// (crates/host/src/options.rs, crates/engine/src/decode/options.rs): an unknown key or a value out
// of range rejects with code `invalid_option` and `param` naming it.
import type { GeneratedToken, StepInfo } from './reports.js';
import type { LineOptions } from './host.js';

/** Passed to `onProgress` after every completed range read (open and layer fetches). */
export interface HostProgress {
  /** Bytes read from the source so far. */
  bytesLoaded: number;
  /** Range reads completed so far. */
  rangeReads: number;
}

export interface HostShimOptions extends LineOptions {
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
   * bounds the activations (each chunk reads every layer not cached). Default: 512 when every
   * layer stays cached (chunks then cost no speed), the whole prompt at once when layers stream,
   * or 256 with `memoryBudget` or `maxSequences` (a chunk is then what a new prompt delays the
   * generations running beside it by).
   */
  maxBatch?: number;
  /**
   * Bytes of wasm memory the model may take (resident tensors, layer cache, KV caches of every
   * prefix window, activations). `open` checks the plan before reading the tensors and rejects
   * a model that does not fit, naming the numbers; the context becomes the largest up to
   * `maxContext` that fits (see `contextLength`), and the KV cache is allocated up front.
   */
  memoryBudget?: number;
  /**
   * KV caches kept beyond one per generation (0..64): a generation that ends parks its
   * conversation in its cache for `reusePrefix` and `continue`, so more caches keep the
   * prefixes of more conversations than run at once. Each counts in the memory plan at the
   * whole context. Default 0.
   */
  prefixWindows?: number;
  /** A prefix window unused for this long (ms) is forgotten instead of reused. Default: never. */
  prefixTtlMs?: number;
  /**
   * Explicit prefill windows (`createPrefillWindow`) kept at once (0..16; 0 disables them).
   * Default 1. Each one's KV cache counts in the memory plan at `prefillWindowMaxTokens`.
   */
  prefillWindows?: number;
  /** The most tokens one prefill window holds (>= 1). Default 512. */
  prefillWindowMaxTokens?: number;
  /**
   * Generations that run at once (1..64, or 'auto'): `generate`, `generateText`, `stream` and
   * `streamTokens` calls run together — each step runs one forward pass for all of them (their
   * rows share each matmul), and each one's tokens are the ones it gets alone, with prefix reuse
   * and prefill windows of its own. Past this many, calls wait in line. Each counts a KV cache in
   * the memory plan. 'auto': as many as `memoryBudget` holds at `maxContext` (at most 16), 4
   * without a budget. Default 1.
   */
  maxSequences?: number | 'auto';
  /**
   * Threads the matmuls split their rows across, 1..=256 (output identical at every count).
   * More than 1 runs the model on the threaded wasm build (shared memory; workers started by the
   * package: `node:worker_threads` in Node, Bun and Deno, module Web Workers in cross-origin
   * isolated pages); where threads do not exist (Workers, pages without COOP/COEP) the
   * one-thread build runs instead (`HostShim.threads` says which). The pool is the wasm
   * instance's: the last open's count holds for every model on it. Default: the available
   * cores (`navigator.hardwareConcurrency` / `os.availableParallelism()`), at most 8.
   */
  threads?: number;
  /**
   * The longest single read at open: the tokenizer and resident tensors (tens of MB) come in
   * pieces of this size, so the source never hands over one huge buffer (in a Worker, JS buffers
   * count against the isolate's memory until collected). Default: one read.
   */
  maxReadBytes?: number;
  /**
   * A chat template used instead of the file's (a Jinja template, as llama-server's
   * `--chat-template-file`): for a model whose file has none, or a template that takes tools.
   */
  chatTemplate?: string;
  /**
   * Pieces of one long read (see `maxReadBytes`) in flight at once, 1 to 6 (a Worker keeps at
   * most 6 connections open per invocation). They are appended in order; memory peaks at the
   * span plus this many pieces. Default: 4.
   */
  readConcurrency?: number;
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
  /** The decode-health monitor (docs/health.md): `true` for its defaults, its policy acting. */
  health?: boolean | HealthOptions;
}

/** The decode-health monitor's settings; every key optional. */
export interface HealthOptions {
  /** Steps in the sliding window (16..1024, default 64). */
  window?: number;
  thresholds?: {
    preAlpha?: number;
    preEntropySlope?: number;
    preRepetition?: number;
    /** 2..16 */
    collapseRepeats?: number;
    collapseEntropy?: number;
  };
  /** Which actions the policy takes (each default true). */
  policy?: { capDrafts?: boolean; moaValve?: boolean; eddy?: boolean };
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

export interface GenerateOptions extends SamplingOptions {
  signal?: AbortSignal;
  /** Appends to the current conversation instead of starting afresh. */
  continue?: boolean;
  /**
   * The prompt is the whole conversation: the KV cache of the prefix window that shares the most
   * with it is kept, and only the rest is prefilled (see `stats().prefix`). Not with `continue`.
   */
  reusePrefix?: boolean;
  /**
   * The id of a prefill window (`createPrefillWindow`) whose tokens start the prompt (the whole
   * conversation): its KV is copied in and only the rest is prefilled; the window stays. Any
   * other case is a cold prefill (`stats().prefix` says why). Wins over `reusePrefix`; not with
   * `continue`.
   */
  prefillWindow?: string;
  /** Keep generating past end-of-text tokens (benchmarks). */
  ignoreEos?: boolean;
  /** Called with each token as it is generated (the shape `streamTokens` yields). */
  onToken?: (token: GeneratedToken) => void;
  onStep?: (step: StepInfo) => void;
}

export interface GenerateTextOptions extends SamplingOptions {
  /** Default 256. */
  maxTokens?: number;
  signal?: AbortSignal;
  continue?: boolean;
  reusePrefix?: boolean;
  prefillWindow?: string;
  ignoreEos?: boolean;
  /**
   * This generation continues a request already being answered (an agentic turn, a tool call's
   * phase): it waits in line past `maxWaiting` and `waitTimeoutMs`. Default false.
   */
  priority?: boolean;
  /** What the steps it runs count their I/O against (passed to `onTurn`). */
  tag?: unknown;
  /**
   * Called with each token as it is generated (the shape `streamTokens` yields; `text` is ''
   * while a character is incomplete).
   */
  onToken?: (token: GeneratedToken) => void;
  onStep?: (step: StepInfo) => void;
}

/**
 * A prompt: text (encoded with the model's BOS), token ids, or chat messages rendered with the
 * model's template in Rust (`tools` for templates that take them; `suffix`: text after the
 * rendered chat).
 */
export type Prompt = string | Uint32Array | ChatMessage[] |
  { messages: ChatMessage[]; tools?: object[]; addGenerationPrompt?: boolean; suffix?: string };

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | (string & {});
  /** null: an assistant turn that only calls tools. */
  content: string | null;
  /** An assistant turn's calls, arguments as objects (what Hugging Face templates read). */
  tool_calls?: { id?: string; type?: 'function'; function: { name: string; arguments: unknown } }[];
  /** A tool turn: the call it answers. */
  tool_call_id?: string;
  name?: string;
}

export interface ChatTemplateOptions {
  /** OpenAI's tools list, for templates that take tools. */
  tools?: object[];
  /** false: without the assistant turn's opening (a conversation so far). Default true. */
  addGenerationPrompt?: boolean;
}

/** How the chat template handles tools. */
export interface ChatTemplateTools {
  /** The template reads a `tools` variable. */
  takesTools: boolean;
  /** The tag a call opens with (`<tool_call>`), when the template writes one. */
  callTag: string | null;
}
