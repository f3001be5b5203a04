// Runs wrangler configurations in workerd (Miniflare) as wrangler's local dev would read them, so
// what is tested locally is what `deploy` uploads: `workerFromConfig` turns one wrangler TOML into
// Miniflare worker options, `startFromConfigs` runs several as one Miniflare (the first serves the
// URL) with the model in their shared local R2 bucket, and `startFromDir` runs a directory that
// `knot-cloudflare plan` wrote (DIR/plan.json, DIR/coordinator.toml, DIR/stations/*.toml).
// Production's costs are simulated as scripts/local.mjs's startStations does: the profile as the
// var KNOT_SIMULATE in every isolate, KNOT_PUBLIC=1 unless the caller gives API keys.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { Log, LogLevel, Miniflare } from 'miniflare';
import { parse } from 'smol-toml';
import { bundle, DIST } from '../bundle.mjs';
import { ensureWasm, localAccess, simulateVar, uploadFile } from '../local.mjs';
import { resolveProfile } from '../profiles.mjs';

/**
 * Top-level keys translated here, and those that mean something only to a deployment (routes,
 * URLs, CPU limits and migrations, which Miniflare neither enforces nor needs). Any other key is
 * refused: a binding kind this file does not know would otherwise be missing locally, silently.
 */
const TRANSLATED = new Set(['name', 'main', 'compatibility_date', 'compatibility_flags', 'rules', 'vars', 'r2_buckets', 'ratelimits', 'durable_objects']);
const DEPLOY_ONLY = new Set(['account_id', 'workers_dev', 'preview_urls', 'routes', 'route', 'limits', 'migrations', 'observability', 'keep_vars', 'upload_source_maps', 'send_metrics']);

/** The fields each translated binding may have (anything else would be dropped: refused). */
const BINDING_FIELDS = {
  r2_buckets: ['binding', 'bucket_name'],
  ratelimits: ['name', 'namespace_id', 'simple'],
  'durable_objects.bindings': ['name', 'class_name', 'script_name'],
};

/** Bundles already made, by output path: each entry is bundled once per bundle directory. */
const bundles = new Map();

/**
 * An error naming the config and what in it is not translated.
 * @param {string} configPath
 * @param {string} what
 */
const refuse = (configPath, what) => new Error(`${configPath}: ${what}: not translated to Miniflare (scripts/cloudflare/miniflare.mjs); a local run would differ from the deployment`);

/**
 * Checks a list of bindings of one kind: an array of tables with the required fields and no
 * field it does not translate.
 * @param {string} configPath
 * @param {string} kind
 * @param {unknown} list
 * @param {string[]} required
 * @returns {Record<string, any>[]}
 */
function bindingsOf(configPath, kind, list, required) {
  if (list === undefined) return [];
  if (!Array.isArray(list)) throw refuse(configPath, `${kind} is not an array of tables`);
  for (const b of list) {
    for (const key of Object.keys(b)) {
      if (!BINDING_FIELDS[kind].includes(key)) throw refuse(configPath, `${kind} field '${key}'`);
    }
    for (const key of required) {
      if (b[key] === undefined) throw new Error(`${configPath}: a ${kind} entry has no '${key}'`);
    }
  }
  return list;
}

/**
 * The bundle of `entry` in its own subdirectory of `bundleDir`: the entry's name and a hash of
 * its path, so two entries never share a directory and each is bundled once.
 * @param {string} entry
 * @param {string} bundleDir
 * @param {boolean} quiet
 */
function bundleOnce(entry, bundleDir, quiet) {
  const sub = `${basename(entry, extname(entry))}-${createHash('sha256').update(entry).digest('hex').slice(0, 8)}`;
  const out = join(bundleDir, sub, 'index.js');
  if (!bundles.has(out)) {
    const made = bundle({ entry, out, quiet });
    bundles.set(out, made);
    // A failed bundle is not kept: the next call tries again.
    made.catch(() => bundles.delete(out));
  }
  return bundles.get(out);
}

/**
 * Miniflare worker options for a wrangler config file, as wrangler's local dev reads it: its name,
 * its `main` bundled (scripts/bundle.mjs: esbuild, the .wasm a CompiledWasm module), the
 * compatibility date and flags, `[vars]` as bindings, `[[r2_buckets]]` (by bucket name, so workers
 * naming one bucket share it), `[[ratelimits]]` and `[[durable_objects.bindings]]` (its own class
 * by name, another script's as `{ className, scriptName }`). Anything else that would change the
 * local run is refused.
 * @param {string} configPath
 * @param {{ bundleDir?: string, quiet?: boolean }} [options] `bundleDir`: where entries are
 *   bundled (default dist/from-config)
 * @returns {Promise<{ name: string, modules: { type: string, path: string }[], modulesRoot: string,
 *   compatibilityDate: string, compatibilityFlags?: string[], bindings: Record<string, unknown>,
 *   r2Buckets: Record<string, string>, ratelimits: Record<string, { simple: { limit: number, period: number } }>,
 *   durableObjects: Record<string, string | { className: string, scriptName: string }> }>}
 */
export async function workerFromConfig(configPath, options = {}) {
  const config = parse(readFileSync(configPath, 'utf8'));
  for (const key of Object.keys(config)) {
    if (!TRANSLATED.has(key) && !DEPLOY_ONLY.has(key)) throw refuse(configPath, `'${key}'`);
  }
  if (typeof config.name !== 'string' || !config.name) throw new Error(`${configPath}: no name`);
  if (typeof config.main !== 'string') throw new Error(`${configPath}: no main`);
  if (typeof config.compatibility_date !== 'string') throw new Error(`${configPath}: no compatibility_date`);
  // bundle.mjs keeps every imported .wasm as a CompiledWasm module: the one rule it implements.
  for (const rule of config.rules ?? []) {
    if (rule.type !== 'CompiledWasm' || !(rule.globs ?? []).every((g) => g.endsWith('.wasm'))) {
      throw refuse(configPath, `rule ${JSON.stringify(rule)} (only CompiledWasm for .wasm files is)`);
    }
  }
  const durable = config.durable_objects ?? {};
  for (const key of Object.keys(durable)) {
    if (key !== 'bindings') throw refuse(configPath, `durable_objects.${key}`);
  }
  const r2 = bindingsOf(configPath, 'r2_buckets', config.r2_buckets, ['binding', 'bucket_name']);
  const limits = bindingsOf(configPath, 'ratelimits', config.ratelimits, ['name', 'simple']);
  const objects = bindingsOf(configPath, 'durable_objects.bindings', durable.bindings, ['name', 'class_name']);
  for (const l of limits) {
    const keys = Object.keys(l.simple);
    if (keys.some((k) => k !== 'limit' && k !== 'period')) throw refuse(configPath, `ratelimits ${l.name}: simple.${keys.find((k) => k !== 'limit' && k !== 'period')}`);
  }

  const entry = resolve(dirname(configPath), config.main);
  if (!existsSync(entry)) throw new Error(`${configPath}: main ${config.main} (${entry}) does not exist`);
  const { modules } = await bundleOnce(entry, options.bundleDir ?? join(DIST, 'from-config'), options.quiet ?? true);
  return {
    name: config.name,
    modules,
    modulesRoot: dirname(modules[0].path),
    compatibilityDate: config.compatibility_date,
    ...(config.compatibility_flags ? { compatibilityFlags: config.compatibility_flags } : {}),
    bindings: { ...config.vars },
    r2Buckets: Object.fromEntries(r2.map((b) => [b.binding, b.bucket_name])),
    ratelimits: Object.fromEntries(limits.map((l) => [l.name, { simple: { limit: l.simple.limit, period: l.simple.period } }])),
    durableObjects: Object.fromEntries(objects.map((o) => [o.name, o.script_name === undefined ? o.class_name : { className: o.class_name, scriptName: o.script_name }])),
  };
}

/**
 * Runs wrangler configs as one Miniflare, the first serving the URL (the coordinator), the others
 * reached only through its bindings; the model uploaded to the local R2 bucket `bucket` under
 * `model.key`. Every isolate gets the profile as KNOT_SIMULATE (seeded by its worker's name) and
 * the local access vars, as startStations gives them.
 * @param {string[]} paths wrangler configs, the entrypoint first
 * @param {{ model: { file: string, key: string }, bucket?: string, port?: number,
 *   profile?: string | object, vars?: Record<string, string>, quiet?: boolean, bundleDir?: string,
 *   log?: boolean }} options `bucket`: the bucket name holding the model (default: the first
 *   worker's first R2 bucket); `vars` are added to every worker's
 * @returns {Promise<{ url: string, mf: Miniflare, r2: R2Bucket, workers: object[], profile: object, dispose: () => Promise<void> }>}
 */
export async function startFromConfigs(paths, options) {
  if (paths.length === 0) throw new Error('startFromConfigs: no config');
  ensureWasm();
  const profile = resolveProfile(options.profile ?? 'local');
  const workers = await Promise.all(paths.map((p) => workerFromConfig(p, { bundleDir: options.bundleDir, quiet: options.quiet })));
  const names = new Set();
  for (const [i, w] of workers.entries()) {
    if (names.has(w.name)) throw new Error(`${paths[i]}: a second worker named ${w.name}`);
    names.add(w.name);
  }
  const [first] = workers;
  const bucketName = options.bucket ?? Object.values(first.r2Buckets)[0];
  const binding = Object.keys(first.r2Buckets).find((b) => first.r2Buckets[b] === bucketName);
  if (binding === undefined) throw new Error(`${paths[0]}: no R2 binding of bucket ${bucketName} to upload the model to`);
  const mf = new Miniflare({
    host: '127.0.0.1',
    port: options.port ?? 0,
    // No request for Cloudflare's `cf` object data: nothing here needs the network.
    cf: false,
    r2Persist: false,
    durableObjectsPersist: false,
    ...(options.log ? { log: new Log(LogLevel.DEBUG) } : {}),
    workers: workers.map((w) => ({
      ...w,
      // In startStations's order: the profile, the config's vars, then the local access vars.
      bindings: { KNOT_SIMULATE: simulateVar(profile, w.name), ...w.bindings, ...localAccess(options.vars) },
    })),
  });
  try {
    const url = await mf.ready;
    const r2 = await mf.getR2Bucket(binding, first.name);
    await uploadFile(r2, options.model.key, options.model.file);
    return { url: url.href.replace(/\/$/, ''), mf, r2, workers, profile, dispose: () => mf.dispose() };
  } catch (e) {
    await mf.dispose().catch(() => {});
    throw e;
  }
}

/**
 * Reads DIR/plan.json and checks that it names its configs and model consistently.
 * @param {string} dir
 */
export function readPlan(dir) {
  const planPath = join(dir, 'plan.json');
  if (!existsSync(planPath)) throw new Error(`${planPath} does not exist (write it with \`knot-cloudflare plan\`)`);
  const plan = JSON.parse(readFileSync(planPath, 'utf8'));
  if (plan.version !== 1) throw new Error(`${planPath}: version ${plan.version}, expected 1`);
  if (!plan.coordinator?.config) throw new Error(`${planPath}: no coordinator.config`);
  if (!plan.model?.file || !plan.model?.key) throw new Error(`${planPath}: no model.file or model.key`);
  const stations = plan.stations ?? [];
  // A station config in DIR that the plan does not name would deploy (or not) unseen here.
  const named = new Set(stations.map((s) => resolve(dir, s.config)));
  const stationsDir = join(dir, 'stations');
  if (existsSync(stationsDir)) {
    for (const f of readdirSync(stationsDir).filter((f) => f.endsWith('.toml'))) {
      if (!named.has(resolve(stationsDir, f))) throw new Error(`${join(stationsDir, f)} is not in ${planPath}'s stations`);
    }
  }
  return plan;
}

/**
 * Runs a generated directory in workerd: its coordinator.toml and every station config it plans,
 * as one Miniflare, with the model (plan.json's model.file) in the local R2 under model.key.
 * @param {string} dir
 * @param {{ port?: number, profile?: string | object, vars?: Record<string, string>, quiet?: boolean,
 *   bundleDir?: string }} [options]
 * @returns {Promise<{ url: string, mf: Miniflare, r2: R2Bucket, plan: object, workers: object[],
 *   profile: object, dispose: () => Promise<void> }>}
 */
export async function startFromDir(dir, options = {}) {
  const plan = readPlan(dir);
  const file = resolve(dir, plan.model.file);
  if (!existsSync(file)) throw new Error(`${join(dir, 'plan.json')}: model file ${file} does not exist`);
  // The plan was made for one file: another of a different size would not match its split.
  const { size } = statSync(file);
  if (plan.model.bytes !== undefined && size !== plan.model.bytes) {
    throw new Error(`${file} has ${size} bytes, ${join(dir, 'plan.json')} was planned for ${plan.model.bytes}`);
  }
  const paths = [plan.coordinator.config, ...(plan.stations ?? []).map((s) => s.config)].map((p) => resolve(dir, p));
  const local = await startFromConfigs(paths, { ...options, model: { file, key: plan.model.key }, bucket: plan.bucket });
  return { ...local, plan };
}

/**
 * `--from DIR` from a command line (`npm start`, `npm run start:stations`): the directory, or
 * undefined when not given.
 * @param {string[]} argv
 */
export function fromArg(argv) {
  const i = argv.indexOf('--from');
  if (i < 0) return undefined;
  const dir = argv[i + 1];
  if (dir === undefined || dir.startsWith('--')) throw new Error('--from needs a directory (one `knot-cloudflare plan` wrote)');
  return resolve(dir);
}

/**
 * What a run from a directory serves, for a startup line: the model and its scripts.
 * @param {{ plan: object, workers: { name: string }[] }} local
 */
export function describeRun(local) {
  const [coordinator, ...stations] = local.workers.map((w) => w.name);
  const model = local.plan.model.key;
  return `${model} on ${coordinator}${stations.length ? ` + ${stations.length} stations (${stations.join(', ')})` : ''}`;
}
