// Benchmarks the wasm package in Node against the native CLI on the same machine, same run:
//   node bench/bench.mjs [model.knot] [--runs 3] [--prompt-len 128] [-n 64]
// Each lruCapacity (all layers, 2, 1) runs in a fresh child process, so peak RSS and wasm memory
// of one configuration do not leak into the next. Prints a table; `--json` prints the figures.
//   node bench/bench.mjs --moa        MOA (defaults) against plain sampling at T 0.7, top-k 40,
//                                     every layer cached, runs interleaved: decode tok/s ratio
//   node bench/bench.mjs --constraint json
//                                     greedy decode with and without the COLTRANE json mask
//   node bench/bench.mjs --baseline ../other/pkg
//                                     greedy decode of this package against another checkout's
//                                     (e.g. the previous commit's), fresh processes alternating
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

function parseArgs(argv) {
  const o = {
    model: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot`, runs: 3, promptLen: 128, n: 64, json: false,
    child: undefined, moa: false, baseline: undefined, pkg: undefined, constraint: undefined,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      const v = Number(argv[++i]);
      if (!Number.isSafeInteger(v) || v < 1) throw new Error(`${a} needs an integer >= 1`);
      return v;
    };
    if (a === '--runs') o.runs = next();
    else if (a === '--prompt-len') o.promptLen = next();
    else if (a === '-n') o.n = next();
    else if (a === '--json') o.json = true;
    else if (a === '--child') o.child = argv[++i];
    else if (a === '--moa') o.moa = true;
    else if (a === '--constraint') o.constraint = argv[++i];
    else if (a === '--baseline') o.baseline = argv[++i];
    else if (a === '--pkg') o.pkg = argv[++i];
    else if (a.startsWith('-')) throw new Error(`unknown flag ${a}`);
    else o.model = a;
  }
  return o;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** The package entry to measure: this one, or another checkout's (`--pkg DIR`). */
const entry = (o) => (o.pkg === undefined ? '../src/node.js' : new URL(`file://${o.pkg.replace(/\/$/, '')}/src/node.js`).href);

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
    const s = shim.stats();
    prefill.push(s.prefillTokens / (s.prefillMs / 1000));
    const steps = s.tokenMs.slice(1);
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
  const shim = await HostShim.open(source, {});
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

/** One configuration, in this (fresh) process: cold open, then `runs` prefill+decode runs. */
async function child(o, capacityArg) {
  if (capacityArg === 'moa') return moaChild(o);
  if (capacityArg === 'constraint') return constraintChild(o);
  const { FileKnotSource, HostShim } = await import(entry(o));
  const source = await FileKnotSource.open(o.model);
  const t0 = performance.now();
  const capacity = capacityArg === 'all' ? undefined : Number(capacityArg);
  const shim = await HostShim.open(source, capacity === undefined ? {} : { lruCapacity: capacity });
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
    return JSON.parse(execFileSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 1 << 20 }));
  };
  if (o.moa) {
    const r = spawn('moa');
    if (o.json) return console.log(JSON.stringify({ model: o.model, runs: 2 * o.runs + 1, n: o.n, ...r }));
    console.log(`MOA k=3 top-k 40 vs plain T 0.7 top-k 40, Node ${process.version}, every layer cached, median of ${2 * o.runs + 1} interleaved runs`);
    console.log(`plain ${r.plainDecodeTokS.toFixed(1)} tok/s, MOA ${r.moaDecodeTokS.toFixed(1)} tok/s: MOA / plain ${r.moaOverPlain.toFixed(3)}`);
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
  const rows = [];
  for (const cap of ['all', '2', '1']) rows.push(spawn(cap));
  if (o.json) {
    console.log(JSON.stringify({ model: o.model, runs: o.runs, promptLen: o.promptLen, n: o.n, native, wasm: rows }, null, 1));
    return;
  }
  console.log(`model ${o.model}: ${o.promptLen}-token prompt, ${o.n} decode tokens, median of ${o.runs} runs; Node ${process.version}`);
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
  if (native) {
    const all = rows[0];
    console.log(`prefill vs native: ${(all.prefillTokS / native.prefill_tok_s).toFixed(2)}x (all layers cached)`);
  }
}

await main();
