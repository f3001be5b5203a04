// knot-wasm/server: the one server over a backend (a HostShim, or the stations coordinator of
// knot-wasm/stations). It answers the OpenAI routes (./openai), `/health`, `/stats` and any routes
// its shell adds, with the same errors, on Fetch API types — so knot-serve (Node, Bun, Deno) and
// the Worker are thin shells around it: they parse their settings, open the backend and move
// bytes. Who runs when is the backend's own line (scheduler.js): a request it cannot take is
// answered 429 with Retry-After.
//
//   GET /health    what the server runs (model, context, sequences at once, prefix reuse, chat
//                  template) and that it is up
//   GET /stats     the backend's figures, its line, the last requests
import { ApiError, errorResponse, openaiResponse, openaiRoute, toApiError } from './openai/index.js';

/**
 * @typedef {{
 *   modelId: string, maxTokens?: number, maxBodyBytes?: number, prefixReuse?: boolean,
 *   terminalProsody?: 'bias' | 'observe' | 'off', prefillWindows?: boolean,
 *   agentic?: import('./types/openai.js').AgenticOptions,
 *   speech?: import('./types/openai.js').SpeechOptions | false,
 *   routes?: Record<string, { methods: string[], answer(request: Request): Promise<Response> | Response }>,
 *   health?: () => Record<string, unknown>,
 *   stats?: () => Record<string, unknown>,
 *   recent?: number,
 * }} ServerSettings
 */

/**
 * The server's request handler over an open backend.
 * @param {import('./types/openai.js').Backend} backend
 * @param {ServerSettings} settings
 */
export function createServer(backend, settings) {
  /**
   * The last requests answered, newest last: each its id, tokens, finish and ms, and its prompt's
   * prefill (prompt_tokens, prefilled_tokens, ttft_ms, prefill_ms, prefill_tok_s, queue_ms).
   * @type {(import('./types/openai.js').CompletionRecord & Record<string, unknown>)[]}
   */
  const recent = [];
  const keep = settings.recent ?? 16;
  const routes = {
    '/health': { methods: ['GET'], answer: () => Response.json({ ...health(backend, settings), ...settings.health?.() }) },
    '/stats': { methods: ['GET'], answer: () => Response.json({ ...backend.stats(), ...settings.stats?.(), recent }) },
    ...settings.routes,
  };
  /**
   * @param {Request} request
   * @param {{ waitUntil?: (work: Promise<unknown>) => void, signal?: AbortSignal, tag?: unknown,
   *   onDone?: (record: import('./types/openai.js').CompletionRecord) => object | void }} [per]
   *   what this request adds: keeping work
   *   alive past the response (Workers' `ctx.waitUntil`), a signal other than the request's, the
   *   tag its model calls carry (what their I/O counts against: the backend's `onTurn`), and
   *   what the shell records of it (merged into `recent`)
   * @returns {Promise<Response>}
   */
  const fetch = async (request, per = {}) => {
    try {
      const { pathname } = new URL(request.url);
      if (openaiRoute(pathname) !== null) {
        return await openaiResponse(backend, request, {
          modelId: settings.modelId,
          maxTokens: settings.maxTokens,
          maxBodyBytes: settings.maxBodyBytes,
          prefixReuse: settings.prefixReuse,
          terminalProsody: settings.terminalProsody,
          prefillWindows: settings.prefillWindows,
          agentic: settings.agentic,
          speech: settings.speech,
          waitUntil: per.waitUntil,
          signal: per.signal,
          tag: per.tag,
          onDone: (r) => {
            recent.push({ ...r, ...per.onDone?.(r) });
            if (recent.length > keep) recent.shift();
          },
        });
      }
      const route = routes[pathname];
      if (route === undefined) throw new ApiError(404, `Unknown route: ${request.method} ${pathname}`, { code: 'unknown_url' });
      if (!route.methods.includes(request.method)) {
        throw new ApiError(405, `${request.method} is not allowed on ${pathname} (use ${route.methods.join(', ')})`,
          { code: 'method_not_allowed', headers: { allow: route.methods.join(', ') } });
      }
      return await route.answer(request);
    } catch (e) {
      return errorResponse(toApiError(e));
    }
  };
  return { fetch, recent };
}

/**
 * `/health`: what this server runs. Written once, here, for every shell.
 * @param {import('./types/openai.js').Backend} backend
 * @param {ServerSettings} s
 */
function health(backend, s) {
  const info = /** @type {any} */ (backend.info());
  const line = backend.stats().queue ?? {};
  return {
    status: 'ok',
    model: s.modelId,
    architecture: info.architecture,
    hidden_dim: info.config.dim,
    vocab_size: info.config.vocab_size,
    layers: info.config.n_layers,
    context_length: info.contextLength,
    max_sequences: info.maxSequences,
    prefix_reuse: s.prefixReuse ?? true,
    prefill_windows: s.prefillWindows ?? true,
    chat_template: info.chatTemplate ?? null,
    queue: { active: line.active ?? 0, waiting: line.waiting ?? 0 },
  };
}
