// knot-wasm/server's door: who may use a server and how much (docs/security.md). One gate per
// server, shared by every shell (knot-serve, the Worker), answering before the model is touched:
//
//   API keys     `Authorization: Bearer <key>` or `x-api-key: <key>`, checked against every
//                configured key in constant time (SHA-256 digests compared without an early
//                exit, so neither a key's length nor how much of it matched shows in the time);
//                a miss is 401 `invalid_api_key`, naming nothing secret
//   scopes       each key may run the agentic loop, on all MCP servers or some, or not at all
//   limits       requests per window (a token bucket here, and/or the Workers Rate Limiting
//                binding) and generations at once, per key: past them 429 with Retry-After
//   CORS         no origin is allowed unless listed; a request from a browser page of another
//                origin is refused (403 `origin_not_allowed`), a preflight from a listed one
//                answered
//
// Without keys a server is open to whoever reaches it: the shells decide when that is allowed
// (knot-serve on loopback, or told --insecure; a Worker told KNOT_PUBLIC=1).
import { ApiError } from './openai/errors.js';
import { anthropicError } from './openai/messages.js';

/** A key shorter than this is refused: it could be guessed. */
export const MIN_KEY_LENGTH = 16;
/** More keys than this is a configuration mistake (each request compares with every one). */
const MAX_KEYS = 1024;

/** The request headers a browser client may send, and the response headers it may read. */
const ALLOW_HEADERS = 'authorization, content-type, x-api-key, x-knot-agentic, x-knot-prefill-window, openai-organization, openai-project, x-stainless-arch, x-stainless-lang, x-stainless-os, x-stainless-package-version, x-stainless-retry-count, x-stainless-runtime, x-stainless-runtime-version, x-stainless-timeout';
const EXPOSE_HEADERS = 'retry-after, x-knot-prefill, x-knot-prefill-reused';
const ALLOW_METHODS = 'GET, POST, PATCH, DELETE, OPTIONS';

/**
 * @typedef {{ name: string, agentic: boolean | string[], limit: number | null, concurrent: number | null }} Scope
 *   what one key may do: its name (in /stats and logs; never the key), the agentic loop (true: on
 *   every MCP server the server allows; a list: those configured servers only; false: never), and
 *   its own limits (null: the server's): requests per window, generations at once
 * @typedef {Scope & { digest: Uint8Array }} Key
 * @typedef {{ id: string, scope: Scope, authenticated: boolean }} Principal
 *   who a request is: `id` what its limits count against (a key's name, or the client's address
 *   on an open server)
 */

/** A configuration error: the shells print it and stop. */
export class AccessConfigError extends Error {
  /** @param {string} message @param {string} field */
  constructor(message, field) {
    super(message);
    this.name = 'AccessConfigError';
    this.field = field;
  }
}

/**
 * API keys from text, as KNOT_API_KEYS and --api-key-file hold them: keys separated by commas,
 * spaces or lines (every key may do everything), or JSON — a list of keys or of
 * `{ key, name?, agentic?: boolean | string[], limit?, concurrent? }` (limit: requests per the
 * server's rate window; concurrent: generations at once).
 * @param {string} text
 * @param {string} [field] what the text came from, in errors
 * @returns {{ key: string, name: string, agentic: boolean | string[], limit: number | null, concurrent: number | null }[]}
 */
export function parseApiKeys(text, field = 'KNOT_API_KEYS') {
  if (typeof text !== 'string') throw new AccessConfigError(`${field} must be text`, field);
  const trimmed = text.trim();
  /** @type {unknown[]} */
  let entries;
  if (trimmed.startsWith('[') || trimmed.startsWith('{')) {
    let json;
    try {
      json = JSON.parse(trimmed);
    } catch (e) {
      throw new AccessConfigError(`${field} is not valid JSON: ${/** @type {Error} */ (e).message}`, field);
    }
    entries = Array.isArray(json) ? json : [json];
  } else {
    entries = trimmed === '' ? [] : trimmed.split(/[\s,]+/);
  }
  if (entries.length > MAX_KEYS) throw new AccessConfigError(`${field} has ${entries.length} keys, more than ${MAX_KEYS}`, field);
  const seen = new Set();
  const names = new Set();
  return entries.map((entry, i) => {
    const at = `${field}[${i}]`;
    const o = typeof entry === 'string' ? { key: entry } : entry;
    if (typeof o !== 'object' || o === null || Array.isArray(o)) throw new AccessConfigError(`${at} must be a key or { key, name, agentic, limit, concurrent }`, field);
    const unknown = Object.keys(o).find((k) => !['key', 'name', 'agentic', 'limit', 'concurrent'].includes(k));
    if (unknown !== undefined) throw new AccessConfigError(`${at} has an unknown field '${unknown}' (key, name, agentic, limit, concurrent)`, field);
    const { key } = /** @type {any} */ (o);
    // The key itself never appears in a message: only where it is and what is wrong with it.
    if (typeof key !== 'string') throw new AccessConfigError(`${at}.key must be a string`, field);
    if (key.length < MIN_KEY_LENGTH) throw new AccessConfigError(`${at}: a key must be at least ${MIN_KEY_LENGTH} characters (this one has ${key.length})`, field);
    if (!/^[\x21-\x7e]+$/.test(key)) throw new AccessConfigError(`${at}: a key must be printable ASCII without spaces (it travels in a header)`, field);
    if (seen.has(key)) throw new AccessConfigError(`${at} repeats an earlier key`, field);
    seen.add(key);
    const name = /** @type {any} */ (o).name ?? `key-${i + 1}`;
    if (typeof name !== 'string' || !/^[\w.@-]{1,64}$/.test(name)) throw new AccessConfigError(`${at}.name must be 1-64 letters, digits or _ . @ -`, field);
    if (names.has(name)) throw new AccessConfigError(`${at}.name '${name}' is another key's`, field);
    names.add(name);
    const agentic = /** @type {any} */ (o).agentic ?? true;
    if (typeof agentic !== 'boolean' && !(Array.isArray(agentic) && agentic.every((s) => typeof s === 'string'))) {
      throw new AccessConfigError(`${at}.agentic must be true, false or a list of MCP server names`, field);
    }
    const limit = (what) => {
      const v = /** @type {any} */ (o)[what];
      if (v === undefined || v === null) return null;
      if (!Number.isSafeInteger(v) || v < 1) throw new AccessConfigError(`${at}.${what} must be a whole number >= 1`, field);
      return v;
    };
    return { key, name, agentic, limit: limit('limit'), concurrent: limit('concurrent') };
  });
}

/**
 * A limiter of requests per window for each id: a token bucket of `limit` requests refilled over
 * `windowMs`, so a client may burst to `limit` and then goes at `limit` per window.
 * @param {{ windowMs?: number, now?: () => number }} o
 */
export function tokenBucket({ windowMs = 60_000, now = () => Date.now() }) {
  /** @type {Map<string, { tokens: number, at: number }>} */
  const buckets = new Map();
  return {
    /**
     * @param {string} id
     * @param {number} limit this id's requests per window
     * @returns {{ ok: boolean, retryAfter: number }} retryAfter: seconds until a request is let in
     */
    take(id, limit) {
      const t = now();
      const rate = limit / windowMs;
      const b = buckets.get(id) ?? { tokens: limit, at: t };
      b.tokens = Math.min(limit, b.tokens + (t - b.at) * rate);
      b.at = t;
      buckets.set(id, b);
      // Buckets that are full again hold nothing worth keeping.
      if (buckets.size > 10_000) {
        for (const [k, v] of buckets) if (v.tokens + (t - v.at) * rate >= limit && k !== id) buckets.delete(k);
      }
      if (b.tokens >= 1) {
        b.tokens -= 1;
        return { ok: true, retryAfter: 0 };
      }
      return { ok: false, retryAfter: Math.max(1, Math.ceil((1 - b.tokens) / rate / 1000)) };
    },
  };
}

/**
 * @typedef {{
 *   keys?: ReturnType<typeof parseApiKeys>,
 *   corsOrigins?: string[],
 *   rateLimit?: { limit?: number, windowMs?: number, binding?: { limit(o: { key: string }): Promise<{ success: boolean }> }, periodSeconds?: number },
 *   concurrent?: number,
 * }} AccessSettings
 *   keys: none means open to whoever reaches it; corsOrigins: exact origins (`https://app.example`)
 *   or '*'; rateLimit: requests per window per key — `limit` per `windowMs` (default a minute)
 *   by a token bucket here (a key's own `limit` takes its place), and/or a Workers Rate Limiting
 *   `binding` (its limit and period, 10 or 60 s, are the binding's configuration; name the
 *   period); concurrent: generations at once per key
 */

/** SHA-256 of text. */
async function digestOf(text) {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)));
}

/** Whether two 32-byte digests are equal, in time that does not depend on where they differ. */
function sameDigest(a, b) {
  let d = 0;
  for (let i = 0; i < 32; i++) d |= a[i] ^ b[i];
  return d === 0;
}

/** The key a request presents: `Authorization: Bearer <key>`, else `x-api-key`, else ''. */
function presentedKey(request) {
  // A Bearer token first; then x-api-key, which Anthropic's clients send and which a proxy's own
  // Authorization (Basic, say) must not hide.
  const bearer = /^\s*Bearer\s+(\S+)\s*$/i.exec(request.headers.get('authorization') ?? '');
  return bearer?.[1] ?? request.headers.get('x-api-key')?.trim() ?? '';
}

/**
 * The gate of one server.
 * @param {AccessSettings} [settings]
 */
export function createGate(settings = {}) {
  const configured = settings.keys ?? [];
  const open = configured.length === 0;
  /** @type {Promise<Key[]> | null} */
  let keys = null;
  const keyDigests = () => {
    keys ??= Promise.all(configured.map(async ({ key, ...scope }) => ({ ...scope, digest: await digestOf(key) })));
    return keys;
  };
  const origins = settings.corsOrigins ?? [];
  const anyOrigin = origins.includes('*');
  const rate = settings.rateLimit ?? {};
  const bucket = tokenBucket({ windowMs: rate.windowMs ?? 60_000 });
  /** Generations running, per principal id. */
  const running = new Map();
  /** @type {Scope} */
  const everything = { name: 'anonymous', agentic: true, limit: null, concurrent: null };

  /** Whether a browser page of `origin` may call this server. */
  const originAllowed = (origin) => anyOrigin || origins.includes(origin);

  /** The CORS headers an answer to a request from `origin` carries. */
  const corsHeaders = (origin) => (origin === null || !originAllowed(origin) ? {}
    : { 'access-control-allow-origin': anyOrigin ? '*' : origin, 'access-control-expose-headers': EXPOSE_HEADERS, vary: 'Origin' });

  /**
   * Who sent `request`, or the answer that turns it away. `openRoute`: a route strangers may
   * ask (/health): a missing or wrong key makes them a stranger instead of a 401.
   * @param {Request} request
   * @param {{ openRoute?: boolean, client?: string }} [o] client: the peer's address, which an
   *   open server's limits count against
   * @returns {Promise<{ principal: Principal | null, cors: Record<string, string> } | { response: Response }>}
   */
  async function admit(request, o = {}) {
    const origin = request.headers.get('origin');
    const cors = corsHeaders(origin);
    if (request.method === 'OPTIONS') return { response: preflight(request, origin) };
    // A page of another origin: refused before anything runs (a form post to a local server
    // needs no preflight, and would spend its CPU).
    // Even one of this server's own host: it serves no pages, and a page of a name rebound to
    // this address (DNS rebinding) sends that name as its origin and its host.
    if (origin !== null && !originAllowed(origin)) {
      return { response: refuse(new ApiError(403, `Requests from the origin ${origin} are not allowed (the server's CORS allow-list)`, { type: 'permission_error', code: 'origin_not_allowed' }), {}, request) };
    }
    /** @type {Principal} */
    let principal;
    if (open) {
      principal = { id: o.client ? `client:${o.client}` : 'anonymous', scope: everything, authenticated: true };
    } else {
      const presented = presentedKey(request);
      // Every key is compared, whether or not one matched already; a request without a key
      // takes the same path (the digest of '').
      const digest = await digestOf(presented);
      let found = null;
      for (const k of await keyDigests()) {
        const same = sameDigest(k.digest, digest);
        found = same && found === null ? k : found;
      }
      if (found === null) {
        if (o.openRoute) return { principal: null, cors };
        const message = presented === ''
          ? 'This server needs an API key: send it as Authorization: Bearer <key> (or x-api-key: <key>)'
          : 'The API key is not valid for this server';
        return { response: refuse(new ApiError(401, message, { code: 'invalid_api_key', headers: { 'www-authenticate': 'Bearer realm="knot"' } }), cors, request) };
      }
      const { digest: _, ...scope } = found;
      principal = { id: scope.name, scope, authenticated: true };
    }
    if (!o.openRoute) {
      const limit = principal.scope.limit ?? rate.limit ?? null;
      let verdict = limit === null ? { ok: true, retryAfter: 0 } : bucket.take(principal.id, limit);
      if (verdict.ok && rate.binding !== undefined) verdict = await bindingLimit(rate.binding, rate.periodSeconds ?? 60, principal.id);
      if (!verdict.ok) {
        const who = principal.scope.name === 'anonymous' ? 'this client' : `the key ${principal.scope.name}`;
        return { response: refuse(new ApiError(429, `Rate limit reached for ${who}: try again in ${verdict.retryAfter} s`, { type: 'rate_limit_error', code: 'rate_limit_exceeded', headers: { 'retry-after': String(verdict.retryAfter) } }), cors, request) };
      }
    }
    return { principal, cors };
  }

  /** A preflight: answered for listed origins, refused for the others. */
  function preflight(request, origin) {
    if (origin === null || !originAllowed(origin)) {
      return refuse(new ApiError(403, origin === null ? 'OPTIONS is answered to CORS preflights only' : `Requests from the origin ${origin} are not allowed (the server's CORS allow-list)`,
        { type: 'permission_error', code: 'origin_not_allowed' }), {});
    }
    return new Response(null, {
      status: 204,
      headers: {
        ...corsHeaders(origin),
        'access-control-allow-methods': ALLOW_METHODS,
        'access-control-allow-headers': ALLOW_HEADERS,
        'access-control-max-age': '600',
      },
    });
  }

  /**
   * A generation of `principal` begins: the function that ends it, or a 429 past its limit of
   * generations at once.
   * @param {Principal} principal
   * @returns {() => void}
   */
  function enter(principal) {
    const cap = principal.scope.concurrent ?? settings.concurrent ?? null;
    const n = running.get(principal.id) ?? 0;
    if (cap !== null && n >= cap) {
      throw new ApiError(429, `${cap} generation${cap === 1 ? '' : 's'} at once is the limit for ${principal.scope.name === 'anonymous' ? 'this client' : `the key ${principal.scope.name}`}: try again when one ends`,
        { type: 'rate_limit_error', code: 'concurrency_limit_exceeded', headers: { 'retry-after': '1' } });
    }
    running.set(principal.id, n + 1);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      const left = (running.get(principal.id) ?? 1) - 1;
      if (left === 0) running.delete(principal.id);
      else running.set(principal.id, left);
    };
  }

  return {
    /** Whether the server needs a key. */
    needsKey: !open,
    admit,
    enter,
    /** Headers to add to an answer for a request from `origin`. */
    corsHeaders,
    /** What /stats says of the gate: no key, no digest. */
    report: () => ({
      keys: configured.length,
      cors_origins: origins,
      rate_limit: { limit: rate.limit ?? null, window_ms: rate.windowMs ?? 60_000, binding: rate.binding !== undefined, period_s: rate.periodSeconds ?? null },
      concurrent: settings.concurrent ?? null,
      running: Object.fromEntries(running),
    }),
  };
}

/** A Workers Rate Limiting binding's verdict for `id`: its window is its own (10 or 60 s). */
async function bindingLimit(binding, periodSeconds, id) {
  const { success } = await binding.limit({ key: id });
  return { ok: success, retryAfter: periodSeconds };
}

/** An error answer with the CORS headers of its request. */
/** A refusal, in Anthropic's shape on its route (`/v1/messages`), else OpenAI's. */
function refuse(e, cors, request = null) {
  const anthropic = request !== null && new URL(request.url).pathname === '/v1/messages';
  return Response.json(anthropic ? anthropicError(e) : e.toJSON(), { status: e.status, headers: { ...e.headers, ...cors } });
}
