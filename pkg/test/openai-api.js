// The OpenAI API test file both servers run — the Worker in workerd (examples/worker/test/
// worker.test.js) and knot-serve in Node, Bun and Deno (test/serve.test.js) — driven by the
// official `openai` client and raw fetch: chat and completions, whole and streamed, greedy and
// seeded output equal to the native CLI, stop sequences, structured output, tool calls (every
// call parses and validates against its tool's schema), explicit prefill windows, and bad
// requests answered with OpenAI-shaped errors while the next request is unharmed.
//
// The server runs SmolLM2-135M-Instruct with max_tokens capped at 400, a context of at least
// 1024, a 256 KiB body cap and terminal prosody `bias` (so the native reference it is given runs
// with `--prosody bias` too).
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';
import { describe, test, testIf } from './harness.js';
import { post } from './servers.js';

/**
 * `quick`: only the models list, greedy chat, forced tool calls and a malformed history, plus the
 * prefill windows unless `windows` is false (the Worker runs that; Bun and Deno that without the
 * windows; Node the whole file: the module's code is the same everywhere, the subsets check each
 * server's wiring).
 * @param {{ url(): string, model: string, native(input: object[] | string, n: number, flags?: string[]): Promise<any>,
 *   windows?: boolean, quick?: boolean }} server
 */
export function openaiApiSuite(server) {
/** A test the quick subset leaves out. */
const full = (name, fn) => testIf(!server.quick, name, fn);
const CAPITAL = [{ role: 'user', content: 'What is the capital of France? Answer in one sentence.' }];
const STORY = [{ role: 'user', content: 'Write a long story about a lighthouse keeper and a storm.' }];
const GREEDY = ['--temperature', '0'];
/** The native CLI, run as the server runs (its `native` adds `--prosody bias`). */
const nat = (input, n, flags = GREEDY) => server.native(input, n, flags);
/** The official client, made at first use: the server's URL is known once its own hooks ran. */
let client;
/** @type {OpenAI} */
const openai = /** @type {any} */ (new Proxy({}, {
  get: (_, key) => {
    client ??= new OpenAI({ baseURL: `${server.url()}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 120_000 });
    return client[key];
  },
}));

describe('the OpenAI routes', () => {
  test('GET /v1/models', async () => {
    const list = await openai.models.list();
    assert.deepEqual(list.data.map((m) => m.id), [server.model]);
  });

  test('chat completions: greedy output equals the native CLI, whole and streamed', async () => {
    const conversations = [
      CAPITAL,
      [{ role: 'system', content: 'You are a terse assistant.' }, { role: 'user', content: 'Name three primary colours.' }],
      [...CAPITAL, { role: 'assistant', content: 'The capital of France is Paris.' }, { role: 'user', content: 'And of Spain?' }],
    ];
    for (const messages of conversations) {
      const want = await nat(messages, 48);
      const r = await openai.chat.completions.create({ model: server.model, messages, temperature: 0, max_tokens: 48 });
      assert.equal(r.object, 'chat.completion');
      assert.equal(r.choices[0].message.role, 'assistant');
      assert.equal(r.choices[0].message.content, want.text);
      assert.equal(r.choices[0].finish_reason, want.finish_reason);
      assert.equal(r.usage.prompt_tokens, want.prompt_ids.length);
      assert.equal(r.usage.completion_tokens, want.ids.length);
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);

      const stream = await openai.chat.completions.create({
        model: server.model, messages, temperature: 0, max_tokens: 48, stream: true, stream_options: { include_usage: true },
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

  full('the stream is server-sent events ending in [DONE]', async () => {
    const res = await post(server.url(), '/v1/chat/completions', { model: server.model, messages: CAPITAL, temperature: 0, stream: true });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const events = res.text.split('\n\n').filter(Boolean);
    assert.ok(events.every((e) => e.startsWith('data: ')));
    assert.equal(events.at(-1), 'data: [DONE]');
    const last = JSON.parse(events.at(-2).slice(6));
    assert.equal(last.choices[0].finish_reason, 'stop');
  });

  full('completions: plain prompts and token ids, whole and streamed', async () => {
    const prompt = 'The three primary colours are';
    const want = await nat(prompt, 24);
    const r = await openai.completions.create({ model: server.model, prompt, temperature: 0, max_tokens: 24 });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].text, want.text);
    assert.equal(r.usage.prompt_tokens, want.prompt_ids.length);
    const byIds = await openai.completions.create({ model: server.model, prompt: want.prompt_ids, temperature: 0, max_tokens: 24 });
    assert.equal(byIds.choices[0].text, want.text);
    let text = '';
    for await (const chunk of await openai.completions.create({ model: server.model, prompt, temperature: 0, max_tokens: 24, stream: true })) {
      text += chunk.choices[0]?.text ?? '';
    }
    assert.equal(text, want.text);
    // The legacy endpoint's default is 16 tokens.
    const short = await openai.completions.create({ model: server.model, prompt, temperature: 0 });
    const want16 = await nat(prompt, 16);
    assert.equal(short.choices[0].text, want16.text);
    assert.equal(short.usage.completion_tokens, want16.ids.length);
    assert.equal(short.choices[0].finish_reason, want16.finish_reason);
  });

  full('stop sequences end the text before them, whole and streamed', async () => {
    const want = (await nat(CAPITAL, 400)).text; // "The capital of France is Paris."
    for (const stop of [' Paris', ['xyz', 'of France']]) {
      const cut = want.slice(0, Math.min(...[].concat(stop).map((s) => (want.includes(s) ? want.indexOf(s) : Infinity))));
      const r = await openai.chat.completions.create({ model: server.model, messages: CAPITAL, temperature: 0, stop });
      assert.equal(r.choices[0].message.content, cut);
      assert.equal(r.choices[0].finish_reason, 'stop');
      let text = '';
      for await (const c of await openai.chat.completions.create({ model: server.model, messages: CAPITAL, temperature: 0, stop, stream: true })) {
        text += c.choices[0]?.delta?.content ?? '';
      }
      assert.equal(text, cut);
    }
  });

  full('max_tokens and max_completion_tokens end with finish_reason length', async () => {
    const r = await openai.chat.completions.create({ model: server.model, messages: STORY, temperature: 0, max_tokens: 5 });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 5);
    assert.equal(r.choices[0].message.content, (await nat(STORY, 5)).text);
    const c = await openai.chat.completions.create({ model: server.model, messages: STORY, temperature: 0, max_completion_tokens: 3 });
    assert.equal(c.usage.completion_tokens, 3);
  });

  full('seeded sampling, penalties and MOA equal the native CLI for the same seed', async () => {
    const messages = [{ role: 'user', content: 'Write a haiku about rain.' }];
    const sampled = await openai.chat.completions.create({ model: server.model, messages, temperature: 0.8, top_p: 0.9, seed: 42, max_tokens: 24 });
    const want = await nat(messages, 24, ['--temperature', '0.8', '--top-p', '0.9', '--top-k', '0', '--min-p', '0', '--seed', '42']);
    assert.equal(sampled.choices[0].message.content, want.text);
    const again = await openai.chat.completions.create({ model: server.model, messages, temperature: 0.8, top_p: 0.9, seed: 42, max_tokens: 24 });
    assert.equal(again.choices[0].message.content, want.text);
    // A negative seed is the same 64 bits as OpenAI's.
    const neg = await openai.chat.completions.create({ model: server.model, messages, temperature: 0.8, seed: -1, max_tokens: 12 });
    const wantNeg = await nat(messages, 12, ['--temperature', '0.8', '--top-k', '0', '--top-p', '1', '--min-p', '0', '--seed', String(2n ** 64n - 1n)]);
    assert.equal(neg.choices[0].message.content, wantNeg.text);
    const penalized = await openai.chat.completions.create({
      model: server.model, messages: STORY, temperature: 0, presence_penalty: 1.5, frequency_penalty: 0.5, max_tokens: 32,
    });
    const wantPenalty = await nat(STORY, 32, ['--temperature', '0', '--presence-penalty', '1.5', '--frequency-penalty', '0.5']);
    assert.equal(penalized.choices[0].message.content, wantPenalty.text);
    assert.notEqual(wantPenalty.text, (await nat(STORY, 32)).text, 'the penalties change the text');
    const moa = await openai.chat.completions.create({ model: server.model, messages, seed: 7, max_tokens: 24, moa: true });
    assert.equal(moa.choices[0].message.content, (await nat(messages, 24, ['--moa', '', '--seed', '7'])).text);
  });

  full('response_format and the coltrane extension constrain the output', async () => {
    const messages = [{ role: 'user', content: 'Describe a cat as JSON with a name and an age.' }];
    const json = await openai.chat.completions.create({ model: server.model, messages, temperature: 0, max_tokens: 64, response_format: { type: 'json_object' } });
    assert.doesNotThrow(() => JSON.parse(json.choices[0].message.content), json.choices[0].message.content);
    const schema = { type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } }, required: ['name', 'age'], additionalProperties: false };
    const typed = await openai.chat.completions.create({
      model: server.model, messages, temperature: 0, max_tokens: 64,
      response_format: { type: 'json_schema', json_schema: { name: 'cat', schema, strict: true } },
    });
    const cat = JSON.parse(typed.choices[0].message.content);
    assert.deepEqual(Object.keys(cat).sort(), ['age', 'name']);
    assert.ok(Number.isInteger(cat.age) && typeof cat.name === 'string');
    const balanced = await openai.chat.completions.create({ model: server.model, messages, temperature: 0, max_tokens: 48, coltrane: { preset: 'balanced' } });
    assert.equal(typeof balanced.choices[0].message.content, 'string');
    // A schema outside COLTRANE's subset: 422, named.
    const res = await post(server.url(), '/v1/chat/completions', {
      model: server.model, messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(a)\\1' } } },
    });
    assert.equal(res.status, 422, res.text);
    assert.equal(res.json.error.code, 'unsupported_schema');
  });
});

describe('bad requests get OpenAI-shaped errors, and the next request is unharmed', () => {
  const chat = (body, init) => post(server.url(), '/v1/chat/completions', body, init);
  const shaped = (res, status, match) => {
    assert.equal(res.status, status, res.text);
    assert.deepEqual(Object.keys(res.json.error).sort(), ['code', 'message', 'param', 'type']);
    assert.match(res.json.error.message, match);
  };

  full('routes and methods: 404, 405', async () => {
    const nf = await fetch(`${server.url()}/v1/nothing`);
    shaped({ status: nf.status, json: await nf.json(), text: '' }, 404, /Unknown route/);
    const wrong = await fetch(`${server.url()}/v1/chat/completions`);
    assert.equal(wrong.headers.get('allow'), 'POST');
    shaped({ status: wrong.status, json: await wrong.json(), text: '' }, 405, /GET is not allowed/);
    const health = await fetch(`${server.url()}/health`, { method: 'POST', body: '{}' });
    assert.equal(health.status, 405);
  });

  full('bodies and parameters: 400, 404, 413', async () => {
    shaped(await chat('{"model": '), 400, /not valid JSON/);
    shaped(await chat('[1, 2]'), 400, /must be a JSON object/);
    shaped(await chat({ messages: CAPITAL }), 400, /must provide a model/);
    shaped(await chat({ model: 'gpt-4o', messages: CAPITAL }), 404, /The model 'gpt-4o' does not exist/);
    shaped(await chat({ model: server.model }), 400, /'messages' must be a non-empty list/);
    shaped(await chat({ model: server.model, messages: [{ role: 'wizard', content: 'hi' }] }), 400, /role 'wizard' is not supported/);
    shaped(await chat({ model: server.model, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }), 400, /only text parts/);
    shaped(await chat({ model: server.model, messages: CAPITAL, n: 2 }), 400, /Only 'n': 1/);
    shaped(await chat({ model: server.model, messages: CAPITAL, temperature: 3 }), 400, /'temperature' must be a number between 0 and 2/);
    shaped(await chat({ model: server.model, messages: CAPITAL, top_p: 0 }), 400, /top_p/);
    shaped(await chat({ model: server.model, messages: CAPITAL, presence_penalty: -3 }), 400, /presence_penalty/);
    shaped(await chat({ model: server.model, messages: CAPITAL, seed: 1.5 }), 400, /'seed' must be an integer/);
    shaped(await chat({ model: server.model, messages: CAPITAL, stop: ['a', 'b', 'c', 'd', 'e'] }), 400, /'stop'/);
    shaped(await chat({ model: server.model, messages: CAPITAL, max_tokens: 401 }), 400, /more than this server's limit of 400/);
    shaped(await chat({ model: server.model, messages: CAPITAL, max_tokens: 0 }), 400, /'max_tokens' must be an integer/);
    shaped(await chat({ model: server.model, messages: CAPITAL, stream_options: { include_usage: true } }), 400, /only allowed with 'stream': true/);
        shaped(await chat({ model: server.model, messages: CAPITAL, logprobs: true }), 400, /'logprobs' is not supported/);
    shaped(await chat({ model: server.model, messages: CAPITAL, frobnicate: 1 }), 400, /Unrecognized request argument supplied: frobnicate/);
    const moaTemp = await chat({ model: server.model, messages: CAPITAL, moa: true, temperature: 0.5 });
    shaped(moaTemp, 400, /temperature does not apply with moa/);
    assert.deepEqual([moaTemp.json.error.code, moaTemp.json.error.param], ['invalid_option', 'temperature']);
    shaped(await chat({ model: server.model, messages: CAPITAL, moa: { k: 99 } }), 400, /moa\.k must be an integer in \[1, 32\]/);
    shaped(await chat({ model: server.model, messages: CAPITAL, coltrane: { preset: 'xml' } }), 400, /preset/);
    shaped(await chat({ model: server.model, messages: CAPITAL, response_format: { type: 'yaml' } }), 400, /response_format/);
    const draft = await chat({ model: server.model, messages: CAPITAL, draft_mode: { maxDraft: 99 } });
    shaped(draft, 400, /maxDraft/);
    assert.equal(draft.json.error.param, 'draft_mode');
    shaped(await post(server.url(), '/v1/completions', { model: server.model, prompt: ['a', 'b'] }), 400, /one prompt per request/);
    shaped(await post(server.url(), '/v1/completions', { model: server.model, prompt: 'x', echo: true }), 400, /'echo' is not supported/);
    const outside = await post(server.url(), '/v1/completions', { model: server.model, prompt: [1, 99999999] });
    shaped(outside, 400, /token id 99999999 is out of range for a vocabulary of 49152/);
    assert.deepEqual([outside.json.error.code, outside.json.error.param], ['token_out_of_range', 'prompt']);
    // Neutral values of unsupported parameters pass (some clients send them by default).
    assert.equal((await chat({ model: server.model, messages: CAPITAL, temperature: 0, logprobs: false, tools: [], max_tokens: 4 })).status, 200);
    // Bodies over the cap: told by Content-Length, and found while reading a chunked one.
    const big = JSON.stringify({ model: server.model, messages: [{ role: 'user', content: 'x'.repeat(300_000) }] });
    shaped(await chat(big), 413, /larger than 262144 bytes/);
    const chunked = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(big));
        c.close();
      },
    });
    shaped(await chat(chunked, { duplex: 'half' }), 413, /larger than/);
    // A prompt longer than the context: 400 context_length_exceeded.
    const long = await chat({ model: server.model, messages: [{ role: 'user', content: 'word '.repeat(5000) }] });
    shaped(long, 400, /the prompt \(\d+ tokens with the conversation\) exceeds the context length \d+/);
    assert.deepEqual([long.json.error.code, long.json.error.param], ['context_length_exceeded', 'messages']);
  });

  full('after all that, the same answer as before', async () => {
    const r = await openai.chat.completions.create({ model: server.model, messages: CAPITAL, temperature: 0 });
    assert.equal(r.choices[0].message.content, (await nat(CAPITAL, 400)).text);
  });
});


const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['city'], additionalProperties: false },
  },
};
const ADD = {
  type: 'function',
  function: {
    name: 'add', description: 'Adds two numbers',
    parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'], additionalProperties: false },
  },
};
const TOOLS = [WEATHER, ADD];
const ajv = new Ajv({ strict: false });
/** A call parses and validates against its tool's schema. */
function valid(call) {
  const tool = TOOLS.find((t) => t.function.name === call.function.name);
  assert.ok(tool, `unknown tool ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  assert.ok(ajv.validate(tool.function.parameters, args), `${call.function.arguments}: ${ajv.errorsText()}`);
  assert.match(call.id, /^call_/);
  assert.equal(call.type, 'function');
  return args;
}

describe('tool calls', () => {
  const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];

  test('required and a named tool force a valid call, whole and streamed alike', async () => {
    for (const tool_choice of ['required', { type: 'function', function: { name: 'add' } }]) {
      const r = await openai.chat.completions.create({ model: server.model, messages: ask, tools: TOOLS, tool_choice, temperature: 0, max_tokens: 64 });
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      assert.equal(m.content, null);
      assert.equal(m.tool_calls.length, 1);
      valid(m.tool_calls[0]);
      if (typeof tool_choice === 'object') assert.equal(m.tool_calls[0].function.name, 'add');
      // Streamed: index, then id, type and name on the first chunk, the arguments in pieces.
      const calls = [];
      let finish;
      let pieces = 0;
      for await (const chunk of await openai.chat.completions.create({
        model: server.model, messages: ask, tools: TOOLS, tool_choice, temperature: 0, max_tokens: 64, stream: true,
      })) {
        const c = chunk.choices[0];
        if (c?.finish_reason) finish = c.finish_reason;
        for (const d of c?.delta?.tool_calls ?? []) {
          if (d.id !== undefined) {
            assert.equal(calls.length, d.index);
            calls.push({ id: d.id, type: d.type, function: { name: d.function.name, arguments: d.function.arguments ?? '' } });
          } else {
            calls[d.index].function.arguments += d.function.arguments;
            pieces++;
          }
        }
      }
      assert.equal(finish, 'tool_calls');
      assert.ok(pieces > 1, 'the arguments came in pieces');
      assert.deepEqual(calls.map((c) => ({ ...c, id: '' })), m.tool_calls.map((c) => ({ ...c, id: '' })));
    }
  });

  full('a tool with bounds, a multiple and refs to its own $defs: the call validates', async () => {
    // As generators emit them (pydantic, zod): refs into the parameters' own `$defs` (which
    // must not mean the call's schema around them), numeric bounds, extension keywords.
    const parameters = {
      type: 'object',
      $defs: { month: { type: 'integer', minimum: 1, maximum: 12 }, day: { type: 'integer', minimum: 1, maximum: 31 } },
      properties: {
        month: { $ref: '#/$defs/month' }, day: { $ref: '#/$defs/day' },
        price: { type: 'number', exclusiveMinimum: 0, multipleOf: 0.01, 'x-unit': 'EUR' },
        guests: { type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991, nullable: true },
      },
      required: ['month', 'day', 'price'],
      additionalProperties: false,
    };
    const tools = [{ type: 'function', function: { name: 'book', description: 'Books a table', parameters } }];
    const r = await openai.chat.completions.create({
      model: server.model, messages: [{ role: 'user', content: 'Book a table for the 3rd of May at 20 euros.' }],
      tools, tool_choice: { type: 'function', function: { name: 'book' } }, temperature: 0, max_tokens: 64,
    });
    const [call] = r.choices[0].message.tool_calls;
    const args = JSON.parse(call.function.arguments);
    const check = new Ajv({ strict: false });
    assert.ok(check.validate(parameters, args), `${call.function.arguments}: ${check.errorsText()}`);
  });

  full('auto answers or calls, always well-formed; none never calls', async () => {
    const auto = await openai.chat.completions.create({ model: server.model, messages: ask, tools: TOOLS, temperature: 0, max_tokens: 96 });
    const m = auto.choices[0].message;
    if (m.tool_calls?.length) {
      assert.equal(auto.choices[0].finish_reason, 'tool_calls');
      m.tool_calls.forEach(valid);
    } else {
      assert.equal(typeof m.content, 'string');
      assert.ok(m.content.length > 0);
    }
    assert.equal(auto.knot.tools.invalid_calls, 0);
    const none = await openai.chat.completions.create({ model: server.model, messages: ask, tools: TOOLS, tool_choice: 'none', temperature: 0, max_tokens: 32 });
    assert.equal(none.choices[0].message.tool_calls, undefined);
    assert.equal(typeof none.choices[0].message.content, 'string');
  });

  full('a tool result goes back through the template and the model answers', async () => {
    const first = await openai.chat.completions.create({ model: server.model, messages: ask, tools: TOOLS, tool_choice: 'required', temperature: 0, max_tokens: 64 });
    const call = first.choices[0].message.tool_calls[0];
    const messages = [...ask, first.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '{"temperature": 18, "sky": "clear"}' }];
    const r = await openai.chat.completions.create({ model: server.model, messages, tools: TOOLS, temperature: 0, max_tokens: 48 });
    assert.equal(r.choices[0].index, 0);
    assert.ok(r.usage.prompt_tokens > first.usage.prompt_tokens);
    for (const c of r.choices[0].message.tool_calls ?? []) valid(c);
  });

  test('a malformed tool history or tool list is a 400 naming the field, and the next request is unharmed', async () => {
    const bad = async (body, param) => {
      const res = await post(server.url(), '/v1/chat/completions', { model: server.model, tools: TOOLS, ...body });
      assert.equal(res.status, 400, res.text);
      assert.equal(res.json.error.param, param, res.text);
    };
    const call = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } };
    await bad({ messages: [...ask, { role: 'tool', tool_call_id: 'call_1', content: '18' }] }, 'messages[1].tool_call_id');
    await bad({ messages: [...ask, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: 'call_9', content: '18' }] }, 'messages[2].tool_call_id');
    await bad({ messages: [...ask, { role: 'assistant', content: null, tool_calls: [{ ...call, function: { name: 'get_weather', arguments: { city: 'Paris' } } }] }] },
      'messages[1].tool_calls[0].function.arguments');
    await bad({ messages: ask, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice');
    await bad({ messages: ask, tools: [{ type: 'function', function: { name: 'has space' } }] }, 'tools[0].function.name');
    // A tool schema outside COLTRANE's subset: 422, named.
    const res = await post(server.url(), '/v1/chat/completions', {
      model: server.model, messages: ask, tool_choice: 'required',
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { s: { type: 'string', pattern: '^(?=a)' } } } } }],
    });
    assert.equal(res.status, 422, res.text);
    const r = await openai.chat.completions.create({ model: server.model, messages: CAPITAL, temperature: 0 });
    assert.equal(r.choices[0].message.content, (await nat(CAPITAL, 400)).text);
  });
});

describe('terminal prosody and explicit prefill windows', () => {
  full('the response says which terminal prosody ran', async () => {
    const r = await post(server.url(), '/v1/chat/completions', { model: server.model, messages: STORY, temperature: 0, max_tokens: 20 });
    assert.equal(r.json.knot.terminal_prosody, 'bias');
    assert.ok(r.json.knot.constraint.prosodySteps > 0, JSON.stringify(r.json.knot));
    assert.equal(r.json.knot.health, undefined);
    // The health monitor on request: its metrics in the extension object; a bad setting is a 400
    // naming it.
    const h = await post(server.url(), '/v1/chat/completions', { model: server.model, messages: STORY, temperature: 0, max_tokens: 20, health: true });
    assert.ok(h.json.knot.health.steps >= 1 && h.json.knot.health.steps <= 21, JSON.stringify(h.json.knot));
    assert.ok(typeof h.json.knot.health.faces.score === 'number');
    const badHealth = await post(server.url(), '/v1/chat/completions', { model: server.model, messages: STORY, max_tokens: 4, health: { window: 3 } });
    assert.equal(badHealth.status, 400, badHealth.text);
    assert.match(badHealth.json.error.message, /health\.window/);
  });

  testIf(server.windows !== false, 'a window serves the prompts that start with it (x-knot-prefill: hit), output unchanged', async () => {
    const system = { role: 'system', content: 'You are a geography teacher. You answer in one short sentence, and you always name the continent.' };
    const messages = [system, ...CAPITAL];
    const cold = await post(server.url(), '/v1/chat/completions', { model: server.model, messages, temperature: 0, max_tokens: 32 });
    const created = await post(server.url(), '/prefill/windows', { messages: [system], ttl_ms: 60_000 });
    assert.equal(created.status, 201, created.text);
    assert.ok(created.json.tokens > 10);
    const { id } = created.json;
    const got = await post(server.url(), `/prefill/windows/${id}`, undefined, { method: 'GET' });
    assert.equal(got.json.tokens, created.json.tokens);
    const warm = await post(server.url(), '/v1/chat/completions', { model: server.model, messages, temperature: 0, max_tokens: 32 },
      { headers: { 'x-knot-prefill-window': id } });
    assert.equal(warm.headers.get('x-knot-prefill'), 'hit', warm.text);
    assert.equal(Number(warm.headers.get('x-knot-prefill-reused')), created.json.tokens);
    assert.equal(warm.json.choices[0].message.content, cold.json.choices[0].message.content);
    // Another prompt: not a prefix, cold prefill, same answer as without the header.
    const other = await post(server.url(), '/v1/chat/completions', { model: server.model, messages: CAPITAL, temperature: 0, max_tokens: 32 },
      { headers: { 'x-knot-prefill-window': id } });
    assert.equal(other.headers.get('x-knot-prefill'), 'mismatch');
    assert.equal(other.json.choices[0].message.content, (await nat(CAPITAL, 32)).text);
    const patched = await post(server.url(), `/prefill/windows/${id}`, { ttl_ms: 1 }, { method: 'PATCH' });
    assert.equal(patched.status, 200, patched.text);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const late = await post(server.url(), '/v1/chat/completions', { model: server.model, messages, temperature: 0, max_tokens: 8 },
      { headers: { 'x-knot-prefill-window': id } });
    assert.ok(['expired', 'miss'].includes(late.headers.get('x-knot-prefill')), late.headers.get('x-knot-prefill'));
    const unknown = await post(server.url(), '/v1/chat/completions', { model: server.model, messages, temperature: 0, max_tokens: 4 },
      { headers: { 'x-knot-prefill-window': 'pw-nope' } });
    assert.equal(unknown.headers.get('x-knot-prefill'), 'miss');
    const second = await post(server.url(), '/prefill/windows', { prompt: 'Once upon a time' });
    assert.equal((await post(server.url(), `/prefill/windows/${second.json.id}`, undefined, { method: 'DELETE' })).json.deleted, true);
    const gone = await post(server.url(), `/prefill/windows/${second.json.id}`, undefined, { method: 'GET' });
    assert.equal(gone.status, 404);
    assert.equal(gone.json.error.code, 'not_found');
    const bad = await post(server.url(), '/prefill/windows', { messages: 'x' });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'messages');
  });
});
}
