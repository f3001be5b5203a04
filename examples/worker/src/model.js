// The model, opened once per isolate and shared by every request: the shim, its settings from
// the environment, and the generation queue in front of it. A failed open is not kept: the next
// request tries again.
import { HostShim } from 'knot-wasm';
import { R2KnotSource } from './r2.js';
import { GenerationQueue } from './queue.js';
import { SplitModel } from './split.js';

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

/** The Worker's settings (wrangler.toml [vars]); see README for what each does. */
export function settings(env) {
  if (!env.MODELS) throw new Error('No R2 bucket is bound as MODELS (wrangler.toml [[r2_buckets]])');
  if (!env.MODEL_KEY) throw new Error('MODEL_KEY (the knot file in the MODELS bucket) is not set');
  const kvCache = env.KNOT_KV_CACHE || 'f16';
  if (kvCache !== 'f16' && kvCache !== 'f32') throw new Error(`KNOT_KV_CACHE must be f16 or f32, got '${kvCache}'`);
  return {
    key: env.MODEL_KEY,
    modelId: env.MODEL_ID || env.MODEL_KEY.replace(/\.knot$/, ''),
    open: {
      lruCapacity: envInt(env, 'KNOT_LRU_CAPACITY', 4),
      // Unset: as deep as the cache has room for (lruCapacity - 1), which hides R2's latency best;
      // shallower keeps the rest of the cache resident, for fewer reads per token.
      ...(env.KNOT_PREFETCH_DEPTH ? { prefetchDepth: envInt(env, 'KNOT_PREFETCH_DEPTH', 0) } : {}),
      memoryBudget: envInt(env, 'KNOT_MEMORY_BUDGET_MB', 96) * MiB,
      kvCache,
      maxContext: envInt(env, 'KNOT_MAX_CONTEXT', 2048),
      maxBatch: envInt(env, 'KNOT_MAX_BATCH', 256),
      prefixWindows: envInt(env, 'KNOT_PREFIX_WINDOWS', 1),
      prefixTtlMs: envInt(env, 'KNOT_PREFIX_TTL_MS', 15000),
      // The resident tensors in 4 MiB reads, not one of 30 MB: each R2 answer is a JS buffer that
      // counts against the isolate until collected.
      maxReadBytes: envInt(env, 'KNOT_MAX_READ_MB', 4) * MiB,
    },
    prefixReuse: env.KNOT_PREFIX_REUSE !== '0',
    stations: Boolean(env.KNOT_STATIONS),
    maxTokens: envInt(env, 'KNOT_MAX_TOKENS', 512),
    maxBodyBytes: envInt(env, 'KNOT_MAX_BODY_BYTES', 256 * 1024),
    queue: {
      max: envInt(env, 'KNOT_QUEUE_MAX', 8),
      timeoutMs: envInt(env, 'KNOT_QUEUE_TIMEOUT_MS', 60000),
      stallMs: envInt(env, 'KNOT_STALL_MS', 60000),
    },
  };
}

/**
 * @typedef {{ shim: HostShim, source: R2KnotSource, queue: GenerationQueue,
 *   settings: ReturnType<typeof settings>, info: object, openMs: number,
 *   recent: { id: string, tokens: number, finish: string, ms: number }[] }} Model
 */

/** @type {{ model: Model | null, opening: Promise<Model> | null }} */
const state = { model: null, opening: null };

/** @param {ReturnType<typeof settings>} s */
async function open(s, env) {
  const t0 = Date.now();
  // Split across stations (Durable Objects), or whole in this isolate.
  const split = s.stations ? await SplitModel.open(env, s) : null;
  const source = split?.source ?? new R2KnotSource(env.MODELS, s.key);
  const shim = split ?? await HostShim.open(source, s.open);
  const queue = new GenerationQueue({
    ...s.queue,
    // A holder silent for stallMs: its request was canceled mid-call (or is stuck for good).
    // Take the shim back so the line moves on.
    onStall: async () => {
      await shim.reclaim();
    },
  });
  return { shim, source, queue, settings: s, info: shim.info(), openMs: Date.now() - t0, recent: [] };
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
