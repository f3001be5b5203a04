// Who may use this Worker (docs/security.md): the package's gate (knot-wasm/server), set up from
// the environment once per isolate. A deployed Worker is reachable by anyone who finds its URL,
// so it serves nobody until its owner says who: the secret KNOT_API_KEYS (`wrangler secret put
// KNOT_API_KEYS`), or KNOT_PUBLIC = "1" to serve everyone.
//
//   KNOT_API_KEYS          keys (commas or lines), or JSON with scopes and limits
//   KNOT_PUBLIC            "1": serve without keys
//   KNOT_CORS_ORIGINS      origins whose browser pages may call (comma-separated, or *)
//   KNOT_RATE_LIMITER      a Rate Limiting binding ([[ratelimits]]): requests per period, per key
//   KNOT_RATE_LIMIT_PERIOD its period in seconds (10 or 60, as configured): Retry-After
//   KNOT_CONCURRENT_PER_KEY generations each key may run at once in an isolate
import { ApiError } from 'knot-wasm/openai';
import { createGate, parseApiKeys } from 'knot-wasm/server';

/** The isolate's gate, and the settings it was made from (one gate while they stay: its counts
 * of requests and generations are the isolate's). */
let made = null;

/**
 * The gate for `env`. Throws an ApiError when the Worker may serve nobody: no key and not
 * public (503 `no_api_keys`), or keys it cannot read (500 `invalid_config`, naming the field,
 * never a key).
 * @param {Record<string, any>} env
 */
export function gateFor(env) {
  const from = JSON.stringify([env.KNOT_API_KEYS, env.KNOT_PUBLIC, env.KNOT_CORS_ORIGINS, env.KNOT_RATE_LIMIT_PERIOD,
    env.KNOT_CONCURRENT_PER_KEY, typeof env.KNOT_RATE_LIMITER?.limit === 'function']);
  if (made !== null && made.from === from) return made.gate;
  const text = typeof env.KNOT_API_KEYS === 'string' ? env.KNOT_API_KEYS : '';
  let keys;
  try {
    keys = parseApiKeys(text, 'KNOT_API_KEYS');
  } catch (e) {
    throw new ApiError(500, `The Worker's configuration is broken: ${e.message}`, { code: 'invalid_config' });
  }
  if (keys.length === 0 && env.KNOT_PUBLIC !== '1') {
    throw new ApiError(503, 'This Worker has no API keys: its owner sets the secret KNOT_API_KEYS '
      + '(wrangler secret put KNOT_API_KEYS), or KNOT_PUBLIC = "1" to serve everyone', { code: 'no_api_keys' });
  }
  const period = Number(env.KNOT_RATE_LIMIT_PERIOD || 60);
  const concurrent = Number(env.KNOT_CONCURRENT_PER_KEY || 0);
  const gate = createGate({
    keys,
    corsOrigins: String(env.KNOT_CORS_ORIGINS ?? '').split(',').map((o) => o.trim()).filter(Boolean),
    rateLimit: typeof env.KNOT_RATE_LIMITER?.limit === 'function' ? { binding: env.KNOT_RATE_LIMITER, periodSeconds: period } : {},
    ...(concurrent > 0 ? { concurrent } : {}),
  });
  made = { gate, from };
  return gate;
}
