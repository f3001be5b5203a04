// Runs the Worker locally the way it runs deployed: workerd through Miniflare (no network), with
// wrangler.toml's compatibility settings and vars, and a local R2 bucket holding the model.
// Used by `npm start`, the tests and the bench.
import { Log, LogLevel, Miniflare } from 'miniflare';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'smol-toml';
import { bundle, DIST, ROOT } from './bundle.mjs';

export const REPO = join(ROOT, '../..');
export const CONFIG = parse(readFileSync(join(ROOT, 'wrangler.toml'), 'utf8'));

/** The default model's knot, converted by the project's scripts when missing. */
export function modelFile() {
  const file = join(REPO, 'models', CONFIG.vars.MODEL_KEY);
  if (!existsSync(file)) {
    console.error(`[worker] ${file} is missing: preparing it (scripts/prepare-model.sh)`);
    execFileSync(join(REPO, 'scripts/prepare-model.sh'), { stdio: ['ignore', 'ignore', 'inherit'] });
  }
  return file;
}

/** The package's wasm, built by the project's script when missing. */
function ensureWasm() {
  if (!existsSync(join(REPO, 'pkg/dist/wasm/host_bg.wasm'))) {
    console.error('[worker] the wasm package is not built: running scripts/build-wasm.sh');
    execFileSync(join(REPO, 'scripts/build-wasm.sh'), { stdio: ['ignore', 'inherit', 'inherit'] });
  }
}

/**
 * Starts the Worker in workerd with the model uploaded to its local R2 bucket.
 * @param {{ port?: number, vars?: Record<string, string>, entry?: string, quiet?: boolean,
 *   inspectorPort?: number }} [options]
 */
export async function startLocal(options = {}) {
  ensureWasm();
  const knot = modelFile();
  const out = options.entry ? join(DIST, `test-${Date.now()}-${Math.random().toString(36).slice(2)}`, 'index.js') : undefined;
  const { modules, sizes } = await bundle({ entry: options.entry, out, quiet: options.quiet });
  const bucket = CONFIG.r2_buckets[0].binding;
  const mf = new Miniflare({
    modules,
    modulesRoot: join(modules[0].path, '..'),
    compatibilityDate: CONFIG.compatibility_date,
    compatibilityFlags: CONFIG.compatibility_flags,
    bindings: { ...CONFIG.vars, ...options.vars },
    r2Buckets: [bucket],
    r2Persist: false,
    // No request for Cloudflare's `cf` object data: nothing here needs the network.
    cf: false,
    host: '127.0.0.1',
    port: options.port ?? 0,
    inspectorPort: options.inspectorPort,
    ...(options.log ? { log: new Log(LogLevel.DEBUG) } : {}),
  });
  const url = await mf.ready;
  const r2 = await mf.getR2Bucket(bucket);
  // A fresh Uint8Array: a pooled Node Buffer trips an assertion in Miniflare's R2.
  await r2.put(CONFIG.vars.MODEL_KEY, new Uint8Array(readFileSync(knot)));
  return { url: url.href.replace(/\/$/, ''), mf, r2, sizes, dispose: () => mf.dispose() };
}

/**
 * Starts a model split across stations in workerd: the coordinator (this Worker with
 * KNOT_STATIONS set) and one Worker per station, each hosting its Durable Object in an isolate of
 * its own (so each station's wasm memory is its own, as on Cloudflare), all sharing one local R2
 * bucket holding the model.
 * @param {{ layers: number, heads: number, modelKey?: string, modelFile?: string, port?: number,
 *   vars?: Record<string, string>, stationVars?: Record<number, Record<string, string>>,
 *   quiet?: boolean }} options `stationVars[i]` adds vars to station i (layers first, then heads)
 */
export async function startStations(options) {
  ensureWasm();
  const key = options.modelKey ?? CONFIG.vars.MODEL_KEY;
  const knot = options.modelFile ?? modelFile();
  const { modules } = await bundle({ quiet: options.quiet ?? true });
  const bucket = CONFIG.r2_buckets[0].binding;
  const base = {
    modules,
    modulesRoot: join(modules[0].path, '..'),
    compatibilityDate: CONFIG.compatibility_date,
    compatibilityFlags: CONFIG.compatibility_flags,
    r2Buckets: { [bucket]: CONFIG.r2_buckets[0].bucket_name },
  };
  const vars = { ...CONFIG.vars, MODEL_KEY: key, ...options.vars };
  const stations = [
    ...Array.from({ length: options.layers }, (_, i) => ({ name: `layers-${i}`, binding: `LAYERS_${i}`, className: 'LayerStation' })),
    ...Array.from({ length: options.heads }, (_, i) => ({ name: `head-${i}`, binding: `HEADS_${i}`, className: 'HeadStation' })),
  ];
  const table = {
    layers: stations.filter((s) => s.className === 'LayerStation').map((s) => s.binding),
    heads: stations.filter((s) => s.className === 'HeadStation').map((s) => s.binding),
  };
  const mf = new Miniflare({
    host: '127.0.0.1',
    port: options.port ?? 0,
    cf: false,
    r2Persist: false,
    durableObjectsPersist: false,
    workers: [
      {
        ...base,
        name: 'coordinator',
        bindings: { ...vars, KNOT_STATIONS: JSON.stringify(table) },
        durableObjects: Object.fromEntries(stations.map((s) => [s.binding, { className: s.className, scriptName: s.name }])),
      },
      ...stations.map((s, i) => ({
        ...base,
        name: s.name,
        bindings: { ...vars, ...options.stationVars?.[i] },
        durableObjects: { [s.binding]: s.className },
      })),
    ],
  });
  const url = await mf.ready;
  const r2 = await mf.getR2Bucket(bucket, 'coordinator');
  await r2.put(key, new Uint8Array(readFileSync(knot)));
  return { url: url.href.replace(/\/$/, ''), mf, r2, stations, dispose: () => mf.dispose() };
}
