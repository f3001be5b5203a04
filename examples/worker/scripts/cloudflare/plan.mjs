// Plans a Cloudflare deployment of one .knot model (`knot-cloudflare plan`, issue 45): which
// topology (one Worker with every layer resident, layer + head stations, or — only when asked —
// the streaming single Worker), what each script holds, and what a token costs there (hops,
// subrequests, tokens per request on each plan, CPU on the free plan), from the knot's index and
// the package's own planners (HostShim's memory plan, planStations). Nothing here touches the
// network; configs.mjs turns the result into wrangler configurations.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { FileKnotSource, HostShim, planStations } from 'knot-wasm';
import { bundle, ROOT } from '../bundle.mjs';

const MiB = 2 ** 20;

/**
 * The platform's limits this plan is checked against (https://developers.cloudflare.com/workers/platform/limits/,
 * read 2026-12: 50 / 10,000 subrequests, 10 ms / 5 min CPU, 128 MB memory, Worker size 64 MiB on
 * both plans): subrequests per invocation (R2 reads and Durable Object calls count), CPU per
 * invocation, the bundle. The Worker size limit changed in 2026 (cloudflare-docs PRs #31002,
 * #31067): before, 3 MB (free) / 10 MB (paid) after compression. The bundle is checked against
 * both readings — 64 MiB uncompressed, and the older compressed figure, which an account that
 * still enforces it would apply — so a plan that passes deploys either way. An isolate has 128
 * MB for the JS heap and wasm memory together.
 */
export const LIMITS = {
  free: { subrequests: 50, cpuMs: 10, bundleBytes: 64 * MiB, gzipBytesBefore2026: 3 * 1e6 },
  paid: { subrequests: 10_000, cpuMs: 300_000, bundleBytes: 64 * MiB, gzipBytesBefore2026: 10 * 1e6 },
  isolateBytes: 128 * 1e6,
};

/** The streaming single Worker's LRU of layers (wrangler.toml's KNOT_LRU_CAPACITY). */
export const STREAM_LRU = 4;
/** Conversations a layer station holds by default; fewer, then a shorter context, when no split fits. */
const CONVERSATIONS = [4, 3, 2, 1];
const SMALLEST_CONTEXT = 256;

/** A refusal to plan: a message for the user (exit 2), never a stack trace. */
export class PlanError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'PlanError';
  }
}

/** @param {number} bytes */
export const mib = (bytes) => `${(bytes / MiB).toFixed(1)} MiB`;

/**
 * The SHA-256 of a file, streamed (a model may be gigabytes).
 * @param {string} file
 * @returns {Promise<string>}
 */
export function sha256File(file) {
  return new Promise((done, fail) => {
    const hash = createHash('sha256');
    createReadStream(file).on('error', fail).on('data', (c) => hash.update(c)).on('end', () => done(hash.digest('hex')));
  });
}

/**
 * The gzipped sizes of the two entries a deployment uploads (the coordinator's src/index.js and
 * the stations' src/station.js), bundled as wrangler bundles them (scripts/bundle.mjs).
 */
async function bundleSizes() {
  const out = mkdtempSync(join(tmpdir(), 'knot-plan-bundle-'));
  try {
    const index = await bundle({ entry: join(ROOT, 'src/index.js'), out: join(out, 'index/index.js'), quiet: true });
    const station = await bundle({ entry: join(ROOT, 'src/station.js'), out: join(out, 'station/station.js'), quiet: true });
    return {
      coordinator: { bytes: index.sizes.bytes, gzipBytes: index.sizes.gzipBytes },
      station: { bytes: station.sizes.bytes, gzipBytes: station.sizes.gzipBytes },
    };
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

/**
 * A source that counts the reads made through it (a Worker's reads of R2 are subrequests).
 * @param {FileKnotSource} source
 */
function counting(source) {
  const counted = {
    reads: 0,
    get size() { return source.size; },
    rangeGet(start, end) { counted.reads += 1; return source.rangeGet(start, end); },
    rangeGetInto(start, end, target) { counted.reads += 1; return source.rangeGetInto(start, end, target); },
  };
  return counted;
}

/**
 * Opens the model whole under `options`: its memory plan and the reads the open made, or null
 * when it is over the budget (rejected before any tensor is read).
 * @param {FileKnotSource} file
 * @param {Record<string, unknown>} options
 */
async function openWhole(file, options) {
  const source = counting(file);
  let shim;
  try {
    shim = await HostShim.open(source, { ...options, threads: 1 });
  } catch (e) {
    if (/** @type {any} */ (e)?.code === 'over_budget') return { fits: false, why: /** @type {Error} */ (e).message };
    throw e;
  }
  try {
    const stats = shim.stats();
    return {
      fits: true,
      context: shim.contextLength,
      sequences: shim.maxSequences,
      layers: shim.layerCount,
      memoryPlan: stats.memoryPlan ?? null,
      openReads: source.reads,
    };
  } finally {
    await shim.dispose();
  }
}

/**
 * CPU of one decode step of the whole model, measured here in Node through HostShim (the same
 * wasm as the Worker's, one thread, this machine's CPU): an estimate of a step, not workerd's
 * (which runs the same wasm on Cloudflare's CPUs; its JS around the step costs more). The model
 * is opened with every layer resident and no budget to speak of; the first token's layer reads
 * are counted (the whole Worker's first request spends them as subrequests).
 * @param {FileKnotSource} file
 */
async function timeStep(file) {
  const source = counting(file);
  const shim = await HostShim.open(source, { memoryBudget: 4096 * MiB, maxContext: 256, kvCache: 'f16', maxSequences: 1, prefixWindows: 0, prefillWindows: 0, threads: 1 });
  try {
    const ids = shim.encode('The capital of France is');
    const opened = source.reads;
    await shim.generate(ids, 1, { temperature: 0 });
    const firstTokenReads = source.reads - opened;
    // Steps timed after a warm-up: a 9-token run less a 1-token run is 8 steps (the prompt's
    // prefill, reused, the same in both); the best of each over a few rounds (the least noise
    // on a busy machine), and a whole run's mean if noise still makes the difference negative.
    const time = async (n) => { const t0 = performance.now(); await shim.generate(ids, n, { temperature: 0 }); return performance.now() - t0; };
    let one = Infinity;
    let nine = Infinity;
    for (let round = 0; round < 3; round++) {
      one = Math.min(one, await time(1));
      nine = Math.min(nine, await time(9));
    }
    const best = nine > one ? (nine - one) / 8 : nine / 9;
    return { stepMs: best, firstTokenReads };
  } finally {
    await shim.dispose();
  }
}

/**
 * The fewest stations for `budget`, at 4 conversations per layer station, fewer (down to 1), then
 * halving the context (down to 256): the first that fits, and what was given up for it.
 * @param {FileKnotSource} source
 * @param {{ budget: number, maxContext: number, kvCache: string, conversations?: number }} o
 *   conversations: per layer station, fixed (fewer conversations make a shorter chain: fewer
 *   hops per token)
 */
async function fitStations(source, { budget, maxContext, kvCache, conversations }) {
  // Asked for a number of conversations: that one only (then a shorter context).
  const counts = conversations === undefined ? CONVERSATIONS : [conversations];
  const tries = counts.map((c) => ({ conversations: c, context: maxContext }));
  for (let c = Math.floor(maxContext / 2); c >= SMALLEST_CONTEXT; c = Math.floor(c / 2)) tries.push({ conversations: 1, context: c });
  let last;
  for (const t of tries) {
    try {
      const layout = await planStations(source, { memoryBudget: budget, maxContext: t.context, kvCache, maxConversations: t.conversations });
      const given = [];
      if (t.conversations < counts[0]) given.push(`${t.conversations} conversation${t.conversations === 1 ? '' : 's'} per layer station instead of ${counts[0]} (no split of ${counts[0]} fits)`);
      if (t.context < maxContext) given.push(`a context of ${t.context} positions instead of ${maxContext} (no split at ${maxContext} fits, even with one conversation)`);
      return { layout, conversations: t.conversations, given };
    } catch (e) {
      if (/** @type {any} */ (e)?.code !== 'over_budget') throw e;
      last = /** @type {Error} */ (e).message;
    }
  }
  throw new PlanError(`no split across stations fits ${mib(budget)} an isolate, even with one conversation at ${SMALLEST_CONTEXT} positions: ${last}`);
}

/**
 * @typedef {{ script: string, kind: 'layers' | 'head', binding: string, range: [number, number],
 *   config: string, plannedBytes: number }} Station
 * @typedef {{ version: 1, name: string, model: { file: string, key: string, bytes: number, sha256: string },
 *   bucket: string, plan: 'free' | 'paid', budgetMb: number, topology: 'whole' | 'stations' | 'stream',
 *   context: number, kvCache: string, conversations: number,
 *   coordinator: { script: string, config: string, plannedBytes: number }, stations: Station[],
 *   figures: Record<string, any> }} Deployment
 */

/**
 * Plans the deployment of `file`. Rejects with a PlanError (a message for the user) when the
 * model cannot be served as asked.
 * @param {{ file: string, budgetMb?: number, plan?: 'free' | 'paid', name?: string, bucket?: string,
 *   key?: string, maxContext?: number, kvCache?: 'f16' | 'f32', stream?: boolean, conversations?: number }} options
 *   conversations: per layer station (default: 4, fewer when no split fits)
 * @returns {Promise<Deployment>}
 */
export async function planDeployment({ file, budgetMb = 96, plan = 'paid', name = 'knot', bucket = 'knot-models', key, maxContext = 2048, kvCache = 'f16', stream = false, conversations }) {
  if (!Number.isInteger(maxContext) || maxContext < 16 || maxContext > 131072) throw new PlanError(`--context must be an integer in 16..131072 (positions), got '${maxContext}'`);
  if (conversations !== undefined && (!Number.isInteger(conversations) || conversations < 1 || conversations > 64)) {
    throw new PlanError(`--conversations must be an integer in 1..64 (per layer station), got '${conversations}'`);
  }
  if (plan !== 'free' && plan !== 'paid') throw new PlanError(`--plan must be free or paid, got '${plan}'`);
  if (!Number.isInteger(budgetMb) || budgetMb < 16 || budgetMb > 4096) throw new PlanError(`--budget-mb must be an integer in 16..4096 (MiB of wasm memory per isolate), got '${budgetMb}'`);
  // Script names: lowercase letters, digits and dashes (Workers' rule), room left for '-layers-NN'.
  if (typeof name !== 'string' || !/^[a-z0-9](?:[a-z0-9-]{0,40}[a-z0-9])?$/.test(name)) {
    throw new PlanError(`--name must be 1-42 lowercase letters, digits or dashes, not starting or ending with a dash (a Worker script name prefix), got '${name}'`);
  }
  if (typeof bucket !== 'string' || !/^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/.test(bucket)) {
    throw new PlanError(`--bucket must be an R2 bucket name (3-63 lowercase letters, digits or dashes), got '${bucket}'`);
  }
  const path = resolve(file);
  let source;
  try {
    source = await FileKnotSource.open(path);
  } catch (e) {
    throw new PlanError(`${file}: ${/** @type {any} */ (e).code === 'ENOENT' ? 'no such file' : /** @type {Error} */ (e).message}`);
  }
  try {
    return await planOpened(source, { path, budgetMb, plan, name, bucket, key: key ?? basename(path), maxContext, kvCache, stream, conversations });
  } catch (e) {
    if (e instanceof PlanError) throw e;
    // A file that is not a knot, a truncated one: the package's message, not a stack.
    throw new PlanError(`${file}: ${/** @type {Error} */ (e).message}`);
  } finally {
    await source.close();
  }
}

/**
 * @param {FileKnotSource} source
 * @param {{ path: string, budgetMb: number, plan: 'free' | 'paid', name: string, bucket: string,
 *   key: string, maxContext: number, kvCache: string, stream: boolean }} o
 * @returns {Promise<Deployment>}
 */
async function planOpened(source, o) {
  const budget = o.budgetMb * MiB;
  const limits = LIMITS[o.plan];
  const notes = [];
  if (budget > LIMITS.isolateBytes - 16 * MiB) {
    notes.push(`a budget of ${mib(budget)} leaves less than 16 MiB of an isolate's 128 MB for the JS heap: it may not run deployed`);
  }
  const open = { memoryBudget: budget, maxContext: o.maxContext, kvCache: o.kvCache, maxSequences: 'auto', prefixWindows: 0, prefillWindows: 0 };
  const whole = await openWhole(source, o.stream ? { ...open, lruCapacity: STREAM_LRU } : open);

  let topology;
  let context;
  let conversations;
  let coordinatorBytes;
  /** @type {Station[]} */
  let stations = [];
  let layout = null;
  if (o.stream) {
    if (!whole.fits) throw new PlanError(`streaming with an LRU of ${STREAM_LRU} layers does not fit ${mib(budget)} either: ${whole.why}`);
    topology = 'stream';
    notes.push('streaming, as asked (--stream): layers not held by the LRU are read from R2 again on every token');
  } else if (whole.fits) {
    topology = 'whole';
    notes.push(`the whole model fits ${mib(budget)} with every layer resident: one Worker, no R2 read per token after the first`);
  } else {
    topology = 'stations';
    notes.push(`the whole model does not fit ${mib(budget)} with every layer resident (${whole.why.replace(/^the model does not fit the memory budget of \d+ bytes \([^)]*\): /, '')}): split across stations (--stream would stream layers from R2 on every token instead)`);
    const fit = await fitStations(source, { budget, maxContext: o.maxContext, kvCache: o.kvCache, conversations: o.conversations });
    layout = fit.layout;
    notes.push(...fit.given.map((g) => `gave up ${g}`));
    context = layout.context;
    conversations = fit.conversations;
    let l = 0;
    let h = 0;
    for (const s of layout.stations) {
      if (s.kind === 'coordinator') { coordinatorBytes = s.total; continue; }
      const i = s.kind === 'layers' ? l++ : h++;
      const script = s.kind === 'layers' ? `${o.name}-layers-${i}` : `${o.name}-head-${i}`;
      stations.push({
        script,
        kind: s.kind,
        binding: s.kind === 'layers' ? `LAYERS_${i}` : `HEADS_${i}`,
        range: /** @type {[number, number]} */ (s.kind === 'layers' ? s.layers : s.rows),
        config: `stations/${script}.toml`,
        plannedBytes: s.total,
      });
    }
  }
  if (topology !== 'stations') {
    context = whole.context;
    conversations = whole.sequences;
    coordinatorBytes = whole.memoryPlan?.total ?? budget;
  }

  const nLayers = whole.layers ?? layout?.stations.filter((s) => s.kind === 'layers').reduce((n, s) => Math.max(n, s.layers[1]), 0);
  const layerStations = stations.filter((s) => s.kind === 'layers').length;
  const headStations = stations.length - layerStations;
  const sizes = await bundleSizes();

  /** @type {Record<string, any>} */
  const figures = {
    budgetBytes: budget,
    memory: [{ script: o.name, plannedBytes: coordinatorBytes }, ...stations.map((s) => ({ script: s.script, plannedBytes: s.plannedBytes }))],
    ...(topology !== 'stations' && whole.memoryPlan ? { memoryPlan: whole.memoryPlan } : {}),
    bundle: topology === 'stations' ? sizes : { coordinator: sizes.coordinator },
    limits: { subrequests: limits.subrequests, cpuMs: limits.cpuMs, bundleBytes: limits.bundleBytes, gzipBytesBefore2026: limits.gzipBytesBefore2026 },
  };
  if (topology === 'whole') {
    Object.assign(figures, {
      hopsPerToken: 0,
      subrequestsPerToken: 0,
      // The open's reads (and the first token's, one per layer at least) fall on the first request.
      firstRequestReads: whole.openReads + nLayers,
      tokensPerRequest: { free: null, paid: null },
    });
  } else if (topology === 'stream') {
    // Every layer the LRU does not hold is read again on every token (README "Deploying":
    // 29.7 measured for SmolLM2 at LRU 4, with the prefetch's misses).
    const reads = Math.max(0, nLayers - STREAM_LRU);
    Object.assign(figures, {
      hopsPerToken: 0,
      lru: STREAM_LRU,
      r2ReadsPerToken: reads,
      subrequestsPerToken: reads,
      firstRequestReads: whole.openReads,
      tokensPerRequest: {
        free: reads ? Math.floor(LIMITS.free.subrequests / reads) : null,
        paid: reads ? Math.floor(LIMITS.paid.subrequests / reads) : null,
      },
    });
  } else {
    // The chain: the coordinator's one call per step reaches the first layer station, each layer
    // station calls the next, the last fans out to the head shards, the answers come back up.
    // Per request besides: a forget or keep and a claim per layer station, and a round of
    // embedding rows to the head shards for a prompt (when the table is sharded).
    const fixed = 2 * layerStations + headStations;
    Object.assign(figures, {
      hopsPerToken: layerStations + 1,
      stationCallsPerToken: layerStations - 1 + headStations,
      subrequestsPerToken: 1,
      fixedSubrequestsPerRequest: fixed,
      tokensPerRequest: {
        free: Math.max(0, LIMITS.free.subrequests - fixed),
        paid: LIMITS.paid.subrequests - fixed,
      },
    });
  }
  for (const [kind, s] of Object.entries(figures.bundle)) {
    if (s.bytes > limits.bundleBytes) throw new PlanError(`the ${kind} bundle is ${(s.bytes / MiB).toFixed(2)} MiB, over the Worker size limit of ${limits.bundleBytes / MiB} MiB`);
    if (s.gzipBytes > limits.gzipBytesBefore2026) throw new PlanError(`the ${kind} bundle is ${(s.gzipBytes / 1e6).toFixed(2)} MB gzipped, over the ${o.plan} plan's ${limits.gzipBytesBefore2026 / 1e6} MB of the limits before 2026`);
  }
  if (o.plan === 'free') await checkFree(source, { topology, figures, stations, layout, notes, name: o.name, openReads: whole.openReads });
  figures.notes = notes;

  return {
    version: 1,
    name: o.name,
    model: { file: o.path, key: o.key, bytes: source.size, sha256: await sha256File(o.path) },
    bucket: o.bucket,
    plan: o.plan,
    budgetMb: o.budgetMb,
    topology,
    context,
    kvCache: o.kvCache,
    conversations,
    coordinator: { script: o.name, config: 'coordinator.toml', plannedBytes: coordinatorBytes },
    stations,
    figures,
  };
}

/**
 * The free plan: 50 subrequests and 10 ms of CPU per invocation. Estimates each isolate's CPU
 * per token from one step of the whole model (apportioned to the stations by the weights they
 * multiply), and refuses, with the numbers, what cannot produce a token there.
 * @param {FileKnotSource} source
 * @param {{ topology: string, figures: Record<string, any>, stations: Station[], layout: any, notes: string[], name: string,
 *   openReads: number }} p
 */
async function checkFree(source, { topology, figures, stations, layout, notes, name, openReads }) {
  const { stepMs, firstTokenReads } = await timeStep(source);
  const cpuMs = LIMITS.free.cpuMs;
  const problems = [];
  const perIsolate = [];
  if (topology === 'stations') {
    // A station's share of a step: the weights it multiplies, of all the stations'.
    const plans = layout.stations.filter((s) => s.kind !== 'coordinator');
    const total = plans.reduce((n, s) => n + s.weights, 0);
    for (const [i, s] of stations.entries()) {
      const ms = stepMs * plans[i].weights / total;
      perIsolate.push({ script: s.script, cpuMsPerToken: round(ms) });
      if (ms > cpuMs) problems.push(`${s.script} ~${ms.toFixed(1)} ms of CPU per token (its share of a ${stepMs.toFixed(1)} ms step)`);
    }
    perIsolate.unshift({ script: name, cpuMsPerToken: null });
    if (figures.tokensPerRequest.free < 1) problems.push(`${figures.fixedSubrequestsPerRequest} subrequests per request before the first token, of ${LIMITS.free.subrequests}`);
    notes.push('the coordinator\'s own CPU per token (sampling, the chain\'s bookkeeping) is not estimated: its request spans the whole generation, so its 10 ms bound all of a request\'s tokens together');
  } else {
    perIsolate.push({ script: name, cpuMsPerToken: round(stepMs) });
    const tokens = Math.floor(cpuMs / stepMs);
    figures.tokensPerRequest.free = Math.min(tokens, figures.tokensPerRequest.free ?? Infinity);
    if (tokens < 1) problems.push(`${name} ~${stepMs.toFixed(1)} ms of CPU per token (one step of the whole model), over ${cpuMs} ms before the first token`);
    // The whole model's first token reads every layer (measured now); streaming's, the LRU's.
    if (topology === 'whole') figures.firstRequestReads = openReads + firstTokenReads;
    const first = figures.firstRequestReads;
    if (first > LIMITS.free.subrequests) problems.push(`the first request reads the model in ~${first} R2 reads, over ${LIMITS.free.subrequests} subrequests`);
    if (topology === 'stream' && figures.tokensPerRequest.free < 1) problems.push(`${figures.r2ReadsPerToken} R2 reads per token, over ${LIMITS.free.subrequests} subrequests`);
  }
  figures.cpu = {
    stepMs: round(stepMs),
    measured: 'one decode step of the whole model in Node through HostShim (the same wasm, one thread, this machine): an estimate; workerd on Cloudflare\'s CPUs differs, and a prompt\'s prefill or a station\'s open costs more than a step',
    perIsolate,
  };
  if (problems.length) {
    throw new PlanError([
      `the free plan (${LIMITS.free.subrequests} subrequests and ${cpuMs} ms of CPU per invocation) cannot serve this model as planned (${topology}):`,
      ...problems.map((p) => `  - ${p}`),
      `estimate: ${figures.cpu.measured}.`,
      'Use --plan paid (CPU up to 5 minutes per request, 10,000 subrequests).',
    ].join('\n'));
  }
  notes.push('the free plan\'s CPU estimate is of a native step: confirm it deployed (GET /stats), the open and a long prompt included');
}

/** @param {number} x */
const round = (x) => Math.round(x * 100) / 100;

/**
 * The plan as printed: topology, why, and the figures.
 * @param {Deployment} d
 * @returns {string}
 */
export function formatPlan(d) {
  const f = d.figures;
  const lines = [];
  const layers = d.stations.filter((s) => s.kind === 'layers');
  const heads = d.stations.filter((s) => s.kind === 'head');
  const what = d.topology === 'whole' ? 'one Worker, every layer resident'
    : d.topology === 'stream' ? `one Worker, streaming layers from R2 (an LRU of ${STREAM_LRU})`
      : `${layers.length} layer + ${heads.length} head stations and a coordinator`;
  lines.push(`${d.model.key} (${mib(d.model.bytes)}), ${d.plan} plan, ${d.budgetMb} MiB per isolate: ${what}`);
  for (const n of f.notes ?? []) lines.push(`  - ${n}`);
  const held = d.topology === 'stations' ? 'conversation' : 'generation';
  lines.push(`context ${d.context} positions, ${d.kvCache} KV cache, ${d.conversations} ${held}${d.conversations === 1 ? '' : 's'} ${d.topology === 'stations' ? 'per layer station' : 'at once'}`);
  lines.push('memory per script (planned):');
  lines.push(`  ${d.coordinator.script.padEnd(28)} ${(d.topology === 'stations' ? 'coordinator' : 'worker').padEnd(19)} ${mib(d.coordinator.plannedBytes).padStart(10)}`);
  for (const s of d.stations) {
    const range = s.kind === 'layers' ? `layers ${s.range[0]}-${s.range[1]}` : `vocab ${s.range[0]}-${s.range[1]}`;
    lines.push(`  ${s.script.padEnd(28)} ${range.padEnd(19)} ${mib(s.plannedBytes).padStart(10)}   (${s.binding})`);
  }
  if (d.topology === 'stations') {
    lines.push(`hops per token: ${f.hopsPerToken} sequential (coordinator → ${layers.length} layer station${layers.length === 1 ? '' : 's'} → ${heads.length} head shard${heads.length === 1 ? '' : 's'} → back), ${f.stationCallsPerToken} station-to-station calls`);
    lines.push(`subrequests per token: ${f.subrequestsPerToken} of the coordinator's request (+ up to ${f.fixedSubrequestsPerRequest} per request: forgets, claims, a rows round)`);
  } else if (d.topology === 'stream') {
    lines.push(`R2 cost: ~${f.r2ReadsPerToken} R2 reads per token (the ${f.r2ReadsPerToken} layers the LRU of ${STREAM_LRU} does not hold), each a subrequest`);
    lines.push(`subrequests per token: ${f.subrequestsPerToken}`);
  } else {
    lines.push(`hops per token: 0; subrequests per token: 0 (the first request reads the model: ~${f.firstRequestReads} R2 reads)`);
  }
  const tokens = (n) => (n === null ? 'unbounded' : String(n));
  lines.push(`tokens per request: free plan (${LIMITS.free.subrequests} subrequests) ${tokens(f.tokensPerRequest.free)}, paid plan (${LIMITS.paid.subrequests}) ${tokens(f.tokensPerRequest.paid)}`);
  if (f.cpu) {
    lines.push(`CPU per token (estimate: ${f.cpu.measured}):`);
    for (const p of f.cpu.perIsolate) lines.push(`  ${p.script.padEnd(28)} ${p.cpuMsPerToken === null ? 'not estimated' : `~${p.cpuMsPerToken} ms`}`);
  }
  const gz = (s) => `${(s.bytes / 1e6).toFixed(2)} MB, ${(s.gzipBytes / 1e6).toFixed(2)} MB gzipped`;
  lines.push(`bundle: coordinator ${gz(f.bundle.coordinator)}${f.bundle.station ? `; station ${gz(f.bundle.station)}` : ''} (limits: ${f.limits.bundleBytes / MiB} MiB a Worker; ${f.limits.gzipBytesBefore2026 / 1e6} MB gzipped on the ${d.plan} plan before 2026)`);
  return lines.join('\n');
}
