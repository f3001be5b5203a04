// Several generations at once through the package in Node (`maxSequences`), against one:
//   node bench/parallel.mjs [model.knot] [--streams 1,2,4,8] [--runs 3] [--prompt-len 64] [-n 32] [--json]
// Every layer resident. For each count, that many `streamTokens` calls with different prompts run
// concurrently on one HostShim; the window timed is the one where all of them are decoding (from
// the moment the last one has its first token to the moment the first one finishes), so prefill
// is not in it. Counts run interleaved, `--runs` times, medians reported; a shim opened with the
// default (maxSequences 1: one generation at a time, the others wait in line) is measured in the
// same rounds as the baseline of the one opened with the most at 1 stream.
import { fileURLToPath } from 'node:url';
import { FileKnotSource, HostShim } from '../src/node.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

function parseArgs(argv) {
  const o = { model: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot`, streams: [1, 2, 4, 8], runs: 3, promptLen: 64, n: 32, json: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const int = () => {
      const v = Number(argv[++i]);
      if (!Number.isSafeInteger(v) || v < 1) throw new Error(`${a} needs an integer >= 1`);
      return v;
    };
    if (a === '--streams') o.streams = argv[++i].split(',').map(Number);
    else if (a === '--runs') o.runs = int();
    else if (a === '--prompt-len') o.promptLen = int();
    else if (a === '-n') o.n = int();
    else if (a === '--json') o.json = true;
    else if (a.startsWith('-')) throw new Error(`unknown flag ${a}`);
    else o.model = a;
  }
  if (o.streams.some((s) => !Number.isSafeInteger(s) || s < 1)) throw new Error('--streams needs counts >= 1');
  return o;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * `prompts.length` streams at once; returns the timed window's ms and the tokens made in it.
 * @param {HostShim} shim
 * @param {Uint32Array[]} prompts
 * @param {number} n
 */
async function together(shim, prompts, n) {
  const firsts = [];
  const lasts = [];
  /** @type {number[][]} */
  const times = prompts.map(() => []);
  await Promise.all(prompts.map(async (p, i) => {
    for await (const _ of shim.streamTokens(p, { maxTokens: n + prompts.length, ignoreEos: true })) {
      times[i].push(performance.now());
    }
    firsts.push(times[i][0]);
    lasts.push(times[i].at(-1));
  }));
  const start = Math.max(...firsts);
  const end = Math.min(...lasts);
  const made = times.reduce((sum, ts) => sum + ts.filter((t) => t > start && t <= end).length, 0);
  return { ms: end - start, made };
}

const o = parseArgs(process.argv.slice(2));
const file = await FileKnotSource.open(o.model);
const most = Math.max(...o.streams);
const threads = process.env.KNOT_THREADS ? { threads: Number(process.env.KNOT_THREADS) } : {};
const batched = await HostShim.open(file, { maxSequences: most, ...threads });
const single = await HostShim.open(file, { ...threads });
for (const shim of [batched, single]) {
  for (let l = 0; l < shim.layerCount; l++) await shim.prefetchLayer(l);
}
const text = 'The quick brown fox jumps over the lazy dog. In the beginning the universe was created. '.repeat(40);
const all = batched.encode(text);
const prompts = Array.from({ length: most }, (_, i) => all.slice(i * 7, i * 7 + o.promptLen));

const rates = new Map(o.streams.map((s) => [s, []]));
const alone = [];
for (let r = 0; r < o.runs; r++) {
  for (const s of o.streams) {
    const { ms, made } = await together(batched, prompts.slice(0, s), o.n);
    rates.get(s).push({ aggregate: made / (ms / 1000), msPerToken: ms / (made / s) });
  }
  const { ms, made } = await together(single, prompts.slice(0, 1), o.n);
  alone.push(made / (ms / 1000));
}
const one = rates.has(1) ? median(rates.get(1).map((x) => x.aggregate)) : undefined;
const rows = o.streams.map((s) => {
  const aggregate = median(rates.get(s).map((x) => x.aggregate));
  return {
    streams: s,
    aggregateTokS: aggregate,
    perStreamTokS: aggregate / s,
    perStreamMsPerToken: median(rates.get(s).map((x) => x.msPerToken)),
    overOneStream: one === undefined ? null : aggregate / one,
  };
});
const aloneTokS = median(alone);
if (o.json) {
  console.log(JSON.stringify({ rows, oneAtATimeTokS: aloneTokS, n: o.n, promptLen: o.promptLen, runs: o.runs }));
} else {
  console.log(`${o.n} tokens per stream after a ${o.promptLen}-token prompt, median of ${o.runs} interleaved runs (Node, wasm)`);
  console.log('streams  aggregate tok/s  per stream tok/s  ms/token  ×1 stream');
  for (const r of rows) {
    console.log(`${String(r.streams).padStart(7)}  ${r.aggregateTokS.toFixed(1).padStart(15)}  ${r.perStreamTokS.toFixed(1).padStart(16)}  ${r.perStreamMsPerToken.toFixed(2).padStart(8)}  ${r.overOneStream?.toFixed(2).padStart(9) ?? '-'}`);
  }
  console.log(`one at a time (maxSequences 1): ${aloneTokS.toFixed(1)} tok/s${one ? ` (maxSequences ${most} at 1 stream: ${(one / aloneTokS).toFixed(2)}× of it)` : ''}`);
}
batched.dispose();
single.dispose();
await file.close();
