// knot-wasm/server: the one server over a backend, on Fetch API types (src/server.js).
import type { AgenticOptions, Backend, CompletionRecord, SpeechOptions } from './openai.js';

export interface ServerSettings {
  /** The model's id in requests, /v1/models and /health. */
  modelId: string;
  maxTokens?: number;
  maxBodyBytes?: number;
  /** The most messages a chat request may send (default 1024; past it 400 `too_many_messages`). */
  maxMessages?: number;
  /** The most tools a chat request may send (default 256; past it 400 `too_many_tools`). */
  maxTools?: number;
  /** Who may ask (`createGate`): API keys, limits, CORS. Default: open to whoever reaches the server. */
  gate?: Gate;
  prefixReuse?: boolean;
  terminalProsody?: 'bias' | 'observe' | 'off';
  prefillWindows?: boolean;
  agentic?: AgenticOptions;
  speech?: SpeechOptions | false;
  /** Routes the shell adds (a Worker's `/stations`). */
  routes?: Record<string, { methods: string[]; answer(request: Request): Promise<Response> | Response }>;
  /** Fields the shell adds to `/health` and `/stats`. */
  health?: () => Record<string, unknown>;
  stats?: () => Record<string, unknown>;
  /** Requests `/stats` lists. Default 16. */
  recent?: number;
}

/** What one request adds: `waitUntil` (Workers), a signal, the tag its model calls carry, a record. */
export interface PerRequest {
  waitUntil?: (work: Promise<unknown>) => void;
  signal?: AbortSignal;
  tag?: unknown;
  /** Told each request's record; what it returns is merged into the record `/stats` lists. */
  onDone?: (record: CompletionRecord) => object | void;
  /** The client's address: an open server's limits count against it. */
  client?: string;
  /** The gate's verdict, when the shell asked it already (the Worker does, before its model opens). */
  admitted?: Admitted;
}

/** What one API key may do. `agentic`: the loop on every server (true), on these configured ones, or never. */
export interface Scope {
  name: string;
  agentic: boolean | string[];
  /** Requests per the server's rate window; null: the server's limit. */
  limit: number | null;
  /** Generations at once; null: the server's. */
  concurrent: number | null;
}
export interface ApiKey extends Scope {
  key: string;
}
export interface Principal {
  /** What its limits count against: the key's name, or the client's address on an open server. */
  id: string;
  scope: Scope;
  authenticated: boolean;
}
/** The gate's verdict: who asked (null: a stranger on an open route), or the answer turning them away. */
export type Admitted = { principal: Principal | null; cors: Record<string, string> } | { response: Response };

export interface AccessSettings {
  /** No keys: open to whoever reaches the server. */
  keys?: ApiKey[];
  /** Origins whose browser pages may call (`https://app.example`), or '*'. Default none. */
  corsOrigins?: string[];
  /**
   * Requests per window per key: `limit` per `windowMs` (default a minute) by a token bucket, a
   * key's own `limit` in its place; and/or a Workers Rate Limiting binding (its period named).
   */
  rateLimit?: {
    limit?: number;
    windowMs?: number;
    binding?: { limit(o: { key: string }): Promise<{ success: boolean }> };
    periodSeconds?: number;
  };
  /** Generations at once per key. */
  concurrent?: number;
}

export interface Gate {
  needsKey: boolean;
  admit(request: Request, o?: { openRoute?: boolean; client?: string }): Promise<Admitted>;
  /** A generation begins: the function that ends it; throws a 429 ApiError past the key's limit. */
  enter(principal: Principal): () => void;
  corsHeaders(origin: string | null): Record<string, string>;
  report(): Record<string, unknown>;
}

/** The gate of one server (docs/security.md). */
export declare function createGate(settings?: AccessSettings): Gate;
/** API keys from text: keys separated by commas, spaces or lines, or JSON with scopes. */
export declare function parseApiKeys(text: string, field?: string): ApiKey[];
/** A token bucket per id: `take(id, limit)` lets `limit` requests in per window. */
export declare function tokenBucket(o: { windowMs?: number; now?: () => number }): {
  take(id: string, limit: number): { ok: boolean; retryAfter: number };
};
export declare const MIN_KEY_LENGTH: number;
export declare class AccessConfigError extends Error {
  field: string;
}

/** The server over `backend`: `fetch` answers every route; `recent` is what `/stats` lists. */
export declare function createServer(backend: Backend, settings: ServerSettings): {
  fetch(request: Request, per?: PerRequest): Promise<Response>;
  /** The last requests answered, newest last: each record with what the shell's `onDone` added. */
  recent: (CompletionRecord & Record<string, unknown>)[];
  gate: Gate;
};
