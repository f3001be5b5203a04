// The model, opened once per isolate and shared by every request: the backend (a HostShim, or
// the stations coordinator), its settings from the environment, and the package's server over
// it. A failed open is not kept: the next request tries again.
//
// Whole in this isolate, every layer is resident: read once, then each token runs from memory.
// A model that does not fit KNOT_MEMORY_BUDGET_MB that way is refused at open with the split
// across stations that fits (planStations), unless KNOT_STREAM_LAYERS=1 asks for an LRU of
// KNOT_LRU_CAPACITY layers, the others read from R2 again on every token.
import { HostShim, errorStatus, planStations } from 'knot-wasm';
import { ApiError, agenticFromEnv, agenticSettings } from 'knot-wasm/openai';
import { createServer } from 'knot-wasm/server';
import { Coordinator, hopAssessmentSettings } from 'knot-wasm/stations';
import { gateFor } from './access.js';
import { R2KnotSource } from './r2.js';
import { stationOptions } from './stations.js';
import { stationTable, transport } from './transport.js';
import { resumeMeter, startMeter } from './meter.js';
import { profileOf } from './simulate.js';

const MiB = 2 ** 20;

/**
 * A whole number from the environment, or the default.
 * @param {Record<string, unknown>} env
 * @param {string} name
 * @param {number} fallback
 */
function envInt(env, name, fallback) {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${name} must be a whole number, got '${v}'`);
  return n;
}

/** TERMINAL_PROSODY: COLTRANE's terminal prosody on every prose answer (bias, observe or off). */
function prosody(env) {
  const v = env.TERMINAL_PROSODY || 'bias';
  if (!['bias', 'observe', 'off'].includes(v)) throw new Error(`TERMINAL_PROSODY must be bias, observe or off, got '${v}'`);
  return v;
}

/** The Worker's settings (wrangler.toml [vars]); see README for what each does. */
export function settings(env) {
  if (!env.MODELS) throw new Error('No R2 bucket is bound as MODELS (wrangler.toml [[r2_buckets]])');
  if (!env.MODEL_KEY) throw new Error('MODEL_KEY (the knot file in the MODELS bucket) is not set');
  const kvCache = env.KNOT_KV_CACHE || 'f16';
  if (kvCache !== 'f16' && kvCache !== 'f32') throw new Error(`KNOT_KV_CACHE must be f16 or f32, got '${kvCache}'`);
  const stream = env.KNOT_STREAM_LAYERS ?? '';
  if (!['', '0', '1'].includes(stream)) throw new Error(`KNOT_STREAM_LAYERS must be 0 or 1, got '${stream}'`);
  const streamLayers = stream === '1';
  const stations = Boolean(env.KNOT_STATIONS);
  if (!streamLayers && !stations) {
    // Not silently ignored: the LRU is streaming's.
    if (env.KNOT_LRU_CAPACITY !== undefined && env.KNOT_LRU_CAPACITY !== '') {
      throw new Error('KNOT_LRU_CAPACITY applies only with KNOT_STREAM_LAYERS=1 (every layer is resident otherwise)');
    }
  }
  // Generations run together (one forward pass per step for all of them; with stations, one
  // hop through the chain per step): each holds a KV cache — counted in this isolate's memory
  // plan, or in every layer station's (which holds KNOT_STATION_CONVERSATIONS). 'auto' (the
  // default): as many as the memory plan holds at KNOT_MAX_CONTEXT.
  const sequencesVar = env.KNOT_MAX_SEQUENCES ?? 'auto';
  const sequences = sequencesVar === 'auto' || sequencesVar === '' ? 'auto' : envInt(env, 'KNOT_MAX_SEQUENCES', 1);
  if (sequences !== 'auto' && (sequences < 1 || sequences > 64)) throw new Error(`KNOT_MAX_SEQUENCES must be auto or in 1..64, got '${env.KNOT_MAX_SEQUENCES}'`);
  const held = envInt(env, 'KNOT_STATION_CONVERSATIONS', 4);
  if (stations && sequences !== 'auto' && sequences > held) {
    throw new Error(`KNOT_MAX_SEQUENCES (${sequences}) is more than the conversations a layer station holds (KNOT_STATION_CONVERSATIONS, ${held})`);
  }
  const agentic = agenticFromEnv(env);
  // Checked now (a configured server outside KNOT_AGENTIC_ALLOW fails the open, naming it).
  agenticSettings(agentic);
  return {
    key: env.MODEL_KEY,
    modelId: env.MODEL_ID || env.MODEL_KEY.replace(/\.knot$/, ''),
    streamLayers,
    open: {
      // Streaming: an LRU of this many layers, the others read from R2 on every token.
      // Resident (the default): no bound, every layer stays once read.
      ...(streamLayers ? { lruCapacity: envInt(env, 'KNOT_LRU_CAPACITY', 4) } : {}),
      // Streaming, unset: as deep as the cache has room for (lruCapacity - 1), which hides R2's
      // latency best; shallower keeps the rest of the cache resident, for fewer reads per token.
      // Resident, unset: 3 layers ahead while the first token reads them all, as streaming's
      // default does (each R2 answer is a JS buffer of the isolate until collected).
      ...(env.KNOT_PREFETCH_DEPTH ? { prefetchDepth: envInt(env, 'KNOT_PREFETCH_DEPTH', 0) }
        : streamLayers ? {} : { prefetchDepth: 3 }),
      memoryBudget: envInt(env, 'KNOT_MEMORY_BUDGET_MB', 96) * MiB,
      kvCache,
      maxContext: envInt(env, 'KNOT_MAX_CONTEXT', 2048),
      maxBatch: envInt(env, 'KNOT_MAX_BATCH', 256),
      // KV caches kept beyond one per generation, for the prefixes of more conversations than
      // run at once (each counts in the memory plan at the whole context).
      prefixWindows: envInt(env, 'KNOT_PREFIX_WINDOWS', 0),
      prefixTtlMs: envInt(env, 'KNOT_PREFIX_TTL_MS', 15000),
      // Explicit prefill windows (/prefill/windows): each one's KV cache counts in the memory
      // plan (SmolLM2, f16, 512 tokens: 11.25 MiB of context). A split model has none.
      prefillWindows: stations ? 0 : envInt(env, 'KNOT_PREFILL_WINDOWS', 1),
      maxSequences: sequences,
      prefillWindowMaxTokens: envInt(env, 'KNOT_PREFILL_WINDOW_TOKENS', 512),
      // The resident tensors in 4 MiB reads, not one of 30 MB: each R2 answer is a JS buffer that
      // counts against the isolate until collected.
      maxReadBytes: envInt(env, 'KNOT_MAX_READ_MB', 4) * MiB,
    },
    prefixReuse: env.KNOT_PREFIX_REUSE !== '0',
    // Explicit prefill windows (/prefill/windows): on unless KNOT_PREFILL_WINDOWS=0.
    prefillWindows: envInt(env, 'KNOT_PREFILL_WINDOWS', 1) > 0 && !stations,
    terminalProsody: prosody(env),
    stations,
    sequences,
    // Positions per message between stations: what a split suggested at an over-budget open
    // is planned for.
    stationMaxBatch: envInt(env, 'KNOT_STATION_MAX_BATCH', 64),
    maxTokens: envInt(env, 'KNOT_MAX_TOKENS', 512),
    // The agentic loop over MCP servers (KNOT_AGENTIC, KNOT_MCP_SERVERS, KNOT_AGENTIC_ALLOW, ...):
    // one object for the isolate's life, so its tools cache lasts across requests.
    agentic,
    maxBodyBytes: envInt(env, 'KNOT_MAX_BODY_BYTES', 256 * 1024),
    maxMessages: envInt(env, 'KNOT_MAX_MESSAGES', 1024),
    maxTools: envInt(env, 'KNOT_MAX_TOOLS', 256),
    // The model's line: requests waiting past it are refused (429), as are those waiting too
    // long; a step silent for KNOT_STALL_MS (its request was canceled mid-call) is taken back.
    line: {
      maxWaiting: envInt(env, 'KNOT_QUEUE_MAX', 8),
      waitTimeoutMs: envInt(env, 'KNOT_QUEUE_TIMEOUT_MS', 60000),
      stallMs: envInt(env, 'KNOT_STALL_MS', 60000),
    },
  };
}

/**
 * @typedef {{ shim: any, source: R2KnotSource, server: ReturnType<typeof createServer>,
 *   settings: ReturnType<typeof settings>, openMs: number,
 *   openMeter: import('./meter.js').Meter, lastMeter: import('./meter.js').Meter | null }} Model
 */

/** @type {{ model: Model | null, opening: Promise<Model> | null }} */
const state = { model: null, opening: null };

/** @param {ReturnType<typeof settings>} s */
async function open(s, env) {
  const t0 = Date.now();
  // What the open spends (R2 reads), apart from the requests'.
  const openMeter = startMeter('open');
  // Split across stations (Durable Objects), or whole in this isolate.
  const source = new R2KnotSource(env.MODELS, s.key);
  const shim = s.stations ? await openStations(source, s, env) : await openWhole(source, s);
  /** @type {Model} */
  const model = { shim, source, server: /** @type {any} */ (null), settings: s, openMs: Date.now() - t0, openMeter, lastMeter: null };
  model.server = createServer(shim, {
    modelId: s.modelId,
    // index.js admits each request before the model opens; the server counts each key's
    // generations at once with the same gate.
    gate: gateFor(env),
    maxTokens: s.maxTokens,
    maxBodyBytes: s.maxBodyBytes,
    maxMessages: s.maxMessages,
    maxTools: s.maxTools,
    prefixReuse: s.prefixReuse,
    terminalProsody: s.terminalProsody,
    prefillWindows: s.prefillWindows,
    agentic: s.agentic,
    // Answered before the model opens (index.js); here for completeness.
    speech: { unavailable: 'speech runs in knot-serve, not in a Worker (docs/speech.md)' },
    health: () => ({ profile: profileOf(env)?.name ?? null }),
    stats: () => ({
      open_ms: model.openMs,
      range_reads: source.reads,
      bytes_read: source.bytes,
      // What the open and the last request spent of the per-invocation limits (meter.js).
      open_spent: openMeter.report(),
      last_request: model.lastMeter?.report() ?? null,
    }),
    routes: {
      '/stations': { methods: ['GET'], answer: () => stationsAnswer(model) },
    },
  });
  return model;
}

/** `/stations`: each station's figures, when the model is split. */
async function stationsAnswer(model) {
  const { shim, settings: s } = model;
  if (!s.stations) {
    throw new ApiError(404, 'This Worker holds the whole model: it has no stations (KNOT_STATIONS is not set)', { code: 'unknown_url' });
  }
  const st = shim.stats();
  // With KNOT_HOP_ASSESSMENT: the last hop's mesh_carrier_assessment/v1 blobs, one per layer station.
  const assessed = st.hopAssessments === undefined ? {} : { hop_assessments: st.hopAssessments };
  // This route's calls are no request's spending.
  resumeMeter(null);
  return Response.json({
    stations: await shim.stationStats(), hops: st.hops, steps: st.steps, stepRounds: st.stepRounds,
    sequences: st.sequences, prefix: st.prefix, prefix_reuse: st.prefixReuse, coordinator: st.coordinator, ...assessed,
  });
}

/**
 * The model split across stations (Durable Objects, stations.js): the package's coordinator in
 * this isolate, the stations reached through their bindings (transport.js). Every station loads
 * its part now; a station that cannot fails the open.
 * @param {R2KnotSource} source
 * @param {ReturnType<typeof settings>} s
 * @param {Record<string, any>} env
 */
async function openStations(source, s, env) {
  const table = stationTable(env);
  return Coordinator.open(source, {
    ...stationOptions(env),
    layers: table.layers,
    heads: table.heads,
    call: transport(env),
    timeoutMs: envInt(env, 'KNOT_STATION_TIMEOUT_MS', 60000),
    hopAssessment: hopAssessmentSettings(env.KNOT_HOP_ASSESSMENT, 'KNOT_HOP_ASSESSMENT'),
    ...s.line,
    // The steps a request runs count against its meter (index.js).
    onTurn: (meter) => resumeMeter(meter ?? null),
  });
}

/**
 * The whole model in this isolate. Refused over the budget with every layer resident (and not
 * streaming): the error says so with the numbers, and names the split across stations that fits.
 * @param {R2KnotSource} source
 * @param {ReturnType<typeof settings>} s
 */
async function openWhole(source, s) {
  try {
    return await HostShim.open(source, {
      ...s.open,
      ...s.line,
      // The steps a request runs count against its meter (index.js).
      onTurn: (meter) => resumeMeter(meter ?? null),
    });
  } catch (e) {
    if (/** @type {any} */ (e)?.code !== 'over_budget' || s.streamLayers) throw e;
    throw await overBudget(source, s, /** @type {Error} */ (e));
  }
}

const mib = (bytes) => `${(bytes / MiB).toFixed(1)} MiB`;

/**
 * The OpenAI-shaped error for a model that does not fit with every layer resident: the host's
 * plan, the stations layout for the same budget and settings (one conversation per prefix
 * window, as this Worker keeps), and the streaming alternative with its cost.
 * @param {R2KnotSource} source
 * @param {ReturnType<typeof settings>} s
 * @param {Error} e the host's over_budget error
 */
async function overBudget(source, s, e) {
  const budget = s.open.memoryBudget;
  const budgetMb = budget / MiB;
  const conversations = typeof s.sequences === 'number' ? s.sequences : 1;
  let split;
  let layers = '';
  try {
    const plan = await planStations(source, {
      memoryBudget: budget,
      maxContext: s.open.maxContext,
      kvCache: s.open.kvCache,
      maxBatch: s.stationMaxBatch,
      maxConversations: conversations,
    });
    const largest = Math.max(...plan.stations.map((p) => p.total));
    const last = plan.stations.filter((p) => p.kind === 'layers').at(-1);
    if (last?.layers) layers = ` (up to ${last.layers[1]} R2 reads per token)`;
    split = `split it across stations: ${plan.layers} layer + ${plan.heads} head stations fit `
      + `${budgetMb} MiB each (the largest takes ${mib(largest)}; planned for ${plan.context} positions, `
      + `an ${s.open.kvCache} KV cache and ${conversations} conversation${conversations === 1 ? '' : 's'} per `
      + `layer station: KNOT_MAX_CONTEXT, KNOT_KV_CACHE and KNOT_STATION_CONVERSATIONS in `
      + 'wrangler.station.toml; see README "Deploying")';
  } catch (p) {
    split = `no split across stations fits ${budgetMb} MiB either (${/** @type {any} */ (p)?.message ?? p})`;
  }
  return new ApiError(errorStatus(e),
    `${s.modelId} does not fit KNOT_MEMORY_BUDGET_MB=${budgetMb} with every layer resident: ${e.message}. `
    + `Either ${split}, or set KNOT_STREAM_LAYERS=1 to stream layers from R2 on every token${layers}.`,
    { code: 'over_budget' });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The isolate's model, opening it on first use. The request that opens it keeps its context
 * alive until the open is done (`waitUntil`), and the others poll for it on timers of their own
 * (in workerd a request must not wait on a promise another request settles).
 * @param {Record<string, unknown>} env
 * @param {{ waitUntil(p: Promise<unknown>): void }} ctx
 * @returns {Promise<Model>}
 */
export async function getModel(env, ctx) {
  if (state.model !== null) return state.model;
  if (state.opening === null) {
    const s = settings(env);
    const opening = open(s, env);
    state.opening = opening;
    opening.then(
      (m) => {
        state.model = m;
        state.opening = null;
      },
      () => {
        // Not cached: the next request tries again.
        if (state.opening === opening) state.opening = null;
      },
    );
    ctx.waitUntil(opening.catch(() => {}));
    return opening;
  }
  for (;;) {
    await sleep(10);
    if (state.model !== null) return state.model;
    if (state.opening === null) return getModel(env, ctx);
  }
}

/** The model if it is open (for routes that must not open it). */
export const currentModel = () => state.model;
