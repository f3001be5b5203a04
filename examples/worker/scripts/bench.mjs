// `npm run bench`: the Worker in workerd (Miniflare, local R2) against the same package in Node
// reading the file, in the same run: open, cold first token, decode tok/s, wasm memory, R2 reads
// per token and per request, subrequests per request, bundle size. Configurations: the default
// (wrangler.toml), and a larger resident set; the Worker's under each profile (production's costs
// simulated, scripts/profiles.mjs), with ratios against `local` from the same run.
//   node scripts/bench.mjs [--tokens 128] [--rounds 3] [--profiles local,prod] [--subrequests free|N]
import { streamOnce as stream } from './stream.mjs';
import { FileKnotSource, HostShim } from 'knot-wasm';
import { startLocal, CONFIG, modelFile } from './local.mjs';
import { freePort, inspectIsolate } from './isolate.mjs';
import { describeProfile, profilesFromArgs } from './profiles.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const TOKENS = arg('tokens', 128);
const ROUNDS = arg('rounds', 3);
const PROFILES = profilesFromArgs(process.argv.slice(2), { list: true, fallback: 'local,prod' });
const MiB = 2 ** 20;
const MESSAGES = [{ role: 'user', content: 'Write a long story about a lighthouse keeper and a storm.' }];
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** The chat request this bench times (`streamOnce` in stream.mjs). */
function streamOnce(url) {
  return stream(url, '/v1/chat/completions', { model: CONFIG.vars.MODEL_ID, messages: MESSAGES, temperature: 0, max_tokens: TOKENS });
}

async function worker(name, vars, profile) {
  const t0 = performance.now();
  const inspectorPort = await freePort();
  const local = await startLocal({ quiet: true, vars, inspectorPort, profile });
  const isolate = await inspectIsolate(inspectorPort);
  try {
    const health = await (await fetch(`${local.url}/health`)).json();
    const openMs = performance.now() - t0;
    const cold = await streamOnce(local.url);
    const warm = [];
    const sampling = isolate.sampler(20);
    for (let r = 0; r < ROUNDS; r++) warm.push(await streamOnce(local.url));
    const heap = await sampling.stop();
    const s = await (await fetch(`${local.url}/stats`)).json();
    return {
      name: `workerd, ${name}`,
      config: name,
      profile: profile.name,
      context: health.context_length,
      openS: +(s.open_ms / 1000).toFixed(2),
      coldFirstTokenMs: Math.round(cold.firstMs),
      warmFirstTokenMs: Math.round(median(warm.map((w) => w.firstMs))),
      decodeTokS: +median(warm.map((w) => w.decodeTokS)).toFixed(1),
      xLocal: null,
      readsPerToken: +(s.generation?.layerReadsPerToken ?? 0).toFixed(1),
      // What the last warm request spent (every warm request is the same one).
      r2ReadsPerReq: s.last_request.r2_reads,
      subreqPerReq: s.last_request.subrequests,
      subreqPerToken: s.last_request.subrequests_per_token,
      wasmMiB: +(s.wasmMemoryBytes / MiB).toFixed(1),
      planMiB: +(s.memoryPlan.total / MiB).toFixed(1),
      jsHeapMiB: +(heap.heapBytes / MiB).toFixed(1),
      jsBuffersMiB: +(heap.buffersBytes / MiB).toFixed(1),
      bundleGzMB: +(local.sizes.gzipBytes / 1e6).toFixed(2),
      startS: +(openMs / 1000).toFixed(1),
    };
  } finally {
    isolate.close();
    await local.dispose();
  }
}

/** The same package, options and request in Node over the file: the baseline. */
async function node(name, options) {
  const source = await FileKnotSource.open(modelFile());
  const shim = await HostShim.open(source, options);
  try {
    const runs = [];
    for (let r = 0; r <= ROUNDS; r++) {
      const t0 = performance.now();
      let first;
      let n = 0;
      for await (const e of shim.streamTokens(MESSAGES, { maxTokens: TOKENS, reusePrefix: true })) {
        if (first === undefined && e.text) first = performance.now();
        n++;
      }
      runs.push({ firstMs: first - t0, decodeTokS: (n - 1) / ((performance.now() - first) / 1000) });
    }
    const warm = runs.slice(1);
    return { name: `node file, ${name}`, config: name, profile: '-', decodeTokS: +median(warm.map((w) => w.decodeTokS)).toFixed(1), warmFirstTokenMs: Math.round(median(warm.map((w) => w.firstMs))), readsPerToken: +shim.stats().layerReadsPerToken.toFixed(1) };
  } finally {
    await shim.dispose();
    await source.close();
  }
}

const v = CONFIG.vars;
const defaults = {
  lruCapacity: Number(v.KNOT_LRU_CAPACITY), memoryBudget: Number(v.KNOT_MEMORY_BUDGET_MB) * MiB, kvCache: v.KNOT_KV_CACHE,
  maxContext: Number(v.KNOT_MAX_CONTEXT), maxBatch: Number(v.KNOT_MAX_BATCH), prefixWindows: 0,
};
const CONFIGS = [
  { name: 'default (LRU 4)', vars: {}, node: defaults },
  { name: 'LRU 12 prefetch 2', vars: { KNOT_LRU_CAPACITY: '12', KNOT_PREFETCH_DEPTH: '2' }, node: { ...defaults, lruCapacity: 12, prefetchDepth: 2 } },
  // What it would be with every layer resident (it does not fit an isolate: about 130 MB of wasm).
  { name: 'all layers resident (160 MiB)', vars: { KNOT_LRU_CAPACITY: '30', KNOT_MEMORY_BUDGET_MB: '160' }, node: { ...defaults, lruCapacity: 30, memoryBudget: 160 * MiB } },
];
for (const p of PROFILES) console.log(`profile ${describeProfile(p)}`);
const rows = [];
for (const c of CONFIGS) {
  for (const p of PROFILES) rows.push(await worker(c.name, c.vars, p));
  rows.push(await node(c.name, c.node));
}
const find = (config, profile) => rows.find((r) => r.config === config && r.profile === profile);
for (const r of rows) {
  const local = r.profile === '-' ? undefined : find(r.config, 'local');
  if (local) r.xLocal = +(r.decodeTokS / local.decodeTokS).toFixed(2);
}
console.log(`SmolLM2-135M-Instruct Q4_1, ${TOKENS} tokens, greedy, medians of ${ROUNDS} warm rounds; `
  + 'xLocal: decode against the same configuration in workerd under local');
console.table(rows.map(({ config, ...r }) => r));
const ratio = (a, b) => (a.decodeTokS / b.decodeTokS).toFixed(2);
const [lru4, lru12, resident] = CONFIGS.map((c) => c.name);
for (const p of PROFILES) {
  const w = (config) => find(config, p.name);
  const n = (config) => find(config, '-');
  console.log(`${p.name}: decode workerd / node: default ${ratio(w(lru4), n(lru4))}x, LRU 12 ${ratio(w(lru12), n(lru12))}x, resident ${ratio(w(resident), n(resident))}x`);
  console.log(`${p.name}: decode in workerd against all layers resident: default ${ratio(w(lru4), w(resident))}x, LRU 12 ${ratio(w(lru12), w(resident))}x`);
  // Where the per-invocation limit cuts a generation short (the prefill's reads aside).
  if (p.subrequests === null) continue;
  for (const c of CONFIGS.map((x) => w(x.name)).filter((r) => r.subreqPerToken > 0)) {
    console.log(`${p.name}: ${c.config}: ${c.subreqPerToken} subrequests per token: the limit of ${p.subrequests} is met after about ${Math.floor(p.subrequests / c.subreqPerToken)} tokens`);
  }
}
