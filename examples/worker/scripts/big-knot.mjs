// `npm run big-knot`: a model larger than any real one here, served by stations in workerd — not
// in the default suite (it costs minutes). It writes a synthetic llama-style knot of ~640 MB
// (crates/knot/examples/synthetic_knot.rs: 32 layers of dim 1024, Q8_0, noise weights), plans the
// fewest stations whose isolates fit the budget (the package's planStations, from the index
// alone), uploads the file to the local R2 in parts (one put would pass Node's string limit),
// serves it under a profile, and checks: greedy output equal to the native CLI on the same file,
// nothing read from R2 after the loads, every isolate's wasm memory under 128 MiB.
//   node scripts/big-knot.mjs [--profile prod] [--budget-mb 112] [--tokens 16] [--keep]
// The knot is written once to models/synthetic-640m.knot (git-ignored) and reused.
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { FileKnotSource, planStations } from 'knot-wasm';
import { REPO, startStations } from './local.mjs';
import { describeProfile, profilesFromArgs } from './profiles.mjs';
import { streamOnce } from './stream.mjs';

const MiB = 2 ** 20;
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const [profile] = profilesFromArgs(process.argv.slice(2), { fallback: 'prod' });
const BUDGET = arg('budget-mb', 112) * MiB;
const TOKENS = arg('tokens', 16);
const CONTEXT = 512;
const KEY = 'synthetic-640m.knot';
const FILE = join(REPO, 'models', KEY);
const PROMPT = 'The lighthouse keeper climbed the stairs and';
const KNOT_BIN = process.env.KNOT_BIN ?? join(REPO, 'target/debug/knot');

if (!existsSync(FILE)) {
  console.log(`writing ${FILE} …`);
  execFileSync('cargo', ['run', '--release', '-q', '-p', 'knot', '--example', 'synthetic_knot', '--', FILE,
    '--layers', '32', '--dim', '1024', '--ffn', '4096', '--vocab', '32000'], { cwd: REPO, stdio: 'inherit' });
}
const bytes = statSync(FILE).size;
assert.ok(bytes > 600e6, `${FILE}: ${bytes} bytes, not over 600 MB`);

// The split, planned from the file's index as a user would: one conversation per layer station,
// 512 positions, the stations' default f32 KV cache.
const source = await FileKnotSource.open(FILE);
const plan = await planStations(source, { memoryBudget: BUDGET, maxContext: CONTEXT, maxConversations: 1 });
await source.close?.();
console.log(`${KEY}: ${(bytes / 1e6).toFixed(0)} MB; planned for ${BUDGET / MiB} MiB an isolate: ${plan.layers} layer + ${plan.heads} head stations`
  + ` (largest planned ${(Math.max(...plan.stations.map((s) => s.total)) / MiB).toFixed(1)} MiB)`);
console.log(`profile ${describeProfile(profile)}`);

const t0 = Date.now();
const local = await startStations({
  layers: plan.layers,
  heads: plan.heads,
  profile,
  modelKey: KEY,
  modelFile: FILE,
  vars: { MODEL_ID: 'synthetic', KNOT_MAX_CONTEXT: String(CONTEXT), KNOT_STATION_CONVERSATIONS: '1', KNOT_MAX_TOKENS: String(TOKENS) },
});
console.log(`started ${local.stations.length} stations and uploaded the knot in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
try {
  const json = async (path) => (await fetch(`${local.url}${path}`)).json();
  const request = { model: 'synthetic', prompt: PROMPT, temperature: 0, max_tokens: TOKENS };
  const cold = await streamOnce(local.url, '/v1/completions', request);
  const warm = await streamOnce(local.url, '/v1/completions', request);
  const res = await fetch(`${local.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(request) });
  const text = (await res.json()).choices[0].text;
  const spent = (await json('/stats')).last_request;
  // Asynchronously: a blocked event loop would miss workerd closing idle connections.
  const { stdout } = await promisify(execFile)(KNOT_BIN, ['generate', FILE, '-n', String(TOKENS), '--json', '--temperature', '0', '--prompt', PROMPT],
    { encoding: 'utf8', maxBuffer: 1 << 26 });
  const native = JSON.parse(stdout);
  assert.equal(text, native.text, 'the split model and one native process disagree');
  assert.equal(spent.r2_reads, 0, 'the coordinator read R2 after the load');
  const s = await json('/stations');
  const coordinator = await json('/stats');
  const isolates = [['coordinator', coordinator.wasmMemoryBytes], ...s.stations.map((x) => [x.station, x.wasmMemoryBytes])];
  console.table(isolates.map(([name, b]) => ({ isolate: name, wasmMiB: +(b / MiB).toFixed(1) })));
  for (const [name, b] of isolates) assert.ok(b < 128 * MiB, `${name}: ${(b / MiB).toFixed(1)} MiB`);
  for (const st of s.stations) assert.equal(st.last_request.r2_reads, 0, `${st.station} read R2 after its load`);
  console.log(JSON.stringify({
    knotMB: +(bytes / 1e6).toFixed(0),
    profile: profile.name,
    layers: plan.layers,
    heads: plan.heads,
    coldFirstTokenMs: Math.round(cold.firstMs),
    warmFirstTokenMs: Math.round(warm.firstMs),
    decodeTokS: +warm.decodeTokS.toFixed(1),
    subrequests: spent.subrequests,
    tokens: spent.tokens,
    largestIsolateMiB: +(Math.max(...isolates.map(([, b]) => b)) / MiB).toFixed(1),
    equalsNative: true,
  }));
} finally {
  await local.dispose();
}
