// Who may use the Worker (src/access.js over the package's gate, docs/security.md), in workerd
// through Miniflare: API keys (401 without one, the same time for every wrong kind), the
// stranger's /health, the Rate Limiting binding as Miniflare simulates it (429 with Retry-After,
// per key, the window reopening), a key's agentic scope (refused before any MCP server is
// reached), CORS, the caps on messages and tools, and a Worker with no keys that is not public
// (503 to everything, its model never opened). Cheap on purpose: three Workers, every
// generation at most 4 tokens.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { MODEL, post, sleep, startLocal } from './support.js';
import { startMcpServer } from '../../../pkg/test/mcp-server.js';
import { noTimingDifference } from '../../../pkg/test/timing.js';

const FULL = 'knot-test-key-full-0123456789';
const NO_AGENT = 'knot-test-key-noagent-0123456';
const LISTED = 'knot-test-key-listed-01234567';
/** FULL's length, FULL's prefix, its last character wrong: the closest a guess gets. */
const ALMOST = `${FULL.slice(0, -1)}X`;
const KEYS = [FULL, NO_AGENT, LISTED];
const APP = 'https://app.example';
const EVIL = 'https://evil.example';
const HI = [{ role: 'user', content: 'Hi' }];

const bearer = (key) => ({ authorization: `Bearer ${key}` });
/** A GET with `headers`, its body read. */
async function get(url, path, headers = {}) {
  const res = await fetch(url + path, { headers });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}
const chat = (url, headers, body = {}) => post(url, '/v1/chat/completions', { model: MODEL, messages: HI, temperature: 0, max_tokens: 2, ...body }, { headers });

/** A 401 as the gate gives it: invalid_api_key, a challenge, no key in the body. */
function assertUnauthorized(r, presented = '') {
  assert.equal(r.status, 401, r.text);
  assert.equal(r.json.error.code, 'invalid_api_key');
  assert.equal(r.headers.get('www-authenticate'), 'Bearer realm="knot"');
  for (const k of [...KEYS, ...(presented ? [presented] : [])]) assert.ok(!r.text.includes(k), `the 401 names a key: ${r.text}`);
}

describe('a Worker with API keys', () => {
  /** @type {Awaited<ReturnType<typeof startLocal>>} */
  let local;
  /** An MCP server the Worker is configured with: its `requests` are every HTTP request it got. */
  let mcp;

  before(async () => {
    mcp = await startMcpServer();
    local = await startLocal({
      quiet: true,
      vars: {
        KNOT_API_KEYS: JSON.stringify([
          { key: FULL, name: 'full' },
          { key: NO_AGENT, name: 'no-agent', agentic: false },
          { key: LISTED, name: 'listed', agentic: ['tools'] },
        ]),
        KNOT_CORS_ORIGINS: APP,
        KNOT_MAX_MESSAGES: '4',
        KNOT_MAX_TOOLS: '2',
        KNOT_MCP_SERVERS: JSON.stringify([{ name: 'tools', url: `${mcp.url}/mcp` }]),
        KNOT_AGENTIC_ALLOW: `${mcp.url}/mcp,${mcp.url}/stateless`,
      },
    });
  });
  after(async () => {
    await local?.dispose();
    await mcp?.close();
  });

  test('no key, a wrong key, a right-length wrong key: 401 invalid_api_key naming no key; the key: the answer', async () => {
    assertUnauthorized(await get(local.url, '/v1/models'));
    assertUnauthorized(await get(local.url, '/v1/models', bearer('wrong')), 'wrong');
    assertUnauthorized(await get(local.url, '/v1/models', bearer(ALMOST)), ALMOST);
    assertUnauthorized(await get(local.url, '/v1/models', { 'x-api-key': ALMOST }), ALMOST);
    assertUnauthorized(await chat(local.url, bearer(ALMOST)), ALMOST);
    // The official client: its apiKey goes as Authorization: Bearer.
    const refused = await new OpenAI({ baseURL: `${local.url}/v1`, apiKey: ALMOST, maxRetries: 0 }).models.list().catch((e) => e);
    assert.equal(refused.status, 401);
    assert.equal(refused.code, 'invalid_api_key');
    const openai = new OpenAI({ baseURL: `${local.url}/v1`, apiKey: FULL, maxRetries: 0, timeout: 120_000 });
    assert.deepEqual((await openai.models.list()).data.map((m) => m.id), [MODEL]);
    const r = await openai.chat.completions.create({ model: MODEL, messages: HI, temperature: 0, max_tokens: 4 });
    assert.equal(r.choices.length, 1);
    assert.ok(r.usage.completion_tokens <= 4);
    // x-api-key, raw.
    const raw = await get(local.url, '/v1/models', { 'x-api-key': NO_AGENT });
    assert.equal(raw.status, 200, raw.text);
    assert.deepEqual(raw.json.data.map((m) => m.id), [MODEL]);
  });

  test('the three wrong kinds take the same time (no key, a short wrong one, one a character off)', async () => {
    const refusal = (headers) => async () => {
      const res = await fetch(`${local.url}/v1/models`, { headers });
      await res.arrayBuffer();
      if (res.status !== 401) throw new Error(`status ${res.status}`);
    };
    await noTimingDifference({
      none: refusal({}),
      short: refusal(bearer('wrong')),
      almost: refusal(bearer(ALMOST)),
    }, { n: 100, log: (line) => console.log(`Worker 401s, ${line}`) });
  });

  test('/health: a stranger gets { status, model } only; the key the full health', async () => {
    for (const headers of [{}, bearer(ALMOST)]) {
      const stranger = await get(local.url, '/health', headers);
      assert.equal(stranger.status, 200, stranger.text);
      assert.deepEqual(stranger.json, { status: 'ok', model: MODEL });
    }
    const full = await get(local.url, '/health', bearer(FULL));
    assert.equal(full.status, 200, full.text);
    assert.equal(full.json.status, 'ok');
    assert.equal(full.json.model, MODEL);
    assert.equal(full.json.architecture, 'llama');
    assert.equal(full.json.layers, 30);
    assert.ok(full.json.context_length > 0);
    // /stats is not an open route.
    assertUnauthorized(await get(local.url, '/stats'));
  });

  test('agentic: false refuses the loop (header or body) before any MCP server is reached; a list refuses other servers', async () => {
    const noAgent = await chat(local.url, { ...bearer(NO_AGENT), 'x-knot-agentic': '1' });
    assert.equal(noAgent.status, 403, noAgent.text);
    assert.equal(noAgent.json.error.code, 'agentic_not_allowed');
    assert.equal(noAgent.json.error.type, 'permission_error');
    const viaBody = await chat(local.url, bearer(NO_AGENT), { knot: { agentic: { servers: ['tools'] } } });
    assert.equal(viaBody.status, 403, viaBody.text);
    assert.equal(viaBody.json.error.code, 'agentic_not_allowed');
    assert.equal(viaBody.json.error.param, 'knot.agentic');
    // A key limited to 'tools' may not bring a server of its own, even one the allow-list lets in.
    const listed = await chat(local.url, bearer(LISTED), { knot: { agentic: { mcp_servers: [{ name: 'extra', url: `${mcp.url}/stateless` }] } } });
    assert.equal(listed.status, 403, listed.text);
    assert.equal(listed.json.error.code, 'mcp_server_not_allowed');
    assert.deepEqual(mcp.requests, [], 'no request reached the MCP server');
    // Without the header, the same key is answered.
    const plain = await chat(local.url, bearer(NO_AGENT));
    assert.equal(plain.status, 200, plain.text);
    assert.equal(mcp.requests.length, 0);
    // The control: a key with the scope runs the loop, and workerd reaches the server on 127.0.0.1.
    const loop = await chat(local.url, { ...bearer(FULL), 'x-knot-agentic': '1' }, { max_tokens: 4 });
    assert.equal(loop.status, 200, loop.text);
    assert.deepEqual(loop.json.knot.agentic.C0.servers.map((s) => [s.name, s.ok]), [['tools', true]]);
    assert.ok(mcp.requests.length > 0, 'the allowed loop reached the MCP server');
  });

  test('CORS: a listed origin is answered (preflight and request), another refused 403', async () => {
    const preflight = await fetch(`${local.url}/v1/chat/completions`, {
      method: 'OPTIONS', headers: { origin: APP, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    assert.equal(preflight.status, 204);
    assert.equal(preflight.headers.get('access-control-allow-origin'), APP);
    assert.match(preflight.headers.get('access-control-allow-headers'), /authorization/);
    assert.match(preflight.headers.get('access-control-allow-methods'), /POST/);
    const evilPreflight = await fetch(`${local.url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: EVIL, 'access-control-request-method': 'POST' } });
    assert.equal(evilPreflight.status, 403);
    assert.equal(evilPreflight.headers.get('access-control-allow-origin'), null);
    // Refused before anything runs, even with the key.
    const evil = await chat(local.url, { ...bearer(FULL), origin: EVIL });
    assert.equal(evil.status, 403, evil.text);
    assert.equal(evil.json.error.code, 'origin_not_allowed');
    assert.equal(evil.headers.get('access-control-allow-origin'), null);
    const ok = await chat(local.url, { ...bearer(FULL), origin: APP });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.headers.get('access-control-allow-origin'), APP);
    assert.match(ok.headers.get('vary') ?? '', /origin/i);
    // An allowed page can read its refusal, too.
    const noKey = await chat(local.url, { origin: APP });
    assertUnauthorized(noKey);
    assert.equal(noKey.headers.get('access-control-allow-origin'), APP);
    // No origin, no CORS headers.
    assert.equal((await get(local.url, '/v1/models', bearer(FULL))).headers.get('access-control-allow-origin'), null);
  });

  test('caps: 5 messages (of 4) and 3 tools (of 2) are 400s; the Worker keeps serving', async () => {
    const five = await chat(local.url, bearer(FULL), { messages: Array.from({ length: 5 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `m${i}` })) });
    assert.equal(five.status, 400, five.text);
    assert.equal(five.json.error.code, 'too_many_messages');
    assert.equal(five.json.error.param, 'messages');
    const tool = (name) => ({ type: 'function', function: { name, description: name, parameters: { type: 'object', properties: {} } } });
    const three = await chat(local.url, bearer(FULL), { tools: [tool('a'), tool('b'), tool('c')] });
    assert.equal(three.status, 400, three.text);
    assert.equal(three.json.error.code, 'too_many_tools');
    assert.equal(three.json.error.param, 'tools');
    // At the caps: answered.
    const four = await chat(local.url, bearer(FULL), {
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello!' }, { role: 'user', content: 'Bye' }],
      tools: [tool('a'), tool('b')], tool_choice: 'none',
    });
    assert.equal(four.status, 200, four.text);
    assert.equal(four.json.choices.length, 1);
  });
});

describe('the Rate Limiting binding (Miniflare simulated: 3 requests per 10 s window, per key)', () => {
  const LIMITED = 'knot-test-key-limited-0123456';
  const OTHER = 'knot-test-key-other-012345678';
  const CORS = 'knot-test-key-cors-0123456789';
  /** @type {Awaited<ReturnType<typeof startLocal>>} */
  let local;
  before(async () => {
    // No KNOT_CORS_ORIGINS (wrangler.toml's is empty): no origin is listed. The binding's period
    // is named to the Worker as deployed ones name it (startLocal's `rateLimit` leaves
    // KNOT_RATE_LIMIT_PERIOD at wrangler.toml's 60).
    local = await startLocal({
      quiet: true, rateLimit: { limit: 3, period: 10 },
      vars: {
        KNOT_API_KEYS: JSON.stringify([{ key: LIMITED, name: 'limited' }, { key: OTHER, name: 'other' }, { key: CORS, name: 'cors' }]),
        KNOT_RATE_LIMIT_PERIOD: '10',
      },
    });
  });
  after(() => local?.dispose());

  test('with no origin listed, no CORS header is ever sent, a wildcard least of all', async () => {
    const preflight = await fetch(`${local.url}/v1/models`, { method: 'OPTIONS', headers: { origin: APP, 'access-control-request-method': 'GET' } });
    assert.equal(preflight.status, 403);
    assert.equal(preflight.headers.get('access-control-allow-origin'), null);
    const page = await get(local.url, '/v1/models', { ...bearer(CORS), origin: APP });
    assert.equal(page.status, 403, page.text);
    assert.equal(page.json.error.code, 'origin_not_allowed');
    assert.equal(page.headers.get('access-control-allow-origin'), null);
    const plain = await get(local.url, '/v1/models', bearer(CORS));
    assert.equal(plain.status, 200, plain.text);
    assert.equal(plain.headers.get('access-control-allow-origin'), null);
    assert.equal((await get(local.url, '/health')).headers.get('access-control-allow-origin'), null);
  });

  test('the 4th request in a window is 429 rate_limit_exceeded, Retry-After 10; other keys unaffected; the next window lets it in', async () => {
    // The model opens on /health (an open route: not counted), so the counted requests are quick.
    assert.equal((await get(local.url, '/health', bearer(LIMITED))).status, 200);
    // Miniflare's simple mode counts fixed windows (floor(now / period)), emptied when a new one
    // begins: start early in one, so the four requests fall in it.
    const phase = Date.now() % 10_000;
    if (phase > 6000) await sleep(10_000 - phase + 100);
    const window = Math.floor(Date.now() / 10_000);
    const first = [];
    for (let i = 0; i < 4; i++) first.push(await get(local.url, '/v1/models', bearer(LIMITED)));
    assert.equal(Math.floor(Date.now() / 10_000), window, 'the four requests fell in one window');
    assert.deepEqual(first.map((r) => r.status), [200, 200, 200, 429], first.at(-1).text);
    const limited = first[3];
    assert.equal(limited.json.error.code, 'rate_limit_exceeded');
    assert.equal(limited.json.error.type, 'rate_limit_error');
    assert.equal(limited.headers.get('retry-after'), '10');
    assert.ok(!limited.text.includes(LIMITED), 'the 429 names no key');
    const other = await get(local.url, '/v1/models', bearer(OTHER));
    assert.equal(other.status, 200, other.text);
    // Polled until let in again, bounded.
    const t0 = Date.now();
    let again;
    while (Date.now() - t0 < 25_000) {
      again = await get(local.url, '/v1/models', bearer(LIMITED));
      if (again.status !== 429) break;
      await sleep(250);
    }
    assert.equal(again.status, 200, again.text);
    assert.ok(Math.floor(Date.now() / 10_000) > window, 'let in again in a later window');
    console.log(`rate limit: the key was let in again ${Date.now() - t0} ms after its 429`);
  });
});

describe('a Worker with no API keys, not public', () => {
  /** @type {Awaited<ReturnType<typeof startLocal>>} */
  let local;
  before(async () => {
    local = await startLocal({ quiet: true, vars: { KNOT_PUBLIC: '0' } });
  });
  after(() => local?.dispose());

  test('every request, /stats included, is 503 no_api_keys (the gate answers before the model opens)', async () => {
    for (const path of ['/v1/models', '/health', '/stats']) {
      for (const headers of [{}, bearer(FULL)]) {
        const r = await get(local.url, path, headers);
        assert.equal(r.status, 503, `${path}: ${r.text}`);
        assert.equal(r.json.error.code, 'no_api_keys');
      }
    }
    const r = await chat(local.url, bearer(FULL));
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.error.code, 'no_api_keys');
  });
});
