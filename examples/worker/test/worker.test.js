// The Worker in workerd (Miniflare), driven by the official `openai` client and raw fetch: the
// package's OpenAI API test file (the one knot-serve runs too: every OpenAI route, streaming and
// not, output equal to the native CLI, tools, prefill windows, bad requests), then what is the
// Worker's own: /health, concurrency in one isolate, a client going away, prefix reuse across
// turns, the memory it takes, four multi-turn chats at once, and a burst of 48 requests.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { MODEL, client, native, post, sleep, startLocal, stats } from './support.js';
import { freePort, inspectIsolate } from '../scripts/isolate.mjs';
import { openaiApiSuite } from '../../../pkg/test/openai-api.js';
import { agentApisSuite } from '../../../pkg/test/agent-apis.js';
import { startMcpServer } from '../../../pkg/test/mcp-server.js';
import { CHATS, atOnceAndAlone, problems } from '../../../pkg/test/chats.js';
import { burst, judge } from '../../../pkg/test/load.js';

const MiB = 2 ** 20;
const CAPITAL = [{ role: 'user', content: 'What is the capital of France? Answer in one sentence.' }];
const STORY = [{ role: 'user', content: 'Write a long story about a lighthouse keeper and a storm.' }];

/** @type {Awaited<ReturnType<typeof startLocal>>} */
let local;
/** @type {ReturnType<typeof client>} */
let openai;
/** An MCP server made with the official SDK, in this process; the Worker reaches it over HTTP. */
let mcp;
/** The isolate through workerd's inspector, for its JS heap. */
let isolate;
const memory = {};
const mib = (b) => +(b / MiB).toFixed(1);

before(async () => {
  // A short line, so that 429s are reachable in a test.
  const inspectorPort = await freePort();
  mcp = await startMcpServer();
  // MCP servers configured, the loop for requests that ask: every test not asking is the plain
  // API with MCP configuration present.
  local = await startLocal({
    quiet: true, inspectorPort, vars: {
      KNOT_QUEUE_MAX: '2', KNOT_MAX_TOKENS: '400',
      KNOT_MCP_SERVERS: JSON.stringify([{ name: 'tools', url: `${mcp.url}/mcp` }, { name: 'faulty', url: `${mcp.url}/faulty` }]),
      KNOT_AGENTIC_ALLOW: `${mcp.url}/mcp,${mcp.url}/faulty,${mcp.url}/stateless`,
      KNOT_MCP_TIMEOUT_MS: '20000',
    },
  });
  openai = client(local.url);
  isolate = await inspectIsolate(inspectorPort);
});

after(async () => {
  isolate?.close();
  await local?.dispose();
  await mcp?.close();
  console.log('memory in workerd (MiB):', JSON.stringify(memory));
});

describe('routes', () => {
  test('GET /health and GET /v1/models', async () => {
    const health = await (await fetch(`${local.url}/health`)).json();
    assert.deepEqual(
      { ...health, context_length: undefined },
      {
        status: 'ok', model: MODEL, architecture: 'llama', hidden_dim: 576, vocab_size: 49152, layers: 30, context_length: undefined,
        // KNOT_MAX_SEQUENCES 'auto' under 96 MiB: one at a time.
        max_sequences: 1, prefix_reuse: true, prefill_windows: true, chat_template: { source: 'file', name: null },
        queue: { active: 0, waiting: 0 }, profile: 'local',
      },
    );
    // 96 MiB streaming 4 layers, an f16 KV cache and one 512-token prefill window: 768.
    assert.ok(health.context_length >= 768, String(health.context_length));
    const s = await stats(local.url);
    assert.equal(s.contextLength, health.context_length);
    assert.deepEqual(s.sequences, { max: 1, active: 0, admitted: 0, ended: 0 });
    memory.afterOpenMiB = mib(s.wasmMemoryBytes);
    memory.planMiB = mib(s.memoryPlan.total);
    const list = await openai.models.list();
    assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
  });
});

// The API file's quick subset and the prefill windows: what is the Worker's is how it wires the
// module (knot-serve runs the whole file under Node, the same module code).
openaiApiSuite({ url: () => local.url, model: MODEL, native, quick: true });
agentApisSuite({ url: () => local.url, model: MODEL, quick: true });

describe('one model, many requests', () => {
  test('concurrent requests queue and all complete correctly; past the line, 429 with Retry-After', async () => {
    const asks = [CAPITAL, [{ role: 'user', content: 'Name three primary colours.' }]];
    const wants = await Promise.all(asks.map(async (m) => ((await native(m, 32))).text));
    const got = await Promise.all(asks.map((messages) => openai.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 32 })));
    assert.deepEqual(got.map((r) => r.choices[0].message.content), wants);
    // Five at once: one generating, two waiting (the line's bound here), the rest refused with
    // 429. (Miniflare's workerd takes new requests in while one is busy with R2 only once it
    // ends, so all but the first arrive together; deployed, they arrive as sent.)
    const long = () => post(local.url, '/v1/chat/completions', { model: MODEL, messages: STORY, temperature: 0, max_tokens: 40 });
    const results = await Promise.all([0, 1, 2, 3, 4].map(async (i) => {
      await sleep(i * 50);
      return long();
    }));
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status === 429);
    assert.equal(ok.length + refused.length, 5, results.map((r) => r.status).join(' '));
    assert.ok(ok.length >= 3 && refused.length >= 1, results.map((r) => r.status).join(' '));
    for (const r of refused) {
      assert.equal(r.json.error.type, 'rate_limit_error');
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
    }
    const want = (await native(STORY, 40)).text;
    for (const r of ok) assert.equal(r.json.choices[0].message.content, want);
  });

  test('a client that goes away mid-stream aborts its generation and frees the model', async () => {
    await new Promise((resolve, reject) => {
      const req = http.request(`${local.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        let chunks = 0;
        res.on('data', () => {
          if (++chunks === 4) {
            req.destroy();
            resolve();
          }
        });
      });
      req.on('error', () => {});
      req.on('close', () => resolve());
      req.end(JSON.stringify({ model: MODEL, messages: STORY, temperature: 0, max_tokens: 400, stream: true }));
      setTimeout(() => reject(new Error('no chunks came')), 60_000);
    });
    // The next request gets the model, and the abandoned generation stopped far short of 400.
    const r = await openai.chat.completions.create({ model: MODEL, messages: CAPITAL, temperature: 0 });
    assert.equal(r.choices[0].message.content, (await native(CAPITAL, 48)).text);
    const recent = (await stats(local.url)).recent;
    // The generation before the one just made.
    const abandoned = recent.at(-2);
    assert.equal(abandoned.finish, 'aborted', JSON.stringify(recent));
    assert.ok(abandoned.tokens < 100, JSON.stringify(abandoned));
    // The same through the openai client's own abort.
    const controller = new AbortController();
    const stream = await openai.chat.completions.create(
      { model: MODEL, messages: STORY, temperature: 0, max_tokens: 400, stream: true },
      { signal: controller.signal },
    );
    let n = 0;
    try {
      // The client ends the iteration quietly on abort (or throws an abort error).
      for await (const _ of stream) if (++n === 3) controller.abort();
    } catch (e) {
      assert.match(String(e?.name ?? e), /abort/i);
    }
    assert.equal(n, 3);
    const after = await openai.chat.completions.create({ model: MODEL, messages: CAPITAL, temperature: 0 });
    assert.equal(after.choices[0].message.content, (await native(CAPITAL, 48)).text);
    assert.equal((await stats(local.url)).recent.at(-2).finish, 'aborted');
  });

  test('the second turn of a conversation reuses the first (x-knot-prefill: hit) and equals a cold run', async () => {
    const turn1 = [{ role: 'user', content: 'Tell me one fact about octopuses.' }];
    const r1 = await post(local.url, '/v1/chat/completions', { model: MODEL, messages: turn1, temperature: 0, max_tokens: 40 });
    assert.equal(r1.status, 200);
    const answer = r1.json.choices[0].message.content;
    const turn2 = [...turn1, { role: 'assistant', content: answer }, { role: 'user', content: 'And one about squids?' }];
    const r2 = await post(local.url, '/v1/chat/completions', { model: MODEL, messages: turn2, temperature: 0, max_tokens: 40 });
    assert.equal(r2.headers.get('x-knot-prefill'), 'hit');
    assert.ok(Number(r2.headers.get('x-knot-prefill-reused')) >= r1.json.usage.prompt_tokens, r2.headers.get('x-knot-prefill-reused'));
    assert.equal(r2.json.choices[0].message.content, (await native(turn2, 40)).text);
    // Streaming reports it too; another conversation does not match.
    const turn3 = [...turn2, { role: 'assistant', content: r2.json.choices[0].message.content }, { role: 'user', content: 'Thanks!' }];
    const r3 = await post(local.url, '/v1/chat/completions', { model: MODEL, messages: turn3, temperature: 0, max_tokens: 8, stream: true });
    assert.equal(r3.headers.get('x-knot-prefill'), 'hit');
    const other = await post(local.url, '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Hello!' }], temperature: 0, max_tokens: 4 });
    assert.equal(other.headers.get('x-knot-prefill'), 'mismatch');
  });

  test('memory: a 256-token generation and 10 requests stay within the plan and the isolate', async () => {
    const sampling = isolate.sampler(20);
    await openai.chat.completions.create({ model: MODEL, messages: STORY, temperature: 0.7, seed: 1, max_tokens: 256 });
    const peak = await sampling.stop();
    memory.after256TokensMiB = +((await stats(local.url)).wasmMemoryBytes / MiB).toFixed(1);
    // The live JS heap is small; R2 answers already copied into wasm wait as array buffers
    // until V8 collects them.
    memory.jsHeapMiB = mib(peak.heapBytes);
    memory.jsArrayBuffersAwaitingCollectionMiB = mib(peak.buffersBytes);
    assert.ok(peak.heapBytes < 16 * MiB, `JS heap ${peak.heapBytes}`);
    for (let i = 0; i < 10; i++) {
      await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `What is ${i} + ${i}?` }], temperature: 0, max_tokens: 16 });
    }
    const s = await stats(local.url);
    memory.after10RequestsMiB = +(s.wasmMemoryBytes / MiB).toFixed(1);
    memory.rangeReadsPerToken = s.generation.layerReadsPerToken;
    assert.ok(s.wasmMemoryBytes <= s.memoryPlan.total, `${s.wasmMemoryBytes} > ${s.memoryPlan.total}`);
    assert.ok(s.wasmMemoryBytes < 100 * MiB);
  });
});

describe('the agentic loop over MCP servers', () => {
  const ask = (body, headers = { 'x-knot-agentic': 'tools' }) => post(local.url, '/v1/chat/completions', {
    model: MODEL, temperature: 0, max_tokens: 120, ...body,
  }, { headers });

  test("tool_choice 'required': the Worker calls the calculator on the MCP server, the answer holds the result", async () => {
    const seen = mcp.log.length;
    const r = await ask({
      messages: [{ role: 'user', content: 'What is 17 multiplied by 23?' }], tool_choice: 'required',
      knot: { agentic: { servers: ['tools'] } },
    });
    assert.equal(r.status, 200, r.text);
    const a = r.json.knot.agentic;
    assert.deepEqual(a.C0.servers.map((s) => [s.name, s.ok, s.tools]), [['tools', true, 2]]);
    const call = a.steps[0].calls[0];
    assert.equal(call.name, 'tools__calculator');
    assert.equal(call.C1.valid, true);
    assert.equal(call.C2.outcome, 'ok');
    assert.equal(mcp.log[seen].name, 'calculator');
    const result = a.messages.find((m) => m.role === 'tool').content;
    assert.ok(r.json.choices[0].message.content.includes(result), `'${r.json.choices[0].message.content}' holds ${result}`);
  });

  test('the hanging tool ends in C2 timeout (cancelled on the server); the Worker keeps serving', async () => {
    const r = await ask({
      messages: [{ role: 'user', content: 'Wait.' }], tool_choice: { type: 'function', function: { name: 'faulty__wait' } },
      knot: { agentic: { servers: ['faulty'], tool_timeout_ms: 1000, max_steps: 2 } },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.knot.agentic.steps[0].calls[0].C2.outcome, 'timeout');
    assert.equal(r.json.knot.agentic.C3.reason, 'step_limit');
    await sleep(200);
    assert.equal(mcp.log.findLast((e) => e.name === 'wait').cancelled, true);
    const plain = await openai.chat.completions.create({ model: MODEL, messages: CAPITAL, max_tokens: 5, temperature: 0 });
    assert.equal(plain.choices.length, 1);
  });

  test('the allow-list: a request may name a server under it, never one outside', async () => {
    const inside = await ask({
      messages: [{ role: 'user', content: 'Which country is Lima in?' }], tool_choice: 'required',
      knot: { agentic: { servers: [], mcp_servers: [{ name: 'extra', url: `${mcp.url}/stateless` }] } },
    });
    assert.equal(inside.status, 200, inside.text);
    assert.deepEqual(inside.json.knot.agentic.C0.servers.map((s) => s.name), ['extra']);
    assert.match(inside.json.knot.agentic.steps[0].calls[0].name, /^extra__/);
    const requests = mcp.requests.length;
    const outside = await ask({
      messages: [{ role: 'user', content: 'Hi' }],
      knot: { agentic: { mcp_servers: [{ name: 'vault', url: `${mcp.url}/auth`, headers: { authorization: 'Bearer s3cret' } }] } },
    });
    assert.equal(outside.status, 400);
    assert.equal(outside.json.error.code, 'mcp_server_not_allowed');
    assert.doesNotMatch(outside.text, /s3cret/);
    assert.equal(mcp.requests.length, requests, 'no request to a server outside the list');
  });

  test('a stdio server (a command) is refused, and workerd says it cannot start processes', async () => {
    const r = await ask({
      messages: [{ role: 'user', content: 'Hi' }],
      knot: { agentic: { mcp_servers: { mcpServers: { fs: { command: 'npx', args: ['-y', 'some-server'] } } } } },
    });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /starts a command \(a stdio server\): this runtime cannot start processes \(a Worker, a page\)/);
  });
});

// Four people each holding a four-turn chat with one Worker at once. As shipped but for what four
// at once need: KNOT_MAX_SEQUENCES=4 (shipped 'auto' is 1 under 96 MiB) and KNOT_MEMORY_BUDGET_MB=
// 160 (four KV caches beside the resident tensors do not fit 96 MiB; workerd here has no 128 MB
// isolate limit). Every later turn reuses the conversation so far, every answer equals the chat
// run alone.
describe('four chats at once, then a burst', () => {
  /** @type {Awaited<ReturnType<typeof startLocal>>} */
  let four;
  before(async () => {
    // No Rate Limiting binding: 32 turns, a burst of 48 and /stats polls can pass 120 in its minute.
    four = await startLocal({ quiet: true, rateLimit: false, vars: { KNOT_MAX_SEQUENCES: '4', KNOT_MEMORY_BUDGET_MB: '160', KNOT_QUEUE_MAX: '4' } });
  });
  after(() => four?.dispose());

  test('4 clients x 4 turns at once: every later turn a prefix hit reusing the previous prompt, answers equal alone', async () => {
    const run = await atOnceAndAlone(four.url, CHATS, { model: MODEL, maxTokens: 8 });
    const later = run.together.flatMap((turns) => turns.slice(1));
    const hits = later.filter((t) => t.prefill === 'hit').length;
    const reused = later.reduce((n, t) => n + t.reused, 0);
    const prompts = later.reduce((n, t) => n + t.promptTokens, 0);
    console.log(`Worker, 4 chats x 4 turns: at once ${run.togetherMs} ms, one after another ${run.aloneMs} ms `
      + `(${(run.togetherMs / run.aloneMs).toFixed(3)}x); later turns ${hits}/${later.length} hits, `
      + `${reused} of their ${prompts} prompt tokens reused`);
    assert.deepEqual(problems(run), []);
    const s = await stats(four.url);
    assert.equal(s.sequences.max, 4);
    assert.ok(s.prefixReuse.hits >= later.length, JSON.stringify(s.prefixReuse));
  });

  // The same burst as knot-serve's (pkg/test/load.js): 48 requests at once, a quarter of the
  // streams left mid-stream, some malformed.
  test('48 requests at once: answered or 429, malformed refused, no 5xx, back to idle within the plan', async () => {
    const b = await burst(four.url, { model: MODEL, maxTokens: 16 });
    const { found, counts } = judge(b);
    console.log(`Worker burst: ${JSON.stringify(counts)}`);
    assert.deepEqual(found, []);
    assert.ok(counts.answered >= 1 && counts.refused >= 1, JSON.stringify(counts));
    assert.equal(counts.malformed, 6);
    let s;
    for (let i = 0; i < 100; i++) {
      s = await stats(four.url);
      if (s.sequences.active === 0 && s.queue.waiting === 0 && !s.queue.busy) break;
      await sleep(50);
    }
    assert.equal(s.sequences.active, 0);
    assert.equal(s.queue.waiting, 0);
    assert.ok(s.kvCacheBytes <= s.memoryPlan.kvCache + s.memoryPlan.prefillWindows, `KV ${s.kvCacheBytes} within the plan's ${s.memoryPlan.kvCache}`);
    assert.ok(s.wasmMemoryBytes <= s.memoryPlan.total + 64 * 2 ** 20, `wasm memory ${s.wasmMemoryBytes} near the plan's ${s.memoryPlan.total}`);
    // It serves as before.
    const again = await post(four.url, '/v1/completions', { model: MODEL, prompt: 'The sea is', max_tokens: 4, temperature: 0 });
    assert.equal(again.status, 200, again.text);
  });
});
