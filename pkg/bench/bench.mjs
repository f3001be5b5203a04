// Benchmarks the wasm package in Node against the native CLI on the same machine, same run:
//   node bench/bench.mjs [model.knot] [--runs 3] [--rounds 3] [--prompt-len 128] [-n 64]
// Each lruCapacity (all layers, 2, 1) runs in a fresh child process, so peak RSS and wasm memory
// of one configuration do not leak into the next; `--rounds` rounds of the three, in rotating
// order, so the machine's drift hits each alike (speeds are medians over rounds). Prints a table
// and streamed decode (lruCapacity 2) over resident decode; `--json` prints the figures.
//   node bench/bench.mjs --moa        MOA (defaults) against plain sampling at T 0.7, top-k 40,
//                                     every layer cached, runs interleaved: decode tok/s ratio
//   node bench/bench.mjs --constraint json
//                                     greedy decode with and without the COLTRANE json mask
//   node bench/bench.mjs --draft      greedy decode with and without draftMode (speculative decoding) on
//                                     copy-heavy and open-ended chat prompts (those of
//                                     `knot bench --draft`), all layers cached and lruCapacity 2:
//                                     tok/s ratio, tokens per pass, layer reads per token
//   node bench/bench.mjs --baseline ../other/pkg
//                                     greedy decode of this package against another checkout's
//                                     (e.g. the previous commit's), fresh processes alternating
//   --threads N                       open every model with `threads: N` (default: the package's;
//                                     1 compares the one-thread build across checkouts)
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

function parseArgs(argv) {
  const o = {
    model: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot`, runs: 3, rounds: 3, promptLen: 128, n: 64, json: false,
    threads: undefined, child: undefined, moa: false, baseline: undefined, pkg: undefined, constraint: undefined, draft: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      const v = Number(argv[++i]);
      if (!Number.isSafeInteger(v) || v < 1) throw new Error(`${a} needs an integer >= 1`);
      return v;
    };
    if (a === '--runs') o.runs = next();
    else if (a === '--rounds') o.rounds = next();
    else if (a === '--prompt-len') o.promptLen = next();
    else if (a === '-n') o.n = next();
    else if (a === '--json') o.json = true;
    else if (a === '--child') o.child = argv[++i];
    else if (a === '--moa') o.moa = true;
    else if (a === '--draft') o.draft = true;
    else if (a === '--constraint') o.constraint = argv[++i];
    else if (a === '--baseline') o.baseline = argv[++i];
    else if (a === '--pkg') o.pkg = argv[++i];
    else if (a === '--threads') o.threads = next();
    else if (a.startsWith('-')) throw new Error(`unknown flag ${a}`);
    else o.model = a;
  }
  return o;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** Open options with `--threads` when given. */
const withThreads = (o, options) => (o.threads === undefined ? options : { ...options, threads: o.threads });

/** The package entry to measure: this one, or another checkout's (`--pkg DIR`). */
const entry = (o) => (o.pkg === undefined ? '../src/node.js' : new URL(`file://${o.pkg.replace(/\/$/, '')}/src/node.js`).href);

/**
 * What the generation that ended last did: its report (`stats().generation`), or, on another
 * checkout's older package (`--baseline`), the per-generation figures its stats had at the top,
 * with `tokenMs` from the second token on as the report has it.
 */
function lastGeneration(shim) {
  const s = shim.stats();
  return s.generation ?? { ...s, tokenMs: s.tokenMs.slice(1) };
}

/**
 * `runs` generations of n + 1 tokens (the first comes from the prefill's logits); returns median
 * prefill and decode tok/s from the host's own timings.
 */
async function measure(shim, prompt, o, options) {
  const prefill = [];
  const decode = [];
  for (let r = 0; r < o.runs; r++) {
    const out = await shim.generate(prompt, o.n + 1, options);
    if (out.length !== o.n + 1) throw new Error(`generation ended after ${out.length - 1} decode tokens (end of text); the figures would be off`);
    const s = lastGeneration(shim);
    prefill.push(s.prefillTokens / (s.prefillMs / 1000));
    const steps = s.tokenMs;
    decode.push(steps.length / (steps.reduce((a, b) => a + b, 0) / 1000));
  }
  return { prefillTokS: median(prefill), decodeTokS: median(decode) };
}

/**
 * Two decode settings against each other, interleaved (alternating which goes first), every
 * layer cached: median decode tok/s of each and their ratio (b / a).
 */
async function compareChild(o, a, b) {
  const { FileKnotSource, HostShim } = await import(entry(o));
  const source = await FileKnotSource.open(o.model);
  const shim = await HostShim.open(source, withThreads(o, {}));
  const base = Array.from(shim.encode('Once upon a time, in a small village by the sea, there lived an old fisherman and his three daughters. '));
  const prompt = Array.from({ length: o.promptLen }, (_, i) => base[i % base.length]);
  const ra = [];
  const rb = [];
  const runs = o.runs;
  const one = { ...o, runs: 1 };
  for (let r = 0; r < 2 * runs + 1; r++) {
    // ignoreEos keeps every run at exactly n decode steps.
    const pa = async () => ra.push((await measure(shim, prompt, one, { ...a(r), ignoreEos: true })).decodeTokS);
    const pb = async () => rb.push((await measure(shim, prompt, one, { ...b(r), ignoreEos: true })).decodeTokS);
    if (r % 2 === 0) { await pa(); await pb(); } else { await pb(); await pa(); }
  }
  shim.dispose();
  await source.close();
  return { aDecodeTokS: median(ra), bDecodeTokS: median(rb), bOverA: median(rb) / median(ra) };
}

/** MOA against plain sampling over the same top-k. */
async function moaChild(o) {
  const r = await compareChild(o, (seed) => ({ temperature: 0.7, topK: 40, seed }), (seed) => ({ moa: true, seed }));
  process.stdout.write(JSON.stringify({ plainDecodeTokS: r.aDecodeTokS, moaDecodeTokS: r.bDecodeTokS, moaOverPlain: r.bOverA }));
}

/** Greedy with and without a COLTRANE preset. */
async function constraintChild(o) {
  const r = await compareChild(o, () => ({}), () => ({ coltrane: { preset: o.constraint } }));
  process.stdout.write(JSON.stringify({ plainDecodeTokS: r.aDecodeTokS, constrainedDecodeTokS: r.bDecodeTokS, constrainedOverPlain: r.bOverA }));
}

const PASSAGE = 'The lighthouse stood on a rocky point at the edge of the bay. Every evening the keeper ' +
  'climbed the spiral stairs, trimmed the wick, and lit the great lamp. Ships far out at sea watched for its beam, ' +
  'and the fishermen of the village said that as long as the light turned, no boat would be lost on the rocks.';

/** The prompts of `knot bench --draft` (crates/cli/src/bench_draft.rs): [name, kind, user message]. */
const DRAFT_PROMPTS = [
  ['repeat', 'copy-heavy', `Repeat the following text exactly, word for word:\n\n${PASSAGE}`],
  ['edit', 'copy-heavy', 'Fix the spelling mistakes in this text and return the corrected text:\n\n' +
    'The lighthouse stood on a rocky point at the edge of the bay. Every evening the keper climbed the spiral ' +
    'stairs, trimmed the wick, and lit the grate lamp. Ships far out at sea watched for its beam.'],
  ['summarize', 'copy-heavy', `Summarize this text in one sentence:\n\n${PASSAGE}`],
  ['story', 'open-ended', 'Write a short story about a lighthouse keeper who finds a message in a bottle.'],
];

/** Greedy with and without draftMode, every prompt, all layers cached then lruCapacity 2. */
async function draftChild(o) {
  const { FileKnotSource, HostShim } = await import(entry(o));
  const source = await FileKnotSource.open(o.model);
  const rows = [];
  for (const [mode, lruCapacity] of [['resident', undefined], ['streaming', 2]]) {
    const shim = await HostShim.open(source, withThreads(o, lruCapacity === undefined ? {} : { lruCapacity }));
    for (const [name, kind, text] of DRAFT_PROMPTS) {
      const runs = { plain: [], draft: [] };
      let ids;
      for (let r = 0; r < 2 * o.runs + 1; r++) {
        const order = r % 2 === 0 ? [false, true] : [true, false];
        for (const draft of order) {
          const out = await shim.generateText([{ role: 'user', content: text }], { maxTokens: o.n + 1, draftMode: draft });
          const s = lastGeneration(shim);
          const steps = s.tokenMs;
          const tokS = steps.length / (steps.reduce((a, b) => a + b, 0) / 1000);
          const got = Array.from(out.tokens).join(',');
          if (ids === undefined) ids = got;
          else if (got !== ids) throw new Error(`${mode} ${name}: tokens differ with draftMode ${draft}`);
          (draft ? runs.draft : runs.plain).push({ tokS, tokensPerPass: s.tokensPerPass, layerReadsPerToken: s.layerReadsPerToken, accepted: s.accepted, drafted: s.drafted, tokens: s.decodeTokens });
        }
      }
      const med = (list, key) => median(list.map((x) => x[key]));
      const summary = (list) => ({ tokensPerPass: med(list, 'tokensPerPass'), layerReadsPerToken: med(list, 'layerReadsPerToken'),
        accepted: list.reduce((a, x) => a + x.accepted, 0), drafted: list.reduce((a, x) => a + x.drafted, 0) });
      rows.push({ mode, prompt: name, kind, tokens: runs.plain[0].tokens, plainTokS: med(runs.plain, 'tokS'),
        draftTokS: med(runs.draft, 'tokS'), speedup: med(runs.draft, 'tokS') / med(runs.plain, 'tokS'),
        plain: summary(runs.plain), draft: summary(runs.draft) });
    }
    shim.dispose();
  }
  await source.close();
  process.stdout.write(JSON.stringify(rows));
}

/** One configuration, in this (fresh) process: cold open, then `runs` prefill+decode runs. */
async function child(o, capacityArg) {
  if (capacityArg === 'draft') return draftChild(o);
  if (capacityArg === 'moa') return moaChild(o);
  if (capacityArg === 'constraint') return constraintChild(o);
  const { FileKnotSource, HostShim } = await import(entry(o));
  const source = await FileKnotSource.open(o.model);
  const t0 = performance.now();
  const capacity = capacityArg === 'all' ? undefined : Number(capacityArg);
  const shim = await HostShim.open(source, withThreads(o, capacity === undefined ? {} : { lruCapacity: capacity }));
  const openMs = performance.now() - t0;
  const opened = shim.stats();
  // A prompt of exactly promptLen ids: a text encoded and repeated.
  // (A plain story continues past 64 tokens without an end-of-text, which would cut decode short.)
  const base = Array.from(shim.encode('Once upon a time, in a small village by the sea, there lived an old fisherman and his three daughters. '));
  const prompt = Array.from({ length: o.promptLen }, (_, i) => base[i % base.length]);
  const { prefillTokS, decodeTokS } = await measure(shim, prompt, o, { temperature: 0 });
  const s = shim.stats();
  const result = {
    lruCapacity: capacityArg === 'all' ? shim.layerCount : capacity,
    layers: shim.layerCount,
    openMs,
    openBytes: opened.bytesFetched,
    openReads: opened.rangeReads,
    prefillTokS,
    decodeTokS,
    bytesFetched: s.bytesFetched,
    rangeReads: s.rangeReads,
    peakResidentBytes: s.peakResidentBytes,
    wasmMemoryBytes: s.wasmMemoryBytes,
    rssBytes: process.memoryUsage().rss,
    maxRssBytes: process.resourceUsage().maxRSS * 1024,
  };
  shim.dispose();
  await source.close();
  process.stdout.write(JSON.stringify(result));
}

const MiB = (b) => (b / 1048576).toFixed(1);

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (o.child !== undefined) return child(o, o.child);
  if (!existsSync(o.model)) throw new Error(`${o.model} is missing (run scripts/prepare-model.sh)`);
  const self = fileURLToPath(import.meta.url);
  const spawn = (cap, pkg) => {
    const args = [self, o.model, '--runs', String(o.runs), '--prompt-len', String(o.promptLen), '-n', String(o.n), '--child', cap];
    if (o.constraint !== undefined) args.push('--constraint', o.constraint);
    if (pkg !== undefined) args.push('--pkg', pkg);
    if (o.threads !== undefined) args.push('--threads', String(o.threads));
    return JSON.parse(execFileSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 1 << 20 }));
  };
  if (o.moa) {
    const r = spawn('moa');
    if (o.json) return console.log(JSON.stringify({ model: o.model, runs: 2 * o.runs + 1, n: o.n, ...r }));
    console.log(`MOA k=3 top-k 40 vs plain T 0.7 top-k 40, Node ${process.version}, every layer cached, median of ${2 * o.runs + 1} interleaved runs`);
    console.log(`plain ${r.plainDecodeTokS.toFixed(1)} tok/s, MOA ${r.moaDecodeTokS.toFixed(1)} tok/s: MOA / plain ${r.moaOverPlain.toFixed(3)}`);
    return;
  }
  if (o.draft) {
    const rows = spawn('draft');
    if (o.json) return console.log(JSON.stringify({ model: o.model, runs: 2 * o.runs + 1, n: o.n, results: rows }));
    console.log(`draftMode (prompt lookup, defaults) vs plain greedy, same tokens, Node ${process.version}, medians of ${2 * o.runs + 1} interleaved runs (kept: over all runs)`);
    for (const r of rows) {
      console.log(`${r.mode.padEnd(10)} ${`${r.prompt} (${r.kind})`.padEnd(24)} ${String(r.tokens).padStart(4)} tokens  ` +
        `${r.plainTokS.toFixed(1).padStart(6)} → ${r.draftTokS.toFixed(1).padStart(6)} tok/s  ${r.speedup.toFixed(2)}x  ` +
        `tokens/pass ${r.plain.tokensPerPass.toFixed(2)} → ${r.draft.tokensPerPass.toFixed(2)}  ` +
        `layer reads/token ${r.plain.layerReadsPerToken.toFixed(1)} → ${r.draft.layerReadsPerToken.toFixed(1)}  ` +
        `kept ${r.draft.accepted}/${r.draft.drafted}`);
    }
    return;
  }
  if (o.constraint !== undefined) {
    const r = spawn('constraint');
    if (o.json) return console.log(JSON.stringify({ model: o.model, runs: 2 * o.runs + 1, n: o.n, constraint: o.constraint, ...r }));
    console.log(`greedy with and without coltrane ${o.constraint}, Node ${process.version}, every layer cached, median of ${2 * o.runs + 1} interleaved runs`);
    console.log(`plain ${r.plainDecodeTokS.toFixed(1)} tok/s, constrained ${r.constrainedDecodeTokS.toFixed(1)} tok/s: constrained / plain ${r.constrainedOverPlain.toFixed(3)}`);
    return;
  }
  if (o.baseline !== undefined) {
    // Fresh processes alternating this package and the baseline, so drift hits both alike.
    const mine = [];
    const theirs = [];
    for (let r = 0; r < 2 * o.runs; r++) {
      const order = r % 2 === 0 ? [undefined, o.baseline] : [o.baseline, undefined];
      for (const pkg of order) (pkg === undefined ? mine : theirs).push(spawn('all', pkg));
    }
    const m = (rows, k) => median(rows.map((x) => x[k]));
    const result = {
      decodeTokS: m(mine, 'decodeTokS'), baselineDecodeTokS: m(theirs, 'decodeTokS'),
      prefillTokS: m(mine, 'prefillTokS'), baselinePrefillTokS: m(theirs, 'prefillTokS'),
    };
    if (o.json) return console.log(JSON.stringify({ model: o.model, baseline: o.baseline, ...result }));
    console.log(`this package against ${o.baseline}, greedy, every layer cached, median of ${2 * o.runs} fresh processes each`);
    console.log(`decode ${result.decodeTokS.toFixed(1)} vs ${result.baselineDecodeTokS.toFixed(1)} tok/s: ${(result.decodeTokS / result.baselineDecodeTokS).toFixed(3)}x`);
    console.log(`prefill ${result.prefillTokS.toFixed(1)} vs ${result.baselinePrefillTokS.toFixed(1)} tok/s: ${(result.prefillTokS / result.baselinePrefillTokS).toFixed(3)}x`);
    return;
  }
  const bin = process.env.KNOT_BIN ?? `${ROOT}target/release/knot`;
  let native;
  if (existsSync(bin)) {
    native = JSON.parse(execFileSync(bin, ['bench', o.model, '--json', '-n', String(o.n), '--prompt-len', String(o.promptLen), '--runs', String(o.runs)], { encoding: 'utf8' }));
  } else {
    console.error(`no native CLI at ${bin} (cargo build --release -p knot-cli); wasm figures only`);
  }
  const caps = ['all', '2', '1'];
  const rounds = caps.map(() => []);
  for (let r = 0; r < o.rounds; r++) {
    for (let i = 0; i < caps.length; i++) {
      const c = (i + r) % caps.length;
      rounds[c].push(spawn(caps[c]));
    }
  }
  const rows = rounds.map((results) => ({
    ...results[results.length - 1],
    prefillTokS: median(results.map((x) => x.prefillTokS)),
    decodeTokS: median(results.map((x) => x.decodeTokS)),
  }));
  // Each round's streamed over resident decode, then their median: a ratio of runs close in time.
  const streamedOverResident = median(rounds[1].map((x, r) => x.decodeTokS / rounds[0][r].decodeTokS));
  if (o.json) {
    console.log(JSON.stringify({ model: o.model, runs: o.runs, rounds: o.rounds, promptLen: o.promptLen, n: o.n, native, wasm: rows, streamedOverResident }, null, 1));
    return;
  }
  console.log(`model ${o.model}: ${o.promptLen}-token prompt, ${o.n} decode tokens, median of ${o.runs} runs × ${o.rounds} rounds; Node ${process.version}`);
  if (native) {
    console.log(`native CLI: prefill ${native.prefill_tok_s.toFixed(1)} tok/s, decode ${native.decode_tok_s.toFixed(1)} tok/s, peak RSS ${MiB(native.peak_rss_bytes)} MiB`);
  }
  const header = ['lruCapacity', 'prefill tok/s', 'decode tok/s', 'decode vs native', 'open ms', 'open MiB/reads', 'fetched MiB/reads', 'peak resident MiB', 'wasm memory MiB', 'max RSS MiB'];
  const table = rows.map((r) => [
    `${r.lruCapacity}${r.lruCapacity === r.layers ? ' (all)' : ''}`,
    r.prefillTokS.toFixed(1),
    r.decodeTokS.toFixed(1),
    native ? `${(r.decodeTokS / native.decode_tok_s).toFixed(2)}x` : '-',
    r.openMs.toFixed(0),
    `${MiB(r.openBytes)} / ${r.openReads}`,
    `${MiB(r.bytesFetched)} / ${r.rangeReads}`,
    MiB(r.peakResidentBytes),
    r.wasmMemoryBytes === undefined ? '?' : MiB(r.wasmMemoryBytes),
    MiB(r.maxRssBytes),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i].length)));
  const line = (cells) => `| ${cells.map((c, i) => c.padStart(widths[i])).join(' | ')} |`;
  console.log(line(header));
  console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const row of table) console.log(line(row));
  console.log(`streamed decode (lruCapacity 2, FileKnotSource) / resident: ${streamedOverResident.toFixed(2)}x (median of per-round ratios)`);
  if (native) {
    const all = rows[0];
    console.log(`prefill vs native: ${(all.prefillTokS / native.prefill_tok_s).toFixed(2)}x (all layers cached)`);
  }
}

await main();
