// Runs the Worker locally the way it runs deployed: workerd through Miniflare (no network), with
// wrangler.toml's compatibility settings and vars, and a local R2 bucket holding the model.
// Optionally with production's costs: a profile (scripts/profiles.mjs) passed to every isolate
// as the var KNOT_SIMULATE, which src/simulate.js applies; wrangler.toml never sets it.
// Used by `npm start`, the tests and the bench.
import { Log, LogLevel, Miniflare } from 'miniflare';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'smol-toml';
import { bundle, DIST, ROOT } from './bundle.mjs';
import { resolveProfile } from './profiles.mjs';

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
export function ensureWasm() {
  if (!existsSync(join(REPO, 'pkg/dist/wasm/host_bg.wasm'))) {
    console.error('[worker] the wasm package is not built: running scripts/build-wasm.sh');
    execFileSync(join(REPO, 'scripts/build-wasm.sh'), { stdio: ['ignore', 'inherit', 'inherit'] });
  }
}

/** Parts of a multipart upload: one at a time in memory, never the whole file. */
const PART_BYTES = 64 * 2 ** 20;
/**
 * Files up to this size go in one `put`: Miniflare reads an object uploaded in parts several
 * times slower (measured: a SmolLM2 decode at 0.9–1.9 tok/s against 6.2–10.5 from one put, in
 * the same run), which would skew every local figure. Well under the limit one `put` meets.
 */
const SINGLE_PUT_BYTES = 256 * 2 ** 20;

/**
 * Uploads a file to a local R2 bucket (Miniflare's, from Node). Past `singleMax`, through R2's
 * multipart upload: a single `put` of the whole file fails past Node's string limit
 * (ERR_STRING_TOO_LONG at ~500 MB) and would hold the file in memory.
 * @param {R2Bucket} r2
 * @param {string} key
 * @param {string} file
 * @param {{ partBytes?: number, singleMax?: number }} [options] every part but the last
 *   `partBytes` (R2: at least 5 MiB); files up to `singleMax` bytes in one put
 */
export async function uploadFile(r2, key, file, options = {}) {
  const partBytes = options.partBytes ?? PART_BYTES;
  // Miniflare's R2 proxy answers through a local fetch that can drop under heavy load (a clean
  // test run with the fuzzing lane beside it): each call is tried three times.
  const retried = async (what) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await what();
      } catch (e) {
        if (attempt >= 3 || !(e instanceof TypeError)) throw e;
        await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
      }
    }
  };
  const fh = await open(file, 'r');
  try {
    const { size } = await fh.stat();
    /** The next `length` bytes at `offset`, in a fresh Uint8Array of that size. */
    const read = async (offset, length) => {
      // Fresh and exact: a pooled Node Buffer, or a view into a larger buffer, trips an
      // assertion in Miniflare's R2.
      const bytes = new Uint8Array(length);
      for (let got = 0; got < length;) {
        const { bytesRead } = await fh.read(bytes, got, length - got, offset + got);
        if (bytesRead === 0) throw new Error(`${file} ended at ${offset + got} of ${size} bytes while uploading it`);
        got += bytesRead;
      }
      return bytes;
    };
    if (size <= (options.singleMax ?? SINGLE_PUT_BYTES)) {
      const bytes = await read(0, size);
      await retried(() => r2.put(key, bytes));
      return;
    }
    const upload = await retried(() => r2.createMultipartUpload(key));
    try {
      const parts = [];
      for (let offset = 0, n = 1; offset < size; offset += partBytes, n++) {
        const bytes = await read(offset, Math.min(partBytes, size - offset));
        const { partNumber, etag } = await retried(() => upload.uploadPart(n, bytes));
        parts.push({ partNumber, etag });
      }
      await retried(() => upload.complete(parts));
    } catch (e) {
      await upload.abort().catch(() => {});
      throw e;
    }
  } finally {
    await fh.close();
  }
}

/**
 * The var KNOT_SIMULATE for one isolate: the profile (a name or an object, default `local`),
 * with the isolate's name seeding its draws.
 */
export function simulateVar(profile, isolate) {
  return JSON.stringify({ ...resolveProfile(profile ?? 'local'), isolate });
}

/**
 * The vars of a local run: the caller's, and — unless they give API keys — KNOT_PUBLIC = "1":
 * a local run listens on 127.0.0.1 only, where the owner is the only client (deployed, a
 * Worker without keys serves nobody: src/access.js).
 * @param {Record<string, string>} [vars]
 */
export function localAccess(vars = {}) {
  return { ...(vars.KNOT_API_KEYS ? {} : { KNOT_PUBLIC: '1' }), ...vars };
}

/**
 * The Rate Limiting bindings of a local run, as Miniflare simulates them: wrangler.toml's
 * [[ratelimits]], or `override` ({ limit, period } for KNOT_RATE_LIMITER; false: none).
 * @param {{ limit: number, period: 10 | 60 } | false} [override]
 */
export function rateLimits(override) {
  if (override === false) return {};
  const configured = CONFIG.ratelimits ?? [];
  return Object.fromEntries(configured.map((r) => [r.name, { simple: override && r.name === 'KNOT_RATE_LIMITER' ? override : r.simple }]));
}

/**
 * Starts the Worker in workerd with the model uploaded to its local R2 bucket.
 * @param {{ port?: number, vars?: Record<string, string>, entry?: string, quiet?: boolean,
 *   inspectorPort?: number, profile?: string | object, rateLimit?: { limit: number, period: 10 | 60 } | false }} [options]
 *   `profile`: production's costs to simulate (scripts/profiles.mjs), default `local`;
 *   `rateLimit`: KNOT_RATE_LIMITER's limit in place of wrangler.toml's (false: none)
 */
export async function startLocal(options = {}) {
  ensureWasm();
  const simulate = simulateVar(options.profile, 'worker');
  const knot = modelFile();
  const out = options.entry ? join(DIST, `test-${Date.now()}-${Math.random().toString(36).slice(2)}`, 'index.js') : undefined;
  const { modules, sizes } = await bundle({ entry: options.entry, out, quiet: options.quiet });
  const bucket = CONFIG.r2_buckets[0].binding;
  const mf = new Miniflare({
    modules,
    modulesRoot: join(modules[0].path, '..'),
    compatibilityDate: CONFIG.compatibility_date,
    compatibilityFlags: CONFIG.compatibility_flags,
    bindings: {
      ...CONFIG.vars, KNOT_SIMULATE: simulate,
      // Retry-After names the period the binding counts (src/access.js).
      ...(options.rateLimit ? { KNOT_RATE_LIMIT_PERIOD: String(options.rateLimit.period) } : {}),
      ...localAccess(options.vars),
    },
    ratelimits: rateLimits(options.rateLimit),
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
  await uploadFile(r2, CONFIG.vars.MODEL_KEY, knot);
  return { url: url.href.replace(/\/$/, ''), mf, r2, sizes, profile: JSON.parse(simulate), dispose: () => mf.dispose() };
}

/** A bundle's modules as Miniflare takes a Worker's script. */
const scriptOf = ({ modules }) => ({ modules, modulesRoot: join(modules[0].path, '..') });

/**
 * Starts a model split across stations in workerd: the coordinator (this Worker with
 * KNOT_STATIONS set) and one Worker per station, each hosting its Durable Object in an isolate of
 * its own (so each station's wasm memory is its own, as on Cloudflare), all sharing one local R2
 * bucket holding the model.
 * @param {{ layers: number, heads: number, modelKey?: string, modelFile?: string, port?: number,
 *   vars?: Record<string, string>, stationVars?: Record<number, Record<string, string>>,
 *   quiet?: boolean, profile?: string | object }} options `stationVars[i]` adds vars to station i
 *   (layers first, then heads); `profile`: production's costs to simulate (scripts/profiles.mjs),
 *   default `local`, in every isolate
 */
export async function startStations(options) {
  ensureWasm();
  const profile = resolveProfile(options.profile ?? 'local');
  const key = options.modelKey ?? CONFIG.vars.MODEL_KEY;
  const knot = options.modelFile ?? modelFile();
  // The coordinator runs this Worker (src/index.js), each station the station scripts' entry
  // (src/station.js, as wrangler.station.toml deploys it): the same wasm, in a bundle of its own.
  const [coordinator, station] = await Promise.all([
    bundle({ quiet: options.quiet ?? true }),
    bundle({ entry: join(ROOT, 'src/station.js'), out: join(DIST, 'station/index.js'), quiet: true }),
  ]);
  const bucket = CONFIG.r2_buckets[0].binding;
  const base = {
    compatibilityDate: CONFIG.compatibility_date,
    compatibilityFlags: CONFIG.compatibility_flags,
    r2Buckets: { [bucket]: CONFIG.r2_buckets[0].bucket_name },
  };
  const vars = { ...CONFIG.vars, MODEL_KEY: key, ...localAccess(options.vars) };
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
        ...scriptOf(coordinator),
        name: 'coordinator',
        bindings: { KNOT_SIMULATE: simulateVar(profile, 'coordinator'), ...vars, KNOT_STATIONS: JSON.stringify(table) },
        ratelimits: rateLimits(options.rateLimit),
        durableObjects: Object.fromEntries(stations.map((s) => [s.binding, { className: s.className, scriptName: s.name }])),
      },
      ...stations.map((s, i) => ({
        ...base,
        ...scriptOf(station),
        name: s.name,
        bindings: { KNOT_SIMULATE: simulateVar(profile, s.name), ...vars, ...options.stationVars?.[i] },
        // Its own class, and every other station as the coordinator binds it: a layer station
        // forwards hidden states to the next station on the route (knot-wasm/stations).
        durableObjects: Object.fromEntries(stations.map((t) => [t.binding, t === s ? t.className : { className: t.className, scriptName: t.name }])),
      })),
    ],
  });
  const url = await mf.ready;
  const r2 = await mf.getR2Bucket(bucket, 'coordinator');
  await uploadFile(r2, key, knot);
  return { url: url.href.replace(/\/$/, ''), mf, r2, stations, profile, dispose: () => mf.dispose() };
}
