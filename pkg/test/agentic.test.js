// The agentic loop: the MCP client against a real MCP server made with the official SDK (stateful
// and stateless, paged, behind a header), and the loop in knot-serve on 127.0.0.1 driven by the
// official openai client — SmolLM2 and Gemma-3-270M calling the calculator, the tools that hang,
// fail and answer 5 MB each ending in the gate that names them, a client that goes away
// cancelling the pending call, the opt-in, the allow-list, and secrets never echoed; SmolLM2
// calling real tools (public MCP servers' schemas, registered verbatim) by name, the server
// validating what it receives (the whole corpus with KNOT_FULL_CORPUS=1).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { after, before, describe, test } from './harness.js';
import { startMcpServer, toolCorpus } from './mcp-server.js';
import { nativeGenerator, post, startServer } from './servers.js';
import { KNOT_BIN, ROOT, SMOL, haveNative, haveSmol } from './support.js';
import { McpConnection, allowed, closed, namespaced, parseMcpServers } from '../src/openai/mcp.js';
import { admit, agenticFromEnv, agenticSettings } from '../src/openai/agentic.js';
import { loadWasm } from '../src/node.js';

const GEMMA = process.env.KNOT_GEMMA3 ?? `${ROOT}models/gemma-3-270m.knot`;
const GEMMA_TEMPLATE = `${ROOT}tests/fixtures/chat/gemma3.jinja`;
const BIN = `${ROOT}pkg/bin/knot-serve.js`;
const QUESTION = 'What is 17 multiplied by 23?';

/** Starts knot-serve on a free port with `env`; resolves with its URL and the process. */
const startServe = (model, args, env) => startServer(process.execPath, [BIN, model, '--port', '0', '--model-id', 'm', '--max-context', '2048', ...args], env);

/** A chat request to the loop; the body's `knot.agentic` opts in unless `header` does. */
const agentic = (url, body, headers = { 'x-knot-agentic': 'tools' }) => post(url, '/v1/chat/completions', {
  model: 'm', temperature: 0, max_tokens: 120, ...body,
}, { headers });

/** The calls of a response's report, all steps. */
const callsOf = (r) => r.json.knot.agentic.steps.flatMap((s) => s.calls ?? []);

/** The result the model read for a call. */
const resultOf = (r, id) => r.json.knot.agentic.messages.find((m) => m.role === 'tool' && m.tool_call_id === id)?.content;

describe('MCP client (the official SDK client) against the official SDK server', () => {
  let mcp;
  before(async () => {
    mcp = await startMcpServer();
  });
  after(() => mcp?.close());
  const signal = new AbortController().signal;
  const conn = (path, headers = {}) => new McpConnection({ name: 's', url: mcp.url + path, headers }, { maxResultBytes: 64 * 1024 });

  for (const path of ['/mcp', '/stateless']) {
    test(`${path}: tools/list and tools/call`, async () => {
      const c = conn(path);
      const tools = await c.listTools({ signal, timeoutMs: 5000 });
      assert.deepEqual(tools.map((t) => t.name), ['calculator', 'lookup']);
      assert.deepEqual(await c.callTool('calculator', { op: 'multiply', a: 17, b: 23 }, { signal, timeoutMs: 5000 }), { outcome: 'ok', text: '391', bytes: 3 });
      assert.equal((await c.callTool('lookup', { key: 'nowhere' }, { signal, timeoutMs: 5000 })).outcome, 'error');
      const sessions = mcp.sessions.size;
      await c.close();
      // A stateful server's session ends with the request.
      if (path === '/mcp') assert.equal(mcp.sessions.size, sessions - 1);
    });
  }

  test('tools/list follows the cursor over pages', async () => {
    const c = conn('/paged');
    assert.deepEqual((await c.listTools({ signal, timeoutMs: 5000 })).map((t) => t.name), ['alpha', 'beta', 'gamma', 'delta', 'epsilon']);
    await c.close();
  });

  test('the hanging tool times out and is cancelled on the server; the failing one is an error; 5 MB is oversized', async () => {
    const c = conn('/faulty');
    const hang = await c.callTool('wait', { seconds: 60 }, { signal, timeoutMs: 300 });
    assert.equal(hang.outcome, 'timeout');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(mcp.log.findLast((e) => e.name === 'wait').cancelled, true);
    const fail = await c.callTool('fail', { reason: 'test' }, { signal, timeoutMs: 5000 });
    assert.equal(fail.outcome, 'error');
    assert.match(fail.text, /failed on purpose/);
    assert.equal((await c.callTool('big_report', { topic: 'x' }, { signal, timeoutMs: 5000 })).outcome, 'oversized');
    // The connection still works after each.
    assert.equal((await c.callTool('fail', { reason: 'again' }, { signal, timeoutMs: 5000 })).outcome, 'error');
    await c.close();
  });

  test("a server's headers are sent, and never in an error", async () => {
    const ok = conn('/auth', { authorization: 'Bearer s3cret' });
    assert.equal((await ok.callTool('lookup', { key: 'lima' }, { signal, timeoutMs: 5000 })).text, 'Peru');
    await ok.close();
    const wrong = conn('/auth', { authorization: 'Bearer wr0ng-key' });
    const r = await wrong.callTool('lookup', { key: 'lima' }, { signal, timeoutMs: 5000 });
    assert.equal(r.outcome, 'error');
    assert.doesNotMatch(r.text, /wr0ng-key/);
  });

  test('preflight: lazy and request-scoped; a listing reused within KNOT_MCP_TOOLS_TTL_MS, not past it', async () => {
    // Each listed tool's schema is checked by COLTRANE (in the wasm).
    await loadWasm();
    const servers = [{ name: 'tools', url: `${mcp.url}/mcp` }];
    const req = { tools: [], toolChoice: 'none', toolChoiceGiven: false };
    const optIn = { via: 'body', budgets: {} };
    const listings = () => mcp.requests.length;
    const cached = agenticSettings({ servers, toolsTtlMs: 60_000 });
    const first = await admit(cached, optIn, req, signal);
    await first.close();
    assert.equal(first.C0.servers[0].cached, false);
    const seen = listings();
    const second = await admit(cached, optIn, req, signal);
    assert.equal(second.C0.servers[0].cached, true);
    assert.equal(second.C0.tools, 2);
    assert.equal(listings(), seen, 'no request to the server');
    const fresh = await admit(agenticSettings({ servers }), optIn, req, signal);
    await fresh.close();
    assert.equal(fresh.C0.servers[0].cached, false);
    assert.ok(listings() > seen);
  });

  test('configuration as people write it: mcpServers (stdio and http), VS Code servers; no command from a request', () => {
    const file = {
      mcpServers: {
        fs: { command: 'npx', args: ['-y', '@modelcontextprotocol/server-filesystem', '/tmp'], env: { DEBUG: '1' } },
        web: { type: 'http', url: 'https://mcp.example/mcp', headers: { authorization: 'Bearer k' } },
        off: { command: 'x', disabled: true },
      },
    };
    assert.deepEqual(parseMcpServers(JSON.stringify(file), 'KNOT_MCP_SERVERS', { stdio: true }), [
      { name: 'fs', command: 'npx', args: ['-y', '@modelcontextprotocol/server-filesystem', '/tmp'], env: { DEBUG: '1' } },
      { name: 'web', url: 'https://mcp.example/mcp', headers: { authorization: 'Bearer k' } },
    ]);
    assert.deepEqual(parseMcpServers({ servers: { t: { type: 'stdio', command: 'node', args: ['t.js'], cwd: '/srv' } } }, 'S', { stdio: true }),
      [{ name: 't', command: 'node', args: ['t.js'], env: {}, cwd: '/srv' }]);
    // A request (or a runtime without processes) never starts one.
    assert.throws(() => parseMcpServers(file, 'knot.agentic.mcp_servers'), /mcpServers\.fs starts a command \(a stdio server\): only the server's own configuration/);
    assert.throws(() => parseMcpServers({ mcpServers: { a: { type: 'sse', url: 'https://x/sse' } } }, 'S'), /S\.mcpServers\.a\.type 'sse' is not served/);
    assert.throws(() => parseMcpServers({ mcpServers: { a: { command: 'x', args: 'y' } } }, 'S', { stdio: true }), /args must be a list of strings/);
    assert.throws(() => parseMcpServers({ mcpServers: { a: { command: 'x', shell: true } } }, 'S', { stdio: true }), /unknown field 'shell'/);
    assert.throws(() => parseMcpServers({ mcpServers: [] }, 'S'), /mcpServers/);
  });

  test('configuration: names, URLs, headers checked; the allow-list by path prefix; namespacing', () => {
    assert.throws(() => parseMcpServers('[{"name":"a b","url":"http://x"}]', 'KNOT_MCP_SERVERS'), /KNOT_MCP_SERVERS\[0\]\.name/);
    assert.throws(() => parseMcpServers('[{"name":"a__b","url":"http://x"}]', 'S'), /name/);
    assert.throws(() => parseMcpServers('[{"name":"a","url":"file:///etc/passwd"}]', 'S'), /S\[0\]\.url/);
    assert.throws(() => parseMcpServers('[{"name":"a","url":"http://x","headers":{"k":1}}]', 'S'), /S\[0\]\.headers/);
    assert.throws(() => parseMcpServers('[{"name":"a","url":"http://x"},{"name":"a","url":"http://y"}]', 'S'), /twice/);
    assert.throws(() => parseMcpServers('{', 'S'), /not valid JSON/);
    assert.throws(() => agenticFromEnv({ KNOT_AGENTIC: 'maybe' }), /KNOT_AGENTIC/);
    assert.throws(() => agenticFromEnv({ KNOT_AGENTIC_MAX_STEPS: '1' }), /KNOT_AGENTIC_MAX_STEPS/);
    assert.equal(allowed('https://a.example/mcp/x', ['https://a.example/mcp']), true);
    assert.equal(allowed('https://a.example/mcpx', ['https://a.example/mcp']), false);
    assert.equal(allowed('https://evil.example/', ['https://a.example']), false);
    const tools = namespaced('srv', [{ name: 'get.weather' }, { name: 'get_weather' }, { name: 'x'.repeat(80) }]);
    assert.deepEqual(tools.map((t) => t.name), ['srv__get_weather', 'srv__get_weather_2', `srv__${'x'.repeat(59)}`]);
    assert.ok(tools.every((t) => /^[a-zA-Z0-9_-]{1,64}$/.test(t.name)));
    assert.deepEqual(closed({ type: 'object', properties: { a: { type: 'object', properties: {} } } }),
      { type: 'object', properties: { a: { type: 'object', properties: {}, additionalProperties: false } }, additionalProperties: false });
  });
});

const ready = haveSmol() && haveNative();
const describeIf = (condition, name, fn) => (condition ? describe(name, fn) : describe.skip(name, fn));

describeIf(ready, 'the agentic loop in knot-serve (SmolLM2)', () => {
  let mcp;
  let server;
  before(async () => {
    mcp = await startMcpServer();
    server = await startServe(SMOL, [], {
      KNOT_MCP_SERVERS: JSON.stringify([
        { name: 'tools', url: `${mcp.url}/mcp` },
        { name: 'faulty', url: `${mcp.url}/faulty` },
        { name: 'vault', url: `${mcp.url}/auth`, headers: { authorization: 'Bearer s3cret' } },
      ]),
      KNOT_MCP_TIMEOUT_MS: '30000',
    });
  });
  after(async () => {
    server?.child.kill('SIGKILL');
    await mcp?.close();
  });

  test('the startup line names the MCP servers', () => {
    assert.match(server.out(), /agentic loop for requests that ask; MCP servers: tools, faulty, vault/);
  });

  test("tool_choice 'required': the calculator is called, its result comes back, the answer holds it", async () => {
    // All three servers listed first (the preflight), then the calculator's alone.
    const all = await agentic(server.url, { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1 });
    assert.deepEqual(all.json.knot.agentic.C0.servers.map((s) => [s.name, s.ok, s.tools]), [['tools', true, 2], ['faulty', true, 3], ['vault', true, 2]]);
    const r = await agentic(server.url, {
      messages: [{ role: 'user', content: QUESTION }], tool_choice: 'required', knot: { agentic: { servers: ['tools'] } },
    }, { 'x-knot-agentic': 'tools' });
    assert.equal(r.status, 200, r.text);
    const a = r.json.knot.agentic;
    assert.equal(a.C0.admitted, true);
    assert.equal(a.C0.via, 'body');
    assert.deepEqual(a.C0.servers.map((s) => [s.name, s.ok, s.tools]), [['tools', true, 2]]);
    const [first] = callsOf(r);
    assert.equal(first.name, 'tools__calculator');
    assert.equal(first.C1.valid, true);
    assert.equal(first.C2.outcome, 'ok');
    const result = resultOf(r, first.id);
    assert.match(result, /^-?\d+(\.\d+)?$/);
    assert.ok(r.json.choices[0].message.content.includes(result), `the answer '${r.json.choices[0].message.content}' holds ${result}`);
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    assert.equal(r.json.choices[0].message.tool_calls, undefined);
    assert.equal(a.C3.reason === 'answered' || a.C3.reason === 'repeated_call' || a.C3.reason === 'step_limit', true, a.C3.reason);
    assert.ok(a.steps.every((s) => s.C3 !== undefined));
    // The server really ran it.
    assert.ok(mcp.log.some((e) => e.name === 'calculator'));
    assert.equal(r.json.usage.total_tokens, a.total_tokens);
    assert.doesNotMatch(r.text, /s3cret/);
  });

  test('the loop on the Responses and Messages APIs: the same calls, gates and answer as on chat completions', async () => {
    const opt = { 'x-knot-agentic': 'tools' };
    const only = { knot: { agentic: { servers: ['tools'] } } };
    const chat = await agentic(server.url, { messages: [{ role: 'user', content: QUESTION }], tool_choice: 'required', ...only }, opt);
    const responses = await post(server.url, '/v1/responses', {
      model: 'm', temperature: 0, max_output_tokens: 120, input: QUESTION, tool_choice: 'required', ...only,
    }, { headers: opt });
    const messages = await post(server.url, '/v1/messages', {
      model: 'm', temperature: 0, max_tokens: 120, messages: [{ role: 'user', content: QUESTION }], tool_choice: { type: 'any' }, ...only,
    }, { headers: opt });
    assert.equal(responses.status, 200, responses.text);
    assert.equal(messages.status, 200, messages.text);
    const calls = (r) => r.json.knot.agentic.steps.flatMap((s) => s.calls ?? []).map((c) => [c.name, c.id, c.C1.valid, c.C2.outcome]);
    assert.ok(calls(chat).length > 0);
    assert.deepEqual(calls(responses), calls(chat));
    assert.deepEqual(calls(messages), calls(chat));
    assert.equal(responses.json.knot.agentic.C3.reason, chat.json.knot.agentic.C3.reason);
    assert.equal(responses.json.output.find((o) => o.type === 'message').content[0].text, chat.json.choices[0].message.content);
    assert.equal(messages.json.content.find((b) => b.type === 'text').text, chat.json.choices[0].message.content);
    assert.equal(messages.json.stop_reason, 'end_turn');
    // Streamed, the loop's calls and results come as `knot.event` events (which the official
    // clients pass through), then the answer.
    const streamed = await fetch(`${server.url}/v1/messages`, {
      method: 'POST', headers: { 'content-type': 'application/json', ...opt },
      body: JSON.stringify({ model: 'm', temperature: 0, max_tokens: 120, stream: true, messages: [{ role: 'user', content: QUESTION }], tool_choice: { type: 'any' }, ...only }),
    });
    const events = (await streamed.text()).split('\n\n').filter((e) => e.startsWith('event: ')).map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 6)));
    const loop = events.filter((e) => e.type === 'knot.event').map((e) => e.knot.agentic.event);
    assert.ok(loop.includes('call') && loop.includes('result'), JSON.stringify(loop));
    const text = events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'text_delta').map((e) => e.delta.text).join('');
    assert.equal(text, chat.json.choices[0].message.content);
    assert.equal(events.at(-1).type, 'message_stop');
  });

  test('streaming with the openai client: the calls and results as they happen, then the answer', async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
    const stream = await client.chat.completions.create(/** @type {any} */ ({
      model: 'm', temperature: 0, max_tokens: 120, stream: true, tool_choice: 'required',
      messages: [{ role: 'user', content: QUESTION }], knot: { agentic: { servers: ['tools'] } },
    }));
    const events = [];
    let content = '';
    const calls = [];
    let finish = null;
    let last;
    for await (const chunk of stream) {
      const c = /** @type {any} */ (chunk);
      if (c.knot?.agentic?.event) events.push(c.knot.agentic);
      const delta = c.choices[0]?.delta;
      for (const t of delta?.tool_calls ?? []) if (t.function?.name) calls.push(t.function.name);
      content += delta?.content ?? '';
      if (c.choices[0]?.finish_reason) {
        finish = c.choices[0].finish_reason;
        last = c;
      }
    }
    assert.deepEqual(events.slice(0, 3).map((e) => e.event), ['admission', 'step', 'call']);
    assert.equal(calls[0], 'tools__calculator');
    const result = events.find((e) => e.event === 'result');
    assert.equal(result.C2.outcome, 'ok');
    assert.ok(content.includes(result.content), `'${content}' holds ${result.content}`);
    assert.equal(finish, 'stop');
    assert.equal(last.knot.agentic.steps[0].calls[0].C2.outcome, 'ok');
  });

  // Each faulty tool, forced by name, ends in the gate that names it; the model reads the error.
  for (const [tool, args, outcome, cause] of [
    ['faulty__wait', {}, 'timeout', /did not answer within 1000 ms/],
    ['faulty__fail', {}, 'error', /failed on purpose/],
    ['faulty__big_report', {}, 'oversized', /larger than \d+ bytes/],
  ]) {
    test(`${tool}: C2 says '${outcome}', the loop goes on to an answer, the server keeps serving`, async () => {
      const r = await agentic(server.url, {
        messages: [{ role: 'user', content: 'Use the tool.' }],
        tool_choice: { type: 'function', function: { name: tool } },
        knot: { agentic: { tool_timeout_ms: 1000, servers: ['faulty'], ...args } },
      }, {});
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.knot.agentic.C0.via, 'body');
      const [call] = callsOf(r);
      assert.equal(call.name, tool);
      assert.equal(call.C2.outcome, outcome);
      assert.match(call.C2.cause, cause);
      assert.match(resultOf(r, call.id), new RegExp(`^Tool error \\(${outcome}\\)`));
      assert.ok(r.json.knot.agentic.steps.length >= 2, 'a step after the failed call');
      const plain = await post(server.url, '/v1/chat/completions', { model: 'm', temperature: 0, max_tokens: 5, messages: [{ role: 'user', content: 'Hi' }] });
      assert.equal(plain.status, 200);
    });
  }

  test('the hanging call is cancelled on the MCP server when its timeout passes', () => {
    assert.equal(mcp.log.findLast((e) => e.name === 'wait')?.cancelled, true);
  });

  test('a client that goes away cancels the pending tool call', async () => {
    const before = mcp.log.filter((e) => e.name === 'wait').length;
    const ac = new AbortController();
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json', 'x-knot-agentic': '1' },
      body: JSON.stringify({
        model: 'm', temperature: 0, max_tokens: 60, stream: true, messages: [{ role: 'user', content: 'Wait.' }],
        tool_choice: { type: 'function', function: { name: 'faulty__wait' } }, knot: { agentic: { servers: ['faulty'] } },
      }),
    });
    const reader = res.body.getReader();
    let text = '';
    while (!text.includes('"event":"call"')) {
      const { done, value } = await reader.read();
      assert.equal(done, false, `the stream ended before the call: ${text}`);
      text += new TextDecoder().decode(value);
    }
    // The call reached the server: then the client leaves (long before the 30 s timeout).
    for (let i = 0; i < 100 && mcp.log.filter((e) => e.name === 'wait').length === before; i++) await new Promise((r) => setTimeout(r, 20));
    ac.abort();
    let cancelled = false;
    for (let i = 0; i < 100 && !cancelled; i++) {
      await new Promise((r) => setTimeout(r, 50));
      cancelled = mcp.log.findLast((e) => e.name === 'wait').cancelled;
    }
    assert.equal(cancelled, true);
    const plain = await post(server.url, '/v1/chat/completions', { model: 'm', temperature: 0, max_tokens: 5, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(plain.status, 200);
  });

  test('without the opt-in, MCP configuration changes nothing: the plain API, no MCP traffic', async () => {
    const seen = mcp.requests.length;
    const messages = [{ role: 'user', content: 'What is the capital of France?' }];
    const r = await post(server.url, '/v1/chat/completions', { model: 'm', temperature: 0, max_tokens: 30, messages });
    assert.equal(r.status, 200);
    assert.equal(r.json.knot.agentic, undefined);
    const native = await nativeGenerator(KNOT_BIN)(messages, 30, undefined, SMOL);
    assert.equal(r.json.choices[0].message.content, native.text);
    // The client's own tools come back to it, as without MCP.
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const t = await post(server.url, '/v1/chat/completions', { model: 'm', temperature: 0, max_tokens: 40, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: 'required' });
    assert.equal(t.json.choices[0].finish_reason, 'tool_calls');
    assert.equal(t.json.knot.agentic, undefined);
    // Opted out by header: the same.
    const off = await post(server.url, '/v1/chat/completions', { model: 'm', temperature: 0, max_tokens: 30, messages }, { headers: { 'x-knot-agentic': '0' } });
    assert.equal(off.json.choices[0].message.content, native.text);
    assert.equal(mcp.requests.length, seen);
  });

  test("tools in the request skip preflight; a client's own tool comes back to it", async () => {
    const seen = mcp.requests.length;
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const r = await agentic(server.url, { messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: 'required' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.knot.agentic.C0.admitted, false);
    assert.equal(r.json.knot.agentic.C0.preflight, false);
    assert.equal(r.json.choices[0].finish_reason, 'tool_calls');
    assert.equal(mcp.requests.length, seen, 'no preflight');
  });

  test('the token and time budgets stop the loop before a turn, and C3 names them', async () => {
    const messages = [{ role: 'user', content: QUESTION }];
    const tokens = await agentic(server.url, { messages, knot: { agentic: { servers: ['tools'], max_total_tokens: 1 } } });
    assert.equal(tokens.status, 200, tokens.text);
    assert.deepEqual(tokens.json.knot.agentic.C3.reason, 'token_budget');
    assert.deepEqual(tokens.json.knot.agentic.steps, [{ step: 1, tools_offered: 2, tool_choice: 'auto', skipped: true, C3: { verdict: 'stop', reason: 'token_budget' } }]);
    assert.equal(tokens.json.choices[0].finish_reason, 'length');
    assert.equal(tokens.json.usage.completion_tokens, 0);
    // The preflight alone takes longer than 1 ms.
    const time = await agentic(server.url, { messages, knot: { agentic: { servers: ['tools'], max_ms: 1 } } });
    assert.equal(time.json.knot.agentic.C3.reason, 'time_budget');
  });

  test('bad requests: a named server without an allow-list, a bad header, budgets past the caps, the legacy endpoint', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const named = await agentic(server.url, { messages, knot: { agentic: { mcp_servers: [{ name: 'x', url: 'http://169.254.169.254/' }] } } });
    assert.equal(named.status, 400);
    assert.equal(named.json.error.code, 'mcp_server_not_allowed');
    const header = await agentic(server.url, { messages }, { 'x-knot-agentic': 'perhaps' });
    assert.equal(header.status, 400);
    const steps = await agentic(server.url, { messages, knot: { agentic: { max_steps: 64 } } });
    assert.equal(steps.status, 400);
    assert.equal(steps.json.error.param, 'knot.agentic.max_steps');
    const unknown = await agentic(server.url, { messages, knot: { agentic: { loops: 2 } } });
    assert.equal(unknown.json.error.param, 'knot.agentic.loops');
    const legacy = await post(server.url, '/v1/completions', { model: 'm', prompt: 'Hi', max_tokens: 2 }, { headers: { 'x-knot-agentic': '1' } });
    assert.equal(legacy.json.error.code, 'agentic_chat_only');
    const noTools = await post(server.url, '/v1/chat/completions', { model: 'm', messages, tool_choice: 'required' });
    assert.equal(noTools.status, 400);
    assert.equal(noTools.json.error.param, 'tool_choice');
  });
});

describeIf(ready, 'stdio MCP servers from an mcpServers file: the public filesystem and memory servers, one that dies', () => {
  let server;
  let dir;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'knot-mcp-'));
    writeFileSync(join(dir, 'note.txt'), 'hello from the filesystem server\n');
    const pkg = (name) => `${ROOT}pkg/node_modules/@modelcontextprotocol/${name}/dist/index.js`;
    const file = join(dir, 'mcp.json');
    writeFileSync(file, JSON.stringify({
      mcpServers: {
        fs: { command: process.execPath, args: [pkg('server-filesystem'), dir] },
        memory: { command: process.execPath, args: [pkg('server-memory')], env: { MEMORY_FILE_PATH: join(dir, 'memory.jsonl') } },
        stdio: { command: process.execPath, args: [`${ROOT}pkg/test/mcp-stdio-server.js`] },
      },
    }));
    server = await startServe(SMOL, ['--mcp', file], { KNOT_MCP_TIMEOUT_MS: '30000' });
  });
  after(() => server?.child.kill('SIGKILL'));

  /** One forced call of `tool` through the loop: its C2 outcome and what it answered. */
  const call = async (tool) => {
    const [srv] = tool.split('__');
    const r = await agentic(server.url, {
      messages: [{ role: 'user', content: 'Use the tool.' }], max_tokens: 24,
      tool_choice: { type: 'function', function: { name: tool } }, knot: { agentic: { servers: [srv] } },
    }, { 'x-knot-agentic': 'tools' });
    assert.equal(r.status, 200, r.text);
    const [first] = callsOf(r);
    assert.equal(first.name, tool);
    return { outcome: first.C2.outcome, result: resultOf(r, first.id) ?? '', r };
  };

  test('the startup line names them; a forced call of each public server answers its real result', async () => {
    assert.match(server.out(), /MCP servers: fs, memory, stdio/);
    const dirs = await call('fs__list_allowed_directories');
    assert.equal(dirs.outcome, 'ok');
    assert.ok(dirs.result.includes(dir), dirs.result);
    const graph = await call('memory__read_graph');
    assert.equal(graph.outcome, 'ok');
    assert.match(graph.result, /"entities"/);
  });

  test('a server that exits mid-call is a C2 error (its stderr kept out of the answer), then started again', async () => {
    const before = await call('stdio__pid');
    assert.equal(before.outcome, 'ok');
    // Its tool with a lookahead pattern is left out, with why; the others are offered.
    const listed = before.r.json.knot.agentic.C0.servers.find((s) => s.name === 'stdio');
    assert.equal(listed.tools, 2);
    assert.deepEqual(listed.left_out.map((l) => l.tool), ['stdio__ahead']);
    assert.equal(listed.left_out[0].reason, 'unsupported JSON Schema keyword "pattern with a lookahead" at #/properties/word');
    const crash = await call('stdio__crash');
    assert.equal(crash.outcome, 'error');
    assert.doesNotMatch(crash.r.text, /crashing on purpose/);
    assert.match(server.stderr(), /\[mcp stdio\] crashing on purpose/);
    const after = await call('stdio__pid');
    assert.equal(after.outcome, 'ok');
    assert.notEqual(after.result, before.result, 'a new process');
  });
});

describeIf(ready, 'the agentic loop on the tag path (SmolLM2 with a template that takes tools)', () => {
  let mcp;
  let server;
  before(async () => {
    mcp = await startMcpServer();
    server = await startServe(SMOL, ['--chat-template', `${ROOT}tests/fixtures/chat/chatml-tools.jinja`], {
      KNOT_MCP_SERVERS: JSON.stringify([{ name: 'tools', url: `${mcp.url}/mcp` }]),
    });
  });
  after(async () => {
    server?.child.kill('SIGKILL');
    await mcp?.close();
  });

  test("tool_choice 'required': the call inside <tool_call>, its result as a tool turn, the answer holds it", async () => {
    const r = await agentic(server.url, { messages: [{ role: 'user', content: QUESTION }], tool_choice: 'required' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.knot.tools.path, 'tag');
    const [first] = callsOf(r);
    assert.equal(first.name, 'tools__calculator');
    assert.equal(first.C2.outcome, 'ok');
    const result = resultOf(r, first.id);
    assert.ok(r.json.choices[0].message.content.includes(result), `the answer '${r.json.choices[0].message.content}' holds ${result}`);
  });
});

describeIf(ready && existsSync(GEMMA), 'the agentic loop in knot-serve (Gemma-3-270M, --agentic on, --mcp FILE)', () => {
  let mcp;
  let server;
  before(async () => {
    mcp = await startMcpServer();
    const file = join(mkdtempSync(join(tmpdir(), 'knot-mcp-')), 'mcp.json');
    writeFileSync(file, JSON.stringify([{ name: 'tools', url: `${mcp.url}/stateless` }]));
    server = await startServe(GEMMA, ['--chat-template', GEMMA_TEMPLATE, '--agentic', 'on', '--mcp', file], {});
  });
  after(async () => {
    server?.child.kill('SIGKILL');
    await mcp?.close();
  });

  test("tool_choice 'required': the calculator is called, the answer holds its result", async () => {
    const r = await agentic(server.url, { messages: [{ role: 'user', content: QUESTION }], tool_choice: 'required' }, {});
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.knot.agentic.C0.via, 'server');
    const [first] = callsOf(r);
    assert.equal(first.name, 'tools__calculator');
    assert.equal(first.C1.valid, true);
    assert.equal(first.C2.outcome, 'ok');
    const result = resultOf(r, first.id);
    assert.ok(r.json.choices[0].message.content.includes(result), `the answer '${r.json.choices[0].message.content}' holds ${result}`);
  });
});

// The corpus of real tool schemas (tests/fixtures/mcp-tools) through the loop: each public
// server's tools registered verbatim on an SDK server of its own (/corpus/S), SmolLM2 made to call
// a tool by naming it in tool_choice, the server validating the arguments it receives with Ajv
// (formats asserted). Seventeen servers are more than knot-serve takes configured (16): each
// request names its server, which the allow-list lets in. CI calls the first tool of the six
// servers tests/mcp_tools_smollm2.rs calls, in 48 tokens (the call and the answer after it; at 32,
// GitHub's six required strings do not fit); KNOT_FULL_CORPUS=1 calls every tool, in 96 tokens
// and a context that holds the largest schemas (MongoDB's, some 4,000 tokens).
const FULL_CORPUS = Boolean(process.env.KNOT_FULL_CORPUS);
const CORPUS_CI = ['everything', 'filesystem', 'github', 'mongodb', 'notion', 'playwright'];
const CORPUS_TOKENS = FULL_CORPUS ? 96 : 48;

describeIf(ready, `real tool schemas through the loop (SmolLM2; ${FULL_CORPUS ? 'every tool' : 'the first tool of six servers'})`, () => {
  const corpus = toolCorpus();
  const tools = corpus.flatMap((c) => namespaced(c.server, c.tools).map((t, i) => ({ ...t, first: i === 0, count: c.tools.length })));
  let mcp;
  let server;
  before(async () => {
    mcp = await startMcpServer();
    // The loop's time budget raised: the prompt of a large schema takes a while on a slow machine.
    server = await startServe(SMOL, FULL_CORPUS ? ['--max-context', '8192'] : [], { KNOT_AGENTIC_ALLOW: `${mcp.url}/corpus/`, KNOT_AGENTIC_MAX_MS: '600000' });
  });
  after(async () => {
    server?.child.kill('SIGKILL');
    await mcp?.close();
  });
  /** The request's own MCP server: corpus server `name`. */
  const named = (name) => ({ mcp_servers: [{ name, url: `${mcp.url}/corpus/${name}` }] });

  test('every tool of every server is offered: COLTRANE enforces each schema, none is left out', async () => {
    for (const c of corpus) {
      // The token budget ends the loop before its first turn: the listing alone.
      const r = await agentic(server.url, { messages: [{ role: 'user', content: 'Hi' }], knot: { agentic: { ...named(c.server), max_total_tokens: 1 } } });
      assert.equal(r.status, 200, r.text);
      const [listed] = r.json.knot.agentic.C0.servers;
      assert.deepEqual([listed.name, listed.ok, listed.tools, listed.left_out ?? []], [c.server, true, c.tools.length, []]);
    }
  });

  for (const t of tools.filter((x) => FULL_CORPUS || (x.first && CORPUS_CI.includes(x.server)))) {
    test(`${t.server}/${t.tool}: called by name, the server receives arguments valid under its schema`, async () => {
      const seen = mcp.log.length;
      // Two steps: the call, then the answer.
      const r = await agentic(server.url, {
        messages: [{ role: 'user', content: `Call the tool ${t.name}.` }], max_tokens: CORPUS_TOKENS,
        tool_choice: { type: 'function', function: { name: t.name } }, knot: { agentic: { ...named(t.server), max_steps: 2 } },
      });
      assert.equal(r.status, 200, r.text);
      const a = r.json.knot.agentic;
      assert.deepEqual(a.C0.servers.map((s) => [s.name, s.ok, s.tools, s.left_out ?? []]), [[t.server, true, t.count, []]]);
      const [call] = callsOf(r);
      assert.equal(call?.name, t.name, `no call of ${t.name}: ${JSON.stringify(a.steps)}`);
      const sent = a.messages.find((m) => m.tool_calls !== undefined)?.tool_calls[0].function.arguments;
      const what = `${t.name}: arguments ${sent}; C1 ${JSON.stringify(call.C1)}; C2 ${JSON.stringify(call.C2)}`;
      assert.equal(call.C1.valid, true, what);
      assert.equal(call.C2.outcome, 'ok', what);
      assert.equal(resultOf(r, call.id), 'valid', what);
      // What the SDK server itself received and made of it.
      const received = mcp.log.slice(seen);
      assert.deepEqual(received.map((e) => [e.server, e.name, e.valid, e.errors]), [[t.server, t.tool, true, []]], what);
      assert.deepEqual(received[0].args, JSON.parse(sent));
    });
  }
});
