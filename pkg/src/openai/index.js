// knot-wasm/openai: OpenAI's API over a model, on Fetch API types (Request → Response), so the
// same code answers in a Cloudflare Worker, in knot-serve (Node, Bun, Deno) or anywhere else
// `Request` and `Response` exist.
//
//   GET    /v1/models
//   POST   /v1/chat/completions      streaming or not; tools; response_format
//   POST   /v1/completions
//   POST   /v1/responses             OpenAI's Responses API over the chat path (responses.js)
//   POST   /v1/messages              Anthropic's Messages API over the chat path (messages.js)
//   POST   /v1/audio/speech          text to speech, WAV or PCM (eSpeak NG, an optional peer; speech.js)
//   POST   /prefill/windows          explicit prefill windows (see windows.js)
//   GET | PATCH | DELETE /prefill/windows/:id
//
// The model is a `Backend` (types/openai.d.ts): HostShim implements it, and so does the stations
// coordinator (knot-wasm/stations). The backend's own line decides who runs when (a request it
// cannot take is refused with 429 and Retry-After); what a server adds around it — keeping work
// alive past the response (Workers' waitUntil), its own routes — is ../server.js.
import { coltraneFromResponseFormat } from '../helpers.js';
import { ApiError, errorResponse, toApiError } from './errors.js';
import { admit, agenticDrive, agenticOptIn, agenticSettings, refuseAgentic } from './agentic.js';
import { respond, runCompletion } from './generate.js';
import { parseChatRequest, parseCompletionRequest, readJson } from './request.js';
import { ResponseStore, parseResponsesRequest, responsesError, responsesShapes } from './responses.js';
import { anthropicErrorResponse, messagesError, messagesShapes, parseMessagesRequest } from './messages.js';
import { speechResponse } from './speech.js';
import { toolPlan } from './tools.js';
import { windowRoute } from './windows.js';

export { ApiError, errorResponse, toApiError } from './errors.js';
export { QueueFull, QueueTimeout } from '../scheduler.js';
export { StopMatcher } from './stop.js';
export { CallReader } from './call-reader.js';
export { agenticFromEnv, agenticSettings } from './agentic.js';
export { McpConfigError, parseMcpServers } from './mcp.js';
export { closeStdioServers } from './stdio.js';
export { parseChatRequest, parseCompletionRequest, readJson } from './request.js';

/** The methods of a Backend (declared in types/openai.d.ts); tests hold HostShim and the stations backend to it. */
export const BACKEND_METHODS = Object.freeze([
  'chatTemplateTools', 'countTokens', 'streamTokens', 'stats', 'info',
  'createPrefillWindow', 'prefillWindow', 'updatePrefillWindow', 'deletePrefillWindow',
]);

/** The routes this module answers, and their methods. */
export const OPENAI_ROUTES = Object.freeze({
  '/v1/models': ['GET'],
  '/v1/chat/completions': ['POST'],
  '/v1/completions': ['POST'],
  '/v1/responses': ['POST'],
  '/v1/messages': ['POST'],
  '/v1/audio/speech': ['POST'],
  '/prefill/windows': ['POST'],
  '/prefill/windows/:id': ['GET', 'PATCH', 'DELETE'],
});

const PROSODY = ['bias', 'observe', 'off'];

/**
 * The route a path is, in OPENAI_ROUTES' spelling, or null.
 * @param {string} pathname
 */
export function openaiRoute(pathname) {
  if (Object.hasOwn(OPENAI_ROUTES, pathname)) return pathname;
  if (/^\/prefill\/windows\/[^/]+$/.test(pathname)) return '/prefill/windows/:id';
  return null;
}

/**
 * Answers one request to the OpenAI routes. Never throws: every failure is an OpenAI-shaped
 * error response.
 * @param {import('../types/openai.js').Backend} backend
 * @param {Request} request
 * @param {import('../types/openai.js').OpenAIOptions} options
 * @returns {Promise<Response>}
 */
export async function openaiResponse(backend, request, options) {
  let anthropic = false;
  try {
    const { pathname } = new URL(request.url);
    anthropic = pathname === '/v1/messages';
    const route = openaiRoute(pathname);
    if (route === null) throw new ApiError(404, `Unknown route: ${request.method} ${pathname}`, { code: 'unknown_url' });
    const methods = OPENAI_ROUTES[route];
    if (!methods.includes(request.method)) {
      throw new ApiError(405, `${request.method} is not allowed on ${pathname} (use ${methods.join(', ')})`,
        { code: 'method_not_allowed', headers: { allow: methods.join(', ') } });
    }
    const settings = { ...settingsOf(options), responses: responseStore(backend, options) };
    if (route === '/v1/models') {
      return Response.json({ object: 'list', data: [{ id: settings.modelId, object: 'model', created: 0, owned_by: 'knot' }] });
    }
    if (route.startsWith('/prefill/windows')) return await windowRoute(backend, request, pathname, settings);
    if (route === '/v1/audio/speech') return await speechResponse(request, settings);
    return await complete(backend, KIND[route], request, settings);
  } catch (e) {
    return errorResponseFor(anthropic ? '/v1/messages' : '', e);
  }
}

/**
 * A failure as the API of `pathname` answers it: Anthropic's shape on `/v1/messages`, OpenAI's
 * elsewhere.
 * @param {string} pathname @param {unknown} e
 */
export function errorResponseFor(pathname, e) {
  const error = toApiError(e);
  return pathname === '/v1/messages' ? anthropicErrorResponse(error) : errorResponse(error);
}

/** The kind of completion each generating route runs. */
const KIND = {
  '/v1/chat/completions': 'chat', '/v1/completions': 'completion', '/v1/responses': 'responses', '/v1/messages': 'messages',
};

/** The request field a prompt's failure is about, by kind. */
const PROMPT_FIELD = { chat: 'messages', completion: 'prompt', responses: 'input', messages: 'messages' };

/**
 * The stored responses `previous_response_id` continues, per backend (a server's model: its
 * options object may be made anew for each request).
 * @param {object} backend @param {{ maxStoredResponses?: number }} options
 */
const stores = new WeakMap();
function responseStore(backend, options) {
  let s = stores.get(backend);
  if (s === undefined) {
    s = new ResponseStore(options.maxStoredResponses ?? 256);
    stores.set(backend, s);
  }
  return s;
}

/**
 * A response's output items as the assistant message a later request continues from.
 * @param {any[]} output
 */
function assistantFrom(output) {
  const text = output.filter((o) => o.type === 'message').flatMap((o) => o.content.map((c) => c.text)).join('');
  const calls = output.filter((o) => o.type === 'function_call')
    .map((o) => ({ id: o.call_id, type: 'function', function: { name: o.name, arguments: o.arguments } }));
  return calls.length > 0 ? { role: 'assistant', content: text === '' ? null : text, tool_calls: calls } : { role: 'assistant', content: text };
}

/** The options with their defaults, checked. */
function settingsOf(options) {
  const s = {
    modelId: options.modelId,
    maxTokens: options.maxTokens ?? 512,
    maxBodyBytes: options.maxBodyBytes ?? 256 * 1024,
    prefixReuse: options.prefixReuse ?? true,
    terminalProsody: options.terminalProsody ?? 'bias',
    waitUntil: options.waitUntil,
    tag: options.tag,
    onDone: options.onDone,
    signal: options.signal,
    prefillWindows: options.prefillWindows ?? true,
    agentic: agenticOf(options.agentic),
    speech: options.speech,
    maxMessages: options.maxMessages ?? 1024,
    maxTools: options.maxTools ?? 256,
    scope: options.scope ?? null,
    enter: options.enter,
  };
  if (typeof s.modelId !== 'string' || s.modelId === '') throw new TypeError('openaiResponse: options.modelId must be a string');
  if (!PROSODY.includes(s.terminalProsody)) {
    throw new TypeError(`openaiResponse: terminalProsody must be ${PROSODY.join(', ')}, got '${s.terminalProsody}'`);
  }
  return s;
}

/** The agentic settings are checked once per options object (and keep its tools cache). */
const agenticByOptions = new WeakMap();
function agenticOf(o) {
  if (o === undefined) return agenticSettings(undefined);
  let s = agenticByOptions.get(o);
  if (s === undefined) {
    s = agenticSettings(o);
    agenticByOptions.set(o, s);
  }
  return s;
}

/** How each backend's chat template takes tools: its template is fixed once open, and reading
 * it parses the template, so once per backend, not per request. */
const templates = new WeakMap();
/** @param {import('../types/openai.js').Backend} backend */
function templateTools(backend) {
  let t = templates.get(backend);
  if (t === undefined) {
    t = backend.chatTemplateTools();
    templates.set(backend, t);
  }
  return t;
}

/**
 * One completion: parse, generate (streamed as server-sent events, or whole). Responses and
 * Messages requests run as the chat requests they read as, answered in their own shapes.
 * @param {import('../types/openai.js').Backend} backend
 * @param {'chat' | 'completion' | 'responses' | 'messages'} kind
 * @param {Request} request
 * @param {ReturnType<typeof settingsOf>} s
 */
async function complete(backend, kind, request, s) {
  // When the request started: its record's `ms` and `ttft_ms` count from here.
  const t0 = performance.now();
  // The body is read first: its cap does not depend on the model.
  const body = await readJson(request, s.maxBodyBytes);
  const limits = { maxTokens: s.maxTokens, defaultMaxTokens: s.maxTokens, modelId: s.modelId, maxMessages: s.maxMessages, maxTools: s.maxTools };
  const promptField = PROMPT_FIELD[kind];
  const chatLike = kind !== 'completion';
  /** A failure as the request's own API names its fields. */
  const named = (e) => (kind === 'responses' ? responsesError(e, body.text !== undefined && body.text !== null)
    : kind === 'messages' ? messagesError(e) : e);
  /** @type {any} */
  const req = kind === 'chat' ? parseChatRequest(body, limits, coltraneFromResponseFormat)
    : kind === 'responses' ? parseResponsesRequest(body, limits, coltraneFromResponseFormat, s.responses)
      : kind === 'messages' ? parseMessagesRequest(body, limits)
        : parseCompletionRequest(body, limits);
  const window = request.headers.get('x-knot-prefill-window');
  const signal = s.signal ?? request.signal;
  if (!chatLike) refuseAgentic(request);
  const optIn = chatLike ? scoped(agenticOptIn(s.agentic, request, req.agentic), s.scope) : null;
  if (optIn === null && chatLike && req.toolChoiceWithoutTools !== null) throw req.toolChoiceWithoutTools;
  // The request is whole and allowed: from here until its run ends it counts against its key's
  // generations at once (a malformed request is answered for what it is, never 429).
  const release = s.enter?.() ?? (() => {});
  // C0 runs before the model is asked for: a preflight never waits in the line.
  let session = null;
  try {
    session = optIn === null ? null : await admit(s.agentic, optIn, /** @type {any} */ (req), signal, s.scope?.agentic ?? true);
  } catch (e) {
    release();
    throw e;
  }
  let plan = { mode: 'plain', tools: [], forced: false, callTag: null, closeTag: null, maxCalls: 0 };
  /** @type {import('./generate.js').Prompt} */
  let prompt = '';
  try {
    if (session?.C0.admitted) {
      // The loop builds each turn's prompt.
    } else if (chatLike) {
      plan = toolPlan(req, templateTools(backend));
      prompt = { messages: plan.messages, ...(plan.templateTools === undefined ? {} : { tools: plan.templateTools }) };
    } else {
      prompt = typeof req.prompt === 'string' ? req.prompt : Uint32Array.from(req.prompt);
    }
  } catch (e) {
    release();
    await session?.close();
    throw named(toApiError(e, promptField));
  }
  const generation = {
    ...(s.tag === undefined ? {} : { tag: s.tag }),
    reusePrefix: s.prefixReuse,
    ...(window !== null && s.prefillWindows ? { prefillWindow: window } : {}),
  };
  const keep = (id, output) => s.responses.put(id, [...req.previous, assistantFrom(output)]);
  const shape = kind === 'responses' ? responsesShapes(s.modelId, req, keep)
    : kind === 'messages' ? messagesShapes(s.modelId) : undefined;
  const job = {
    backend, kind, modelId: s.modelId, req, prompt, plan, signal, generation, prosody: s.terminalProsody, shape,
  };
  let run;
  try {
    run = session?.C0.admitted
      ? respond(job, agenticDrive({ backend, req, template: templateTools(backend), session }))
      : runCompletion(job, session === null ? {} : { agentic: { C0: session.C0 } });
  } catch (e) {
    release();
    throw e;
  }
  run.done.then(release, release);
  const record = (finish) => s.onDone?.({
    id: run.shape.id, tokens: run.completion(), finish: run.aborted() ? 'aborted' : finish,
    ms: Math.round(performance.now() - t0), ...prefillRecord(run.prefill(), t0),
  });
  run.done.then((r) => record(r.finish), () => record('error'));
  s.waitUntil?.(run.done.catch(() => {}));
  const headers = (prefix) => ({
    'x-knot-prefill': window !== null && !s.prefillWindows ? 'disabled'
      : s.prefixReuse || window !== null ? (prefix?.status ?? 'miss') : 'disabled',
    'x-knot-prefill-reused': String(prefix?.reused ?? 0),
  });
  if (!req.stream) {
    const r = await run.done.catch((e) => {
      throw named(toApiError(e, promptField));
    });
    return Response.json(r.shape.whole(r.message, r.finish, r.usage, r.knot, r.more), { headers: headers(r.prefix) });
  }
  let prefix;
  try {
    prefix = await run.started;
  } catch (e) {
    throw named(toApiError(e, promptField));
  }
  return new Response(run.body, {
    headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', ...headers(prefix) },
  });
}

/**
 * The loop as the request's key may run it: a key without the agentic scope that asks for the
 * loop is refused (403, before any MCP server is reached); one the server's mode would put in
 * the loop without asking runs without it.
 * @param {ReturnType<typeof agenticOptIn>} optIn
 * @param {{ name: string, agentic: boolean | string[] } | null} scope
 */
function scoped(optIn, scope) {
  if (optIn === null || scope === null || scope.agentic !== false) return optIn;
  if (optIn.via === 'server') return null;
  throw new ApiError(403, 'This API key may not run the agentic loop (its scope)', {
    type: 'permission_error', param: optIn.via === 'body' ? 'knot.agentic' : null, code: 'agentic_not_allowed',
  });
}

/** Milliseconds to a tenth. */
const tenth = (ms) => (ms === null ? null : Math.round(ms * 10) / 10);

/**
 * What a request's record says of its prompt's prefill (docs/batching.md): summed over its
 * generations — an agentic loop's turns, a tool call's phases — as its usage's prompt_tokens is.
 * @param {ReturnType<ReturnType<typeof respond>['prefill']>} p
 * @param {number} t0 when the request started (performance.now())
 */
function prefillRecord(p, t0) {
  return {
    prompt_tokens: p.promptTokens,
    prefilled_tokens: p.prefilled,
    ttft_ms: p.firstAt === null ? null : tenth(p.firstAt - t0),
    prefill_ms: tenth(p.ms),
    prefill_tok_s: p.prefilled > 0 && p.ms !== null && p.ms > 0 ? Math.round(p.prefilled / (p.ms / 1000) * 10) / 10 : null,
    queue_ms: tenth(p.queueMs),
  };
}
