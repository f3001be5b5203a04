// `npm run bench`: this package and @wllama/wllama at the same thread counts (`--threads 1,2`;
// default 1: knot's one-thread build, wllama's n_threads 1) in the same headless Chromium,
// on the same model files (wllama loads the GGUF, we load the knot converted from it), the same
// 128-token prompt and 64 greedy decode tokens, in interleaved rounds (each run a fresh context).
// Prints prefill and decode tok/s (medians) with the ratio knot / wllama, and each engine's
// scaling from the first count.
//   node bench/bench.mjs [--rounds 3] [--prompt-tokens 128] [--n 64] [--models smol,gemma] [--threads 1,2]
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { FileKnotSource, HostShim } from '../../../pkg/src/node.js';
import { REPO, startServer } from '../server.mjs';
import { launch } from '../test/browser.mjs';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    'prompt-tokens': { type: 'string', default: '128' },
    n: { type: 'string', default: '64' },
    models: { type: 'string', default: 'smol,gemma' },
    threads: { type: 'string', default: '1' },
  },
});
const ROUNDS = Number(values.rounds);
const PROMPT_TOKENS = Number(values['prompt-tokens']);
const N = Number(values.n);
const THREADS = values.threads.split(',').map(Number);

const MODELS = {
  // Targets by thread count (knot / wllama at the same count).
  smol: { name: 'SmolLM2-135M-Instruct Q4_1', knot: 'SmolLM2-135M-Instruct.Q4_1.knot', gguf: 'SmolLM2-135M-Instruct.Q4_1.gguf', targets: { 1: { prefill: 6, decode: 6 }, 2: { prefill: 4, decode: 3.5 } } },
  gemma: { name: 'Gemma-3-270M Q4_K_M', knot: 'gemma-3-270m.knot', gguf: 'gemma-3-270m-q4_k_m.gguf', targets: { 1: { prefill: 6, decode: 4 }, 2: { prefill: 4, decode: 2.5 } } },
};

const PASSAGE = `The old lighthouse stood at the end of a narrow spit of land, where the river met the sea
and the water changed color twice a day with the tide. For more than a century its keepers had
written the weather into thick ledgers: the direction of the wind, the height of the swell, the
ships that passed and the ones that did not come back. When the light was automated, the ledgers
were boxed and carried to the town library, where a retired teacher began to read them one winter,
page by page, copying the numbers into a spreadsheet. She found storms that nobody remembered,
summers that were colder than the records said, and a keeper who drew small birds in the margins
whenever the fog kept him awake. Her tables showed the slow rise of the water at the quay, a few
millimeters a year, and the way the great autumn gales had moved a week later across a hundred
years. Students came to help her, then a professor from the university, and finally a team that
measured the seabed and the old stones of the pier. What had started as a way to pass the dark
evenings became a small archive of the coast, and the lighthouse, which had once warned ships away
from the rocks, now told the town how the sea itself was changing around it.`.replace(/\s+/g, ' ');

/** The passage cut to exactly `tokens` tokens of the model's tokenizer (the knot's = HF's). */
async function promptText(knotFile, tokens) {
  const file = await FileKnotSource.open(knotFile);
  const shim = await HostShim.open(file, { lruCapacity: 1 });
  try {
    const words = PASSAGE.split(' ');
    let best = '';
    for (let w = 1; w <= words.length; w++) {
      const text = words.slice(0, w).join(' ');
      if (shim.encode(text).length > tokens) break;
      best = text;
    }
    return { text: best, tokens: shim.encode(best).length };
  } finally {
    shim.dispose();
    await file.close();
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const server = await startServer({ quiet: true });
let browser = await launch();
const wllamaVersion = JSON.parse(readFileSync(join(import.meta.dirname, '..', 'node_modules', '@wllama', 'wllama', 'package.json'), 'utf8')).version;
console.log(`Chromium ${browser.version()}, @wllama/wllama ${wllamaVersion}, knot-wasm from pkg/dist; threads ${THREADS.join(', ')} ` +
  `(each engine at the same count); ${PROMPT_TOKENS}-token prompt, ${N} decode tokens, ${ROUNDS} interleaved rounds\n`);

/**
 * One measured page load; a crashed page or browser is reported and the run tried once more in
 * a fresh browser (the figure then comes from the retry).
 * @param {string} engine @param {string} modelPath @param {string} text
 */
async function runOnce(engine, modelPath, text, threads, retry = true) {
  try {
    return await measure(engine, modelPath, text, threads);
  } catch (err) {
    if (!retry) throw err;
    console.log(`  (${engine} run failed: ${err.message.split('\n')[0]}; retrying in a fresh browser)`);
    await browser.close().catch(() => {});
    browser = await launch();
    return runOnce(engine, modelPath, text, threads, false);
  }
}

/** @param {string} engine @param {string} modelPath @param {string} text @param {number} threads */
async function measure(engine, modelPath, text, threads) {
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    page.on('crash', () => console.log(`  (${engine}: the page crashed)`));
    const query = new URLSearchParams({ engine, model: `models/${modelPath}`, text, n: String(N), threads: String(threads) });
    await page.goto(`${server.url}/bench.html?${query}`);
    await page.waitForFunction(() => document.body.dataset.state !== 'loading', undefined, { timeout: 600_000, polling: 200 });
    const error = await page.evaluate(() => window.benchError);
    if (error !== undefined) throw new Error(`${engine}: ${error}`);
    return await page.evaluate(() => window.benchResult);
  } finally {
    await context.close();
  }
}

const rows = [];
try {
  for (const key of values.models.split(',')) {
    const m = MODELS[key];
    if (m === undefined) throw new Error(`unknown model ${key} (smol, gemma)`);
    const prompt = await promptText(join(REPO, 'models', m.knot), PROMPT_TOKENS);
    /** @type {Record<string, any[]>} runs by `${engine}@${threads}` */
    const runs = {};
    for (let r = 0; r < ROUNDS; r++) {
      // Every engine at every count once a round, the order alternating.
      const all = THREADS.flatMap((t) => ['knot', 'wllama'].map((engine) => ({ engine, t })));
      for (const { engine, t } of r % 2 === 0 ? all : [...all].reverse()) {
        const result = await runOnce(engine, engine === 'knot' ? m.knot : m.gguf, prompt.text, t);
        (runs[`${engine}@${t}`] ??= []).push(result);
        console.log(`  ${m.name} round ${r + 1} ${engine.padEnd(6)} ${t} thr prompt ${result.promptTokens} tok: prefill ${result.prefillTokS.toFixed(1)} tok/s, ` +
          `decode ${result.decodeTokS.toFixed(1)} tok/s (${result.generated} tokens), load ${(result.loadMs / 1000).toFixed(2)} s ${JSON.stringify(result.info)}`);
      }
    }
    const stat = (key, field) => median(runs[key].map((x) => x[field]));
    for (const t of THREADS) {
      rows.push({
        model: m.name,
        threads: t,
        prompt: `${runs[`knot@${t}`][0].promptTokens} / ${runs[`wllama@${t}`][0].promptTokens}`,
        knotPrefill: stat(`knot@${t}`, 'prefillTokS'), wllamaPrefill: stat(`wllama@${t}`, 'prefillTokS'),
        knotDecode: stat(`knot@${t}`, 'decodeTokS'), wllamaDecode: stat(`wllama@${t}`, 'decodeTokS'),
        knotLoad: stat(`knot@${t}`, 'loadMs'), wllamaLoad: stat(`wllama@${t}`, 'loadMs'),
        // Each engine against itself at the first count.
        knotScale: [stat(`knot@${t}`, 'prefillTokS') / stat(`knot@${THREADS[0]}`, 'prefillTokS'), stat(`knot@${t}`, 'decodeTokS') / stat(`knot@${THREADS[0]}`, 'decodeTokS')],
        wllamaScale: [stat(`wllama@${t}`, 'prefillTokS') / stat(`wllama@${THREADS[0]}`, 'prefillTokS'), stat(`wllama@${t}`, 'decodeTokS') / stat(`wllama@${THREADS[0]}`, 'decodeTokS')],
        targets: m.targets[t],
      });
    }
  }
} finally {
  await browser.close();
  await server.close();
}

const f = (x) => x.toFixed(1);
const target = (ratio, want) => (want === undefined ? '' : ` (≥ ${want}×${ratio >= want ? ', met' : ', NOT met'})`);
console.log(`\n| model | threads | prompt tokens (knot / wllama) | prefill tok/s knot / wllama | ratio | decode tok/s knot / wllama | ratio | load s knot / wllama | scaling vs ${THREADS[0]} thr, prefill / decode: knot; wllama |`);
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  const pr = r.knotPrefill / r.wllamaPrefill;
  const dr = r.knotDecode / r.wllamaDecode;
  console.log(`| ${r.model} | ${r.threads} | ${r.prompt} | ${f(r.knotPrefill)} / ${f(r.wllamaPrefill)} | ${pr.toFixed(2)}×${target(pr, r.targets?.prefill)} | ` +
    `${f(r.knotDecode)} / ${f(r.wllamaDecode)} | ${dr.toFixed(2)}×${target(dr, r.targets?.decode)} | ` +
    `${(r.knotLoad / 1000).toFixed(2)} / ${(r.wllamaLoad / 1000).toFixed(2)} | ` +
    `${r.knotScale.map((x) => x.toFixed(2)).join(' / ')}; ${r.wllamaScale.map((x) => x.toFixed(2)).join(' / ')} |`);
}
