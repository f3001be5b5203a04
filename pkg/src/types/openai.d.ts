// knot-wasm/openai: OpenAI's API over a model, on Fetch API types.
import type { ChatTemplateTools, GenerateTextOptions, Prompt } from './options.js';
import type { GeneratedToken, ModelInfo, PrefillWindow, PrefillWindowCreated } from './reports.js';
import type { LineStats } from './host.js';

/**
 * What the OpenAI module and the server run on: the package's `HostShim` implements it, and so
 * does the stations coordinator (knot-wasm/stations). Its own line decides who runs when: a
 * generation it cannot take rejects with QueueFull / QueueTimeout (answered 429).
 */
export interface Backend {
  chatTemplateTools(): ChatTemplateTools;
  /** A prompt's length in tokens, as a generation would run it. */
  countTokens(prompt: Prompt): number;
  /**
   * A generation, token by token: the first token says how the prompt was served (`prompt:
   * { tokens, prefix }`), the last what the generation did (`report`).
   */
  streamTokens(prompt: Prompt, options?: GenerateTextOptions):
    AsyncGenerator<GeneratedToken, void, undefined>;
  /** The backend's figures (`queue`: its line); a HostShim's are `HostStats`. */
  stats(): { queue?: LineStats };
  info(): ModelInfo;
  createPrefillWindow(prompt: Prompt, options?: { ttlMs?: number; signal?: AbortSignal; tag?: unknown }): Promise<PrefillWindowCreated>;
  prefillWindow(id: string): PrefillWindow | null;
  /** Rejects with code `not_found` for an unknown id. */
  updatePrefillWindow(id: string, update: { prompt?: Prompt; ttlMs?: number; signal?: AbortSignal; tag?: unknown }): Promise<PrefillWindow>;
  deletePrefillWindow(id: string): boolean;
}

/**
 * One finished (or failed, or aborted) request, as `/stats` lists it in `recent`. The prefill
 * figures sum over the request's generations (an agentic loop's turns, a tool call's phases), as
 * its usage's prompt_tokens does.
 */
export interface CompletionRecord {
  id: string;
  /** Tokens generated. */
  tokens: number;
  finish: string;
  /** From the request's start to its end. */
  ms: number;
  /** Tokens of the prompt (the usage's prompt_tokens). */
  prompt_tokens: number;
  /** Prompt tokens run through the model: the prompt less those a prefix or prefill window served. */
  prefilled_tokens: number;
  /** From the request's start to its first generated token (null: none came). */
  ttft_ms: number | null;
  /**
   * The prefill's time: the backend's own measure, admission to first token (a HostShim's
   * `report.prefillMs`); for a generation a stop sequence ended before its last token, from the
   * call to its first token (its wait in line included). Null: no token came.
   */
  prefill_ms: number | null;
  /** `prefilled_tokens / (prefill_ms / 1000)`; null when nothing was prefilled (or not timed). */
  prefill_tok_s: number | null;
  /** The wait in the backend's line before admission; null when the backend did not report its prefill time. */
  queue_ms: number | null;
}

export interface OpenAIOptions {
  /** The model's id in requests and /v1/models. */
  modelId: string;
  /** The most `max_tokens` a request may ask, and the default. Default 512. */
  maxTokens?: number;
  /** Request bodies past this are refused with 413. Default 256 KiB. */
  maxBodyBytes?: number;
  /** The most messages a chat request may send: past it 400 `too_many_messages`. Default 1024. */
  maxMessages?: number;
  /** The most tools a chat request may send: past it 400 `too_many_tools`. Default 256. */
  maxTools?: number;
  /**
   * What the request's API key may do (knot-wasm/server's gate): `agentic: false` refuses a request
   * asking for the loop (403 `agentic_not_allowed`), a list keeps it to those MCP servers.
   * Default: everything.
   */
  scope?: { name: string; agentic: boolean | string[] } | null;
  /**
   * Called once a generation request is parsed and allowed, before it runs: the function that
   * ends it (called when its run ends). Throws (a 429 ApiError) to refuse it: the server's
   * generations at once per key.
   */
  enter?: () => () => void;
  /** Implicit prefix reuse across requests. Default true. */
  prefixReuse?: boolean;
  /** COLTRANE's terminal prosody on prose (not on structured output). Default 'bias'. */
  terminalProsody?: 'bias' | 'observe' | 'off';
  /** The /prefill/windows routes and the x-knot-prefill-window header. Default true. */
  prefillWindows?: boolean;
  /** Keeps a generation alive past its response (Workers' `ctx.waitUntil`). */
  waitUntil?: (work: Promise<unknown>) => void;
  onDone?: (record: CompletionRecord) => void;
  /** Aborts the generation (default: the request's signal). */
  signal?: AbortSignal;
  /** What the steps this request runs count their I/O against (the backend's `onTurn`). */
  tag?: unknown;
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
  /**
   * Responses kept for `previous_response_id` (POST /v1/responses, `store` not false), per
   * backend, newest kept (and at most 8 MB of their text): past it the oldest is forgotten, and continuing it is 404
   * `previous_response_not_found`. Default 256.
   */
  maxStoredResponses?: number;
}

/** An output item of a response (POST /v1/responses). */
export type ResponseOutputItem =
  | { id: string; type: 'message'; status: 'in_progress' | 'completed'; role: 'assistant'; content: { type: 'output_text'; text: string; annotations: []; logprobs: [] }[] }
  | { id: string; type: 'function_call'; status: 'in_progress' | 'completed'; call_id: string; name: string; arguments: string };

/** The body POST /v1/responses answers (OpenAI's Responses API; docs/agent-apis.md). */
export interface ResponseObject {
  id: string;
  object: 'response';
  created_at: number;
  status: 'completed' | 'incomplete' | 'in_progress';
  error: null;
  incomplete_details: { reason: 'max_output_tokens' } | null;
  model: string;
  output: ResponseOutputItem[];
  instructions: string | null;
  max_output_tokens: number | null;
  previous_response_id: string | null;
  store: boolean;
  usage: { input_tokens: number; input_tokens_details: { cached_tokens: number }; output_tokens: number;
    output_tokens_details: { reasoning_tokens: number }; total_tokens: number } | null;
  /** The project's figures, as on chat completions. */
  knot?: object;
  [field: string]: unknown;
}

/** A content block of a message (POST /v1/messages, Anthropic's Messages API). */
export type MessageContentBlock =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

/** The body POST /v1/messages answers. */
export interface MessageObject {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: MessageContentBlock[];
  stop_reason: 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';
  stop_sequence: string | null;
  usage: { input_tokens: number; output_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number };
  knot?: object;
}

/** An error as Anthropic answers it (every failure on POST /v1/messages). */
export interface AnthropicErrorBody {
  type: 'error';
  error: { type: string; message: string; param?: string; code?: string };
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

/**
 * An MCP server: Streamable HTTP at `url`, with `headers` on every request (never echoed); or a
 * command speaking MCP on its stdio (Node, Bun and Deno; started once and shared by requests,
 * its `env` values never echoed).
 */
export type McpServerConfig = {
  /** Letters, digits, '-' and single '_' (tool names are `name__tool`). */
  name: string;
} & ({ url: string; headers?: Record<string, string> }
  | { command: string; args?: string[]; env?: Record<string, string>; cwd?: string });

/** `{ "mcpServers": { NAME: { command, args, env, cwd } | { url, headers } } }`, as Claude Desktop,
 * Cursor (and, under `servers`, VS Code) write it. */
export interface McpServersFile {
  mcpServers?: Record<string, Record<string, unknown>>;
  servers?: Record<string, Record<string, unknown>>;
}

export interface AgenticOptions {
  /** 'on': every chat request runs the loop (a request may opt out); 'request': a request opts
   * in (header x-knot-agentic, body knot.agentic); 'off': never. Default 'request'. */
  mode?: 'on' | 'off' | 'request';
  servers?: McpServerConfig[] | McpServersFile;
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
export declare function parseMcpServers(value: unknown, where: string, options?: { stdio?: boolean }): McpServerConfig[];
/** Ends the stdio MCP servers this process started (knot-serve does on shutdown). */
export declare function closeStdioServers(): Promise<void>;
export declare class McpConfigError extends Error {
  field: string;
}

/** Answers one request to the OpenAI routes; every failure is an OpenAI-shaped error response. */
export declare function openaiResponse(backend: Backend, request: Request, options: OpenAIOptions): Promise<Response>;
/** The route a path is (`/prefill/windows/:id` for a window), or null. */
export declare function openaiRoute(pathname: string): string | null;
export declare const OPENAI_ROUTES: Readonly<Record<string, readonly string[]>>;
export { QueueFull, QueueTimeout } from './host.js';
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
/** A failure as the API of `pathname` answers it: Anthropic's shape on /v1/messages, OpenAI's elsewhere. */
export declare function errorResponseFor(pathname: string, error: unknown): Response;
/** Any failure as the OpenAI error it is answered with (status from the code table). */
export declare function toApiError(error: unknown, promptField?: string | null): ApiError;

/** OpenAI's `stop` sequences over streamed text. */
export declare class StopMatcher {
  constructor(stops: string[]);
  readonly stopped: boolean;
  readonly matched: string | null;
  push(piece: string): string;
  flush(): string;
}
