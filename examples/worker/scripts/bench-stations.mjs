// `npm run bench:stations`: a model split across stations against the whole model in one Worker,
// everything in workerd (Miniflare, local R2) and measured in the same run, rounds interleaved:
// decode tok/s, time to the first token, bytes and time per hop between isolates, and each
// isolate's wasm memory.
//   node scripts/bench-stations.mjs [--tokens 64] [--rounds 3] [--gemma]
import { streamOnce as stream } from './stream.mjs';
import { join } from 'node:path';
import { REPO, startLocal, startStations } from './local.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const TOKENS = arg('tokens', 64);
const ROUNDS = arg('rounds', 3);
const GEMMA = process.argv.includes('--gemma');
const MiB = 2 ** 20;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const model = GEMMA
  ? { id: 'gemma-3-270m', key: 'gemma-3-270m.knot', file: join(REPO, 'models/gemma-3-270m.knot'), splits: [[4, 4], [6, 4]] }
  : { id: 'SmolLM2-135M-Instruct', key: 'SmolLM2-135M-Instruct.Q4_1.knot', file: undefined, splits: [[2, 2], [4, 2]] };
const vars = { MODEL_ID: model.id, MODEL_KEY: model.key, KNOT_MAX_TOKENS: String(TOKENS) };
const PROMPT = 'Once upon a time, in a lighthouse on a rocky island, there lived a keeper who';

/** The completion request this bench times (`streamOnce` in stream.mjs). */
function streamOnce(url) {
  return stream(url, '/v1/completions', { model: model.id, prompt: PROMPT, temperature: 0, max_tokens: TOKENS });
}

const configs = [];
if (!GEMMA) {
  // The whole model in one isolate, as deployed (layers streamed from R2 through an LRU of 4).
  configs.push({ name: 'one Worker (LRU 4)', local: await startLocal({ quiet: true, vars }) });
}
// The whole model resident in one isolate: over the 128 MB limit (not deployable), the bound.
// (Gemma-3-270M has no one-Worker row: its 262144-row embedding alone is past an isolate.)
if (!GEMMA) configs.push({ name: 'one Worker, all resident', local: await startLocal({ quiet: true, vars: { ...vars, KNOT_LRU_CAPACITY: '64', KNOT_MEMORY_BUDGET_MB: '400' } }) });
for (const [layers, heads] of model.splits) {
  configs.push({ name: `${layers} layer + ${heads} head stations`, stations: true, local: await startStations({ layers, heads, modelKey: model.key, modelFile: model.file, vars }) });
}
try {
  for (const c of configs) {
    await streamOnce(c.local.url); // cold: opens, reads layers
    c.runs = [];
    c.hopsBefore = c.stations ? (await (await fetch(`${c.local.url}/stations`)).json()).hops : null;
  }
  for (let r = 0; r < ROUNDS; r++) {
    for (const c of configs) c.runs.push(await streamOnce(c.local.url));
  }
  const rows = [];
  for (const c of configs) {
    const tokens = c.runs.reduce((n, x) => n + x.tokens, 0);
    const row = {
      config: c.name,
      decodeTokS: +median(c.runs.map((x) => x.decodeTokS)).toFixed(1),
      firstTokenMs: Math.round(median(c.runs.map((x) => x.firstMs))),
    };
    if (c.stations) {
      const s = await (await fetch(`${c.local.url}/stations`)).json();
      const hops = s.hops.messages - c.hopsBefore.messages;
      row.kibPerToken = +((s.hops.bytes - c.hopsBefore.bytes) / tokens / 1024).toFixed(1);
      row.msPerHop = +((s.hops.ms - c.hopsBefore.ms) / hops).toFixed(2);
      row.hopsPerToken = +(hops / tokens).toFixed(1);
      const coord = await (await fetch(`${c.local.url}/stats`)).json();
      row.maxIsolateMiB = +(Math.max(coord.wasm_memory_bytes, ...s.stations.map((x) => x.wasmMemoryBytes)) / MiB).toFixed(1);
    } else {
      const s = await (await fetch(`${c.local.url}/stats`)).json();
      row.maxIsolateMiB = +(s.wasm_memory_bytes / MiB).toFixed(1);
    }
    rows.push(row);
  }
  console.log(`${model.id}, ${TOKENS} tokens greedy, medians of ${ROUNDS} interleaved rounds, all in workerd (Miniflare)`);
  console.table(rows);
  const base = rows.find((r) => r.config === 'one Worker, all resident') ?? rows[0];
  for (const r of rows) console.log(`${r.config}: decode ${(r.decodeTokS / base.decodeTokS).toFixed(2)}x of '${base.config}'`);
} finally {
  await Promise.all(configs.map((c) => c.local.dispose()));
}
