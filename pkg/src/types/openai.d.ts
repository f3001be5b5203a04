// knot-wasm/openai: OpenAI's API over a model, on Fetch API types.
import type { ChatMessage, ChatTemplateOptions, ChatTemplateTools, GenerateTextOptions } from './options.js';
import type { GeneratedToken, HostStats, PrefillWindow, PrefillWindowCreated } from './reports.js';

/**
 * What the OpenAI module runs on: the package's `HostShim` implements it, and so does the Worker's
 * stations coordinator (examples/worker/src/split.js).
 */
export interface Backend {
  encode(text: string): Uint32Array;
  applyChatTemplate(messages: ChatMessage[], options?: ChatTemplateOptions): string;
  chatTemplateTools(): ChatTemplateTools;
  /** One generation at a time: the server's line (OpenAIOptions.acquire) keeps them in order. */
  streamTokens(prompt: Uint32Array, options?: GenerateTextOptions & { prefillWindow?: string }):
    AsyncGenerator<GeneratedToken, void, undefined>;
  /** `prefix`: how the last prompt's prefill used a window. */
  stats(): Pick<HostStats, 'prefix'>;
  createPrefillWindow(prompt: Uint32Array, options?: { ttlMs?: number }): Promise<PrefillWindowCreated>;
  prefillWindow(id: string): PrefillWindow | null;
  /** Rejects with code `not_found` for an unknown id. */
  updatePrefillWindow(id: string, update: { prompt?: Uint32Array; ttlMs?: number }): Promise<PrefillWindow>;
  deletePrefillWindow(id: string): boolean;
}

/** A place in the server's line of requests: `progress` on every token, `release` at the end. */
export interface Lease {
  since: number;
  progress(): void;
  release(): void;
}

/** One finished (or failed, or aborted) generation. */
export interface CompletionRecord {
  id: string;
  tokens: number;
  finish: string;
  ms: number;
}

export interface OpenAIOptions {
  /** The model's id in requests and /v1/models. */
  modelId: string;
  /** The most `max_tokens` a request may ask, and the default. Default 512. */
  maxTokens?: number;
  /** Request bodies past this are refused with 413. Default 256 KiB. */
  maxBodyBytes?: number;
  /** Implicit prefix reuse across requests. Default true. */
  prefixReuse?: boolean;
  /** COLTRANE's terminal prosody on prose (not on structured output). Default 'bias'. */
  terminalProsody?: 'bias' | 'observe' | 'off';
  /** The /prefill/windows routes and the x-knot-prefill-window header. Default true. */
  prefillWindows?: boolean;
  /** The line in front of the backend (default: none, the backend refuses a second generation). */
  acquire?: (signal: AbortSignal) => Promise<Lease>;
  /** Keeps a generation alive past its response (Workers' `ctx.waitUntil`). */
  waitUntil?: (work: Promise<unknown>) => void;
  onDone?: (record: CompletionRecord) => void;
  /** Aborts the generation (default: the request's signal). */
  signal?: AbortSignal;
  /**
   * The agentic loop over MCP servers (docs/agentic.md). Keep one object for the server's life:
   * the tools cache lives with it. Default: mode 'request', no servers.
   */
  agentic?: AgenticOptions;
  /**
   * POST /v1/audio/speech (docs/speech.md). Default: eSpeak NG from the optional peer `espeak-ng`,
   * imported when the route is first asked; `false` answers it 501 `speech_unavailable`.
   */
  speech?: SpeechOptions | false;
}

/** The body of POST /v1/audio/speech, OpenAI's shape. */
export interface SpeechRequest {
  /** Any name (`tts-1`, …): there is one synthesizer, and it is not the model. */
  model: string;
  /** The text, at most 4096 characters. */
  input: string;
  /** An OpenAI voice (alloy, ash, ballad, coral, echo, fable, onyx, nova, sage, shimmer, verse)
   * or an eSpeak NG voice (`en-us`, `de+f3`). */
  voice: string;
  /** `wav` (default) or `pcm`: 16-bit signed little-endian mono at x-knot-sample-rate. */
  response_format?: 'wav' | 'pcm';
  /** 0.25 to 4, default 1: eSpeak's 175 words per minute times it, within 80–450. */
  speed?: number;
}

/** The synthesizer a server speaks with. */
export interface SpeechEngine {
  /** eSpeak's language voices and variants, lower case. */
  languages: Set<string>;
  variants: Set<string>;
  synthesize(options: { text: string; voice: string; wpm: number }): Promise<{ samples: Int16Array; sampleRate: number }>;
}

export interface SpeechOptions {
  /** The synthesizer (default: eSpeak NG from the `espeak-ng` package, loaded once). */
  engine?: () => Promise<SpeechEngine>;
  /** Why speech is not offered here: the route answers 501 `speech_unavailable` with it. */
  unavailable?: string;
  /** Called with each WAV before the response; the headers it gives are added to it (knot-serve's
   * playback modes write or play the audio here). */
  onAudio?: (wav: Uint8Array, info: { voice: string; seconds: number }) => Record<string, string> | Promise<Record<string, string>>;
}

/** An MCP server: Streamable HTTP at `url`, with `headers` on every request (never echoed). */
export interface McpServerConfig {
  /** Letters, digits, '-' and single '_' (tool names are `name__tool`). */
  name: string;
  url: string;
  headers?: Record<string, string>;
}

export interface AgenticOptions {
  /** 'on': every chat request runs the loop (a request may opt out); 'request': a request opts
   * in (header x-knot-agentic, body knot.agentic); 'off': never. Default 'request'. */
  mode?: 'on' | 'off' | 'request';
  servers?: McpServerConfig[];
  /** URL prefixes (or '*') the loop may call; null (default): the configured servers only, and
   * a request may not name others. */
  allow?: string[] | null;
  /** Model turns per request, the last one answering without tools. Default 4. */
  maxSteps?: number;
  /** Prompt and completion tokens over all turns. Default 16384. */
  maxTotalTokens?: number;
  /** Wall time from admission; tool calls get what is left. Default 60000. */
  maxMs?: number;
  /** One tool call's timeout. Default 10000. */
  toolTimeoutMs?: number;
  /** The bytes of a server's answer to a call; past it, the call is 'oversized'. Default 256 KiB. */
  maxResultBytes?: number;
  /** The characters of a result the model reads (the rest is cut, and said so). Default 4000. */
  maxResultChars?: number;
  /** How long a server's tool listing is reused across requests. Default 0 (every request lists). */
  toolsTtlMs?: number;
}

/** The agentic settings from an environment (KNOT_AGENTIC, KNOT_MCP_SERVERS, KNOT_AGENTIC_ALLOW, ...). */
export declare function agenticFromEnv(env: Record<string, unknown>): Required<Pick<AgenticOptions, 'mode' | 'servers' | 'allow'>> & AgenticOptions;
/** Checks agentic settings (throws McpConfigError naming the field) and gives them their cache. */
export declare function agenticSettings(options: AgenticOptions | undefined): object;
export declare function parseMcpServers(value: unknown, where: string): Required<McpServerConfig>[];
export declare class McpConfigError extends Error {
  field: string;
}

/** Answers one request to the OpenAI routes; every failure is an OpenAI-shaped error response. */
export declare function openaiResponse(backend: Backend, request: Request, options: OpenAIOptions): Promise<Response>;
/** The route a path is (`/prefill/windows/:id` for a window), or null. */
export declare function openaiRoute(pathname: string): string | null;
export declare const OPENAI_ROUTES: Readonly<Record<string, readonly string[]>>;
export declare const BACKEND_METHODS: readonly (keyof Backend)[];

/** An error answered as OpenAI does: `{ error: { message, type, param, code } }`. */
export declare class ApiError extends Error {
  constructor(status: number, message: string, more?: { type?: string; param?: string | null; code?: string | null; headers?: Record<string, string> });
  status: number;
  type: string;
  param: string | null;
  code: string | null;
  headers: Record<string, string>;
  toJSON(): { error: { message: string; type: string; param: string | null; code: string | null } };
}
export declare function errorResponse(error: ApiError): Response;
/** Any failure as the OpenAI error it is answered with (status from the code table). */
export declare function toApiError(error: unknown, promptField?: string | null): ApiError;

export declare class QueueFull extends Error { retryAfter: number }
export declare class QueueTimeout extends Error { retryAfter: number }
/** One generation at a time, the others waiting in order; past `max` waiting, QueueFull. */
export declare class GenerationQueue {
  constructor(options: { max: number; timeoutMs: number; stallMs: number; pollMs?: number; onStall: (lease: Lease) => Promise<void> });
  acquire(signal?: AbortSignal): Promise<Lease>;
  readonly waiting: unknown[];
  readonly served: number;
  readonly reclaimed: number;
}

/** OpenAI's `stop` sequences over streamed text. */
export declare class StopMatcher {
  constructor(stops: string[]);
  readonly stopped: boolean;
  readonly matched: string | null;
  push(piece: string): string;
  flush(): string;
}
