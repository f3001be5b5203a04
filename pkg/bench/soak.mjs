// Soak: many tokens through the npm package streaming layers from a fault-injecting source
// (test/fault-source.js: rejects, throws, short and long reads, reads that never settle, random
// delays and so out-of-order answers), checked token for token against a fault-free run of the
// same greedy generations, with wasm memory and RSS sampled after warm-up and at the end.
//   node bench/soak.mjs [model.knot] [--tokens 10000] [--lru 2] [--fault-rate 0.05] [--seed 1]
//        [--per-call 256] [--timeout-ms 50] [--json]
// Exits non-zero when a token differs or memory grew after warm-up.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BufferKnotSource, HostShim } from '../src/node.js';
import { faultySource } from '../test/fault-source.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

function parseArgs(argv) {
  const o = {
    model: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot`, tokens: 10_000, lru: 2, faultRate: 0.05, seed: 1,
    perCall: 256, timeoutMs: 50, json: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const num = () => {
      const v = Number(argv[++i]);
      if (!Number.isFinite(v) || v < 0) throw new Error(`${a} needs a number >= 0`);
      return v;
    };
    if (a === '--tokens') o.tokens = num();
    else if (a === '--lru') o.lru = num();
    else if (a === '--fault-rate') o.faultRate = num();
    else if (a === '--seed') o.seed = num();
    else if (a === '--per-call') o.perCall = num();
    else if (a === '--timeout-ms') o.timeoutMs = num();
    else if (a === '--json') o.json = true;
    else if (a.startsWith('-')) throw new Error(`unknown flag ${a}`);
    else o.model = a;
  }
  return o;
}

const o = parseArgs(process.argv.slice(2));
const bytes = readFileSync(o.model);
const source = faultySource(new BufferKnotSource(bytes), {
  seed: o.seed, faultRate: o.faultRate, maxDelayMs: 2, delayRate: 0.25,
});
source.enabled = false;
// Enough retries that 5% faults practically never exhaust them (0.05^7 per read).
const shim = await HostShim.open(source, {
  lruCapacity: o.lru, readTimeoutMs: o.timeoutMs, readRetries: 6, readBackoffMs: 1,
});
const clean = await HostShim.open(new BufferKnotSource(bytes), {});

const topics = ['the sea', 'a small robot', 'winter in the mountains', 'how bread is made'];
const prompt = (i) => [{ role: 'user', content: `Write a long story about ${topics[i % topics.length]}.` }];
/** The fault-free run of each prompt, computed once (greedy: every run of it is the same). */
const references = new Map();
const reference = async (i, opts) => {
  const key = `${i % topics.length}/${opts.maxTokens}`;
  if (!references.has(key)) references.set(key, await clean.generateText(prompt(i), opts));
  return references.get(key);
};
const mib = (b) => (b / 2 ** 20).toFixed(1);
const memory = () => ({ wasm: shim.stats().wasmMemoryBytes, rss: process.memoryUsage().rss });

let tokens = 0;
let calls = 0;
let mismatches = 0;
/** @type {{ wasm: number, rss: number } | undefined} */
let warm;
const t0 = performance.now();
source.enabled = true;
while (tokens < o.tokens) {
  const n = Math.min(o.perCall, o.tokens - tokens);
  const opts = { maxTokens: n, ignoreEos: true };
  const got = await shim.generateText(prompt(calls), opts);
  const want = await reference(calls, opts);
  if (got.text !== want.text || got.tokens.join() !== want.tokens.join()) {
    mismatches++;
    console.error(`call ${calls}: tokens differ from the fault-free run`);
  }
  tokens += got.tokens.length;
  calls++;
  // Warm-up: the first two calls (allocator pools, JIT, caches filled).
  if (calls === 2) {
    globalThis.gc?.();
    warm = memory();
  }
  if (!o.json && calls % 4 === 0) {
    const s = shim.stats();
    process.stderr.write(`  ${tokens} tokens, ${source.faults} faults, ${s.readRetries} retries, ${s.readTimeouts} timeouts, ` +
      `wasm ${mib(s.wasmMemoryBytes)} MiB, rss ${mib(process.memoryUsage().rss)} MiB\n`);
  }
}
globalThis.gc?.();
const end = memory();
const s = shim.stats();
const result = {
  model: o.model.split('/').at(-1),
  tokens,
  calls,
  lruCapacity: o.lru,
  reads: source.reads,
  faults: source.faults,
  injected: source.injected,
  readRetries: s.readRetries,
  readTimeouts: s.readTimeouts,
  mismatches,
  wasmMemory: { warm: warm?.wasm, end: end.wasm },
  rss: { warm: warm?.rss, end: end.rss },
  seconds: (performance.now() - t0) / 1000,
};
shim.dispose();
clean.dispose();
if (o.json) {
  console.log(JSON.stringify(result));
} else {
  console.log(`${result.tokens} tokens in ${result.calls} calls (${result.seconds.toFixed(0)} s), lruCapacity ${o.lru}`);
  console.log(`${result.reads} reads, ${result.faults} faults injected ${JSON.stringify(result.injected)}`);
  console.log(`${result.readRetries} retries, ${result.readTimeouts} timeouts, ${mismatches} calls differing from the fault-free run`);
  console.log(`wasm memory ${mib(result.wasmMemory.warm)} → ${mib(result.wasmMemory.end)} MiB, ` +
    `RSS ${mib(result.rss.warm)} → ${mib(result.rss.end)} MiB (after warm-up → end)`);
}
const grew = end.wasm > (warm?.wasm ?? end.wasm);
if (mismatches > 0 || grew) process.exit(1);
