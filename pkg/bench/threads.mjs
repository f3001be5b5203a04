// Thread scaling of the wasm package in this runtime (Node; Bun and Deno run it too): the
// one-thread build against the threaded build at each count, same process, interleaved rounds
// (each round opens each count afresh, alternating the order), every layer cached. Prints
// median prefill and decode tok/s per count and the ratio to 1 thread.
//   node bench/threads.mjs [--models smol,gemma] [--threads 1,2] [--rounds 5] [--prompt-len 128] [-n 64] [--json]
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { FileKnotSource, HostShim } from '../src/node.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MODELS = {
  smol: { name: 'SmolLM2-135M-Instruct Q4_1', file: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot` },
  gemma: { name: 'Gemma-3-270M Q4_K_M', file: `${ROOT}models/gemma-3-270m.knot` },
};
const { values } = parseArgs({
  options: {
    models: { type: 'string', default: 'smol,gemma' },
    threads: { type: 'string', default: '1,2' },
    rounds: { type: 'string', default: '5' },
    'prompt-len': { type: 'string', default: '128' },
    n: { type: 'string', short: 'n', default: '64' },
    json: { type: 'boolean', default: false },
  },
});
const counts = values.threads.split(',').map(Number);
const rounds = Number(values.rounds);
const promptLen = Number(values['prompt-len']);
const n = Number(values.n);
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const TEXT = 'The old lighthouse stood at the end of a narrow spit of land, where the river met the sea and the water changed color twice a day with the tide. ';

/** One generation at `threads`: prefill and decode tok/s from the host's own timings. */
async function once(file, layers, prompt, threads) {
  const shim = await HostShim.open(file, { threads, lruCapacity: layers });
  try {
    for (let l = 0; l < layers; l++) await shim.prefetchLayer(l);
    // A warm-up generation: the first pass pays for allocations.
    await shim.generate(prompt.slice(0, 8), 2, { ignoreEos: true });
    await shim.generate(prompt, n + 1, { ignoreEos: true });
    // The generation's report: the time between its tokens (the first comes from the prefill).
    const s = shim.stats().generation;
    const steps = s.tokenMs;
    return {
      prefill: s.prefillTokens / (s.prefillMs / 1000),
      decode: steps.length / (steps.reduce((a, b) => a + b, 0) / 1000),
      build: shim.wasmBuild,
    };
  } finally {
    shim.dispose();
  }
}

const results = [];
for (const key of values.models.split(',')) {
  const model = MODELS[key];
  const file = await FileKnotSource.open(model.file);
  const probe = await HostShim.open(file, { threads: 1, lruCapacity: 1 });
  const layers = probe.layerCount;
  const base = Array.from(probe.encode(TEXT.repeat(8)));
  probe.dispose();
  const prompt = base.slice(0, promptLen);
  /** @type {Map<number, { prefill: number[], decode: number[], build: string }>} */
  const got = new Map(counts.map((c) => [c, { prefill: [], decode: [], build: '' }]));
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? [...counts].reverse() : counts;
    for (const c of order) {
      const m = await once(file, layers, prompt, c);
      const g = got.get(c);
      g.prefill.push(m.prefill);
      g.decode.push(m.decode);
      g.build = m.build;
    }
  }
  await file.close();
  const one = got.get(counts[0]);
  for (const c of counts) {
    const g = got.get(c);
    const row = {
      model: model.name, threads: c, build: g.build,
      prefillTokS: median(g.prefill), decodeTokS: median(g.decode),
      prefillRatio: median(g.prefill) / median(one.prefill), decodeRatio: median(g.decode) / median(one.decode),
    };
    results.push(row);
  }
}
if (values.json) {
  console.log(JSON.stringify(results, null, 2));
} else {
  console.log(`${'model'.padEnd(28)} threads  build    prefill tok/s  decode tok/s   prefill x  decode x  (${rounds} rounds, ${promptLen}-token prompt, ${n} tokens)`);
  for (const r of results) {
    console.log(`${r.model.padEnd(28)} ${String(r.threads).padStart(7)}  ${r.build.padEnd(7)} ${r.prefillTokS.toFixed(1).padStart(14)} ${r.decodeTokS.toFixed(1).padStart(13)} ${r.prefillRatio.toFixed(2).padStart(11)} ${r.decodeRatio.toFixed(2).padStart(9)}`);
  }
}
