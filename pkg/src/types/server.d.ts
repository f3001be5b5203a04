// knot-wasm/server: the one server over a backend, on Fetch API types (src/server.js).
import type { AgenticOptions, Backend, CompletionRecord, SpeechOptions } from './openai.js';

export interface ServerSettings {
  /** The model's id in requests, /v1/models and /health. */
  modelId: string;
  maxTokens?: number;
  maxBodyBytes?: number;
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
}

/** The server over `backend`: `fetch` answers every route; `recent` is what `/stats` lists. */
export declare function createServer(backend: Backend, settings: ServerSettings): {
  fetch(request: Request, per?: PerRequest): Promise<Response>;
  /** The last requests answered, newest last: each record with what the shell's `onDone` added. */
  recent: (CompletionRecord & Record<string, unknown>)[];
};
