// Deploys the Worker with wrangler, refusing to put a keyless Worker on the internet: a deployed
// Worker answers anyone who finds its URL. `npm run deploy -- [options]`:
//
//   --config FILE         wrangler.toml (the default: the single Worker) or wrangler.stations.toml
//                         (the coordinator: each station script is deployed first, private,
//                         from wrangler.station.toml under the coordinator's script_names)
//   --api-keys-file FILE  the API keys (separated by commas or newlines, or JSON), set as the
//                         secret KNOT_API_KEYS with the deploy (wrangler's --secrets-file: the
//                         Worker is never up without them); KNOT_API_KEYS in the environment
//                         does the same
//   --public              no keys: the Worker serves everyone (the var KNOT_PUBLIC = "1")
//   --dry-run             wrangler's dry run of every deploy (no network, nothing uploaded)
//
// With neither keys nor --public it refuses (exit 2) before running wrangler, unless a real
// deploy finds the secret KNOT_API_KEYS already set on the Worker (`wrangler secret list`).
// Every wrangler command is printed before it runs; the keys never are, nor are they ever on a
// command line.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parse } from 'smol-toml';
import { parseApiKeys } from 'knot-wasm/server';
import { ROOT } from './bundle.mjs';

const WRANGLER = join(ROOT, 'node_modules/wrangler/bin/wrangler.js');
const SECRET = 'KNOT_API_KEYS';
const USAGE = 'usage: node scripts/deploy.mjs [--config wrangler.toml|wrangler.stations.toml] [--dry-run] [--public] [--api-keys-file FILE]';

/** Prints why and exits 2: nothing was deployed. */
function refuse(message) {
  console.error(`deploy: ${message}`);
  process.exit(2);
}

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      config: { type: 'string', default: 'wrangler.toml' },
      'dry-run': { type: 'boolean', default: false },
      public: { type: 'boolean', default: false },
      'api-keys-file': { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  }));
} catch (e) {
  refuse(`${e.message}\n${USAGE}`);
}
if (args.help) {
  console.log(USAGE);
  process.exit(0);
}
const dryRun = args['dry-run'];
const configFile = resolve(args.config);
if (!existsSync(configFile)) refuse(`${args.config}: no such file\n${USAGE}`);
const stationConfig = join(dirname(configFile), 'wrangler.station.toml');
if (configFile === stationConfig) {
  refuse(`${args.config} is deployed once per station by --config wrangler.stations.toml, under the coordinator's script_names`);
}
const config = parse(readFileSync(configFile, 'utf8'));
const name = config.name;
// The station scripts the coordinator binds, in its order; none for the single Worker.
const stations = [...new Set((config.durable_objects?.bindings ?? []).map((b) => b.script_name).filter(Boolean))];

/** The API keys (the secret's text as given) and where they came from, or null. */
function apiKeys() {
  if (args['api-keys-file'] !== undefined) {
    const file = args['api-keys-file'];
    let text;
    try {
      text = readFileSync(file, 'utf8').trim();
    } catch (e) {
      refuse(`--api-keys-file ${file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
    }
    return { text, source: file };
  }
  const text = process.env[SECRET]?.trim();
  return text ? { text, source: `${SECRET} in the environment` } : null;
}

const keys = apiKeys();
// Read as the Worker reads them (knot-wasm/server's parseApiKeys): keys it would refuse at its
// first request (short, repeated, bad JSON) are refused here, naming the entry, never the key.
let keyCount = 0;
if (keys) {
  try {
    keyCount = parseApiKeys(keys.text, keys.source).length;
  } catch (e) {
    refuse(e.message);
  }
  if (keyCount === 0) refuse(`${keys.source}: no API key in it`);
}
if (keys && args.public) refuse(`--public serves everyone without a key: give it or the keys (${keys.source}), not both`);

/** wrangler's environment: this one, without the keys (they go through a file only). */
const env = { ...process.env };
delete env[SECRET];

/** A command as printed: wrangler and its arguments, quoted where needed. */
const shown = (argv) => ['wrangler', ...argv].map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`)).join(' ');

/**
 * Runs wrangler (the example's own, as the tests run it) and resolves to its exit code and, with
 * `capture`, its stdout (stderr goes to ours).
 */
function wrangler(argv, { capture = false } = {}) {
  console.log(`$ ${shown(argv)}`);
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [WRANGLER, ...argv], {
      cwd: ROOT, env, stdio: ['inherit', capture ? 'pipe' : 'inherit', 'inherit'],
    });
    let stdout = '';
    child.stdout?.on('data', (chunk) => { stdout += chunk; });
    child.on('error', (e) => { console.error(`deploy: wrangler: ${e.message}`); resolve({ code: 1, stdout }); });
    child.on('close', (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), stdout }));
  });
}

/** Whether the deployed Worker `script` already has the secret (a real deploy only: network). */
async function hasSecret(script) {
  const r = await wrangler(['secret', 'list', '--name', script, '--config', configFile], { capture: true });
  if (r.code !== 0) return { has: false, why: `could not list ${script}'s secrets (wrangler exited ${r.code})` };
  try {
    const list = JSON.parse(r.stdout.slice(r.stdout.indexOf('[')));
    return list.some((s) => s.name === SECRET)
      ? { has: true }
      : { has: false, why: `${script} has no secret ${SECRET}` };
  } catch {
    return { has: false, why: `could not read ${script}'s secrets from wrangler's output` };
  }
}

const WHY = [
  `refusing to deploy ${name} without API keys.`,
  'A deployed Worker answers anyone who finds its URL: their requests would spend your CPU, R2 and',
  'Durable Object time, and (with the agentic loop) call your MCP servers.',
  `Give the keys with --api-keys-file FILE or ${SECRET} in the environment (keys separated by`,
  'commas or newlines, or JSON), or --public to serve everyone without a key.',
].join('\n');

let keptSecret = false;
if (!keys && !args.public) {
  if (dryRun) {
    refuse(`${WHY}\n(A dry run has no network, so it cannot see whether ${name} already has the secret ${SECRET}; `
      + 'a real deploy accepts one already set.)');
  }
  const found = await hasSecret(name);
  if (!found.has) refuse(`${WHY}\n(${found.why}.)`);
  keptSecret = true;
  console.log(`deploy: ${name} already has the secret ${SECRET}: deploying without changing it`);
}

const temp = mkdtempSync(join(tmpdir(), 'knot-deploy-'));
const cleanUp = () => rmSync(temp, { recursive: true, force: true });
process.on('SIGINT', () => { cleanUp(); process.exit(130); });
process.on('SIGTERM', () => { cleanUp(); process.exit(143); });

/** `wrangler deploy` with `argv`, a dry run's out directory of its own; exits on a failure. */
async function deploy(script, argv) {
  const dry = dryRun ? ['--dry-run', '--outdir', join(temp, `out-${script}`)] : [];
  const r = await wrangler(['deploy', ...argv, ...dry]);
  if (r.code !== 0) {
    console.error(`deploy: wrangler deploy of ${script} failed (exit ${r.code})${stations.length ? ': nothing after it was deployed' : ''}`);
    cleanUp();
    process.exit(r.code);
  }
}

try {
  // The stations first, so the coordinator's bindings find their scripts. Private (no URL, their
  // fetch answers 404): they need no key.
  for (const script of stations) {
    await deploy(script, ['--config', stationConfig, '--name', script]);
  }
  const argv = ['--config', configFile];
  if (keys) {
    // The secret goes up with the deploy, from a file only this user reads, removed after.
    const file = join(temp, 'secrets.json');
    writeFileSync(file, JSON.stringify({ [SECRET]: keys.text }), { mode: 0o600 });
    argv.push('--secrets-file', file);
    const n = keyCount;
    console.log(`deploy: ${dryRun ? 'would set' : 'setting'} the secret ${SECRET} on ${name} with the deploy: ${n} key${n === 1 ? '' : 's'} from ${keys.source} (not shown)`);
  } else if (args.public) {
    argv.push('--var', 'KNOT_PUBLIC:1');
    console.log(`deploy: warning: --public: ${name} serves everyone who finds its URL, without an API key (KNOT_PUBLIC = "1")`);
  }
  await deploy(name, argv);
  const what = stations.length ? `${stations.length} private station scripts (${stations.join(', ')}) and ${name}` : name;
  const access = keys ? `with its API keys (${SECRET})` : keptSecret ? `with the API keys it had (${SECRET})` : 'public (KNOT_PUBLIC = "1")';
  console.log(`deploy: ${dryRun ? 'dry run passed' : 'deployed'}: ${what}, ${access}`);
} finally {
  cleanUp();
}
