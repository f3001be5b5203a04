#!/usr/bin/env node
// knot-cloudflare: a .knot model to a running Cloudflare deployment in one command (issue 45), and
// the one deploy path of this example (`npm run deploy` runs it for the shipped model).
//
//   knot-cloudflare plan    MODEL.knot [options]   print the topology and its figures, write DIR
//   knot-cloudflare deploy  MODEL.knot [options]   plan, write DIR, upload the model, deploy the
//                                                  station scripts then the coordinator, wait for
//                                                  /health (--dry-run: everything but the network)
//   knot-cloudflare destroy [MODEL.knot] [options] delete every script of DIR's plan
//   knot-cloudflare status  [MODEL.knot] [options] GET /health and /stations of the deployment
//
// DIR (--out, default examples/worker/.cloudflare/<name>) is generated, never hand-edited:
// plan.json, coordinator.toml, stations/<script>.toml (scripts/cloudflare/configs.mjs); the local
// harness runs the same directory. A deploy refuses (exit 2, before any wrangler run) to put a
// keyless Worker on the internet: API keys with --api-keys-file or KNOT_API_KEYS (set as the
// secret KNOT_API_KEYS with the deploy, through wrangler's --secrets-file, never printed nor on a
// command line), or --public, or (a real deploy) the secret already set on the Worker. Every
// wrangler command is printed before it runs. Bad input: a message and exit 2, no stack trace.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parseApiKeys } from 'knot-wasm/server';
import { ROOT } from '../scripts/bundle.mjs';
import { writeConfigs } from '../scripts/cloudflare/configs.mjs';
import { formatPlan, mib, PlanError, planDeployment } from '../scripts/cloudflare/plan.mjs';

const WRANGLER = join(ROOT, 'node_modules/wrangler/bin/wrangler.js');
const SECRET = 'KNOT_API_KEYS';
const S3_VARS = ['CLOUDFLARE_ACCOUNT_ID', 'R2_ACCESS_KEY_ID', 'R2_SECRET_ACCESS_KEY'];
/** wrangler's `r2 object put` limit (workers-sdk packages/wrangler/src/r2/constants.ts). */
const WRANGLER_PUT_BYTES = 300 * 2 ** 20;
/** How long a deploy waits for /health to answer with the planned model (cold stations load). */
const HEALTH_TIMEOUT_MS = 300_000;
const USAGE = `usage: knot-cloudflare <plan|deploy|destroy|status> MODEL.knot [options]
  --budget-mb N          wasm memory per isolate, MiB (default 96; an isolate has 128 MB in all)
  --context N            positions each conversation may hold (default 2048)
  --conversations N      conversations a layer station keeps (default 4, fewer when no split fits;
                         fewer make a shorter chain: fewer hops per token)
  --plan free|paid       the Workers plan to fit (default paid)
  --name PREFIX          script names: PREFIX, PREFIX-layers-i, PREFIX-head-i (default knot)
  --bucket NAME          the R2 bucket holding the model (default knot-models)
  --out DIR              the generated directory (default examples/worker/.cloudflare/<name>)
  --stream               one Worker streaming layers from R2 on every token (explicit only)
  --dry-run              deploy/destroy: everything but the network
  --api-keys-file FILE   deploy: API keys (commas, newlines or JSON), set as the secret ${SECRET}
  --public               deploy: no keys, serve everyone (KNOT_PUBLIC = "1")
  --url URL              status: the deployment's URL (default: DIR/deployed.json's)`;

/** A refusal: why, and exit 2 (nothing, or nothing more, was done). */
class Refusal extends Error {}
/** @param {string} message @returns {never} */
const refuse = (message) => { throw new Refusal(message); };

/** @type {{ values: Record<string, any>, positionals: string[] }} */
let parsed;
try {
  parsed = parseArgs({
    allowPositionals: true,
    options: {
      'budget-mb': { type: 'string', default: '96' },
      context: { type: 'string', default: '2048' },
      conversations: { type: 'string' },
      plan: { type: 'string', default: 'paid' },
      name: { type: 'string', default: 'knot' },
      bucket: { type: 'string', default: 'knot-models' },
      out: { type: 'string' },
      stream: { type: 'boolean', default: false },
      'dry-run': { type: 'boolean', default: false },
      'api-keys-file': { type: 'string' },
      public: { type: 'boolean', default: false },
      url: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
} catch (e) {
  console.error(`knot-cloudflare: ${/** @type {Error} */ (e).message}\n${USAGE}`);
  process.exit(2);
}
const args = parsed.values;
const [command, model, ...extra] = parsed.positionals;
const dryRun = args['dry-run'];
const out = resolve(args.out ?? join(ROOT, '.cloudflare', args.name));

/** wrangler's environment: this one, without the keys (they go through a file only). */
const env = { ...process.env };
delete env[SECRET];

/** A command as printed: wrangler and its arguments, quoted where needed. */
const shown = (argv) => ['wrangler', ...argv].map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`)).join(' ');

/**
 * Runs wrangler (the example's own, as the tests run it); resolves to its exit code and, with
 * `capture`, its stdout (echoed too, unless `quiet`). stderr goes to ours.
 * @param {string[]} argv
 * @param {{ capture?: boolean, quiet?: boolean }} [options]
 * @returns {Promise<{ code: number, stdout: string }>}
 */
function wrangler(argv, { capture = false, quiet = false } = {}) {
  console.log(`$ ${shown(argv)}`);
  return new Promise((done) => {
    const child = spawn(process.execPath, [WRANGLER, ...argv], { cwd: ROOT, env, stdio: ['inherit', capture ? 'pipe' : 'inherit', 'inherit'] });
    let stdout = '';
    child.stdout?.on('data', (chunk) => {
      stdout += chunk;
      if (!quiet) process.stdout.write(chunk);
    });
    child.on('error', (e) => { console.error(`knot-cloudflare: wrangler: ${e.message}`); done({ code: 1, stdout }); });
    child.on('close', (code, signal) => done({ code: code ?? (signal ? 1 : 0), stdout }));
  });
}

/** The options planDeployment takes, from the command line. */
function planOptions() {
  if (!model) refuse(`${command} needs the model: knot-cloudflare ${command} MODEL.knot\n${USAGE}`);
  if (extra.length) refuse(`unexpected argument${extra.length > 1 ? 's' : ''}: ${extra.join(' ')}\n${USAGE}`);
  if (!/^\d+$/.test(args['budget-mb'])) refuse(`--budget-mb must be a whole number of MiB, got '${args['budget-mb']}'`);
  if (!/^\d+$/.test(args.context)) refuse(`--context must be a whole number of positions, got '${args.context}'`);
  if (args.conversations !== undefined && !/^\d+$/.test(args.conversations)) refuse(`--conversations must be a whole number, got '${args.conversations}'`);
  if (!existsSync(model)) refuse(`${model}: no such file`);
  if (!statSync(model).isFile()) refuse(`${model}: not a file`);
  return {
    file: model, budgetMb: Number(args['budget-mb']), plan: args.plan, name: args.name, bucket: args.bucket, stream: args.stream,
    maxContext: Number(args.context), ...(args.conversations === undefined ? {} : { conversations: Number(args.conversations) }),
  };
}

/** Plans, prints the plan and writes DIR; returns the deployment. */
async function planAndWrite() {
  const deployment = await planDeployment(planOptions());
  console.log(formatPlan(deployment));
  const written = writeConfigs(out, deployment);
  const n = written.stations.length;
  console.log(`wrote ${out}: plan.json, coordinator.toml${n ? `, ${n} station config${n === 1 ? '' : 's'} in stations/` : ''} (generated: do not edit)`);
  return deployment;
}

/** The API keys (the secret's text as given), where they came from, and how many; or null. */
function apiKeys() {
  let text;
  let source;
  if (args['api-keys-file'] !== undefined) {
    source = args['api-keys-file'];
    try {
      text = readFileSync(source, 'utf8').trim();
    } catch (e) {
      refuse(`--api-keys-file ${source}: ${/** @type {any} */ (e).code === 'ENOENT' ? 'no such file' : /** @type {Error} */ (e).message}`);
    }
  } else {
    text = process.env[SECRET]?.trim();
    source = `${SECRET} in the environment`;
    if (!text) return null;
  }
  // Read as the Worker reads them (knot-wasm/server's parseApiKeys): keys it would refuse at its
  // first request (short, repeated, bad JSON) are refused here, naming the entry, never the key.
  let keys;
  try {
    keys = parseApiKeys(text, source);
  } catch (e) {
    refuse(/** @type {Error} */ (e).message);
  }
  if (keys.length === 0) refuse(`${source}: no API key in it`);
  return { text, source, count: keys.length, first: keys[0].key };
}

const whyKeys = (name) => [
  `refusing to deploy ${name} without API keys.`,
  'A deployed Worker answers anyone who finds its URL: their requests would spend your CPU, R2 and',
  'Durable Object time, and (with the agentic loop) call your MCP servers.',
  `Give the keys with --api-keys-file FILE or ${SECRET} in the environment (keys separated by`,
  'commas or newlines, or JSON), or --public to serve everyone without a key.',
].join('\n');

/** Whether the deployed Worker `script` already has the secret (a real deploy only: network). */
async function hasSecret(script, config) {
  const r = await wrangler(['secret', 'list', '--name', script, '--config', config], { capture: true, quiet: true });
  if (r.code !== 0) return { has: false, why: `could not list ${script}'s secrets (wrangler exited ${r.code})` };
  try {
    const list = JSON.parse(r.stdout.slice(r.stdout.indexOf('[')));
    return list.some((s) => s.name === SECRET) ? { has: true } : { has: false, why: `${script} has no secret ${SECRET}` };
  } catch {
    return { has: false, why: `could not read ${script}'s secrets from wrangler's output` };
  }
}

/**
 * Puts the model in the bucket: through R2's S3 API when its credentials are set (multipart,
 * resumable, skipped when the object has the same size and SHA-256), otherwise wrangler's single
 * put up to 300 MiB. A dry run says which it would do.
 * @param {import('../scripts/cloudflare/plan.mjs').Deployment} d
 */
async function upload(d) {
  const { file, key, bytes, sha256 } = d.model;
  const s3 = S3_VARS.every((v) => process.env[v]);
  const target = `${d.bucket}/${key}`;
  const size = `${mib(bytes)}, sha256 ${sha256.slice(0, 16)}…`;
  if (!s3 && bytes > WRANGLER_PUT_BYTES) {
    const message = `${file} is ${mib(bytes)}, over wrangler's single put of ${mib(WRANGLER_PUT_BYTES)}: it goes through R2's S3 API in parts. `
      + `Set ${S3_VARS.join(', ')} (an R2 API token: dashboard, R2, "Manage API tokens")`;
    if (!dryRun) refuse(message);
    console.log(`upload: a real deploy would refuse: ${message}`);
    return;
  }
  if (s3) {
    const endpoint = `https://${process.env.CLOUDFLARE_ACCOUNT_ID}.r2.cloudflarestorage.com`;
    if (dryRun) {
      console.log(`upload: would upload ${file} (${size}) to ${target} through R2's S3 API (${endpoint}), unless it is there with the same size and SHA-256`);
      return;
    }
    const { uploadModel } = await import('../scripts/cloudflare/upload.mjs');
    let last = '';
    const r = await uploadModel({
      file,
      bucket: d.bucket,
      key,
      accountId: process.env.CLOUDFLARE_ACCOUNT_ID,
      credentials: { accessKeyId: process.env.R2_ACCESS_KEY_ID, secretAccessKey: process.env.R2_SECRET_ACCESS_KEY },
      endpoint,
      stateDir: out,
      // Every tenth of the way, per phase (hashing the file, then sending it).
      onProgress: ({ phase, bytes: at, total }) => {
        const tenth = `${phase} ${Math.floor((10 * at) / Math.max(1, total)) * 10}%`;
        if (tenth !== last) { last = tenth; console.log(`upload: ${tenth}`); }
      },
    });
    console.log(`upload: ${r.action} ${target} (${mib(r.bytes)}, sha256 ${r.sha256})`);
    if (r.sha256 && r.sha256 !== sha256) refuse(`upload: ${target} has sha256 ${r.sha256}, the planned file ${sha256}`);
    return;
  }
  // wrangler cannot compare what is there: the put goes up every time (one request).
  const argv = ['r2', 'object', 'put', target, '--file', file, '--remote'];
  if (dryRun) {
    console.log(`upload: would run: ${shown(argv)} (${size}; or set ${S3_VARS.join(', ')} to upload only when it is not there)`);
    return;
  }
  const r = await wrangler(argv);
  if (r.code !== 0) refuse(`upload: wrangler r2 object put failed (exit ${r.code}); does the bucket exist? (npx wrangler r2 bucket create ${d.bucket})`);
}

/** Waits until GET /health (with a key) answers with the planned model. */
async function waitHealthy(url, modelId, key) {
  const deadline = Date.now() + HEALTH_TIMEOUT_MS;
  let last = 'no answer yet';
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`${url}/health`, { headers: key ? { authorization: `Bearer ${key}` } : {}, signal: AbortSignal.timeout(120_000) });
      const body = await res.json().catch(() => null);
      if (res.ok && body?.model === modelId) return body;
      last = `${res.status} ${JSON.stringify(body).slice(0, 300)}`;
    } catch (e) {
      last = /** @type {Error} */ (e).message;
    }
    await new Promise((r) => setTimeout(r, 5000));
  }
  refuse(`${url}/health did not answer with ${modelId} within ${HEALTH_TIMEOUT_MS / 1000} s (last: ${last}); see \`knot-cloudflare status\` and \`npx wrangler tail\``);
}

async function deploy() {
  // The keys first: a keyless deploy is refused before anything else runs.
  const keys = apiKeys();
  if (keys && args.public) refuse(`--public serves everyone without a key: give it or the keys (${keys.source}), not both`);
  if (!keys && !args.public && dryRun) {
    refuse(`${whyKeys(args.name)}\n(A dry run has no network, so it cannot see whether ${args.name} already has the secret ${SECRET}; `
      + 'a real deploy accepts one already set.)');
  }
  const d = await planAndWrite();
  const coordinator = join(out, d.coordinator.config);
  let keptSecret = false;
  if (!keys && !args.public) {
    const found = await hasSecret(d.name, coordinator);
    if (!found.has) refuse(`${whyKeys(d.name)}\n(${found.why}.)`);
    keptSecret = true;
    console.log(`deploy: ${d.name} already has the secret ${SECRET}: deploying without changing it`);
  }
  await upload(d);

  const temp = mkdtempSync(join(tmpdir(), 'knot-cloudflare-'));
  const cleanUp = () => rmSync(temp, { recursive: true, force: true });
  process.on('SIGINT', () => { cleanUp(); process.exit(130); });
  process.on('SIGTERM', () => { cleanUp(); process.exit(143); });
  let url = null;
  try {
    /** `wrangler deploy -c config` (a dry run with an out directory of its own); stops at a failure. */
    const step = async (script, argv) => {
      const dry = dryRun ? ['--dry-run', '--outdir', join(temp, `out-${script}`)] : [];
      const r = await wrangler(['deploy', ...argv, ...dry], { capture: true });
      if (r.code !== 0) {
        refuse(`wrangler deploy of ${script} failed (exit ${r.code})${d.stations.length ? ': nothing after it was deployed' : ''}`);
      }
      return r.stdout;
    };
    // The stations first, so the coordinator's bindings find their scripts. Private (no URL,
    // their fetch answers 404): they need no key.
    for (const s of d.stations) await step(s.script, ['--config', join(out, s.config)]);
    const argv = ['--config', coordinator];
    if (keys) {
      // The secret goes up with the deploy, from a file only this user reads, removed after.
      const file = join(temp, 'secrets.json');
      writeFileSync(file, JSON.stringify({ [SECRET]: keys.text }), { mode: 0o600 });
      argv.push('--secrets-file', file);
      const n = keys.count;
      console.log(`deploy: ${dryRun ? 'would set' : 'setting'} the secret ${SECRET} on ${d.name} with the deploy: ${n} key${n === 1 ? '' : 's'} from ${keys.source} (not shown)`);
    } else if (args.public) {
      argv.push('--var', 'KNOT_PUBLIC:1');
      console.log(`deploy: warning: --public: ${d.name} serves everyone who finds its URL, without an API key (KNOT_PUBLIC = "1")`);
    }
    const printed = await step(d.name, argv);
    url = /https:\/\/[\w.-]+\.workers\.dev/.exec(printed)?.[0] ?? null;
  } finally {
    cleanUp();
  }
  const n = d.stations.length;
  const what = n ? `${n} private station scripts (${d.stations.map((s) => s.script).join(', ')}) and ${d.name}` : d.name;
  const access = keys ? `with its API keys (${SECRET})` : keptSecret ? `with the API keys it had (${SECRET})` : 'public (KNOT_PUBLIC = "1")';
  if (dryRun) {
    console.log(`deploy: dry run passed: ${what}, ${access}; nothing uploaded`);
    return;
  }
  const modelId = d.model.key.replace(/\.knot$/, '');
  if (!url) refuse(`deployed ${what}, but wrangler printed no workers.dev URL (a route only?): check it with knot-cloudflare status --url URL`);
  writeFileSync(join(out, 'deployed.json'), `${JSON.stringify({ url, name: d.name, scripts: [d.name, ...d.stations.map((s) => s.script)], model: modelId }, null, 2)}\n`);
  console.log(`deploy: deployed ${what}, ${access}: ${url}; waiting for /health to answer with ${modelId}`);
  const key = keys?.first ?? process.env.KNOT_API_KEY;
  const health = await waitHealthy(url, modelId, key);
  console.log(`deploy: ${url} serves ${health.model}${health.layers ? ` (${health.layers} layers, context ${health.context_length})` : ''}`);
}

/** DIR's plan.json, or a refusal saying how to make it. */
function readPlan() {
  const file = join(out, 'plan.json');
  if (!existsSync(file)) refuse(`${file}: no such file (write it with knot-cloudflare plan MODEL.knot${args.out ? ` --out ${args.out}` : ''})`);
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    refuse(`${file}: ${/** @type {Error} */ (e).message}`);
  }
}

async function destroy() {
  if (model && !existsSync(model)) refuse(`${model}: no such file`);
  const p = readPlan();
  // The coordinator first: it binds the stations. Each station binds the others, so deleting one
  // breaks the rest by design: --force.
  const scripts = [[p.coordinator.script, []], ...p.stations.map((s) => [s.script, ['--force']])];
  for (const [script, flags] of scripts) {
    const argv = ['delete', '--name', script, ...flags];
    if (dryRun) {
      console.log(`$ ${shown(argv)}   (dry run: not run)`);
      continue;
    }
    const r = await wrangler(argv);
    if (r.code !== 0) refuse(`wrangler delete of ${script} failed (exit ${r.code})`);
  }
  const what = `${scripts.length} script${scripts.length === 1 ? '' : 's'}`;
  console.log(`destroy: ${dryRun ? `would delete ${what}` : `deleted ${what}`}; the model stays in R2 (npx wrangler r2 object delete ${p.bucket}/${p.model.key} --remote)`);
  if (!dryRun) rmSync(join(out, 'deployed.json'), { force: true });
}

async function status() {
  let url = args.url;
  if (!url) {
    const file = join(out, 'deployed.json');
    if (!existsSync(file)) refuse(`${file}: no such file (deploy first, or give --url URL)`);
    url = JSON.parse(readFileSync(file, 'utf8')).url;
  }
  url = String(url).replace(/\/$/, '');
  const key = process.env.KNOT_API_KEY;
  if (!key) console.log('status: no KNOT_API_KEY in the environment: /health answers without the model\'s figures');
  for (const route of ['/health', '/stations']) {
    let res;
    try {
      res = await fetch(`${url}${route}`, { headers: key ? { authorization: `Bearer ${key}` } : {}, signal: AbortSignal.timeout(120_000) });
    } catch (e) {
      refuse(`GET ${url}${route}: ${/** @type {Error} */ (e).message}`);
    }
    const text = await res.text();
    let body = text;
    try { body = JSON.stringify(JSON.parse(text), null, 2); } catch { /* not JSON: as it is */ }
    console.log(`GET ${url}${route}: ${res.status}\n${body}`);
  }
}

try {
  if (args.help) {
    console.log(USAGE);
  } else if (command === 'plan') {
    await planAndWrite();
  } else if (command === 'deploy') {
    await deploy();
  } else if (command === 'destroy') {
    await destroy();
  } else if (command === 'status') {
    await status();
  } else {
    refuse(`${command === undefined ? 'no command' : `unknown command '${command}'`}\n${USAGE}`);
  }
} catch (e) {
  if (e instanceof Refusal || e instanceof PlanError) {
    console.error(`knot-cloudflare: ${e.message}`);
    process.exit(2);
  }
  throw e;
}
