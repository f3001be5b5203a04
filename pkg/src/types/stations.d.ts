// knot-wasm/stations: a model split across stations (src/stations/).
import type { ChatTemplateTools, GenerateTextOptions, Prompt } from './options.js';
import type {
  CoordinatorStats, GeneratedToken, ModelInfo, PrefillWindow, PrefillWindowCreated, PrefixReport,
} from './reports.js';
import type { LineStats } from './host.js';
import type { Backend } from './openai.js';

/**
 * A station on a route: how the transport reaches it (in the Worker, a Durable Object binding),
 * the name it goes by, and its part (`layers=A-B` or `rows=A-B`, named by every request).
 */
export interface Hop {
  address: string;
  name: string;
  query: string;
}

/** What a call and the calls behind it spent: messages, bytes both ways, sequential rounds. */
export interface Traffic {
  messages: number;
  /** Bytes both ways; `back`: of them, the answers'. */
  bytes: number;
  back: number;
  rounds: number;
  /** Bytes of the answer coming back up. */
  answer: number;
}

/** The hops a layer station forwards its output along (header `x-knot-route`). */
export interface Route {
  next: Hop[];
  heads: Hop[] | null;
  /** Rows of their top ids the head shards send along. */
  top: number;
  /** The head shards' largest logits to answer with (0: every one). */
  pick: number;
  /** The step the head shards keep the hidden states as (for `/again`). */
  step: number;
  timeoutMs: number;
}

/**
 * The transport: one request to a station (`path`: step, logits, again, rows, claim, keep,
 * forget, stats; `params` appended to the station's query), resolving to its answer's bytes and the
 * traffic it and the calls behind it made (and the hop assessments the stations attached, the
 * `x-knot-assessments` text), or null when it did not answer within `timeoutMs`. A station's
 * error answer rejects (a StationError).
 */
export type Call = (station: Hop, path: string, body: Uint8Array,
  options: { params?: string; headers?: Record<string, string>; timeoutMs: number }) =>
  Promise<{ bytes: Uint8Array; traffic: Traffic; assessments?: string | null } | null>;

/** The hop assessments' settings (assess.js, docs/mesh-carrier.md). */
export interface HopAssessmentSettings {
  carrierBandwidth: number;
  observerBandwidths: number[];
  patchSize: number;
}

export interface CoordinatorOptions {
  /** Each layer station's address, in order (what `call` reaches it by). */
  layers: string[];
  /** Each head station's address: the vocabulary is cut into as many slices. */
  heads: string[];
  call: Call;
  /** One station call's timeout (a chain's: one per station after it, two for the head shards). Default 60000. */
  timeoutMs?: number;
  /** Hop assessments' settings, or null (default): off. */
  hopAssessment?: HopAssessmentSettings | null;
  /** A wasm-bindgen namespace other than the package's. */
  wasm?: object;
  // The line's (scheduler.js).
  maxWaiting?: number;
  waitTimeoutMs?: number;
  stallMs?: number;
  preemptMs?: number;
  requestScopedIo?: boolean;
  onTurn?: (tag: unknown) => void;
  // The stations' own options (crates/host/src/station/options.rs): the stations must be
  // opened with the same maxContext, maxBatch and maxConversations.
  /** Positions a conversation may hold. Default 2048. */
  maxContext?: number;
  /** Positions a step carries, every sequence's together. Default 64. */
  maxBatch?: number;
  /** The layer stations' KV cache. Default 'f16'. */
  kvCache?: 'f16' | 'f32';
  /** Conversations a layer station holds (running and kept). Default 4. */
  maxConversations?: number;
  maxReadBytes?: number;
  readTimeoutMs?: number;
  readConcurrency?: number;
  /** The embedding table is read whole at open up to this many bytes. Default 64 MiB. */
  embeddingBudget?: number;
  rowCacheBytes?: number;
  /** Rows of its top ids each head station sends with its logits (sharded table). Default 1. */
  logitRows?: number;
  /** Logits each head station answers a step with: its largest this many and a bound on the
   * rest, more only when a pick asks (`/again`); 0: every logit. Default 64, at most 1024. */
  candidates?: number;
  /** Sequences run together. Default 'auto': half of `maxConversations`. */
  maxSequences?: number | 'auto';
  /** Conversations kept for prefix replay. Default (and most): maxConversations less maxSequences. */
  keptConversations?: number;
  /** A chat template instead of the file's. */
  chatTemplate?: string;
}

/** The sequences a coordinator runs, and how prompts used the conversations it kept. */
export interface SequenceStats {
  sequences: { max: number; active: number; admitted: number; ended: number };
  prefixReuse: {
    hits: number; misses: number; mismatches: number; expired: number;
    reusedTokens: number; prefilledTokens: number;
    /** Conversations that may be kept, and those kept now. */
    windows: number; windowsHeld: number;
  };
}

/** WasmCoordinator `admit`: the sequence, its prompt, and the claim to make before its first step. */
export interface CoordinatorAdmitted {
  /** The sequence, and the conversation the layer stations know it by. */
  id: number;
  promptTokens: number;
  prefix: PrefixReport | null;
  /** Claim this prefix of the conversation from every layer station (`hash`: 16 hex digits). */
  claim: { len: number; hash: string } | null;
}

/** `Coordinator.stats()`. */
export interface SplitStats extends SequenceStats {
  wasmMemoryBytes: number | undefined;
  contextLength: number;
  /** How the latest admitted prompt was served (null: it asked for no reuse). */
  prefix: PrefixReport | null;
  stations: { layers: string[]; heads: string[] };
  /** Every station request (`messages`, the chain's too), sequential `rounds`, `bytes` both
   * ways (`back`: the answers', at every hop they cross; `answers`: the head shards' answers
   * as they reach the coordinator, once), rounds of `/again` (picks the head shards' first answers did
   * not settle), `tokens` picked, the coordinator's own `calls` and its time waiting on them
   * (`ms`). */
  hops: { messages: number; rounds: number; bytes: number; back: number; answers: number; again: number; tokens: number; calls: number; ms: number };
  steps: number;
  /** Rounds of each of the latest steps. */
  stepRounds: number[];
  /** The last hop's mesh_carrier_assessment/v1 blobs, one per layer station (with hopAssessment). */
  hopAssessments?: object[];
  coordinator: CoordinatorStats;
  queue: LineStats;
}

/**
 * A model split across stations: the backend the server and the OpenAI module run on (the
 * Backend's methods; its `stats()` are the split's own).
 */
export declare class Coordinator implements Backend {
  static open(source: { rangeGet(start: number, end: number): Promise<Uint8Array> }, options: CoordinatorOptions): Promise<Coordinator>;
  readonly layers: Hop[];
  readonly heads: Hop[];
  readonly maxSequences: number;
  readonly contextLength: number;
  readonly vocabSize: number;
  readonly layerCount: number;
  encode(text: string): Uint32Array;
  chatTemplateTools(): ChatTemplateTools;
  countTokens(prompt: Prompt): number;
  streamTokens(prompt: Prompt, options?: GenerateTextOptions): AsyncGenerator<GeneratedToken, void, undefined>;
  stats(): SplitStats;
  info(): ModelInfo;
  /** Each station's own figures, loading its part first if it has not. */
  stationStats(): Promise<({ station: string } & Record<string, unknown>)[]>;
  /** Always rejects (`disabled`): a split model has prefix replay only. */
  createPrefillWindow(prompt: Prompt, options?: object): Promise<PrefillWindowCreated>;
  prefillWindow(id: string): PrefillWindow | null;
  updatePrefillWindow(id: string, update: object): Promise<PrefillWindow>;
  deletePrefillWindow(id: string): boolean;
  dispose(): void;
}

export declare class StationError extends Error {
  code: 'station_failed';
}
export declare function noTraffic(): Traffic;
/** The route in an `x-knot-route` header (null: none); a bad one throws with `status: 400`. */
export declare function parseRoute(header: string | null, reachable: (address: string) => boolean): Route | null;
export declare function chainTraffic(headers: { get(name: string): string | null }): Traffic | null;
export declare function hopTraffic(behind: Traffic | null, sent: number, answer: number): Traffic;
export declare function chainTimeout(route: Route): number;
export declare function addTraffic(a: Traffic, b: Traffic): Traffic;
export declare function gatherHeads(call: Call, heads: Hop[], message: Uint8Array, ask: { top: number; pick: number; step: number }, timeoutMs: number, traffic: Traffic): Promise<(Uint8Array | Error)[]>;
export declare function bundleAnswers(answers: (Uint8Array | Error)[]): Uint8Array;
export declare function unbundleAnswers(bytes: Uint8Array, count: number): (Uint8Array | StationError)[];

export declare const HOP_ASSESSMENT_DEFAULTS: Readonly<HopAssessmentSettings>;
/** `on`, `off` or JSON settings as the settings (null: off); a bad value throws naming `name`. */
export declare function hopAssessmentSettings(value: string | undefined, name?: string): HopAssessmentSettings | null;
export declare function parseAssessHeader(header: string | null): { hop: number; spectral: object | null; settings: HopAssessmentSettings } | null;
export declare function nextAssessHeader(assess: { hop: number; spectral: object | null; settings: HopAssessmentSettings }): string;
export declare function assessmentsOf(text: string | null): object[];
export declare function hiddenStatesOf(bytes: Uint8Array): { position: number | null; rows: number; dim: number; values: Float32Array } | null;
export declare function assessHop(assess: { hop: number; spectral: object | null; settings: HopAssessmentSettings }, station: string, to: string[], out: Uint8Array): string;
export declare function assessmentsHeader(own: string, behind: string | null): string;
