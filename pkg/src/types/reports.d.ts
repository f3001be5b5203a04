// What the Rust side reports, as JSON: the serde structs of crates/host (Stats, MemoryPlan,
// PrefixReport), crates/engine (StepInfo, the emitted token), crates/coltrane (StepReport, Metrics)
// and crates/moa (MoaReport). test/contract.generated.ts, written by a Rust test from real values
// of those types, must type-check against these declarations (npm run typecheck), so a field
// added, renamed or retyped on either side fails the build.

/** A token as a generation hands it out (`streamTokens`, `onToken`). */
export interface GeneratedToken {
  id: number;
  /** The text this token completes ('' while a character is incomplete, and for end-of-text). */
  text: string;
  /** Set on the last token: 'stop' at end-of-text, 'length' at maxTokens or a full context. */
  finishReason: 'stop' | 'length' | null;
  /** What COLTRANE did over the generation, on the last token (when a constraint ran). */
  constraint?: ColtraneMetrics;
  /** What the health monitor saw over the generation, on the last token (option `health`). */
  health?: HealthMetrics;
  /** On the first token: the prompt's length and how it was served. */
  prompt?: { tokens: number; prefix: PrefixReport | null };
  /** On the last token: what the generation did. */
  report?: SequenceReport;
}

/** The decode-health monitor's faces (each 0..1) and their sum (docs/health.md). */
export interface HealthFaces {
  waste: number;
  opportunity: number;
  diversity: number;
  score: number;
}

/** The noise colour nearest a periodogram slope α: violet −2, blue −1, white 0, pink 1, brown 2. */
export type NoiseColour = 'violet' | 'blue' | 'white' | 'pink' | 'brown';

export type HealthState = 'normal' | 'pre-collapse' | 'boundary-collapse';

/** The health monitor at a step (`StepInfo.health`, option `health`). */
export interface HealthStepReport {
  /** −ln p of the chosen token under the model's own distribution, nats. */
  surprisal: number;
  entropy: number;
  /** p(top) − p(second). */
  margin: number;
  /** Once the window is full: each series' log–log periodogram slope. */
  alpha?: { surprisal: number; entropy: number; margin: number };
  /** The entropy series' colour, once the window is full. */
  colour?: NoiseColour;
  entropySlope: number;
  repetition: number;
  repetitionTrend: number;
  /** The period of the loop the tokens are in, if any. */
  loopPeriod?: number;
  state: HealthState;
  faces: HealthFaces;
  /** What the policy did: loop continuations banned before the pick, MOA's valve opened after it. */
  actions: { eddyBans: number; valve: boolean };
}

/** What the health monitor saw over a generation. */
export interface HealthMetrics {
  steps: number;
  preCollapseSteps: number;
  boundaryCollapseSteps: number;
  firstPreCollapse?: number;
  firstBoundaryCollapse?: number;
  /** Means over the steps. */
  faces: HealthFaces;
  eddySteps: number;
  valves: number;
  cappedDrafts: number;
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
  /** What the schema's matcher admits beyond the schema (an overlapping `oneOf` it could not make exclusive). */
  relaxations: string[];
  /** Keywords kept as annotations that a validator may assert (a `format` COLTRANE does not enforce). */
  annotations: string[];
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
  /** The health monitor's report (option `health`). */
  health?: HealthStepReport;
} & ({ picker: 'greedy' } | { picker: 'sample' } | ({ picker: 'moa' } & MoaStepReport));

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
  /** What the health monitor saw, when `health` was set. */
  health?: HealthMetrics;
  /** The prompt's length in tokens, and how a window served it (null: it asked for none). */
  promptTokens: number;
  prefix: PrefixReport | null;
  /** What the generation did (absent when it ended without a token). */
  report?: SequenceReport;
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
  /** Reads issued again after a transient failure (they count in `rangeReads` too). */
  readRetries: number;
  /** Read attempts that hit `readTimeoutMs`. */
  readTimeouts: number;
  residentBytes: number;
  peakResidentBytes: number;
  /** Bytes the KV caches have allocated: every generation's, every window's, every prefill window's. */
  kvCacheBytes: number;
  /** Positions a generation's context holds. */
  contextLength: number;
  /** The generations run together: the most at once, running now, admitted and ended so far. */
  sequences: { max: number; active: number; admitted: number; ended: number };
  /** Prefix reuse over every prompt that asked for it, and the windows (KV caches) held. */
  prefixReuse: {
    hits: number; misses: number; mismatches: number; expired: number;
    reusedTokens: number; prefilledTokens: number; windows: number; windowsHeld: number;
  };
  /** The explicit prefill windows held (`createPrefillWindow`). */
  prefillWindows: PrefillWindowStats;
  /** The plan `open` checked against `memoryBudget` (null without one). */
  memoryPlan: MemoryPlan | null;
  openMs: number;
  /** Steps (forward passes over every running generation) and the tokens they made. */
  steps: { steps: number; tokens: number; positions: number; tokensPerStep: number };
  /** The report of the generation that ended last. */
  generation: SequenceReport | null;
  /** Size of the wasm instance's linear memory (it never shrinks: also its peak); HostShim only. */
  wasmMemoryBytes?: number | undefined;
  /** The line's figures; HostShim only. */
  queue?: import('./host.js').LineStats;
}

/** A sequence admitted (WasmHost `admit`): its id, its whole prompt's tokens, how a window served it. */
export interface Admitted {
  id: number;
  promptTokens: number;
  prefix: PrefixReport | null;
}

/** What one generation did (the last token of a stream carries it as `report`). */
export interface SequenceReport {
  /** Tokens of its whole prompt (with `continue`, the conversation continued included). */
  promptTokens: number;
  /** How its prompt used a prefix window or an explicit prefill window (null: it asked for neither). */
  prefix: PrefixReport | null;
  /** From admission to its first token (its prompt's prefill, in steps shared with others). */
  prefillMs: number;
  /** Prompt tokens prefilled (not served from a window). */
  prefillTokens: number;
  /** Wall time between its tokens, after the first. */
  tokenMs: number[];
  /** Layer range reads while it decoded, and per token (0 with every layer resident). */
  decodeLayerReads: number;
  layerReadsPerToken: number;
  /** Tokens it made, and the forward passes they took. */
  decodeTokens: number;
  forwardPasses: number;
  /** Forward passes that verified a draft; draft tokens verified and kept. */
  verifyPasses: number;
  drafted: number;
  accepted: number;
  /** `decodeTokens / forwardPasses` (the first token comes from the prompt's pass). */
  tokensPerPass: number;
}

/** How a prompt's prefill used the prefix windows. */
export interface PrefixReport {
  /**
   * 'hit': the prompt continues (or repeats) a conversation a window held, all of whose prompt it
   * shares was reused; 'mismatch': the best window's conversation went another way before the
   * end of its prompt (the tokens they share were still kept); 'miss': nothing was reused;
   * 'expired': the window that would have served it had outlived `prefixTtlMs`.
   */
  status: 'hit' | 'miss' | 'mismatch' | 'expired' | 'disabled';
  /** Prompt tokens whose KV came from the window. */
  reused: number;
  /** Prompt tokens prefilled. */
  prefilled: number;
  /** The implicit window that served it (0 for an explicit one). */
  window: number;
  /**
   * 'implicit': `reusePrefix` (the parked conversations); 'explicit': `prefillWindow` (the
   * window named, `id`). For an explicit one, 'hit': the window's tokens start the prompt and
   * its KV was copied in; 'miss': no window has that id (or copying it failed); 'mismatch': its
   * tokens do not start the prompt, or leave no token of it to run; 'expired': its time to live
   * ran out (it is dropped); 'disabled': the host keeps none (`prefillWindows: 0`). Every case
   * but 'hit' is a cold prefill.
   */
  kind: 'implicit' | 'explicit';
  id: string | null;
}

/** An explicit prefill window. */
export interface PrefillWindow {
  id: string;
  /** Tokens it holds. */
  tokens: number;
  /** When it expires, in ms since the Unix epoch (as `Date.now()`). */
  expiresAt: number;
}

/** `createPrefillWindow`'s answer: the window, and the one it replaced (the least recently used, when the count was full). */
export interface PrefillWindowCreated extends PrefillWindow {
  replaced: string | null;
}

/** The explicit prefill windows, in `stats()`. */
export interface PrefillWindowStats {
  /** Windows held, and the most the host keeps (`prefillWindows`). */
  count: number;
  max: number;
  /** Tokens they hold, and the bytes their KV caches have allocated. */
  tokens: number;
  kvBytes: number;
  windows: PrefillWindow[];
}

/** What `open` planned under `memoryBudget`, in bytes. */
export interface MemoryPlan {
  resident: number;
  tokenizer: number;
  layers: number;
  kvCache: number;
  /** Every explicit prefill window's KV cache at `prefillWindowMaxTokens` positions. */
  prefillWindows: number;
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
  /** Generations run at once. */
  maxSequences: number;
  /**
   * Where the chat template came from: the `chatTemplate` option, the file, or implied by the
   * vocabulary's special tokens (`name`: gemma, chatml, llama3); null when there is none.
   */
  chatTemplate: { source: 'file' | 'option' | 'implied'; name: string | null } | null;
}

/** Rows of the embedding a split model's coordinator was handed (`CoordinatorStats`). */
export interface RowRounds {
  /** Rounds of `/rows` requests, each a parallel fan-out to the head shards owning the rows. */
  rounds: number;
  /** Of those, rounds for a picked token whose row did not ride with the logits. */
  misses: number;
  /** Rows that came by `/rows`. */
  rowsFetched: number;
  /** Rows that rode with the logits. */
  rowsRiding: number;
}

/**
 * What `WasmCoordinator.stats()` reports (a model split across stations, examples/worker): reads
 * of the file (at open, and since: 0, the invariant of the per-token path), where the embedding
 * rows live, and the rounds of rows fetched.
 */
export interface CoordinatorStats {
  embedding: {
    /** `resident`: the whole table read at open; `sharded`: rows from the head stations. */
    mode: 'resident' | 'sharded';
    /** Rows held (the vocabulary when resident, the rows cached when sharded). */
    rows: number;
    bytes: number;
    rowBytes: number;
    /** Rows of its top ids each head shard sends with its logits (0 when resident). */
    logitRows: number;
  };
  readsAtOpen: number;
  readsSinceOpen: number;
  /** Since open. */
  rows: RowRounds;
  /** The latest generation's reads and rows, once one began. */
  generation: { reads: number; rows: RowRounds } | null;
}
