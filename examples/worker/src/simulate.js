// Production's costs, simulated locally: R2's time to first byte and per-stream bandwidth, the
// cap on requests waiting for their response headers, the subrequest limit, and each Durable
// Object call's latency. Active only when the var KNOT_SIMULATE holds a profile (JSON, resolved
// by scripts/profiles.mjs and set only by scripts/local.mjs): wrangler.toml never sets it, so a
// deployed Worker runs none of this and /health says `"profile": null`.
//
// What is approximated: production counts waiting requests per invocation; here they are counted
// per isolate, which coincides with one generation at a time per isolate (the queue) and one
// Durable Object per isolate (one station per script). Latency is drawn per request from a
// log-normal through the profile's p50 and p99, from a seeded PRNG (the same draws on every run
// of an isolate), on top of nothing: the local R2's own time runs concurrently with it.
import { currentMeter } from './meter.js';

/** A profile's fields: what each must be (null: no limit). */
const FIELDS = {
  name: 'a non-empty string',
  seed: 'a whole number',
  isolate: 'a string (the isolate whose draws these are)',
  ttfbP50Ms: 'a number >= 0 (R2 time to first byte, median)',
  ttfbP99Ms: 'a number >= ttfbP50Ms (R2 time to first byte, 99th percentile)',
  streamMBps: 'null or a number > 0 (R2 body, MB/s per stream)',
  maxWaiting: 'null or a whole number >= 1 (requests waiting for response headers at once)',
  subrequests: 'null or a whole number >= 1 (subrequests per invocation)',
  doCallMs: 'a number >= 0 (latency per Durable Object call)',
};

/**
 * A profile checked field by field: a clear error for anything else.
 * @param {unknown} p
 * @returns {{ name: string, seed: number, isolate: string, ttfbP50Ms: number, ttfbP99Ms: number,
 *   streamMBps: number | null, maxWaiting: number | null, subrequests: number | null, doCallMs: number }}
 */
export function checkProfile(p) {
  if (p === null || typeof p !== 'object' || Array.isArray(p)) throw new Error(`a simulation profile must be an object, got ${JSON.stringify(p)}`);
  for (const k of Object.keys(p)) {
    if (!(k in FIELDS)) throw new Error(`simulation profile: unknown field '${k}' (fields: ${Object.keys(FIELDS).join(', ')})`);
  }
  const q = { seed: 0, isolate: '', ttfbP50Ms: 0, ttfbP99Ms: 0, streamMBps: null, maxWaiting: null, subrequests: null, doCallMs: 0, ...p };
  const num = (v, min) => typeof v === 'number' && Number.isFinite(v) && v >= min;
  const whole = (v, min) => Number.isSafeInteger(v) && v >= min;
  const ok = {
    name: typeof q.name === 'string' && q.name !== '',
    seed: whole(q.seed, 0),
    isolate: typeof q.isolate === 'string',
    ttfbP50Ms: num(q.ttfbP50Ms, 0),
    ttfbP99Ms: num(q.ttfbP99Ms, q.ttfbP50Ms) && (q.ttfbP99Ms === 0 || q.ttfbP50Ms > 0),
    streamMBps: q.streamMBps === null || (num(q.streamMBps, 0) && q.streamMBps > 0),
    maxWaiting: q.maxWaiting === null || whole(q.maxWaiting, 1),
    subrequests: q.subrequests === null || whole(q.subrequests, 1),
    doCallMs: num(q.doCallMs, 0),
  };
  for (const [k, good] of Object.entries(ok)) {
    if (!good) throw new Error(`simulation profile '${q.name}': ${k} must be ${FIELDS[k]}, got ${JSON.stringify(q[k])}`);
  }
  return q;
}

/** FNV-1a: a 32-bit seed from text. */
function hash(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** mulberry32: a small seeded PRNG, uniform in [0, 1). */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

/** z of the standard normal's 99th percentile: p99 = p50 · e^(σ·z99). */
const Z99 = 2.3263;

/**
 * Times to first byte (ms) drawn from the log-normal through the profile's p50 and p99, the
 * same sequence for the same profile seed and name.
 * @param {ReturnType<typeof checkProfile>} profile
 * @param {string} name what draws (an isolate)
 */
export function latencySampler(profile, name) {
  const { ttfbP50Ms: p50, ttfbP99Ms: p99 } = profile;
  if (p50 === 0) return () => 0;
  const sigma = Math.log(p99 / p50) / Z99;
  const random = prng(hash(`${profile.seed}:${name}`));
  return () => {
    // Box–Muller; 1 - u keeps the logarithm's argument in (0, 1].
    const z = Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
    return p50 * Math.exp(sigma * z);
  };
}

const sleep = (ms) => (ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve());

/** Production's error past the subrequest limit (its message, word for word). */
function checkSubrequests(profile) {
  const meter = currentMeter();
  if (profile.subrequests !== null && meter !== null && meter.subrequests > profile.subrequests) {
    throw new Error('Too many subrequests.');
  }
}

/**
 * An R2 bucket binding with production's costs on `get` and `head` (the calls the Worker makes;
 * put, list and the rest pass through unchanged).
 */
export class SimulatedBucket {
  /**
   * @param {R2Bucket} real the binding
   * @param {ReturnType<typeof checkProfile>} profile
   * @param {{ name?: string, pollMs?: number, leakMs?: number }} [options]
   */
  constructor(real, profile, options = {}) {
    this.real = real;
    this.profile = profile;
    this.draw = latencySampler(profile, options.name ?? profile.isolate);
    // Waiters poll on timers of their own: in workerd a request must not wait on a promise
    // another request settles (see queue.js).
    this.pollMs = options.pollMs ?? 2;
    // A slot or a place in line held this long belongs to a request workerd canceled (its
    // `finally` never ran): it no longer counts.
    this.leakMs = options.leakMs ?? 30_000;
    /** @type {Set<{ since: number }>} requests waiting for their headers */
    this.slots = new Set();
    /** @type {{ polled: number }[]} requests waiting for a slot, first first */
    this.line = [];
    this.waited = 0;
  }

  /** Requests waiting for their headers now. */
  get inFlight() {
    const now = Date.now();
    for (const s of this.slots) if (now - s.since > this.leakMs) this.slots.delete(s);
    return this.slots.size;
  }

  /** A slot among the profile's `maxWaiting`, in order of arrival. */
  async #enter() {
    const slot = { since: 0 };
    if (this.profile.maxWaiting !== null && (this.line.length > 0 || this.inFlight >= this.profile.maxWaiting)) {
      this.waited++;
      const ticket = { polled: Date.now() };
      this.line.push(ticket);
      try {
        for (;;) {
          ticket.polled = Date.now();
          while (this.line.length > 0 && this.line[0] !== ticket && ticket.polled - this.line[0].polled > this.leakMs) this.line.shift();
          if (this.line[0] === ticket && this.inFlight < this.profile.maxWaiting) break;
          await sleep(this.pollMs);
        }
      } finally {
        const i = this.line.indexOf(ticket);
        if (i >= 0) this.line.splice(i, 1);
      }
    }
    slot.since = Date.now();
    this.slots.add(slot);
    return slot;
  }

  /** `call()` on the real binding once a slot is free, its answer no sooner than a drawn latency. */
  async #request(call) {
    checkSubrequests(this.profile);
    const slot = await this.#enter();
    try {
      // A failure too comes no sooner than the latency: it is an answer from afar.
      const [answer] = await Promise.allSettled([call(), sleep(this.draw())]);
      if (answer.status === 'rejected') throw answer.reason;
      return answer.value;
    } finally {
      this.slots.delete(slot);
    }
  }

  /**
   * @param {string} key
   * @param {R2GetOptions} [options]
   */
  async get(key, options) {
    const object = await this.#request(() => this.real.get(key, options));
    // Only a body has bytes to deliver (a failed `onlyIf` answers an R2Object without one).
    if (object === null || typeof object.arrayBuffer !== 'function' || this.profile.streamMBps === null) return object;
    return throttled(object, Date.now(), (this.profile.streamMBps * 1e6) / 1000);
  }

  /** @param {string} key */
  head(key) {
    return this.#request(() => this.real.head(key));
  }

  put(...args) { return this.real.put(...args); }
  delete(...args) { return this.real.delete(...args); }
  list(...args) { return this.real.list(...args); }
  createMultipartUpload(...args) { return this.real.createMultipartUpload(...args); }
  resumeMultipartUpload(...args) { return this.real.resumeMultipartUpload(...args); }
}

/**
 * An R2 object body delivered at `bytesPerMs` from `headersAt`: its bytes (arrayBuffer, bytes,
 * text, json, blob) no sooner than their size allows, its stream chunk by chunk; everything else
 * (key, size, range, etag, ...) is the real object's.
 */
function throttled(object, headersAt, bytesPerMs) {
  const until = (bytes) => sleep(headersAt + bytes / bytesPerMs - Date.now());
  const arrayBuffer = async () => {
    const buffer = await object.arrayBuffer();
    await until(buffer.byteLength);
    return buffer;
  };
  const text = async () => new TextDecoder().decode(await arrayBuffer());
  const own = {
    // Never a thenable: awaiting the wrapper gives the wrapper (Miniflare's Node-side objects
    // answer `then`, a real R2ObjectBody does not).
    then: undefined,
    arrayBuffer,
    text,
    bytes: async () => new Uint8Array(await arrayBuffer()),
    json: async () => JSON.parse(await text()),
    blob: async () => new Blob([await arrayBuffer()]),
    get body() {
      let sent = 0;
      return object.body.pipeThrough(new TransformStream({
        async transform(chunk, controller) {
          sent += chunk.byteLength;
          await until(sent);
          controller.enqueue(chunk);
        },
      }));
    },
  };
  return new Proxy(object, {
    get(target, prop) {
      if (Object.hasOwn(own, prop)) return own[prop];
      const v = Reflect.get(target, prop);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

/** The isolate's simulation: its profile and its one bucket (shared waiting slots). */
let isolate = null;

/**
 * The profile KNOT_SIMULATE holds, checked (null when it is not set: deployed).
 * @param {Record<string, unknown>} env
 */
export function profileOf(env) {
  const json = env.KNOT_SIMULATE;
  if (json === undefined || json === '') return null;
  if (isolate?.json === json) return isolate.profile;
  let parsed;
  try {
    parsed = JSON.parse(String(json));
  } catch (e) {
    throw new Error(`KNOT_SIMULATE must be a profile as JSON (scripts/profiles.mjs): ${e.message}`);
  }
  return checkProfile(parsed);
}

/**
 * `env` as the code sees it: with KNOT_SIMULATE set, MODELS is the isolate's simulated bucket
 * (a profile that adds nothing, `local`, leaves it as it is); without, `env` itself.
 * @param {Record<string, any>} env
 */
export function simulate(env) {
  const profile = profileOf(env);
  if (profile === null) return env;
  if (isolate?.json !== env.KNOT_SIMULATE) {
    const adds = profile.ttfbP99Ms > 0 || profile.streamMBps !== null || profile.maxWaiting !== null || profile.subrequests !== null;
    isolate = {
      json: env.KNOT_SIMULATE,
      profile,
      bucket: adds && env.MODELS ? new SimulatedBucket(env.MODELS, profile) : null,
    };
  }
  return isolate.bucket === null ? env : Object.create(env, { MODELS: { value: isolate.bucket, enumerable: true } });
}

/**
 * Before a Durable Object call (after counting it): production's limit on subrequests, then the
 * profile's latency per call. Nothing when not simulating.
 * @returns {Promise<void> | undefined}
 */
export function hop() {
  if (isolate === null) return undefined;
  checkSubrequests(isolate.profile);
  return isolate.profile.doCallMs > 0 ? sleep(isolate.profile.doCallMs) : undefined;
}
