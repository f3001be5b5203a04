// Who gets in (docs/security.md): the gate's parts alone (key files, the token bucket, the timing
// check's power), then knot-serve as a user starts it — refusing a public address without a
// key, and with keys: 401s that take the same time whatever the wrong key, the right key's
// answer through the official client, a stranger's /health, rate and concurrency limits with
// Retry-After and recovery, a key without the agentic scope refused before any MCP traffic,
// CORS, and the request caps.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { after, before, describe, test } from './harness.js';
import { createGate, parseApiKeys, tokenBucket } from '../src/server.js';
import { startMcpServer } from './mcp-server.js';
import { runtimeCommand, startServer } from './servers.js';
import { ROOT, SMOL, haveSmol, sleep } from './support.js';
import { mannWhitneyZ, noTimingDifference, timingDifferences } from './timing.js';

const BIN = `${ROOT}pkg/bin/knot-serve.js`;
const MODEL = 'SmolLM2-135M-Instruct';
const run = promisify(execFile);

const OWNER = 'owner-0123456789abcdef0123456789';
const APP = 'app-00123456789abcdef0123456789';
const LIMITED = 'lim-00123456789abcdef0123456789';
const ONE = 'one-00123456789abcdef0123456789';
const SAME_LENGTH = 'owner-0123456789abcdef012345678X';

describe('the gate', () => {
  test('key files: plain lists and JSON scopes; bad ones are refused naming where, never the key', () => {
    assert.deepEqual(parseApiKeys(`${OWNER}, ${APP}\n`).map((k) => [k.name, k.agentic]), [['key-1', true], ['key-2', true]]);
    const [k] = parseApiKeys(JSON.stringify([{ key: APP, name: 'app', agentic: ['docs'], limit: 5, concurrent: 1 }]));
    assert.deepEqual({ ...k, key: undefined }, { key: undefined, name: 'app', agentic: ['docs'], limit: 5, concurrent: 1 });
    assert.deepEqual(parseApiKeys('  '), []);
    const refused = (text, pattern) => assert.throws(() => parseApiKeys(text, 'keys.txt'), (e) => {
      assert.equal(e.name, 'AccessConfigError');
      assert.match(e.message, pattern);
      assert.ok(!e.message.includes('short-key') && !e.message.includes(OWNER), e.message);
      return true;
    });
    refused('short-key', /keys\.txt\[0\]: a key must be at least 16 characters \(this one has 9\)/);
    refused(`${OWNER},${OWNER}`, /keys\.txt\[1\] repeats an earlier key/);
    refused(JSON.stringify([{ key: OWNER, agentic: 'yes' }]), /agentic must be true, false or a list/);
    refused(JSON.stringify([{ key: OWNER, rpm: 3 }]), /unknown field 'rpm'/);
    refused(JSON.stringify([{ key: OWNER, limit: 0 }]), /limit must be a whole number >= 1/);
    refused(JSON.stringify([{ key: `${OWNER}\u00e9` }]), /printable ASCII/);
    refused('[{', /not valid JSON/);
  });

  test('the token bucket: bursts to its limit, then one request per window/limit, Retry-After in whole seconds', () => {
    let now = 0;
    const bucket = tokenBucket({ windowMs: 60_000, now: () => now });
    for (let i = 0; i < 3; i++) assert.equal(bucket.take('a', 3).ok, true);
    assert.deepEqual(bucket.take('a', 3), { ok: false, retryAfter: 20 });
    assert.equal(bucket.take('b', 3).ok, true, 'another id has its own bucket');
    now = 19_000;
    assert.deepEqual(bucket.take('a', 3), { ok: false, retryAfter: 1 });
    now = 20_001;
    assert.equal(bucket.take('a', 3).ok, true);
  });

  test('the timing check sees a shift of 0.2 ms and passes equal samples', () => {
    const noise = () => Array.from({ length: 150 }, () => 0.5 + Math.random() * 0.1);
    const equal = timingDifferences({ a: noise(), b: noise() });
    assert.equal(equal[0].measurable, false, JSON.stringify(equal));
    const shifted = timingDifferences({ a: noise().map((x) => x + 0.2), b: noise() });
    assert.equal(shifted[0].measurable, true, JSON.stringify(shifted));
    assert.ok(mannWhitneyZ([3, 4, 5], [0, 1, 2]) > 0);
  });

  test('a request without a valid key costs a hash: no backend is asked', async () => {
    const gate = createGate({ keys: parseApiKeys(OWNER) });
    const verdict = await gate.admit(new Request('http://x/v1/models', { headers: { authorization: `Bearer ${SAME_LENGTH}` } }));
    assert.ok('response' in verdict);
    assert.equal(verdict.response.status, 401);
    const ok = await gate.admit(new Request('http://x/v1/models', { headers: { authorization: `bearer ${OWNER}` } }));
    assert.equal(/** @type {any} */ (ok).principal.scope.name, 'key-1');
  });
});

test("docs/errors.md's server table lists every code the gate and the Worker's access answer, with its status", () => {
  const table = new Set(readFileSync(`${ROOT}docs/errors.md`, 'utf8').split('\n')
    .map((line) => line.split('|').map((c) => c.trim()))
    .filter((cells) => /^\d{3}$/.test(cells[1] ?? ''))
    .flatMap((cells) => [...cells[2].matchAll(/`([a-z_]+)`/g)].map((m) => `${m[1]} ${cells[1]}`)));
  for (const file of ['pkg/src/access.js', 'examples/worker/src/access.js', 'pkg/src/server.js', 'pkg/src/openai/request.js', 'pkg/src/openai/index.js', 'pkg/src/openai/errors.js', 'pkg/src/openai/agentic.js']) {
    const text = readFileSync(`${ROOT}${file}`, 'utf8');
    for (const m of text.matchAll(/ApiError\((\d{3}),[^;]*?code: '([a-z_]+)'/gs)) {
      assert.ok(table.has(`${m[2]} ${m[1]}`), `${file}: ${m[2]} (${m[1]}) is not in docs/errors.md's server table with that status`);
    }
  }
  for (const code of ['too_many_messages 400', 'too_many_tools 400', 'agentic_not_allowed 403', 'concurrency_limit_exceeded 429', 'no_api_keys 503']) assert.ok(table.has(code), code);
});

describe('knot-serve refuses to serve others without a key', () => {
  test('a non-loopback --host without a key: exit 2 and why, before the model opens', async () => {
    const [cmd, argv] = runtimeCommand(BIN, [SMOL, '--host', '0.0.0.0', '--port', '0']);
    const e = await run(cmd, argv, { encoding: 'utf8' }).then(() => null, (err) => err);
    assert.ok(e !== null, 'knot-serve started on 0.0.0.0 without a key');
    assert.equal(e.code, 2);
    assert.match(e.stderr, /refusing to serve 0\.0\.0\.0 without an API key: anyone who can reach it could use the model\. Give --api-key-file FILE \(or KNOT_API_KEYS\), or --insecure/);
  });

  test('a key file that cannot be read, a short key, a bad --rate-limit: exit 2 naming it', async () => {
    for (const [args, pattern] of [
      [['--api-key-file', '/nonexistent/keys'], /--api-key-file: ENOENT/],
      [['--api-key', 'short'], /--api-key\[0\]: a key must be at least 16 characters/],
      [['--api-key', OWNER, '--rate-limit', '5/0'], /--rate-limit \(or KNOT_RATE_LIMIT\) must be N or N\/SECONDS/],
      [['--api-key', OWNER, '--cors-origin', 'app.example'], /--cors-origin: 'app\.example' is not an origin/],
    ]) {
      const [cmd, argv] = runtimeCommand(BIN, [SMOL, '--port', '0', ...args]);
      const e = await run(cmd, argv, { encoding: 'utf8' }).then(() => null, (err) => err);
      assert.equal(e?.code, 2, `${args.join(' ')} started`);
      assert.match(e.stderr, pattern);
    }
  });
});

describe(haveSmol() ? 'knot-serve with API keys' : 'knot-serve with API keys (no SmolLM2: skipped)', { skip: !haveSmol() }, () => {
  /** @type {Awaited<ReturnType<typeof startServer>>} */
  let server;
  /** @type {Awaited<ReturnType<typeof startMcpServer>>} */
  let mcp;
  let dir;
  before(async () => {
    mcp = await startMcpServer();
    dir = mkdtempSync(join(tmpdir(), 'knot-keys-'));
    const keys = join(dir, 'keys.json');
    writeFileSync(keys, JSON.stringify([
      { key: OWNER, name: 'owner' },
      { key: APP, name: 'app', agentic: false },
      { key: LIMITED, name: 'limited', limit: 3 },
      { key: ONE, name: 'one', concurrent: 1 },
    ]));
    const mcpFile = join(dir, 'mcp.json');
    writeFileSync(mcpFile, JSON.stringify({ mcpServers: { lookup: { url: `${mcp.url}/mcp` } } }));
    // Listening on every address, as a server for others does: keys make that allowed.
    server = await startServer(...runtimeCommand(BIN, [
      SMOL, '--host', '0.0.0.0', '--port', '0', '--model-id', MODEL, '--max-context', '512', '--api-key-file', keys,
      '--rate-limit', '1000/2', '--cors-origin', 'https://app.example', '--mcp', mcpFile, '--max-messages', '4', '--max-tools', '2',
    ]));
    server.url = server.url.replace('0.0.0.0', '127.0.0.1');
  });
  after(async () => {
    server?.child.kill('SIGKILL');
    await mcp?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const get = (path, headers = {}) => fetch(`${server.url}${path}`, { headers });
  const chat = (key, body = {}, headers = {}) => fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, ...body }),
  });

  test('the startup line says keys are required', () => {
    assert.match(server.out(), /knot-serve: 4 API key\(s\) required/);
  });

  test('no key, a wrong key, a key of the right length: 401 invalid_api_key, naming nothing, in the same time', async () => {
    for (const headers of [{}, { authorization: 'Bearer nope' }, { authorization: `Bearer ${SAME_LENGTH}` }, { 'x-api-key': SAME_LENGTH }, { authorization: OWNER }]) {
      const r = await get('/v1/models', headers);
      assert.equal(r.status, 401, JSON.stringify(headers));
      assert.equal(r.headers.get('www-authenticate'), 'Bearer realm="knot"');
      const body = await r.json();
      assert.equal(body.error.code, 'invalid_api_key');
      assert.ok(!JSON.stringify(body).includes(OWNER.slice(0, 8)), JSON.stringify(body));
    }
    await noTimingDifference({
      none: () => get('/v1/models').then((r) => r.arrayBuffer()),
      wrong: () => get('/v1/models', { authorization: 'Bearer x' }).then((r) => r.arrayBuffer()),
      sameLength: () => get('/v1/models', { authorization: `Bearer ${SAME_LENGTH}` }).then((r) => r.arrayBuffer()),
    }, { n: 120, log: (line) => console.log(`knot-serve ${line}`) });
  });

  test('the right key: the answer, through the official client and x-api-key', async () => {
    const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: OWNER, maxRetries: 0 });
    const r = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, temperature: 0 });
    assert.equal(r.usage?.completion_tokens, 3);
    const wrong = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: SAME_LENGTH, maxRetries: 0 });
    await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.code === 'invalid_api_key');
    assert.equal((await get('/v1/models', { 'x-api-key': OWNER })).status, 200);
    // A proxy's own Authorization (not Bearer) does not hide x-api-key; a Bearer key is the one read.
    assert.equal((await get('/v1/models', { authorization: 'Basic cHJveHk6cGFzcw==', 'x-api-key': OWNER })).status, 200);
    assert.equal((await get('/v1/models', { authorization: `Bearer ${SAME_LENGTH}`, 'x-api-key': OWNER })).status, 401);
    // Anthropic's client sends its key as x-api-key: let in with the right one; turned away
    // with a 401 in Anthropic's shape, which the client reads as its AuthenticationError.
    const anthropic = new Anthropic({ baseURL: server.url, apiKey: OWNER, maxRetries: 0 });
    const m = await anthropic.messages.create({ model: MODEL, max_tokens: 3, temperature: 0, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(m.usage.output_tokens, 3);
    const stranger = new Anthropic({ baseURL: server.url, apiKey: SAME_LENGTH, maxRetries: 0 });
    await assert.rejects(stranger.messages.create({ model: MODEL, max_tokens: 3, messages: [{ role: 'user', content: 'Hi' }] }),
      (e) => e instanceof Anthropic.AuthenticationError && e.error?.type === 'error' && e.error.error.type === 'authentication_error');
  });

  test('/health: a stranger learns the status and the model only', async () => {
    assert.deepEqual(await (await get('/health')).json(), { status: 'ok', model: MODEL });
    const full = await (await get('/health', { authorization: `Bearer ${OWNER}` })).json();
    assert.equal(full.layers, 30);
    assert.equal((await get('/stats')).status, 401);
    const stats = await (await get('/stats', { authorization: `Bearer ${OWNER}` })).json();
    assert.equal(stats.access.keys, 4);
    assert.ok(!JSON.stringify(stats).includes(OWNER), 'no key in /stats');
  });

  test('the rate limit: 429 with Retry-After past it, other keys unaffected, in again after the window', async () => {
    // `limited` may make 3 requests per 2 s window (the server's --rate-limit window).
    for (let i = 0; i < 3; i++) assert.equal((await get('/v1/models', { authorization: `Bearer ${LIMITED}` })).status, 200);
    const r = await get('/v1/models', { authorization: `Bearer ${LIMITED}` });
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal((await r.json()).error.code, 'rate_limit_exceeded');
    assert.equal((await get('/v1/models', { authorization: `Bearer ${OWNER}` })).status, 200);
    await sleep(1000 * Number(r.headers.get('retry-after')));
    assert.equal((await get('/v1/models', { authorization: `Bearer ${LIMITED}` })).status, 200);
  });

  test('generations at once: a second one of a key with concurrent 1 is 429 while the first runs', async () => {
    const first = await chat(ONE, { stream: true, max_tokens: 24 });
    assert.equal(first.status, 200);
    const second = await chat(ONE);
    assert.equal(second.status, 429);
    assert.equal((await second.json()).error.code, 'concurrency_limit_exceeded');
    // A malformed request is answered for what it is, not counted.
    const malformed = await chat(ONE, { model: 'gpt-4o' });
    assert.equal(malformed.status, 404);
    assert.equal((await malformed.json()).error.code, 'model_not_found');
    await first.text();
    // The first one's end gave its place back.
    for (let i = 0; ; i++) {
      const again = await chat(ONE);
      if (again.status === 200 || i >= 20) {
        assert.equal(again.status, 200);
        break;
      }
      await sleep(50);
    }
  });

  test('a key without the agentic scope: 403 before any MCP traffic; with it, the loop runs', async () => {
    const before = mcp.requests.length;
    for (const [body, headers] of [[{}, { 'x-knot-agentic': '1' }], [{ knot: { agentic: true } }, {}]]) {
      const r = await chat(APP, body, headers);
      assert.equal(r.status, 403);
      const e = (await r.json()).error;
      assert.equal(e.code, 'agentic_not_allowed');
      assert.equal(e.type, 'permission_error');
    }
    assert.equal(mcp.requests.length, before, 'the MCP server was called for a key without the scope');
    assert.equal((await chat(APP)).status, 200, 'the same key without the loop');
    // The owner's key reaches the server (its tools are listed before the model runs): seen,
    // the request is let go.
    const gone = new AbortController();
    const owner = fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', signal: gone.signal,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${OWNER}`, 'x-knot-agentic': '1' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 }),
    }).catch(() => null);
    for (let i = 0; i < 200 && mcp.requests.length === before; i++) await sleep(25);
    gone.abort();
    await owner;
    assert.ok(mcp.requests.length > before, 'the owner key reached the MCP server');
  });

  test('CORS: no origin unless listed; a listed one is answered, its preflight too', async () => {
    const pre = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.match(pre.headers.get('access-control-allow-headers') ?? '', /authorization/);
    const evilPre = await fetch(`${server.url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' } });
    assert.equal(evilPre.status, 403);
    assert.equal(evilPre.headers.get('access-control-allow-origin'), null);
    // A simple (unpreflighted) POST from another page is refused before anything runs.
    const evil = await chat(OWNER, {}, { origin: 'https://evil.example' });
    assert.equal(evil.status, 403);
    assert.equal((await evil.json()).error.code, 'origin_not_allowed');
    const ok = await chat(OWNER, {}, { origin: 'https://app.example' });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get('access-control-allow-origin'), 'https://app.example');
    const stranger = await get('/v1/models', { origin: 'https://app.example' });
    assert.equal(stranger.status, 401);
    assert.equal(stranger.headers.get('access-control-allow-origin'), 'https://app.example', 'a listed page can read its 401');
    const none = await get('/v1/models', { authorization: `Bearer ${OWNER}` });
    assert.equal(none.headers.get('access-control-allow-origin'), null, 'no wildcard');
  });

  test('request caps: messages and tools past the limits are 400 naming the field; the server serves on', async () => {
    const many = await chat(OWNER, { messages: Array.from({ length: 5 }, () => ({ role: 'user', content: 'x' })) });
    assert.equal(many.status, 400);
    assert.deepEqual(((await many.json()).error), { message: "'messages' has 5 messages, more than this server's limit of 4", type: 'invalid_request_error', param: 'messages', code: 'too_many_messages' });
    const tool = (name) => ({ type: 'function', function: { name, parameters: { type: 'object', properties: {} } } });
    const tools = await chat(OWNER, { tools: [tool('a'), tool('b'), tool('c')] });
    assert.equal(tools.status, 400);
    assert.equal((await tools.json()).error.code, 'too_many_tools');
    assert.equal((await chat(OWNER)).status, 200);
  });
});
