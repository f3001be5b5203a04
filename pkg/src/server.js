// knot-wasm/server: the one server over a backend (a HostShim, or the stations coordinator of
// knot-wasm/stations). It answers the OpenAI routes (./openai), `/health`, `/stats` and any routes
// its shell adds, with the same errors, on Fetch API types — so knot-serve (Node, Bun, Deno) and
// the Worker are thin shells around it: they parse their settings, open the backend and move
// bytes. Who may ask, and how much, is the gate's (access.js), before anything else runs; who
// runs when is the backend's own line (scheduler.js): a request it cannot take is answered 429
// with Retry-After.
//
//   GET /health    what the server runs (model, context, sequences at once, prefix reuse, chat
//                  template) and that it is up; to a request without a valid key (when the server
//                  has keys), that it is up and its model id only
//   GET /stats     the backend's figures, its line, the last requests
import { ApiError, errorResponseFor, openaiResponse, openaiRoute } from './openai/index.js';
import { createGate } from './access.js';

export { AccessConfigError, createGate, parseApiKeys, tokenBucket, MIN_KEY_LENGTH } from './access.js';

/**
 * @typedef {{
 *   modelId: string, maxTokens?: number, maxBodyBytes?: number, maxMessages?: number, maxTools?: number,
 *   prefixReuse?: boolean, terminalProsody?: 'bias' | 'observe' | 'off', prefillWindows?: boolean,
 *   agentic?: import('./types/openai.js').AgenticOptions,
 *   speech?: import('./types/openai.js').SpeechOptions | false,
 *   gate?: ReturnType<typeof createGate>,
 *   routes?: Record<string, { methods: string[], answer(request: Request): Promise<Response> | Response }>,
 *   health?: () => Record<string, unknown>,
 *   stats?: () => Record<string, unknown>,
 *   recent?: number,
 * }} ServerSettings
 *   gate: who may ask (access.js: API keys, limits, CORS); default open to whoever reaches it
 */

/**
 * The server's request handler over an open backend.
 * @param {import('./types/openai.js').Backend} backend
 * @param {ServerSettings} settings
 */
export function createServer(backend, settings) {
  const gate = settings.gate ?? createGate();
  /**
   * The last requests answered, newest last: each its id, tokens, finish and ms, and its prompt's
   * prefill (prompt_tokens, prefilled_tokens, ttft_ms, prefill_ms, prefill_tok_s, queue_ms), and
   * the name of the key that asked (never the key).
   * @type {(import('./types/openai.js').CompletionRecord & Record<string, unknown>)[]}
   */
  const recent = [];
  const keep = settings.recent ?? 16;
  const routes = {
    '/health': { methods: ['GET'], answer: () => Response.json({ ...health(backend, settings), ...settings.health?.() }) },
    '/stats': { methods: ['GET'], answer: () => Response.json({ ...backend.stats(), ...settings.stats?.(), access: gate.report(), recent }) },
    ...settings.routes,
  };
  /**
   * @param {Request} request
   * @param {{ waitUntil?: (work: Promise<unknown>) => void, signal?: AbortSignal, tag?: unknown,
   *   onDone?: (record: import('./types/openai.js').CompletionRecord) => object | void,
   *   client?: string, admitted?: Awaited<ReturnType<ReturnType<typeof createGate>['admit']>> }} [per]
   *   what this request adds: keeping work
   *   alive past the response (Workers' `ctx.waitUntil`), a signal other than the request's, the
   *   tag its model calls carry (what their I/O counts against: the backend's `onTurn`), what
   *   the shell records of it (merged into `recent`), the peer's address (an open server's
   *   limits count against it), and the gate's verdict when the shell asked it already (the
   *   Worker does, before it opens the model)
   * @returns {Promise<Response>}
   */
  const fetch = async (request, per = {}) => {
    let cors = {};
    const { pathname } = new URL(request.url);
    try {
      const admitted = per.admitted ?? await gate.admit(request, { openRoute: pathname === '/health', client: per.client });
      if ('response' in admitted) return admitted.response;
      cors = admitted.cors;
      const { principal } = admitted;
      // A stranger's /health: that the server is up, and its model, nothing more.
      if (principal === null) return withHeaders(Response.json({ status: 'ok', model: settings.modelId }), cors);
      if (openaiRoute(pathname) !== null) {
        const answer = await openaiResponse(backend, request, {
          modelId: settings.modelId,
          maxTokens: settings.maxTokens,
          maxBodyBytes: settings.maxBodyBytes,
          maxMessages: settings.maxMessages,
          maxTools: settings.maxTools,
          prefixReuse: settings.prefixReuse,
          terminalProsody: settings.terminalProsody,
          prefillWindows: settings.prefillWindows,
          agentic: settings.agentic,
          speech: settings.speech,
          scope: principal.scope,
          // Once the request is parsed and allowed: its key's generations at once.
          enter: () => gate.enter(principal),
          waitUntil: per.waitUntil,
          signal: per.signal,
          tag: per.tag,
          onDone: (r) => {
            recent.push({ ...r, key: principal.scope.name, ...per.onDone?.(r) });
            if (recent.length > keep) recent.shift();
          },
        });
        return withHeaders(answer, cors);
      }
      const route = routes[pathname];
      if (route === undefined) throw new ApiError(404, `Unknown route: ${request.method} ${pathname}`, { code: 'unknown_url' });
      if (!route.methods.includes(request.method)) {
        throw new ApiError(405, `${request.method} is not allowed on ${pathname} (use ${route.methods.join(', ')})`,
          { code: 'method_not_allowed', headers: { allow: route.methods.join(', ') } });
      }
      return withHeaders(await route.answer(request), cors);
    } catch (e) {
      return withHeaders(errorResponseFor(pathname, e), cors);
    }
  };
  return { fetch, recent, gate };
}

/** `response` with `headers` added (a fetched response's headers are immutable: copied then). */
function withHeaders(response, headers) {
  const entries = Object.entries(headers);
  if (entries.length === 0) return response;
  try {
    for (const [k, v] of entries) response.headers.set(k, v);
    return response;
  } catch {
    const copy = new Response(response.body, response);
    for (const [k, v] of entries) copy.headers.set(k, v);
    return copy;
  }
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
