// An OpenAI-compatible LLM server in a Cloudflare Worker: the model streams from R2 through the
// knot-wasm package, opened once per isolate and shared by every request.
//
//   GET  /health                  { status, model, hidden_dim, vocab_size, layers, profile }
//   GET  /stats                   memory, cache and queue figures, what the last request spent
//   GET  /v1/models
//   POST /v1/chat/completions     OpenAI's shapes, streaming or not
//   POST /v1/completions
//   GET  /stations                each station's figures, when the model is split (KNOT_STATIONS)
//
// Every generation runs inside `ctx.waitUntil`, so a client that goes away cannot cancel it
// halfway (workerd cancels a request's pending work when its client disconnects, which would
// leave the shared model stuck); the client's going away aborts it instead, cleanly.
import { coltraneFromResponseFormat, errorStatus } from 'knot-wasm';
import { ApiError, errorResponse, parseChatRequest, parseCompletionRequest, readJson, shapes } from './openai.js';
import { currentModel, getModel } from './model.js';
import { QueueFull, QueueTimeout } from './queue.js';
import { StopMatcher } from './stop.js';
import { startMeter } from './meter.js';
import { profileOf, simulate } from './simulate.js';

// The Durable Object classes of a split model; a script hosting stations exports them.
export { HeadStation, LayerStation } from './stations.js';

const ROUTES = {
  '/health': ['GET'],
  '/stats': ['GET'],
  '/v1/models': ['GET'],
  '/v1/chat/completions': ['POST'],
  '/v1/completions': ['POST'],
  '/stations': ['GET'],
};

export default {
  /**
   * @param {Request} request
   * @param {Record<string, any>} env
   * @param {{ waitUntil(p: Promise<unknown>): void }} ctx
   */
  async fetch(request, env, ctx) {
    const { pathname } = new URL(request.url);
    try {
      // Production's costs when a local run asked for them (KNOT_SIMULATE); deployed, env as is.
      env = simulate(env);
      const methods = ROUTES[pathname];
      if (methods === undefined) {
        throw new ApiError(404, `Unknown route: ${request.method} ${pathname}`, { code: 'unknown_url' });
      }
      if (!methods.includes(request.method)) {
        throw new ApiError(405, `${request.method} is not allowed on ${pathname} (use ${methods.join(', ')})`,
          { code: 'method_not_allowed', headers: { allow: methods.join(', ') } });
      }
      switch (pathname) {
        case '/health': return await health(env, ctx);
        case '/stats': return stats();
        case '/v1/models': return await models(env, ctx);
        case '/stations': return await stations(env, ctx);
        default: return await complete(pathname === '/v1/chat/completions' ? 'chat' : 'completion', request, env, ctx);
      }
    } catch (e) {
      return errorResponse(asApiError(e));
    }
  },
};

/** Any failure as the OpenAI error it is answered with. */
function asApiError(e) {
  if (e instanceof ApiError) return e;
  if (e instanceof QueueFull || e instanceof QueueTimeout) {
    return new ApiError(429, e.message, {
      type: 'rate_limit_error', code: 'server_busy', headers: { 'retry-after': String(e.retryAfter) },
    });
  }
  // A station that failed outside a generation (one that could not load its part at open): the
  // split model's upstream failed.
  if (e?.code === 'station_failed') return new ApiError(errorStatus(e), e.message, { code: e.code });
  return new ApiError(500, `The server failed: ${e?.message ?? String(e)}`, { code: 'internal_error' });
}

async function health(env, ctx) {
  const { info, shim, settings } = await getModel(env, ctx);
  return Response.json({
    status: 'ok',
    model: settings.modelId,
    hidden_dim: info.config.dim,
    vocab_size: shim.vocabSize,
    layers: `0-${shim.layerCount}`,
    context_length: shim.contextLength,
    // The simulated production profile (simulate.js): null deployed.
    profile: profileOf(env)?.name ?? null,
  });
}

function stats() {
  const m = currentModel();
  if (m === null) return Response.json({ open: false });
  const s = m.shim.stats();
  return Response.json({
    open: true,
    open_ms: m.openMs,
    wasm_memory_bytes: s.wasmMemoryBytes,
    memory_plan: s.memoryPlan,
    context_length: s.contextLength,
    kv_cache_bytes: s.kvCacheBytes,
    resident_layers: s.residentLayers,
    range_reads: m.source.reads,
    bytes_read: m.source.bytes,
    layer_reads_per_token: s.layerReadsPerToken,
    prefill_ms: s.prefillMs,
    prefill_tokens: s.prefillTokens,
    token_ms: s.tokenMs,
    prefix: s.prefix,
    queue: { waiting: m.queue.waiting.length, busy: m.queue.holder !== null, served: m.queue.served, reclaimed: m.queue.reclaimed },
    // What the open and the last generation spent of the per-invocation limits (meter.js).
    open_spent: m.openMeter.report(),
    last_request: m.lastMeter?.report() ?? null,
    recent: m.recent,
  });
}

async function stations(env, ctx) {
  const { shim } = await getModel(env, ctx);
  if (typeof shim.stationStats !== 'function') {
    throw new ApiError(404, 'This Worker holds the whole model: it has no stations (KNOT_STATIONS is not set)', { code: 'unknown_url' });
  }
  const s = shim.stats();
  // The coordinator's own figures ride along: R2 reads since open (0), the embedding's mode, and
  // rounds of rows and misses (a picked token's row that did not ride with the logits).
  return Response.json({ stations: await shim.stationStats(), hops: s.hops, prefix: s.prefix, coordinator: s.coordinator });
}

async function models(env, ctx) {
  const { settings } = await getModel(env, ctx);
  return Response.json({
    object: 'list',
    data: [{ id: settings.modelId, object: 'model', created: 0, owned_by: 'knot' }],
  });
}

/** The request fields the package's options come from, where their names differ. */
const REQUEST_FIELD = { draftMode: 'draft_mode', topP: 'top_p', presencePenalty: 'presence_penalty', frequencyPenalty: 'frequency_penalty', maxTokens: 'max_tokens' };

/**
 * A generation's failure, as the OpenAI error it is answered with: the status from the package's
 * code → status table (docs/errors.md), the code itself, and the request field it is about.
 * @param {any} e
 * @param {string} promptField 'messages' or 'prompt'
 */
function generationError(e, promptField) {
  if (e instanceof ApiError) return e;
  if (e?.name === 'AbortError') return new ApiError(499, 'The client closed the request', { code: 'client_closed' });
  if (typeof e?.code !== 'string') return asApiError(e);
  const option = typeof e.param === 'string' ? e.param.split('.')[0] : undefined;
  const param = option !== undefined ? (REQUEST_FIELD[option] ?? option)
    : e.code === 'unsupported_schema' ? 'response_format'
      : ['token_out_of_range', 'context_length_exceeded', 'empty_prompt', 'invalid_text', 'chat_template'].includes(e.code) ? promptField
        : null;
  return new ApiError(errorStatus(e), e.message, { code: e.code, param });
}

/**
 * One completion: parse, wait for the model, generate (streamed as server-sent events, or
 * whole), release.
 * @param {'chat' | 'completion'} kind
 */
async function complete(kind, request, env, ctx) {
  // The body is read first: its cap does not depend on the model.
  const cap = Number(env.KNOT_MAX_BODY_BYTES || 256 * 1024);
  const body = await readJson(request, cap);
  const model = await getModel(env, ctx);
  const { shim, settings } = model;
  const limits = { maxTokens: settings.maxTokens, defaultMaxTokens: settings.maxTokens, modelId: settings.modelId };
  const req = kind === 'chat'
    ? parseChatRequest(body, limits, coltraneFromResponseFormat)
    : parseCompletionRequest(body, limits);

  const promptField = kind === 'chat' ? 'messages' : 'prompt';
  let ids;
  try {
    ids = kind === 'chat'
      ? shim.encode(shim.applyChatTemplate(req.messages))
      : typeof req.prompt === 'string' ? shim.encode(req.prompt) : Uint32Array.from(req.prompt);
  } catch (e) {
    throw generationError(e, promptField);
  }

  const lease = await model.queue.acquire(request.signal);
  const run = generate(model, lease, ids, req, kind, request.signal, promptField);
  ctx.waitUntil(run.done.catch(() => {}));
  const prefillHeaders = (p) => ({
    'x-knot-prefill': settings.prefixReuse ? (p?.status ?? 'miss') : 'disabled',
    'x-knot-prefill-reused': String(p?.reused ?? 0),
  });
  if (!req.stream) {
    const r = await run.done.catch((e) => { throw generationError(e, promptField); });
    const headers = { ...prefillHeaders(r.prefix), 'x-knot-queue-ms': String(run.queuedMs) };
    return Response.json(r.shape.whole(r.text, r.finish, r.usage), { headers });
  }
  let prefix;
  try {
    prefix = await run.started;
  } catch (e) {
    throw generationError(e, promptField);
  }
  return new Response(run.body, {
    headers: {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      ...prefillHeaders(prefix),
    },
  });
}

const encoder = new TextEncoder();

/**
 * Gives the event loop a turn. Between tokens, so that a generation whose reads all complete at
 * once (layers cached, or an in-process R2 as in Miniflare) still lets the runtime take new
 * requests, run the waiters' timers and notice a client that went away.
 */
const yieldToEventLoop = () => new Promise((resolve) => setTimeout(resolve, 0));

/**
 * Runs one generation under `lease`, releasing it whatever happens. `started` settles at the
 * first token (with how the prefix was reused) or the first failure; `done` with the result; a
 * streaming request reads `body`, whose cancellation (the client going away) aborts the work.
 */
function generate(model, lease, ids, req, kind, signal, promptField) {
  const { shim, settings } = model;
  const shape = shapes(kind, settings.modelId);
  const abort = new AbortController();
  const onClientGone = () => abort.abort(new DOMException('The client went away', 'AbortError'));
  signal?.addEventListener('abort', onClientGone);
  /** @type {ReadableStreamDefaultController<Uint8Array> | undefined} */
  let sink;
  const send = (obj) => {
    if (sink === undefined || !req.stream) return;
    try {
      // Never awaited: a slow client must not hold the model.
      sink.enqueue(encoder.encode(`data: ${JSON.stringify(obj)}\n\n`));
    } catch {
      onClientGone();
    }
  };
  const body = req.stream
    ? new ReadableStream({
      start(controller) {
        sink = controller;
      },
      cancel: onClientGone,
    })
    : null;
  let resolveStarted;
  let rejectStarted;
  const started = new Promise((resolve, reject) => {
    resolveStarted = resolve;
    rejectStarted = reject;
  });
  started.catch(() => {});
  const queuedMs = Date.now() - lease.since;
  // The generation is the invocation's spending: its R2 reads and station calls from here on.
  const meter = startMeter('generation');
  model.lastMeter = meter;
  let completion = 0;
  const done = (async () => {
    const stops = new StopMatcher(req.stop);
    let text = '';
    let finish = 'length';
    let prefix = null;
    let first = true;
    try {
      const options = {
        ...req.options,
        // The context caps it further (Rust ends with 'length' when it fills).
        maxTokens: req.maxTokens,
        reusePrefix: settings.prefixReuse,
        signal: abort.signal,
      };
      for await (const e of shim.streamTokens(ids, options)) {
        lease.progress();
        if (first) {
          first = false;
          prefix = shim.stats().prefix;
          resolveStarted(prefix);
          const head = shape.first();
          if (head) send(head);
        }
        completion++;
        meter.tokens = completion;
        const out = stops.push(e.text);
        if (out !== '') {
          text += out;
          send(shape.piece(out));
        }
        if (stops.stopped) {
          finish = 'stop';
          break;
        }
        if (e.finishReason !== null) finish = e.finishReason;
        await yieldToEventLoop();
      }
      const rest = stops.flush();
      if (rest !== '') {
        text += rest;
        send(shape.piece(rest));
      }
      if (first) {
        // Nothing generated (max_tokens met by the context): still a well-formed answer.
        prefix = shim.stats().prefix;
        resolveStarted(prefix);
        const head = shape.first();
        if (head) send(head);
      }
      const usage = { prompt: ids.length, completion };
      send(shape.last(finish));
      if (req.includeUsage) send(shape.usage(usage));
      if (sink !== undefined) {
        sink.enqueue(encoder.encode('data: [DONE]\n\n'));
        sink.close();
      }
      return { text, finish, usage, prefix, shape };
    } catch (e) {
      rejectStarted(e);
      if (sink !== undefined && !first) {
        // Mid-stream: OpenAI's error event, then the end of the stream.
        const err = generationError(e, promptField);
        try {
          sink.enqueue(encoder.encode(`data: ${JSON.stringify({ error: { message: err.message, type: err.type, param: err.param, code: err.code } })}\n\n`));
          sink.close();
        } catch {
          // The client is gone.
        }
      } else if (sink !== undefined) {
        try {
          sink.error(e);
        } catch {
          // Nobody reads it.
        }
      }
      throw e;
    } finally {
      signal?.removeEventListener('abort', onClientGone);
      lease.release();
      const { r2_reads, r2_bytes, do_calls, subrequests } = meter.report();
      model.recent.push({
        id: shape.id, tokens: completion, finish: abort.signal.aborted ? 'aborted' : finish, ms: Date.now() - lease.since,
        r2_reads, r2_bytes, do_calls, subrequests,
      });
      if (model.recent.length > 16) model.recent.shift();
    }
  })();
  return { started, done, body, queuedMs };
}
