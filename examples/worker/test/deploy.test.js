// Deploy readiness without a network: wrangler's own `deploy --dry-run` (bundling, config
// checks, bindings, Durable Object classes and migrations; nothing is uploaded and no login is
// needed) on each configuration this example deploys, and the bundle against the Workers size
// limits (compressed: 3 MB on the free plan, 10 MB paid). wrangler runs with no telemetry, no
// error reports and no banner (whose update check is the one network call a dry run makes),
// with a home and config directory of its own, and without a network where that can be had.
// The station scripts are private (wrangler.station.toml), and `npm run deploy`
// (bin/knot-cloudflare.mjs deploy) refuses a Worker without API keys unless --public; its plans
// and generated configurations for SmolLM2 and Gemma are test/cloudflare.test.js's.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { parse } from 'smol-toml';
import { ROOT } from '../scripts/bundle.mjs';
import { OFFLINE, wranglerEnv } from '../scripts/cloudflare/offline.mjs';

const WRANGLER = join(ROOT, 'node_modules/wrangler/bin/wrangler.js');
const MB = 1e6;
const LIMIT_FREE = 3 * MB;
const LIMIT_PAID = 10 * MB;

const tmp = mkdtempSync(join(tmpdir(), 'knot-deploy-test-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** wrangler's environment: offline and quiet, nothing read from or written to the user's home. */
const ENV = wranglerEnv(tmp);

console.log(OFFLINE ? 'wrangler runs with no network (unshare -n)' : 'unshare -n is not available: wrangler runs with the network this machine has');

/**
 * `wrangler deploy --dry-run` on `config`; resolves to its exit code, output and the files it
 * wrote to its out directory.
 * @param {string} config a path
 * @param {string[]} [extra] more arguments
 */
function dryRun(config, extra = []) {
  const outdir = join(tmp, `out-${Math.random().toString(36).slice(2)}`);
  mkdirSync(outdir);
  return run([WRANGLER, 'deploy', '--dry-run', '--outdir', outdir, '--config', config, ...extra]).then((r) => ({
    ...r, files: readdirSync(outdir).map((name) => join(outdir, name)),
  }));
}

/** Node with `args` in the example's directory, offline where it can be; its code and output. */
function run(args, env = ENV) {
  const [command, argv] = OFFLINE ? ['unshare', ['-n', process.execPath, ...args]] : [process.execPath, args];
  return new Promise((resolve) => {
    execFile(command, argv, { cwd: ROOT, env, timeout: 120_000, maxBuffer: 1 << 24 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, output: `${stdout}\n${stderr}` });
    });
  });
}

/** The modules wrangler would upload: their total size, raw and gzipped. */
function sizes(files) {
  const modules = files.filter((f) => /\.(js|mjs|wasm)$/.test(f));
  const raw = modules.reduce((n, f) => n + readFileSync(f).byteLength, 0);
  const gzip = modules.reduce((n, f) => n + gzipSync(readFileSync(f), { level: 9 }).byteLength, 0);
  return { modules: modules.map((f) => f.split('/').at(-1)), raw, gzip };
}

/** Runs the dry run of `file` and checks what every deployable configuration must show. */
async function deployable(file, extra, bindings) {
  const r = await dryRun(join(ROOT, file), extra);
  assert.equal(r.code, 0, `wrangler deploy --dry-run -c ${file} failed:\n${r.output}`);
  assert.match(r.output, /--dry-run: exiting now/, r.output);
  for (const b of bindings) assert.ok(r.output.includes(b), `${file}: no binding ${b} in:\n${r.output}`);
  const s = sizes(r.files);
  assert.ok(s.modules.some((m) => m.endsWith('.wasm')), `${file}: no .wasm module in ${s.modules}`);
  const upload = /Total Upload: ([^\n]+)/.exec(r.output)?.[1] ?? '(not printed)';
  console.log(`${file}: ${s.modules.join(' + ')}: ${(s.raw / MB).toFixed(2)} MB raw, ${(s.gzip / MB).toFixed(2)} MB gzip `
    + `(limits, compressed: ${LIMIT_FREE / MB} MB free, ${LIMIT_PAID / MB} MB paid; wrangler: ${upload})`);
  assert.ok(s.gzip <= LIMIT_PAID, `${file}: ${s.gzip} bytes gzipped, over the paid plan's ${LIMIT_PAID}`);
  if (s.gzip > LIMIT_FREE) console.log(`${file}: over the free plan's ${LIMIT_FREE / MB} MB`);
  return { ...r, sizes: s };
}

describe('wrangler deploy --dry-run', () => {
  test('wrangler.toml: the single Worker', async () => {
    await deployable('wrangler.toml', [], ['env.MODELS (knot-models)', 'KNOT_STREAM_LAYERS']);
  });

  test('wrangler.stations.toml: the coordinator, bound to the station scripts', async () => {
    await deployable('wrangler.stations.toml', [], [
      'env.MODELS (knot-models)', 'env.LAYERS_0 (LayerStation, defined in knot-station-layers-0)',
      'env.HEADS_3 (HeadStation, defined in knot-station-head-3)', 'KNOT_STATIONS',
    ]);
  });

  test('wrangler.station.toml: one station, its Durable Object classes and migration', async () => {
    await deployable('wrangler.station.toml', ['--name', 'knot-station-layers-0'], [
      'env.MODELS (knot-models)', 'env.LAYERS (LayerStation)', 'env.HEADS (HeadStation)',
    ]);
  });

  test('wrangler.station.toml: a private script (its own entry, no URL)', () => {
    // The station entry exports the classes and serves nothing of its own (test/stations.test.js
    // shows its 404s in workerd); no workers.dev address, preview URL or route reaches it.
    const config = parse(readFileSync(join(ROOT, 'wrangler.station.toml'), 'utf8'));
    assert.equal(config.main, 'src/station.js');
    assert.equal(config.workers_dev, false);
    assert.equal(config.preview_urls, false);
    assert.equal(config.route, undefined);
    assert.equal(config.routes, undefined);
  });

  test('a broken configuration fails it', async () => {
    // The station script with a Durable Object class its entry does not export.
    const text = readFileSync(join(ROOT, 'wrangler.station.toml'), 'utf8');
    assert.ok(text.includes('main = "src/station.js"'));
    const config = text
      .replace('main = "src/station.js"', `main = ${JSON.stringify(join(ROOT, 'src/station.js'))}`)
      .replaceAll('HeadStation', 'HeadStatoin');
    const file = join(tmp, 'broken.toml');
    writeFileSync(file, config);
    const r = await dryRun(file);
    assert.notEqual(r.code, 0, `a Durable Object class the Worker does not export deployed:\n${r.output}`);
    assert.match(r.output, /Durable Objects, which are not exported in your entrypoint file: HeadStatoin/, r.output);
  });
});

describe('npm run deploy (bin/knot-cloudflare.mjs deploy): no keyless public Worker', () => {
  // The shipped model, as `npm run deploy` gives it; the generated directory in the test's temp.
  const MODEL = join(ROOT, '../../models/SmolLM2-135M-Instruct.Q4_1.knot');
  const deploy = (args, env = ENV) => run([join(ROOT, 'bin/knot-cloudflare.mjs'), 'deploy', MODEL,
    '--out', join(tmp, `gen-${Math.random().toString(36).slice(2)}`), ...args], env);
  // What a refusal says, and that it ran no wrangler (every command run is printed first).
  const refused = (r, name) => {
    assert.equal(r.code, 2, r.output);
    assert.match(r.output, new RegExp(`refusing to deploy ${name} without API keys`), r.output);
    assert.match(r.output, /answers anyone who finds its URL/);
    assert.match(r.output, /--api-keys-file FILE or KNOT_API_KEYS/);
    assert.match(r.output, /--public to serve everyone/);
    assert.doesNotMatch(r.output, /\$ wrangler|--dry-run: exiting now/, r.output);
  };

  test('no keys and no --public: refused before any wrangler run (the coordinator and its station scripts too)', async () => {
    for (const [flags, name] of [[['--stream'], 'knot'], [['--name', 'knot-coordinator'], 'knot-coordinator']]) {
      const r = await deploy([...flags, '--dry-run']);
      refused(r, name);
      assert.match(r.output, /A dry run has no network/);
    }
    // The keys and --public together are a contradiction: refused too.
    const both = await deploy(['--dry-run', '--public'], { ...ENV, KNOT_API_KEYS: 'sk-test-both-0123456789' });
    assert.equal(both.code, 2, both.output);
    assert.match(both.output, /not both/);
    assert.doesNotMatch(both.output, /\$ wrangler|sk-test-both-0123456789/);
    // Keys the Worker would refuse at its first request are refused here, naming no key.
    const short = join(tmp, 'short-keys.txt');
    writeFileSync(short, 'sk-short\n');
    const weak = await deploy(['--dry-run', '--api-keys-file', short]);
    assert.equal(weak.code, 2, weak.output);
    assert.match(weak.output, /short-keys\.txt\[0\]: a key must be at least 16 characters/);
    assert.doesNotMatch(weak.output, /\$ wrangler|sk-short/);
  });

  test('--api-keys-file: the dry run passes with the secret, its text nowhere in the output', async () => {
    const key = `sk-knot-test-${Math.random().toString(36).slice(2)}`;
    const file = join(tmp, 'keys.txt');
    writeFileSync(file, `${key}\n`);
    // The streaming single Worker (one script: the quickest dry run; the split is cloudflare.test.js's).
    const r = await deploy(['--stream', '--dry-run', '--api-keys-file', file]);
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, /\$ wrangler deploy --config \S+coordinator.toml --secrets-file \S+ --dry-run --outdir/, r.output);
    assert.match(r.output, /--dry-run: exiting now/);
    assert.match(r.output, /would set the secret KNOT_API_KEYS on knot with the deploy: 1 key from/);
    assert.match(r.output, /env\.KNOT_API_KEYS \("\(hidden\)"\)/, r.output);
    assert.ok(!r.output.includes(key), 'the key was printed');
    assert.ok(!r.output.includes(key.slice(8)), 'part of the key was printed');
  });

  test('--public: the dry run passes with KNOT_PUBLIC, and warns', async () => {
    const r = await deploy(['--stream', '--dry-run', '--public']);
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, /\$ wrangler deploy --config \S+coordinator.toml --var KNOT_PUBLIC:1 --dry-run/, r.output);
    assert.match(r.output, /warning: --public: knot serves everyone who finds its URL, without an API key/);
    assert.match(r.output, /env\.KNOT_PUBLIC/, r.output);
    assert.match(r.output, /--dry-run: exiting now/);
  });
});
