// The production profiles the local runs can simulate (src/simulate.js applies them inside
// workerd; scripts/local.mjs passes the chosen one as the var KNOT_SIMULATE). One place for every
// figure, each with where it comes from.
//
// Sources:
// [R2] Public measurements (2026) of Workers reading R2 through the binding: time to first byte
//      about 130–300 ms at the median and about 700 ms at p99 within a region, about 430 ms at
//      the median across regions; 35–65 MB/s per stream.
// [LIMITS] Cloudflare's Workers limits, https://developers.cloudflare.com/workers/platform/limits/:
//      6 simultaneous outgoing connections per request (the 7th waits for one of them);
//      subrequests per request 50 on the free plan, 10,000 on paid; 128 MB per isolate. Past
//      the limit production throws "Too many subrequests.".
// [SUBREQ] What counts as a subrequest: requests to other Cloudflare services, R2, KV and D1
//      included (cloudflare-docs PR #13251), and Durable Objects (cloudflare-docs PR #3184: "For
//      subrequests to internal services like Workers KV and Durable Objects, the subrequest limit
//      is 1000 per request" — an older figure, now 10,000 on paid plans).
// [DO] Assumed, not measured here: a Durable Object call is a network hop to the object's
//      location, a few ms when it sits in the caller's region (prod), more further away
//      (prod-far). Every call counts as a subrequest [SUBREQ].
import { checkProfile } from '../src/simulate.js';

/** Every field of a profile is documented in src/simulate.js (FIELDS). */
export const PROFILES = {
  // Today's local behaviour: Miniflare's own R2 and Durable Objects, no added latency, no limits
  // beyond Miniflare's.
  local: {
    name: 'local',
    seed: 1,
    ttfbP50Ms: 0,
    ttfbP99Ms: 0,
    streamMBps: null,
    maxWaiting: null,
    subrequests: null,
    doCallMs: 0,
  },
  // The Worker and its bucket in one region, on the paid plan.
  prod: {
    name: 'prod',
    seed: 1,
    ttfbP50Ms: 200, // [R2] 130–300 ms p50 within a region
    ttfbP99Ms: 700, // [R2] ~700 ms p99 within a region
    streamMBps: 50, // [R2] 35–65 MB/s per stream
    maxWaiting: 6, // [LIMITS] 6 simultaneous connections per request
    subrequests: 10_000, // [LIMITS] paid plan (the free plan's 50: `--subrequests free`)
    doCallMs: 3, // [DO] same region
  },
  // The Worker far from its bucket (another region).
  'prod-far': {
    name: 'prod-far',
    seed: 1,
    ttfbP50Ms: 450, // [R2] ~430 ms p50 across regions
    ttfbP99Ms: 1000, // chosen for this profile: the measurements [R2] give no cross-region p99
    streamMBps: 35, // [R2] the low end of 35–65 MB/s
    maxWaiting: 6, // [LIMITS]
    subrequests: 10_000, // [LIMITS] paid plan
    doCallMs: 15, // [DO] another region
  },
};

/** The free plan's subrequest limit: `--subrequests free`, or `{ subrequests: 50 }`. */
export const FREE_PLAN_SUBREQUESTS = 50; // [LIMITS]

/**
 * A profile by name (or a whole profile object), with overrides, checked.
 * @param {string | object} [profile] default `local`
 * @param {object} [overrides] fields to change, e.g. `{ subrequests: 50 }` (the free plan)
 */
export function resolveProfile(profile = 'local', overrides = {}) {
  let base = profile;
  if (typeof profile === 'string') {
    base = PROFILES[profile];
    if (base === undefined) throw new Error(`unknown profile '${profile}' (profiles: ${Object.keys(PROFILES).join(', ')})`);
  }
  return checkProfile({ ...base, ...overrides });
}

/**
 * `--profile NAME` (or `--profiles A,B`) and `--subrequests N` from a command line.
 * @param {string[]} argv
 * @param {{ list?: boolean, fallback: string }} options
 * @returns {object[]} resolved profiles
 */
export function profilesFromArgs(argv, options) {
  const value = (flag) => {
    const i = argv.indexOf(flag);
    if (i < 0) return undefined;
    const v = argv[i + 1];
    if (v === undefined || v.startsWith('--')) throw new Error(`${flag} needs a value`);
    return v;
  };
  const names = (value(options.list ? '--profiles' : '--profile') ?? options.fallback).split(',').filter(Boolean);
  if (names.length === 0) throw new Error('no profile named');
  const sub = value('--subrequests');
  let overrides = {};
  if (sub !== undefined) {
    const n = sub === 'free' ? FREE_PLAN_SUBREQUESTS : Number(sub);
    if (!Number.isSafeInteger(n) || n < 1) throw new Error(`--subrequests must be 'free' or a whole number >= 1, got '${sub}'`);
    overrides = { subrequests: n };
  }
  // The subrequest override applies to the production profiles; `local` stays unlimited.
  return names.map((name) => resolveProfile(name, name === 'local' ? {} : overrides));
}

/** One line naming a profile's figures, for the scripts to print. */
export function describeProfile(p) {
  if (p.ttfbP99Ms === 0 && p.streamMBps === null && p.maxWaiting === null && p.subrequests === null && p.doCallMs === 0) {
    return `${p.name}: Miniflare as is (no added latency, no limits)`;
  }
  return `${p.name}: R2 first byte p50 ${p.ttfbP50Ms} ms / p99 ${p.ttfbP99Ms} ms, ${p.streamMBps ?? '∞'} MB/s per stream, `
    + `${p.maxWaiting ?? '∞'} waiting for headers, ${p.subrequests ?? '∞'} subrequests per request, ${p.doCallMs} ms per Durable Object call`;
}
