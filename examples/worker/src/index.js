// An OpenAI-compatible LLM server in a Cloudflare Worker: the model streams from R2 through the
// knot-wasm package, opened once per isolate and shared by every request. The OpenAI API itself
// (requests, responses, streaming, tools, prefill windows) is the package's `knot-wasm/openai`;
// this file adds the Worker's own routes, the model's lifecycle, the line of waiting requests
// and `waitUntil`.
//
//   GET  /health                  { status, model, hidden_dim, vocab_size, layers, profile }
//   GET  /stats                   memory, cache and queue figures, what the last request spent
//   GET  /stations                each station's figures, when the model is split (KNOT_STATIONS); with
//                                 KNOT_MAX_SEQUENCES, the steps run together and their rounds
//   the OpenAI routes             /v1/models, /v1/chat/completions, /v1/completions,
//                                 /prefill/windows[/:id]; /v1/audio/speech answers 501
//                                 speech_unavailable (speech.js, docs/speech.md)
//
// Every generation runs inside `ctx.waitUntil`, so a client that goes away cannot cancel it
// halfway (workerd cancels a request's pending work when its client disconnects, which would
// leave the shared model stuck); the client's going away aborts it instead, cleanly.
import { ApiError, errorResponse, openaiResponse, openaiRoute, toApiError } from 'knot-wasm/openai';
import { currentModel, getModel } from './model.js';
import { resumeMeter, startMeter } from './meter.js';
import { profileOf, simulate } from './simulate.js';
import { refuseSpeech } from './speech.js';

// The Durable Object classes of a split model; a script hosting stations exports them.
export { HeadStation, LayerStation } from './stations.js';

const ROUTES = {
  '/health': ['GET'],
  '/stats': ['GET'],
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
      // Answered before the model opens: the refusal needs no model.
      if (pathname === '/v1/audio/speech') refuseSpeech(request);
      if (openaiRoute(pathname) !== null) return await openai(request, env, ctx);
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
        default: return await stations(env, ctx);
      }
    } catch (e) {
      // A station that could not load its part at open fails as station_failed (502), from the
      // package's code table like every coded failure.
      return errorResponse(toApiError(e));
    }
  },
};

/**
 * The OpenAI routes, answered by the package's module over this isolate's model: the Worker
 * brings the line (its queue), `waitUntil`, and the per-generation meter and record.
 */
async function openai(request, env, ctx) {
  const model = await getModel(env, ctx);
  const { shim, settings } = model;
  /** This request's meter: an agentic request takes the model once per turn, all on one meter. */
  let meter = null;
  return openaiResponse(shim, request, {
    modelId: settings.modelId,
    maxTokens: settings.maxTokens,
    maxBodyBytes: settings.maxBodyBytes,
    prefixReuse: settings.prefixReuse,
    terminalProsody: settings.terminalProsody,
    // A split model has no explicit windows (split.js).
    prefillWindows: settings.prefillWindows && !settings.stations,
    agentic: settings.agentic,
    acquire: async (signal) => {
      const lease = await model.queue.acquire(signal);
      // The generation is the invocation's spending: its R2 reads and station calls from here on.
      if (meter === null) meter = startMeter('generation');
      else resumeMeter(meter);
      model.lastMeter = meter;
      return lease;
    },
    waitUntil: (work) => ctx.waitUntil(work),
    onDone: (r) => {
      if (meter !== null) meter.tokens = r.tokens;
      const { r2_reads, r2_bytes, do_calls, subrequests } = meter?.report() ?? {};
      model.recent.push({ ...r, r2_reads, r2_bytes, do_calls, subrequests });
      if (model.recent.length > 16) model.recent.shift();
    },
  });
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
    queue: { waiting: m.queue.waiting.length, busy: m.queue.busy, holders: m.queue.holders.size, peak_holders: m.queue.peakHolders, served: m.queue.served, reclaimed: m.queue.reclaimed },
    // What the open and the last generation spent of the per-invocation limits (meter.js).
    open_spent: m.openMeter.report(),
    last_request: m.lastMeter?.report() ?? null,
    recent: m.recent,
  });
}

async function stations(env, ctx) {
  const { shim, settings } = await getModel(env, ctx);
  if (!settings.stations) {
    throw new ApiError(404, 'This Worker holds the whole model: it has no stations (KNOT_STATIONS is not set)', { code: 'unknown_url' });
  }
  const s = shim.stats();
  // The coordinator's own figures ride along: R2 reads since open (0), the embedding's mode, and
  // rounds of rows and misses (a picked token's row that did not ride with the logits).
  const together = s.steps === undefined ? {} : { steps: s.steps, stepRounds: s.stepRounds, sequences: s.sequences };
  // With KNOT_HOP_ASSESSMENT: the last hop's mesh_carrier_assessment/v1 blobs, one per layer station.
  const assessed = s.hopAssessments === undefined ? {} : { hop_assessments: s.hopAssessments };
  return Response.json({ stations: await shim.stationStats(), hops: s.hops, prefix: s.prefix, coordinator: s.coordinator, ...together, ...assessed });
}
