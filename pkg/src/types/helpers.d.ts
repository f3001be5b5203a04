// MOA and COLTRANE helpers (docs/moa.md, docs/coltrane.md): pure functions over the same Rust
// code the decode loop runs. Node, Bun, Deno and Workers initialize the wasm on import; in
// browsers `await loadWasm()` first.
import type { JsonSchema } from './options.js';
import type { KnotByteSource } from './sources.js';

/**
 * The `coltrane` option for an OpenAI `response_format` (`json_object` → `{ preset: 'json' }`,
 * `json_schema` → `{ preset: 'json', schema }`, `text` → null).
 */
export declare function coltraneFromResponseFormat(responseFormat: {
  type: 'text' | 'json_object' | 'json_schema';
  json_schema?: { name?: string; schema?: JsonSchema; strict?: boolean };
}): { preset: 'json'; schema?: JsonSchema } | null;

/** Why COLTRANE cannot enforce a JSON Schema (the keyword and its path), or null when it can. */
export declare function schemaProblem(schema: JsonSchema): string | null;

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

/** What one isolate of a split model holds at most (bytes), as `planStations` plans it. */
export interface StationPlan {
  kind: 'coordinator' | 'layers' | 'head';
  /** A layer station's layers, `[start, end)`. */
  layers?: [number, number];
  /** A head station's rows of the vocabulary, `[start, end)`. */
  rows?: [number, number];
  /** The file's bytes it reads and keeps (its layers, or the output norm and its LM head rows). */
  weights: number;
  /** The coordinator's tokenizer: the blob, the parsed tokenizer, COLTRANE's vocabulary index. */
  tokenizer: number;
  /** Every kept conversation's KV cache holding the whole context (layer stations). */
  kvCache: number;
  /** Activations of the largest batch, the messages in and out, one read's buffer. */
  activations: number;
  /** The coordinator's whole-vocabulary logits (the answers and their join), a head's slice. */
  logits: number;
  overhead: number;
  total: number;
}

/** The smallest split whose every isolate fits the budget. */
export interface StationLayout {
  /** Layer stations and head stations (each a Worker script of its own). */
  layers: number;
  heads: number;
  budget: number;
  /** Positions each conversation is planned for (capped by the model's context length). */
  context: number;
  /** The layer stations in order, then the head stations, then the coordinator. */
  stations: StationPlan[];
}

/**
 * The fewest layer and head stations a model needs so that every isolate fits `memoryBudget`
 * bytes, from the knot file's index alone. Rejects with code `over_budget` when no split fits.
 */
export declare function planStations(
  source: KnotByteSource,
  options: {
    memoryBudget: number;
    /** Default 2048. */
    maxContext?: number;
    /** Default 'f32' (the stations' default: bit-identical to one process). */
    kvCache?: 'f32' | 'f16';
    /** Positions per message; default 64. */
    maxBatch?: number;
    /** Conversations a layer station keeps a KV cache for; default 4. */
    maxConversations?: number;
    /** Default 4 MiB. */
    maxReadBytes?: number;
  },
): Promise<StationLayout>;
