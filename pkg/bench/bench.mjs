// Benchmarks the wasm package in Node against the native CLI on the same machine, same run:
//   node bench/bench.mjs [model.knot] [--runs 3] [--prompt-len 128] [-n 64]
// Each lruCapacity (all layers, 2, 1) runs in a fresh child process, so peak RSS and wasm memory
// of one configuration do not leak into the next. Prints a table; `--json` prints the figures.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

function parseArgs(argv) {
  const o = { model: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot`, runs: 3, promptLen: 128, n: 64, json: false, child: undefined };
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
    else if (a.startsWith('-')) throw new Error(`unknown flag ${a}`);
    else o.model = a;
  }
  return o;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** One configuration, in this (fresh) process: cold open, then `runs` prefill+decode runs. */
async function child(o, capacityArg) {
  const { FileKnotSource, HostShim } = await import('../src/node.js');
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
  const prefill = [];
  const decode = [];
  for (let r = 0; r < o.runs; r++) {
    // n + 1 steps: the first token comes from the prefill's logits, the other n each run a forward pass.
    const out = await shim.generate(prompt, o.n + 1, { temperature: 0 });
    if (out.length !== o.n + 1) throw new Error(`generation ended after ${out.length - 1} decode tokens (end of text); the figures would be off`);
    const s = shim.stats();
    prefill.push(s.prefillTokens / (s.prefillMs / 1000));
    const steps = s.tokenMs.slice(1);
    decode.push(steps.length / (steps.reduce((a, b) => a + b, 0) / 1000));
  }
  const s = shim.stats();
  const result = {
    lruCapacity: capacityArg === 'all' ? shim.layerCount : capacity,
    layers: shim.layerCount,
    openMs,
    openBytes: opened.bytesFetched,
    openReads: opened.rangeReads,
    prefillTokS: median(prefill),
    decodeTokS: median(decode),
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
  const bin = process.env.KNOT_BIN ?? `${ROOT}target/release/knot`;
  let native;
  if (existsSync(bin)) {
    native = JSON.parse(execFileSync(bin, ['bench', o.model, '--json', '-n', String(o.n), '--prompt-len', String(o.promptLen), '--runs', String(o.runs)], { encoding: 'utf8' }));
  } else {
    console.error(`no native CLI at ${bin} (cargo build --release -p knot-cli); wasm figures only`);
  }
  const self = fileURLToPath(import.meta.url);
  const rows = [];
  for (const cap of ['all', '2', '1']) {
    const args = [self, o.model, '--runs', String(o.runs), '--prompt-len', String(o.promptLen), '-n', String(o.n), '--child', cap];
    rows.push(JSON.parse(execFileSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 1 << 20 })));
  }
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
