// `npm run big-knot`: a model larger than any real one here, planned and run the way a user
// deploys it — not in the default suite (it costs minutes). It writes a synthetic llama-style
// knot of ~640 MB (crates/knot/examples/synthetic_knot.rs: 32 layers of dim 1024, Q8_0, noise
// weights), plans it as `knot-cloudflare plan` does (scripts/cloudflare/plan.mjs's
// planDeployment at --budget-mb, 512 positions, the conversations per layer station it finds room
// for), writes the generated directory (configs.mjs's writeConfigs) to .cloudflare/big-knot/,
// prints the plan, runs that directory in workerd under a profile (miniflare.mjs's startFromDir:
// the model uploaded to the local R2 in parts), and checks: greedy output equal to the native CLI
// on the same file (with the Worker's terminal prosody), nothing read from R2 after the loads,
// every isolate's wasm memory under 128 MiB. Then `knot-cloudflare deploy --dry-run` on the same knot (a temporary key file, wrangler
// offline where the machine allows it): its transcript printed, wrangler's tables of bindings
// counted (whole in .cloudflare/big-knot/deploy-dry-run.log).
//   node scripts/big-knot.mjs [--profile prod] [--budget-mb 112] [--tokens 16]
// The knot is written once to models/synthetic-640m.knot (git-ignored) and reused; KNOT_BIN
// names the native CLI (default target/debug/knot).
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './bundle.mjs';
import { writeConfigs } from './cloudflare/configs.mjs';
import { describeRun, startFromDir } from './cloudflare/miniflare.mjs';
import { formatPlan, planDeployment } from './cloudflare/plan.mjs';
import { OFFLINE, wranglerEnv } from './cloudflare/offline.mjs';
import { REPO } from './local.mjs';
import { describeProfile, profilesFromArgs } from './profiles.mjs';
import { streamOnce } from './stream.mjs';

const MiB = 2 ** 20;
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const [profile] = profilesFromArgs(process.argv.slice(2), { fallback: 'prod' });
const BUDGET_MB = arg('budget-mb', 112);
const TOKENS = arg('tokens', 16);
const CONTEXT = 512;
const NAME = 'big-knot';
const KEY = 'synthetic-640m.knot';
const FILE = join(REPO, 'models', KEY);
const DIR = join(ROOT, '.cloudflare', NAME);
const PROMPT = 'The lighthouse keeper climbed the stairs and';
const KNOT_BIN = process.env.KNOT_BIN ?? join(REPO, 'target/debug/knot');
const seconds = (t0) => `${((Date.now() - t0) / 1000).toFixed(1)} s`;

if (!existsSync(FILE)) {
  const t0 = Date.now();
  console.log(`writing ${FILE} …`);
  execFileSync('cargo', ['run', '--release', '-q', '-p', 'knot', '--example', 'synthetic_knot', '--', FILE,
    '--layers', '32', '--dim', '1024', '--ffn', '4096', '--vocab', '32000'], { cwd: REPO, stdio: 'inherit' });
  console.log(`wrote it in ${seconds(t0)}`);
}
const bytes = statSync(FILE).size;
assert.ok(bytes > 600e6, `${FILE}: ${bytes} bytes, not over 600 MB`);

// The plan, as `knot-cloudflare plan models/synthetic-640m.knot --name big-knot --budget-mb 112`
// makes it (that command's context is its default 2048; this run's, 512).
let t0 = Date.now();
// One conversation per layer station: the shortest chain that fits (11 + 1 stations at 112 MiB,
// where 4 conversations need 21 + 1: twice the hops per token).
const deployment = await planDeployment({ file: FILE, budgetMb: BUDGET_MB, name: NAME, maxContext: CONTEXT, conversations: 1 });
console.log(formatPlan(deployment));
writeConfigs(DIR, deployment);
console.log(`wrote ${DIR}: plan.json, coordinator.toml, ${deployment.stations.length} station configs in stations/ (planned and written in ${seconds(t0)})`);
assert.equal(deployment.topology, 'stations', `${KEY} at ${BUDGET_MB} MiB: planned ${deployment.topology}, not stations`);
console.log(`profile ${describeProfile(profile)}`);

t0 = Date.now();
const local = await startFromDir(DIR, { profile });
const { plan } = local;
console.log(`started ${describeRun(local)} and uploaded the knot in ${seconds(t0)}`);
const layers = plan.stations.filter((s) => s.kind === 'layers').length;
const heads = plan.stations.length - layers;
try {
  const json = async (path) => (await fetch(`${local.url}${path}`)).json();
  const model = local.workers[0].bindings.MODEL_ID;
  const request = { model, prompt: PROMPT, temperature: 0, max_tokens: TOKENS };
  const cold = await streamOnce(local.url, '/v1/completions', request);
  const warm = await streamOnce(local.url, '/v1/completions', request);
  const res = await fetch(`${local.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(request) });
  const text = (await res.json()).choices[0].text;
  const spent = (await json('/stats')).last_request;
  // The native reference with the Worker's terminal prosody (TERMINAL_PROSODY, default bias: near
  // the token limit it leans toward ending the sentence), as test/support.js's `native` has it.
  // Asynchronously: a blocked event loop would miss workerd closing idle connections.
  const prosody = local.workers[0].bindings.TERMINAL_PROSODY || 'bias';
  const { stdout } = await promisify(execFile)(KNOT_BIN, ['generate', FILE, '-n', String(TOKENS), '--json', '--temperature', '0', '--prosody', prosody, '--prompt', PROMPT],
    { encoding: 'utf8', maxBuffer: 1 << 26 });
  const native = JSON.parse(stdout);
  assert.equal(text, native.text, 'the split model and one native process disagree');
  assert.equal(spent.r2_reads, 0, 'the coordinator read R2 after the load');
  const s = await json('/stations');
  const coordinator = await json('/stats');
  // /stations lists the stations in the plan's order (the coordinator's KNOT_STATIONS).
  const isolates = [
    [plan.coordinator.script, coordinator.wasmMemoryBytes, plan.coordinator.plannedBytes],
    ...s.stations.map((x, i) => [plan.stations[i]?.script ?? x.station, x.wasmMemoryBytes, plan.stations[i]?.plannedBytes]),
  ];
  console.table(isolates.map(([name, b, planned]) => ({ isolate: name, plannedMiB: planned ? +(planned / MiB).toFixed(1) : null, wasmMiB: +(b / MiB).toFixed(1) })));
  for (const [name, b] of isolates) assert.ok(b < 128 * MiB, `${name}: ${(b / MiB).toFixed(1)} MiB`);
  for (const st of s.stations) assert.equal(st.last_request.r2_reads, 0, `${st.station} read R2 after its load`);
  console.log(JSON.stringify({
    knotMB: +(bytes / 1e6).toFixed(0),
    profile: profile.name,
    budgetMb: plan.budgetMb,
    context: plan.context,
    conversations: plan.conversations,
    layers,
    heads,
    coldFirstTokenMs: Math.round(cold.firstMs),
    warmFirstTokenMs: Math.round(warm.firstMs),
    decodeTokS: +warm.decodeTokS.toFixed(1),
    subrequests: spent.subrequests,
    tokens: spent.tokens,
    // The head shards' answers coming back through the chain, over the three requests.
    backKiBPerToken: +(s.hops.back / s.hops.tokens / 1024).toFixed(1),
    // Of which what the head shards answered, once (the rest: the same bytes again at each
    // layer station they cross back).
    answersKiBPerToken: +(s.hops.answers / s.hops.tokens / 1024).toFixed(1),
    kibPerToken: +(s.hops.bytes / s.hops.tokens / 1024).toFixed(1),
    largestIsolateMiB: +(Math.max(...isolates.map(([, b]) => b)) / MiB).toFixed(1),
    equalsNative: true,
  }));
} finally {
  await local.dispose();
}

// The deploy a user would run next, dry: everything but the network (bin/knot-cloudflare.mjs).
// wrangler in a home of its own, quiet and without metrics; offline where `unshare -n` works.
const tmp = mkdtempSync(join(tmpdir(), 'knot-big-knot-'));
try {
  const keys = join(tmp, 'keys.txt');
  writeFileSync(keys, `sk-big-knot-${Math.random().toString(36).slice(2)}\n`, { mode: 0o600 });
  const argv = ['deploy', FILE, '--budget-mb', String(BUDGET_MB), '--context', String(CONTEXT), '--conversations', '1', '--name', NAME, '--api-keys-file', keys, '--out', join(tmp, 'out'), '--dry-run'];
  const env = wranglerEnv(tmp);
  const offline = OFFLINE;
  const bin = join(ROOT, 'bin/knot-cloudflare.mjs');
  const [command, args] = offline ? ['unshare', ['-n', process.execPath, bin, ...argv]] : [process.execPath, [bin, ...argv]];
  console.log(`\n$ knot-cloudflare ${argv.join(' ')}   (${offline ? 'offline: unshare -n' : 'network not removed: unshare -n is not permitted here'}; `
    + 'the key file a temporary one: the same plan as above)');
  t0 = Date.now();
  const r = spawnSync(command, args, { cwd: ROOT, env, encoding: 'utf8', maxBuffer: 1 << 26, timeout: 900_000 });
  // The whole transcript in DIR; here, each wrangler run's table of bindings as a count.
  const transcript = join(DIR, 'deploy-dry-run.log');
  writeFileSync(transcript, `$ knot-cloudflare ${argv.join(' ')}\n${r.stdout ?? ''}${r.stderr ?? ''}`);
  let bindings = 0;
  const flush = () => {
    if (bindings) console.log(`  (${bindings} bindings: the table in ${transcript})`);
    bindings = 0;
  };
  for (const line of `${r.stdout ?? ''}${r.stderr ?? ''}`.split('\n')) {
    if (/^env\.\w+ \(/.test(line)) { bindings += 1; continue; }
    if (/^Binding\s+Resource\s*$/.test(line) || line === 'Your Worker has access to the following bindings:') continue;
    flush();
    if (line.trim()) console.log(line);
  }
  flush();
  const why = r.error ? r.error.message : r.status !== 0 ? `exit ${r.status ?? r.signal}` : null;
  console.log(`knot-cloudflare deploy --dry-run: ${why ? `failed (${why})` : 'passed'} in ${seconds(t0)}`);
  if (why) process.exitCode = 1;
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
