// Errors as OpenAI answers them: `{ error: { message, type, param, code } }` with an HTTP status.
// A failure of the package carries a stable `code`; its status comes from the one code → status
// table (../errors.js, docs/errors.md), never from its wording.
import { ERROR_STATUS, errorStatus } from '../errors.js';
import { QueueFull, QueueTimeout } from '../scheduler.js';

/** An error answered as OpenAI does. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   * @param {{ type?: string, param?: string | null, code?: string | null, headers?: Record<string, string> }} [more]
   */
  constructor(status, message, more = {}) {
    super(message);
    this.status = status;
    this.type = more.type ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
    this.param = more.param ?? null;
    this.code = more.code ?? null;
    this.headers = more.headers ?? {};
  }

  /** The body OpenAI's clients read. */
  toJSON() {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** A 400 naming the field. */
export const badRequest = (message, param, code = null) => new ApiError(400, message, { param, code });

/** @param {ApiError} e */
export function errorResponse(e) {
  return Response.json(e.toJSON(), { status: e.status, headers: e.headers });
}

/** The request fields the package's options come from, where their names differ. */
const REQUEST_FIELD = {
  draftMode: 'draft_mode', topP: 'top_p', presencePenalty: 'presence_penalty',
  frequencyPenalty: 'frequency_penalty', maxTokens: 'max_tokens',
};

/** Codes about the prompt itself: their param is the prompt's field. */
const PROMPT_CODES = new Set(['token_out_of_range', 'context_length_exceeded', 'empty_prompt', 'invalid_text', 'chat_template']);

/**
 * Any failure as the OpenAI error it is answered with: a busy line → 429 with Retry-After; an
 * abort → 499; a failure with the package's `code` → the status from the code table, the code,
 * and the request field it is about; anything else (a bug) → 500.
 * @param {any} e
 * @param {string | null} [promptField] 'messages' or 'prompt'
 * @returns {ApiError}
 */
export function toApiError(e, promptField = null) {
  if (e instanceof ApiError) return e;
  if (e instanceof QueueFull || e instanceof QueueTimeout) {
    return new ApiError(429, e.message, {
      type: 'rate_limit_error', code: 'server_busy', headers: { 'retry-after': String(e.retryAfter) },
    });
  }
  if (e?.name === 'AbortError') return new ApiError(499, 'The client closed the request', { code: 'client_closed' });
  if (typeof e?.code !== 'string' || !Object.hasOwn(ERROR_STATUS, e.code)) {
    return new ApiError(500, `The server failed: ${e?.message ?? String(e)}`, { code: 'internal_error' });
  }
  const option = typeof e.param === 'string' ? e.param.split('.')[0] : undefined;
  const param = option !== undefined ? (REQUEST_FIELD[option] ?? option)
    : e.code === 'unsupported_schema' ? (e.field ?? 'response_format')
      : PROMPT_CODES.has(e.code) ? promptField
        : null;
  return new ApiError(errorStatus(e), e.message, { code: e.code, param });
}
