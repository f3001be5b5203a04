// Local = deployed: the wrangler configurations themselves run in workerd (Miniflare) through
// scripts/cloudflare/miniflare.mjs. Unit checks of `workerFromConfig` on the shipped configs
// (wrangler.toml, wrangler.stations.toml, wrangler.station.toml: the options object as wrangler's
// local dev reads them) and a refusal of what it does not translate; then one run of a directory
// generated as `knot-cloudflare plan` writes it (plan.mjs's planDeployment, configs.mjs's
// writeConfigs: plan.json + coordinator.toml + stations/*.toml) for Gemma-3-270M at the default
// budget, under the `prod` profile, whose greedy chat output through the `openai` client equals
// the native CLI's.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse, stringify } from 'smol-toml';
import { REPO, client, native } from './support.js';
import { ROOT } from '../scripts/bundle.mjs';
import { writeConfigs } from '../scripts/cloudflare/configs.mjs';
import { readPlan, startFromDir, workerFromConfig } from '../scripts/cloudflare/miniflare.mjs';
import { planDeployment } from '../scripts/cloudflare/plan.mjs';

const tmp = mkdtempSync(join(tmpdir(), 'knot-from-dir-'));
const bundleDir = join(tmp, 'dist');
after(() => rmSync(tmp, { recursive: true, force: true }));

const read = (file) => parse(readFileSync(join(ROOT, file), 'utf8'));
const WHOLE = read('wrangler.toml');
const COORDINATOR = read('wrangler.stations.toml');
const STATION = read('wrangler.station.toml');

/** The stations the shipped coordinator binds, in its order: `{ binding, className, script }`. */
const SHIPPED_STATIONS = COORDINATOR.durable_objects.bindings.map((b) => ({ binding: b.name, className: b.class_name, script: b.script_name }));

/**
 * A generated directory as `knot-cloudflare plan` writes it: the model's deployment planned at
 * the default budget and written by configs.mjs.
 * @param {string} dir
 * @param {string} file the model
 */
async function planned(dir, file) {
  writeConfigs(dir, await planDeployment({ file }));
  return readPlan(dir);
}

describe('workerFromConfig: the shipped configs as wrangler dev reads them', () => {
  const LIMITER = { KNOT_RATE_LIMITER: { simple: { limit: 120, period: 60 } } };
  const common = { compatibilityDate: '2026-04-01', r2Buckets: { MODELS: 'knot-models' } };
  const stationBindings = Object.fromEntries(SHIPPED_STATIONS.map((s) => [s.binding, { className: s.className, scriptName: s.script }]));
  /** The options without the bundle's paths, checked apart. */
  const options = ({ modules, modulesRoot, ...rest }) => rest;

  test('wrangler.toml: the streaming single Worker', async () => {
    const w = await workerFromConfig(join(ROOT, 'wrangler.toml'), { bundleDir });
    assert.deepEqual(options(w), {
      ...common, name: 'knot-worker', compatibilityFlags: ['enable_request_signal'],
      bindings: { ...WHOLE.vars }, ratelimits: LIMITER, durableObjects: {},
    });
    assert.deepEqual(w.modules.map((m) => m.type), ['ESModule', 'CompiledWasm']);
    assert.equal(w.modulesRoot, join(w.modules[0].path, '..'));
  });

  test('wrangler.stations.toml: the coordinator binds each station by script name', async () => {
    const w = await workerFromConfig(join(ROOT, 'wrangler.stations.toml'), { bundleDir });
    assert.deepEqual(options(w), {
      ...common, name: 'knot-coordinator', compatibilityFlags: ['enable_request_signal'],
      bindings: { ...COORDINATOR.vars }, ratelimits: LIMITER, durableObjects: stationBindings,
    });
    // One entry, one bundle: the whole Worker and the coordinator share src/index.js's.
    const whole = await workerFromConfig(join(ROOT, 'wrangler.toml'), { bundleDir });
    assert.equal(w.modules[0].path, whole.modules[0].path);
  });

  test('wrangler.station.toml: its own classes by name, every station by script name', async () => {
    const w = await workerFromConfig(join(ROOT, 'wrangler.station.toml'), { bundleDir });
    assert.deepEqual(options(w), {
      ...common, name: 'knot-station', bindings: { ...STATION.vars }, ratelimits: {},
      durableObjects: { LAYERS: 'LayerStation', HEADS: 'HeadStation', ...stationBindings },
    });
    // src/station.js in a directory of its own, apart from src/index.js's bundle.
    const coordinator = await workerFromConfig(join(ROOT, 'wrangler.stations.toml'), { bundleDir });
    assert.notEqual(w.modulesRoot, coordinator.modulesRoot);
  });

  test('what it does not translate is refused, not dropped', async () => {
    const config = (extra) => {
      const file = join(tmp, `refused-${Math.random().toString(36).slice(2)}.toml`);
      writeFileSync(file, stringify({ ...WHOLE, main: join(ROOT, 'src/index.js'), ...extra }));
      return file;
    };
    await assert.rejects(workerFromConfig(config({ kv_namespaces: [{ binding: 'CACHE', id: 'x' }] }), { bundleDir }), /'kv_namespaces': not translated to Miniflare/);
    await assert.rejects(
      workerFromConfig(config({ durable_objects: { bindings: [{ name: 'X', class_name: 'LayerStation', environment: 'staging' }] } }), { bundleDir }),
      /durable_objects\.bindings field 'environment': not translated/,
    );
    await assert.rejects(workerFromConfig(config({ rules: [{ type: 'Text', globs: ['**/*.txt'] }] }), { bundleDir }), /rule .*Text.*not translated/);
  });
});

const SMOL = join(REPO, 'models', WHOLE.vars.MODEL_KEY);
const GEMMA = join(REPO, 'models', COORDINATOR.vars.MODEL_KEY);
for (const file of [SMOL, GEMMA]) {
  if (!existsSync(file) && process.env.KNOT_REQUIRE_MODELS) throw new Error(`${file} is missing and KNOT_REQUIRE_MODELS is set (run scripts/prepare-model.sh --all)`);
}

test('SmolLM2 as planned translates script by script; a directory that disagrees with its plan.json is refused', { skip: !existsSync(SMOL) }, async () => {
  const dir = join(tmp, 'smol');
  const plan = await planned(dir, SMOL);
  const [coordinator, ...stations] = await Promise.all([plan.coordinator, ...plan.stations].map((s) => workerFromConfig(join(dir, s.config), { bundleDir })));
  const bound = (s) => ({ className: s.kind === 'head' ? 'HeadStation' : 'LayerStation', scriptName: s.script });
  assert.deepEqual(coordinator.durableObjects, Object.fromEntries(plan.stations.map((s) => [s.binding, bound(s)])));
  for (const [i, w] of stations.entries()) {
    const own = plan.stations[i];
    assert.equal(w.name, own.script);
    assert.deepEqual(w.durableObjects, Object.fromEntries(plan.stations.map((s) => [s.binding, s === own ? bound(s).className : bound(s)])));
    assert.equal(w.bindings.MODEL_KEY, plan.model.key);
  }
  writeFileSync(join(dir, 'plan.json'), JSON.stringify({ ...plan, model: { ...plan.model, bytes: plan.model.bytes + 1 } }));
  await assert.rejects(startFromDir(dir), /was planned for/);
  writeFileSync(join(dir, 'stations', 'stray.toml'), '');
  assert.throws(() => readPlan(dir), /stray\.toml is not in .*plan\.json's stations/);
});

// Each model as `knot-cloudflare deploy` would deploy it (96 MiB an isolate, the paid plan),
// run from the very directory it writes: SmolLM2 on 4 + 1 stations, Gemma-3-270M on 2 + 3.
const RUNS = [
  { name: 'SmolLM2-135M', file: SMOL, asks: [[{ role: 'user', content: 'What is the capital of France? Answer in one sentence.' }]] },
  {
    name: 'Gemma-3-270M',
    file: GEMMA,
    asks: [[{ role: 'user', content: 'Write a haiku about rain.' }]],
  },
];

for (const run of RUNS) {
  describe(`startFromDir: ${run.name} as planned, in workerd`, () => {
    const have = existsSync(run.file);
    const dir = join(tmp, `run-${run.name}`);
    let local;
    before(async () => {
      if (!have) return;
      await planned(dir, run.file);
      local = await startFromDir(dir, { profile: 'prod', bundleDir });
    });
    after(async () => local?.dispose());

    test(`${run.name} as planned, prod profile: greedy chat output equals the native CLI`, { skip: !have, timeout: 120_000 }, async () => {
      const { plan } = local;
      assert.equal(plan.topology, 'stations');
      // Every script of the plan runs, the coordinator first (it serves the URL).
      assert.deepEqual(local.workers.map((w) => w.name), [plan.coordinator.script, ...plan.stations.map((s) => s.script)]);
      const model = local.workers[0].bindings.MODEL_ID;
      const openai = client(local.url);
      for (const messages of run.asks) {
        const r = await openai.chat.completions.create({ model, messages, temperature: 0, max_tokens: 12 });
        assert.equal(r.choices[0].message.content, (await native(messages, 12, undefined, run.file)).text);
      }
      // The split the plan names, each station's isolate under prod's costs and the 128 MB limit.
      const { stations } = await (await fetch(`${local.url}/stations`)).json();
      assert.deepEqual(stations.map((s) => s.kind), plan.stations.map((s) => (s.kind === 'head' ? 'head station' : 'layer station')));
      for (const s of stations) {
        assert.equal(s.profile, 'prod');
        assert.ok(s.wasmMemoryBytes < 128 * 2 ** 20, `${s.station}: ${s.wasmMemoryBytes} bytes`);
      }
    });
  });
}
