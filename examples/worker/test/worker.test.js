// The Worker in workerd (Miniflare), driven by the official `openai` client and raw fetch: every
// route, streaming and not, greedy and seeded output equal to the native CLI, concurrency, a
// client going away, prefix reuse across turns, bad requests, and the memory it takes.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { MODEL, client, native, post, sleep, startLocal, stats } from './support.js';
import { freePort, inspectIsolate } from '../scripts/isolate.mjs';

const MiB = 2 ** 20;
const CAPITAL = [{ role: 'user', content: 'What is the capital of France? Answer in one sentence.' }];
const STORY = [{ role: 'user', content: 'Write a long story about a lighthouse keeper and a storm.' }];

/** @type {Awaited<ReturnType<typeof startLocal>>} */
let local;
/** @type {ReturnType<typeof client>} */
let openai;
/** The isolate through workerd's inspector, for its JS heap. */
let isolate;
const memory = {};
const mib = (b) => +(b / MiB).toFixed(1);

before(async () => {
  // A short line, so that 429s are reachable in a test.
  const inspectorPort = await freePort();
  local = await startLocal({ quiet: true, inspectorPort, vars: { KNOT_QUEUE_MAX: '2', KNOT_MAX_TOKENS: '400' } });
  openai = client(local.url);
  isolate = await inspectIsolate(inspectorPort);
});

after(async () => {
  isolate?.close();
  await local?.dispose();
  console.log('memory in workerd (MiB):', JSON.stringify(memory));
});

describe('routes', () => {
  test('GET /health and GET /v1/models', async () => {
    const health = await (await fetch(`${local.url}/health`)).json();
    assert.deepEqual(
      { ...health, context_length: undefined },
      { status: 'ok', model: MODEL, hidden_dim: 576, vocab_size: 49152, layers: '0-30', context_length: undefined, profile: 'local' },
    );
    assert.ok(health.context_length >= 1024);
    const s = await stats(local.url);
    memory.afterOpenMiB = mib(s.wasm_memory_bytes);
    memory.planMiB = mib(s.memory_plan.total);
    const list = await openai.models.list();
    assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
  });

  test('chat completions: greedy output equals the native CLI, whole and streamed', async () => {
    const conversations = [
      CAPITAL,
      [{ role: 'system', content: 'You are a terse assistant.' }, { role: 'user', content: 'Name three primary colours.' }],
      [...CAPITAL, { role: 'assistant', content: 'The capital of France is Paris.' }, { role: 'user', content: 'And of Spain?' }],
    ];
    for (const messages of conversations) {
      const want = await native(messages, 48);
      const r = await openai.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 48 });
      assert.equal(r.object, 'chat.completion');
      assert.equal(r.choices[0].message.role, 'assistant');
      assert.equal(r.choices[0].message.content, want.text);
      assert.equal(r.choices[0].finish_reason, want.finish_reason);
      assert.equal(r.usage.prompt_tokens, want.prompt_ids.length);
      assert.equal(r.usage.completion_tokens, want.ids.length);
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);

      const stream = await openai.chat.completions.create({
        model: MODEL, messages, temperature: 0, max_tokens: 48, stream: true, stream_options: { include_usage: true },
      });
      let text = '';
      let finish;
      let usage;
      let first = true;
      for await (const chunk of stream) {
        assert.equal(chunk.object, 'chat.completion.chunk');
        if (chunk.usage) {
          usage = chunk.usage;
          assert.deepEqual(chunk.choices, []);
          continue;
        }
        if (first) assert.equal(chunk.choices[0].delta.role, 'assistant');
        first = false;
        text += chunk.choices[0].delta.content ?? '';
        if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      }
      assert.equal(text, want.text);
      assert.equal(finish, want.finish_reason);
      assert.deepEqual(usage, r.usage);
    }
  });

  test('the stream is server-sent events ending in [DONE]', async () => {
    const res = await post(local.url, '/v1/chat/completions', { model: MODEL, messages: CAPITAL, temperature: 0, stream: true });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const events = res.text.split('\n\n').filter(Boolean);
    assert.ok(events.every((e) => e.startsWith('data: ')));
    assert.equal(events.at(-1), 'data: [DONE]');
    const last = JSON.parse(events.at(-2).slice(6));
    assert.equal(last.choices[0].finish_reason, 'stop');
  });

  test('completions: plain prompts and token ids, whole and streamed', async () => {
    const prompt = 'The three primary colours are';
    const want = await native(prompt, 24);
    const r = await openai.completions.create({ model: MODEL, prompt, temperature: 0, max_tokens: 24 });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].text, want.text);
    assert.equal(r.usage.prompt_tokens, want.prompt_ids.length);
    const byIds = await openai.completions.create({ model: MODEL, prompt: want.prompt_ids, temperature: 0, max_tokens: 24 });
    assert.equal(byIds.choices[0].text, want.text);
    let text = '';
    for await (const chunk of await openai.completions.create({ model: MODEL, prompt, temperature: 0, max_tokens: 24, stream: true })) {
      text += chunk.choices[0]?.text ?? '';
    }
    assert.equal(text, want.text);
    // The legacy endpoint's default is 16 tokens.
    const short = await openai.completions.create({ model: MODEL, prompt, temperature: 0 });
    assert.equal(short.usage.completion_tokens, 16);
    assert.equal(short.choices[0].finish_reason, 'length');
  });

  test('stop sequences end the text before them, whole and streamed', async () => {
    const want = (await native(CAPITAL, 48)).text; // "The capital of France is Paris."
    for (const stop of [' Paris', ['xyz', 'of France']]) {
      const cut = want.slice(0, Math.min(...[].concat(stop).map((s) => (want.includes(s) ? want.indexOf(s) : Infinity))));
      const r = await openai.chat.completions.create({ model: MODEL, messages: CAPITAL, temperature: 0, stop });
      assert.equal(r.choices[0].message.content, cut);
      assert.equal(r.choices[0].finish_reason, 'stop');
      let text = '';
      for await (const c of await openai.chat.completions.create({ model: MODEL, messages: CAPITAL, temperature: 0, stop, stream: true })) {
        text += c.choices[0]?.delta?.content ?? '';
      }
      assert.equal(text, cut);
    }
  });

  test('max_tokens and max_completion_tokens end with finish_reason length', async () => {
    const r = await openai.chat.completions.create({ model: MODEL, messages: STORY, temperature: 0, max_tokens: 5 });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 5);
    assert.equal(r.choices[0].message.content, (await native(STORY, 5)).text);
    const c = await openai.chat.completions.create({ model: MODEL, messages: STORY, temperature: 0, max_completion_tokens: 3 });
    assert.equal(c.usage.completion_tokens, 3);
  });

  test('seeded sampling, penalties and MOA equal the native CLI for the same seed', async () => {
    const messages = [{ role: 'user', content: 'Write a haiku about rain.' }];
    const sampled = await openai.chat.completions.create({ model: MODEL, messages, temperature: 0.8, top_p: 0.9, seed: 42, max_tokens: 24 });
    const want = await native(messages, 24, ['--temperature', '0.8', '--top-p', '0.9', '--top-k', '0', '--min-p', '0', '--seed', '42']);
    assert.equal(sampled.choices[0].message.content, want.text);
    const again = await openai.chat.completions.create({ model: MODEL, messages, temperature: 0.8, top_p: 0.9, seed: 42, max_tokens: 24 });
    assert.equal(again.choices[0].message.content, want.text);
    // A negative seed is the same 64 bits as OpenAI's.
    const neg = await openai.chat.completions.create({ model: MODEL, messages, temperature: 0.8, seed: -1, max_tokens: 12 });
    const wantNeg = await native(messages, 12, ['--temperature', '0.8', '--top-k', '0', '--top-p', '1', '--min-p', '0', '--seed', String(2n ** 64n - 1n)]);
    assert.equal(neg.choices[0].message.content, wantNeg.text);
    const penalized = await openai.chat.completions.create({
      model: MODEL, messages: STORY, temperature: 0, presence_penalty: 1.5, frequency_penalty: 0.5, max_tokens: 32,
    });
    const wantPenalty = await native(STORY, 32, ['--temperature', '0', '--presence-penalty', '1.5', '--frequency-penalty', '0.5']);
    assert.equal(penalized.choices[0].message.content, wantPenalty.text);
    assert.notEqual(wantPenalty.text, (await native(STORY, 32)).text, 'the penalties change the text');
    const moa = await openai.chat.completions.create({ model: MODEL, messages, seed: 7, max_tokens: 24, moa: true });
    assert.equal(moa.choices[0].message.content, (await native(messages, 24, ['--moa', '', '--seed', '7'])).text);
  });

  test('response_format and the coltrane extension constrain the output', async () => {
    const messages = [{ role: 'user', content: 'Describe a cat as JSON with a name and an age.' }];
    const json = await openai.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 64, response_format: { type: 'json_object' } });
    assert.doesNotThrow(() => JSON.parse(json.choices[0].message.content), json.choices[0].message.content);
    const schema = { type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } }, required: ['name', 'age'], additionalProperties: false };
    const typed = await openai.chat.completions.create({
      model: MODEL, messages, temperature: 0, max_tokens: 64,
      response_format: { type: 'json_schema', json_schema: { name: 'cat', schema, strict: true } },
    });
    const cat = JSON.parse(typed.choices[0].message.content);
    assert.deepEqual(Object.keys(cat).sort(), ['age', 'name']);
    assert.ok(Number.isInteger(cat.age) && typeof cat.name === 'string');
    const balanced = await openai.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 48, coltrane: { preset: 'balanced' } });
    assert.equal(typeof balanced.choices[0].message.content, 'string');
    // A schema outside COLTRANE's subset: 422, named.
    const res = await post(local.url, '/v1/chat/completions', {
      model: MODEL, messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '^[a-z]+$' } } },
    });
    assert.equal(res.status, 422, res.text);
    assert.equal(res.json.error.code, 'unsupported_schema');
  });
});

describe('bad requests get OpenAI-shaped errors, and the next request is unharmed', () => {
  const chat = (body, init) => post(local.url, '/v1/chat/completions', body, init);
  const shaped = (res, status, match) => {
    assert.equal(res.status, status, res.text);
    assert.deepEqual(Object.keys(res.json.error).sort(), ['code', 'message', 'param', 'type']);
    assert.match(res.json.error.message, match);
  };

  test('routes and methods: 404, 405', async () => {
    const nf = await fetch(`${local.url}/v1/nothing`);
    shaped({ status: nf.status, json: await nf.json(), text: '' }, 404, /Unknown route/);
    const wrong = await fetch(`${local.url}/v1/chat/completions`);
    assert.equal(wrong.headers.get('allow'), 'POST');
    shaped({ status: wrong.status, json: await wrong.json(), text: '' }, 405, /GET is not allowed/);
    const health = await fetch(`${local.url}/health`, { method: 'POST', body: '{}' });
    assert.equal(health.status, 405);
  });

  test('bodies and parameters: 400, 404, 413', async () => {
    shaped(await chat('{"model": '), 400, /not valid JSON/);
    shaped(await chat('[1, 2]'), 400, /must be a JSON object/);
    shaped(await chat({ messages: CAPITAL }), 400, /must provide a model/);
    shaped(await chat({ model: 'gpt-4o', messages: CAPITAL }), 404, /The model 'gpt-4o' does not exist/);
    shaped(await chat({ model: MODEL }), 400, /'messages' must be a non-empty list/);
    shaped(await chat({ model: MODEL, messages: [{ role: 'wizard', content: 'hi' }] }), 400, /role 'wizard' is not supported/);
    shaped(await chat({ model: MODEL, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }), 400, /only text parts/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, n: 2 }), 400, /Only 'n': 1/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, temperature: 3 }), 400, /'temperature' must be a number between 0 and 2/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, top_p: 0 }), 400, /top_p/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, presence_penalty: -3 }), 400, /presence_penalty/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, seed: 1.5 }), 400, /'seed' must be an integer/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, stop: ['a', 'b', 'c', 'd', 'e'] }), 400, /'stop'/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, max_tokens: 401 }), 400, /more than this server's limit of 400/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, max_tokens: 0 }), 400, /'max_tokens' must be an integer/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, stream_options: { include_usage: true } }), 400, /only allowed with 'stream': true/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, tools: [{ type: 'function', function: { name: 'f' } }] }), 400, /'tools' is not supported/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, logprobs: true }), 400, /'logprobs' is not supported/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, frobnicate: 1 }), 400, /Unrecognized request argument supplied: frobnicate/);
    const moaTemp = await chat({ model: MODEL, messages: CAPITAL, moa: true, temperature: 0.5 });
    shaped(moaTemp, 400, /temperature does not apply with moa/);
    assert.deepEqual([moaTemp.json.error.code, moaTemp.json.error.param], ['invalid_option', 'temperature']);
    shaped(await chat({ model: MODEL, messages: CAPITAL, moa: { k: 99 } }), 400, /moa\.k must be an integer in \[1, 32\]/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, coltrane: { preset: 'xml' } }), 400, /preset/);
    shaped(await chat({ model: MODEL, messages: CAPITAL, response_format: { type: 'yaml' } }), 400, /response_format/);
    const draft = await chat({ model: MODEL, messages: CAPITAL, draft_mode: { maxDraft: 99 } });
    shaped(draft, 400, /maxDraft/);
    assert.equal(draft.json.error.param, 'draft_mode');
    shaped(await post(local.url, '/v1/completions', { model: MODEL, prompt: ['a', 'b'] }), 400, /one prompt per request/);
    shaped(await post(local.url, '/v1/completions', { model: MODEL, prompt: 'x', echo: true }), 400, /'echo' is not supported/);
    const outside = await post(local.url, '/v1/completions', { model: MODEL, prompt: [1, 99999999] });
    shaped(outside, 400, /token id 99999999 is out of range for a vocabulary of 49152/);
    assert.deepEqual([outside.json.error.code, outside.json.error.param], ['token_out_of_range', 'prompt']);
    // Neutral values of unsupported parameters pass (some clients send them by default).
    assert.equal((await chat({ model: MODEL, messages: CAPITAL, temperature: 0, logprobs: false, tools: [], max_tokens: 4 })).status, 200);
    // Bodies over the cap: told by Content-Length, and found while reading a chunked one.
    const big = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x'.repeat(300_000) }] });
    shaped(await chat(big), 413, /larger than 262144 bytes/);
    const chunked = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(big));
        c.close();
      },
    });
    shaped(await chat(chunked, { duplex: 'half' }), 413, /larger than/);
    // A prompt longer than the context: 400 context_length_exceeded.
    const long = await chat({ model: MODEL, messages: [{ role: 'user', content: 'word '.repeat(5000) }] });
    shaped(long, 400, /the prompt \(\d+ tokens with the conversation\) exceeds the context length \d+/);
    assert.deepEqual([long.json.error.code, long.json.error.param], ['context_length_exceeded', 'messages']);
  });

  test('after all that, the same answer as before', async () => {
    const r = await openai.chat.completions.create({ model: MODEL, messages: CAPITAL, temperature: 0 });
    assert.equal(r.choices[0].message.content, (await native(CAPITAL, 48)).text);
  });
});

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

  test('memory: a 256-token generation and 20 requests stay within the plan and the isolate', async () => {
    const sampling = isolate.sampler(20);
    await openai.chat.completions.create({ model: MODEL, messages: STORY, temperature: 0.7, seed: 1, max_tokens: 256 });
    const peak = await sampling.stop();
    memory.after256TokensMiB = +((await stats(local.url)).wasm_memory_bytes / MiB).toFixed(1);
    // The live JS heap is small; R2 answers already copied into wasm wait as array buffers
    // until V8 collects them.
    memory.jsHeapMiB = mib(peak.heapBytes);
    memory.jsArrayBuffersAwaitingCollectionMiB = mib(peak.buffersBytes);
    assert.ok(peak.heapBytes < 16 * MiB, `JS heap ${peak.heapBytes}`);
    for (let i = 0; i < 20; i++) {
      await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `What is ${i} + ${i}?` }], temperature: 0, max_tokens: 16 });
    }
    const s = await stats(local.url);
    memory.after20RequestsMiB = +(s.wasm_memory_bytes / MiB).toFixed(1);
    memory.rangeReadsPerToken = s.layer_reads_per_token;
    assert.ok(s.wasm_memory_bytes <= s.memory_plan.total, `${s.wasm_memory_bytes} > ${s.memory_plan.total}`);
    assert.ok(s.wasm_memory_bytes < 100 * MiB);
  });
});
