// knot-wasm/openai without a model: the model's line as the module answers it (over a HostShim on
// a stand-in WasmHost), stop sequences, request checking (tools and tool histories included), the
// tool-call reader and the envelope's messages.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ApiError, CallReader, StopMatcher, openaiResponse, parseChatRequest, parseCompletionRequest } from '../src/openai/index.js';
import { envelopeMessages, envelopeSchema, toolPlan } from '../src/openai/tools.js';
import { derivedId } from '../src/openai/shapes.js';
import { ResponseStore, parseResponsesRequest } from '../src/openai/responses.js';
import { anthropicError, parseMessagesRequest } from '../src/openai/messages.js';
import { BACKEND_METHODS } from '../src/openai/index.js';
import { HostShim } from '../src/shim.js';
import { admits, hangingHost, recordingHost } from './fake-host.js';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * POST /v1/completions over token ids on `shim` (the stand-in answers with its reply's bytes).
 * @param {HostShim} shim
 * @param {number[]} ids
 * @param {{ signal?: AbortSignal, maxTokens?: number }} [o]
 */
const complete = (shim, ids, o = {}) => openaiResponse(shim, new Request('http://knot/v1/completions', {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'm', prompt: ids, max_tokens: o.maxTokens ?? 4, temperature: 0 }),
  signal: o.signal,
}), { modelId: 'm', terminalProsody: 'off' });

/**
 * Starts a request and waits until it is in the shim's line (admitted or waiting); resolves with
 * `{ response }`, the response's promise.
 * @param {HostShim} shim
 * @param {() => Promise<Response>} start
 */
async function enter(shim, start) {
  const count = () => shim.sequences.active + shim.sequences.waiting;
  const before = count();
  const response = start();
  while (count() === before) await sleep(1);
  return { response };
}

/** @param {Response} res */
const answer = async (res) => ({ status: res.status, body: await res.json(), retryAfter: res.headers.get('retry-after') });

describe("the model's line, as the OpenAI module answers it", () => {
  test('one slot: requests run one at a time, in order; past maxWaiting a 429 with Retry-After', async () => {
    const host = recordingHost('abcd');
    const shim = new HostShim(host, undefined, undefined, { maxWaiting: 2 });
    // The first request's first step waits until the others are in line.
    host.holdNext = true;
    const { response: a } = await enter(shim, () => complete(shim, [1]));
    const { response: b } = await enter(shim, () => complete(shim, [2]));
    const { response: c } = await enter(shim, () => complete(shim, [3]));
    const refused = await answer(await complete(shim, [4]));
    host.release();
    assert.equal(refused.status, 429);
    assert.deepEqual([refused.body.error.type, refused.body.error.code], ['rate_limit_error', 'server_busy']);
    assert.match(refused.body.error.message, /too many requests are waiting/);
    assert.ok(Number(refused.retryAfter) >= 1, String(refused.retryAfter));
    for (const r of await Promise.all([a, b, c])) {
      const { status, body } = await answer(r);
      assert.equal(status, 200);
      assert.equal(body.choices[0].text, 'abcd');
    }
    assert.deepEqual(admits(host).map(([p]) => p[0]), [1, 2, 3]);
    // Each admitted after the one before it ended: one sequence in every step.
    const firstSteps = host.calls.findIndex((c) => c === 'step');
    assert.deepEqual(host.calls.slice(firstSteps - 1, firstSteps + 5).map((c) => (Array.isArray(c) ? c[0] : c)),
      ['admit', 'step', 'step', 'step', 'step', 'admit']);
  });

  test('with maxSequences, that many run at once and the rest wait in order', async () => {
    const host = recordingHost('abcd', { maxSequences: 2 });
    const shim = new HostShim(host);
    // The first request's first step waits until the others are in line.
    host.holdNext = true;
    const started = [];
    for (const id of [1, 2, 3, 4]) started.push((await enter(shim, () => complete(shim, [id]))).response);
    // The first one or two admitted before the held step, the rest waiting.
    const { active, waiting } = shim.sequences;
    assert.ok(active >= 1 && active <= 2 && active + waiting === 4, JSON.stringify(shim.sequences));
    host.release();
    // Every one answered (the stand-in refuses an admission past its two slots).
    for (const r of await Promise.all(started)) assert.equal((await answer(r)).body.choices[0].text, 'abcd');
    assert.deepEqual(admits(host).map(([p]) => p[0]), [1, 2, 3, 4]);
    // Two at once, never more; four steps for each, the steps shared.
    assert.equal(host.calls.filter((c) => c === 'step').length, active === 2 ? 8 : 9);
    assert.equal(shim.stats().queue.peakActive, 2);
    assert.ok(shim.stats().queue.peakWaiting >= 2);
  });

  test('a waiting request that leaves (its signal) or waits past waitTimeoutMs gives up its place', async () => {
    const host = recordingHost('abcdefghijklmnop');
    const shim = new HostShim(host, undefined, undefined, { waitTimeoutMs: 40 });
    // The first request's first step waits until the others gave up.
    host.holdNext = true;
    const { response: long } = await enter(shim, () => complete(shim, [1], { maxTokens: 16 }));
    const gone = new AbortController();
    const { response: leaving } = await enter(shim, () => complete(shim, [2], { signal: gone.signal }));
    const { response: timing } = await enter(shim, () => complete(shim, [3]));
    gone.abort(new DOMException('The client went away', 'AbortError'));
    const left = await answer(await leaving);
    assert.equal(left.status, 499, JSON.stringify(left.body));
    const late = await answer(await timing);
    assert.equal(late.status, 429);
    assert.match(late.body.error.message, /waited too long/);
    assert.ok(Number(late.retryAfter) >= 1);
    host.release();
    assert.equal((await answer(await long)).body.choices[0].text, 'abcdefghijklmnop');
    // Neither was ever admitted, and the next request is served at once.
    assert.equal((await answer(await complete(shim, [4]))).body.choices[0].text, 'abcd');
    assert.deepEqual(admits(host).map(([p]) => p[0]), [1, 4]);
    assert.deepEqual([shim.stats().queue.timedOut, shim.stats().queue.served], [1, 2]);
  });

  test('a step whose request never comes back is taken back after stallMs; steps that progress never are', async () => {
    const host = recordingHost('abcdefghijklmnop', { stepMs: 5 });
    const shim = new HostShim(host, undefined, undefined, { stallMs: 40 });
    // Sixteen steps of 5 ms (80 ms in all) while another request waits: each step progresses.
    const { response: long } = await enter(shim, () => complete(shim, [1], { maxTokens: 16 }));
    const { response: next } = await enter(shim, () => complete(shim, [2]));
    assert.equal((await answer(await long)).body.choices[0].text, 'abcdefghijklmnop');
    assert.equal((await answer(await next)).body.choices[0].text, 'abcd');
    assert.equal(shim.stats().queue.reclaimed, 0);
    // A step that never comes back (its request was canceled mid-call, as workerd does).
    const stuckHost = hangingHost('abcd');
    stuckHost.unwindOnAbort = false;
    const stuck = new HostShim(stuckHost, undefined, undefined, { stallMs: 40 });
    void complete(stuck, [1]);
    while (!stuckHost.calls.includes('step')) await sleep(1);
    const after = await answer(await complete(stuck, [2]));
    assert.equal(after.body.choices[0].text, 'abcd');
    assert.equal(stuck.stats().queue.reclaimed, 1);
  });
});

describe("a request's later generations", () => {
  test('the phases after a request\'s first generation (here a tool call\'s) wait in line with priority, past its bounds', async () => {
    // A backend that records each generation's prompt and options: the first writes a call, the
    // next (whether another call follows) says something else.
    const seen = [];
    const backend = {
      chatTemplateTools: () => ({ takesTools: true, callTag: '<tool_call>' }),
      countTokens: () => 3,
      async *streamTokens(prompt, options) {
        seen.push({ suffix: prompt.suffix, priority: options.priority });
        const text = seen.length === 1 ? '{"name": "f", "arguments": {}}' : 'Done.';
        for (const [i, ch] of [...text].entries()) {
          yield { id: 1, text: ch, finishReason: null, ...(i === 0 ? { prompt: { tokens: 3, prefix: null } } : {}) };
        }
        yield { id: 0, text: '', finishReason: 'stop' };
      },
      stats: () => ({}),
      info: () => ({}),
    };
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
    const res = await openaiResponse(/** @type {any} */ (backend), new Request('http://knot/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], tools, tool_choice: 'required' }),
    }), { modelId: 'm' });
    const body = await res.json();
    assert.equal(body.choices[0].finish_reason, 'tool_calls');
    assert.equal(body.choices[0].message.tool_calls[0].function.name, 'f');
    // Both prompts are the chat with what follows it so far (rendered in the backend); only the
    // second continues the request, so only it passes the line's bounds.
    assert.deepEqual(seen, [
      { suffix: '<tool_call>\n', priority: undefined },
      { suffix: '<tool_call>\n{"name":"f","arguments":{}}\n</tool_call>\n', priority: true },
    ]);
    assert.equal(body.usage.prompt_tokens, 6);
    // The call's id is OpenAI-shaped and derived from the prompt: the turn that answers it
    // renders it, so an equal request must get the same id (a greedy answer depends on it).
    const { id } = body.choices[0].message.tool_calls[0];
    assert.match(id, /^call_[A-Za-z0-9]{24}$/);
    seen.length = 0;
    const again = await (await openaiResponse(/** @type {any} */ (backend), new Request('http://knot/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], tools, tool_choice: 'required' }),
    }), { modelId: 'm' })).json();
    assert.equal(again.choices[0].message.tool_calls[0].id, id);
  });

  test('derived ids: equal keys, equal ids; a different key or place, a different id', () => {
    const a = derivedId('call_', '0\u0000hi');
    assert.match(a, /^call_[A-Za-z0-9]{24}$/);
    assert.equal(derivedId('call_', '0\u0000hi'), a);
    const others = ['1\u0000hi', '0\u0000hj', '0\u0000hi ', ''].map((k) => derivedId('call_', k));
    assert.equal(new Set([a, ...others]).size, 5);
  });
});

describe('StopMatcher', () => {
  const run = (stops, pieces) => {
    const m = new StopMatcher(stops);
    const out = pieces.map((p) => m.push(p));
    return { out, rest: m.flush(), stopped: m.stopped };
  };

  test('text before a stop sequence passes, the sequence and what follows never do', () => {
    const r = run([' Paris'], ['The', ' capital', ' is', ' Par', 'is', '.']);
    assert.deepEqual(r.out, ['The', ' capital', ' is', '', '', '']);
    assert.equal(r.stopped, true);
    assert.equal(r.rest, '');
    // Held back only while it may still become the stop sequence.
    const held = run(['END'], ['a', 'E', 'N', 'x']);
    assert.deepEqual(held.out, ['a', '', '', 'ENx']);
    assert.equal(held.stopped, false);
    // The earliest of several; one inside a single piece.
    assert.equal(run(['c', 'b'], ['abcd']).out[0], 'a');
    // At the end without a stop, what was held goes out.
    assert.deepEqual(run(['xyz'], ['abx']), { out: ['ab'], rest: 'x', stopped: false });
  });
});

describe('request checking', () => {
  const limits = { maxTokens: 100, defaultMaxTokens: 100, modelId: 'm' };
  const chat = (body) => parseChatRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...body }, limits, () => null);
  const fails = (f, status, param, match) => {
    assert.throws(f, (e) => e instanceof ApiError && e.status === status && e.param === param && match.test(e.message));
  };

  test('OpenAI defaults and mappings', () => {
    const r = chat({});
    assert.equal(r.options.temperature, 1);
    assert.equal(r.maxTokens, 100);
    assert.equal(r.stream, false);
    assert.match(r.options.seed, /^\d+$/);
    assert.equal(chat({ seed: -1 }).options.seed, String(2n ** 64n - 1n));
    const m = chat({ temperature: 0.5, top_p: 0.9, presence_penalty: 1, frequency_penalty: -1, max_tokens: 7, stop: 'x' });
    assert.deepEqual([m.options.temperature, m.options.topP, m.options.presencePenalty, m.options.frequencyPenalty, m.maxTokens, m.stop],
      [0.5, 0.9, 1, -1, 7, ['x']]);
    assert.equal(chat({ max_completion_tokens: 9, max_tokens: 3 }).maxTokens, 9);
    assert.deepEqual(chat({ messages: [{ role: 'developer', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] }).messages,
      [{ role: 'system', content: 'ab' }]);
    assert.equal(chat({ moa: { k: 4 } }).options.temperature, undefined);
    assert.equal(parseCompletionRequest({ model: 'm', prompt: ['once'] }, limits).maxTokens, 16);
    assert.deepEqual(parseCompletionRequest({ model: 'm', prompt: [[1, 2]] }, limits).prompt, [1, 2]);
  });

  test('each bad value names its parameter', () => {
    fails(() => chat({ model: 'x' }), 404, 'model', /does not exist/);
    fails(() => chat({ n: 3 }), 400, 'n', /Only 'n': 1/);
    fails(() => chat({ max_tokens: 101 }), 400, 'max_tokens', /limit of 100/);
    fails(() => chat({ temperature: -1 }), 400, 'temperature', /between 0 and 2/);
    fails(() => chat({ stop: [''] }), 400, 'stop', /non-empty/);
    fails(() => chat({ stream: 'yes' }), 400, 'stream', /true or false/);
    fails(() => chat({ stream: true, stream_options: { x: 1 } }), 400, 'stream_options', /Unrecognized stream option/);
    fails(() => chat({ logit_bias: { 1: 5 } }), 400, 'logit_bias', /not supported/);
    fails(() => chat({ what: 1 }), 400, 'what', /Unrecognized request argument/);
    fails(() => chat({ coltrane: { preset: 'json' }, response_format: { type: 'json_object' } }), 400, 'response_format', /not both/);
    fails(() => parseCompletionRequest({ model: 'm', prompt: '' }, limits), 400, 'prompt', /must not be empty/);
    fails(() => parseCompletionRequest({ model: 'm', prompt: [1.5] }, limits), 400, 'prompt', /token ids/);
  });
});

describe('tools', () => {
  const limits = { maxTokens: 100, defaultMaxTokens: 100, modelId: 'm' };
  const weather = { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
  const chat = (body) => parseChatRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...body }, limits, () => null);
  const fails = (f, param, match) => {
    assert.throws(f, (e) => e instanceof ApiError && e.status === 400 && e.param === param && match.test(e.message), String(match));
  };
  const call = (id, args = '{"city":"Paris"}') => ({ id, type: 'function', function: { name: 'get_weather', arguments: args } });

  test('tools, tool_choice and parallel_tool_calls are read', () => {
    const r = chat({ tools: [weather] });
    assert.deepEqual(r.tools.map((t) => t.name), ['get_weather']);
    assert.equal(r.toolChoice, 'auto');
    assert.equal(r.parallelToolCalls, true);
    assert.deepEqual(chat({ tools: [weather], tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false }).toolChoice, { name: 'get_weather' });
    assert.equal(chat({}).toolChoice, 'none');
    // No parameters: a function that takes none.
    assert.deepEqual(chat({ tools: [{ type: 'function', function: { name: 'now' } }] }).tools[0].parameters, { type: 'object', properties: {}, additionalProperties: false });
  });

  test('a tool history is checked: every tool message answers a call of the assistant turn before it', () => {
    const history = [
      { role: 'user', content: 'weather?' },
      { role: 'assistant', content: null, tool_calls: [call('c1'), call('c2', '{"city":"Rome"}')] },
      { role: 'tool', tool_call_id: 'c2', content: '20C' },
      { role: 'tool', tool_call_id: 'c1', content: '18C' },
    ];
    const r = chat({ messages: history, tools: [weather] });
    assert.deepEqual(r.messages[3], { role: 'tool', content: '18C', tool_call_id: 'c1', name: 'get_weather' });
    assert.equal(r.messages[1].content, null);
    fails(() => chat({ messages: [{ role: 'tool', tool_call_id: 'x', content: '1' }] }), 'messages[0].tool_call_id', /does not match/);
    fails(() => chat({ messages: [...history.slice(0, 2), { role: 'tool', tool_call_id: 'c9', content: '1' }] }), 'messages[2].tool_call_id', /'c9' does not match/);
    fails(() => chat({ messages: [...history, { role: 'tool', tool_call_id: 'c1', content: '1' }] }), 'messages[4].tool_call_id', /answered already/);
    fails(() => chat({ messages: [{ role: 'tool', content: '1' }] }), 'messages[0].tool_call_id', /id of the call/);
    fails(() => chat({ messages: [{ role: 'assistant', tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: { city: 1 } } }] }] }),
      'messages[0].tool_calls[0].function.arguments', /must be a string/);
    fails(() => chat({ messages: [{ role: 'assistant', tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '[1' } }] }] }),
      'messages[0].tool_calls[0].function.arguments', /JSON object/);
    fails(() => chat({ messages: [{ role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{}' } }] }] }),
      'messages[0].tool_calls[0]', /id, type/);
    fails(() => chat({ messages: [{ role: 'assistant', tool_calls: 'x' }] }), 'messages[0].tool_calls', /list/);
  });

  test('bad tools and choices name their field', () => {
    fails(() => chat({ tools: {} }), 'tools', /list/);
    fails(() => chat({ tools: [{ type: 'code' }] }), 'tools[0]', /type: 'function'/);
    fails(() => chat({ tools: [{ type: 'function', function: { name: 'a b' } }] }), 'tools[0].function.name', /letters/);
    fails(() => chat({ tools: [weather, weather] }), 'tools[1].function.name', /twice/);
    fails(() => chat({ tools: [{ type: 'function', function: { name: 'a', parameters: 3 } }] }), 'tools[0].function.parameters', /JSON Schema/);
    // Without tools, a choice is the agentic loop's (its servers bring the tools); the plain API
    // refuses it once it knows the request did not opt in.
    fails(() => { throw chat({ tool_choice: 'auto' }).toolChoiceWithoutTools; }, 'tool_choice', /only allowed when 'tools'/);
    assert.equal(chat({ tool_choice: 'none' }).toolChoiceWithoutTools, null);
    fails(() => chat({ tools: [weather], tool_choice: 'always' }), 'tool_choice', /'none', 'auto'/);
    fails(() => chat({ tools: [weather], tool_choice: { type: 'function', function: { name: 'x' } } }), 'tool_choice', /not in 'tools'/);
    fails(() => chat({ tools: [weather], parallel_tool_calls: 1 }), 'parallel_tool_calls', /true or false/);
    fails(() => parseChatRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: [weather], response_format: { type: 'json_object' } },
      limits, () => ({ preset: 'json' })), 'response_format', /not both/);
  });

  test('the envelope: tools in the system turn, past calls as envelopes, results as a user turn', () => {
    const r = chat({
      tools: [weather],
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: null, tool_calls: [call('c1')] },
        { role: 'tool', tool_call_id: 'c1', content: '18C' },
      ],
    });
    const m = envelopeMessages(r.messages, r.tools, 'auto');
    assert.deepEqual(m.map((x) => x.role), ['system', 'user', 'assistant', 'user']);
    assert.match(m[0].content, /^Be brief\.\n\nYou can call these tools[^]*"name":"get_weather"[^]*\{"response": /);
    assert.equal(m[2].content, '{"tool_call":{"name":"get_weather","arguments":{"city":"Paris"}}}');
    assert.equal(m[3].content, 'Result of the tool get_weather (call c1):\n18C');
    const plan = toolPlan(r, { takesTools: false, callTag: null });
    assert.equal(plan.mode, 'envelope');
    assert.equal(toolPlan({ ...r, toolChoice: 'none', tools: r.tools }, { takesTools: false, callTag: null }).mode, 'plain');
    const tag = toolPlan(r, { takesTools: true, callTag: '<tool_call>' });
    assert.equal(tag.mode, 'tag');
    assert.equal(tag.closeTag, '</tool_call>');
    assert.deepEqual(tag.messages[2].tool_calls[0].function.arguments, { city: 'Paris' });
    // required: no text answer in the envelope's schema.
    assert.equal(envelopeSchema(r.tools, false).anyOf, undefined);
    assert.equal(envelopeSchema(r.tools, true).anyOf.length, 2);
  });

  test('the call reader gives the name, the arguments in pieces and the response text', () => {
    const feed = (root, text, step) => {
      const r = new CallReader(root);
      const events = [];
      for (let i = 0; i < text.length; i += step) events.push(...r.push(text.slice(i, i + step)));
      return { events, done: r.done };
    };
    for (const step of [1, 2, 5, 100]) {
      const a = feed('envelope', '{"tool_call": {"arguments": {"city": "Pa\\"ris", "n": [1, 2.5, {"a": null}]}, "name": "get_weather"}}', step);
      assert.equal(a.events.filter((e) => e.type === 'arguments').map((e) => e.text).join(''), '{"city": "Pa\\"ris", "n": [1, 2.5, {"a": null}]}');
      assert.deepEqual(a.events.filter((e) => e.type !== 'arguments'), [{ type: 'name', name: 'get_weather' }, { type: 'end' }]);
      assert.ok(a.done);
      const b = feed('envelope', '{ "response" : "Hi \\u00e9 \\ud83d\\ude00\\n" }', step);
      assert.equal(b.events.map((e) => e.text).join(''), 'Hi é 😀\n');
      const c = feed('call', '{"name":"x","arguments":5}', step);
      assert.deepEqual(c.events.filter((e) => e.type !== 'arguments'), [{ type: 'name', name: 'x' }, { type: 'end' }]);
      assert.equal(c.events.filter((e) => e.type === 'arguments').map((e) => e.text).join(''), '5');
    }
  });
});

test('HostShim has every method of the Backend interface', () => {
  for (const m of BACKEND_METHODS) assert.equal(typeof HostShim.prototype[m], 'function', m);
});

describe('the Responses and Messages requests, read as chat requests', () => {
  const limits = { maxTokens: 64, defaultMaxTokens: 64, modelId: 'm' };
  test('previous_response_id: the newest responses are kept; an evicted one is 404 naming the field', () => {
    const store = new ResponseStore(2);
    for (const id of ['a', 'b', 'c']) store.put(id, [{ role: 'user', content: id }, { role: 'assistant', content: `${id}!` }]);
    assert.equal(store.get('a'), undefined);
    const req = parseResponsesRequest({ model: 'm', previous_response_id: 'c', instructions: 'Be brief.', input: 'more' }, limits, () => null, store);
    assert.deepEqual(req.messages.map((m) => [m.role, m.content]), [['system', 'Be brief.'], ['user', 'c'], ['assistant', 'c!'], ['user', 'more']]);
    assert.throws(() => parseResponsesRequest({ model: 'm', previous_response_id: 'a', input: 'x' }, limits, () => null, store),
      (e) => e instanceof ApiError && e.status === 404 && e.param === 'previous_response_id' && e.code === 'previous_response_not_found');
    // The bytes are capped too: a long conversation pushes the older ones out.
    const small = new ResponseStore(10, 1000);
    small.put('x', [{ role: 'user', content: 'a'.repeat(100) }]);
    small.put('y', [{ role: 'user', content: 'b'.repeat(400) }]);
    assert.equal(small.get('x'), undefined);
    assert.ok(small.get('y') !== undefined && small.bytes <= 1000);
  });

  test('items: a turn\'s text and calls are one assistant message; a chat refusal names the item it came from', () => {
    const store = new ResponseStore();
    const req = parseResponsesRequest({
      model: 'm',
      input: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: [{ type: 'output_text', text: 'Checking.' }] },
        { type: 'function_call', call_id: 'c1', name: 'w', arguments: '{}' },
        { type: 'function_call', call_id: 'c2', name: 'w', arguments: '{"a":1}' },
        { type: 'function_call_output', call_id: 'c2', output: 'sun' },
        { type: 'function_call_output', call_id: 'c1', output: 'rain' },
      ],
      max_output_tokens: 9,
    }, limits, () => null, store);
    assert.equal(req.maxTokens, 9);
    assert.deepEqual(req.messages.map((m) => m.role), ['user', 'assistant', 'tool', 'tool']);
    assert.deepEqual(req.messages[1].tool_calls.map((c) => c.id), ['c1', 'c2']);
    assert.equal(req.messages[1].content, 'Checking.');
    const bad = (input) => () => parseResponsesRequest({ model: 'm', input }, limits, () => null, store);
    assert.throws(bad([{ type: 'function_call', call_id: 'c', name: 'w', arguments: '[1]' }]), (e) => e.param === 'input[0].tool_calls[0].function.arguments');
    assert.throws(bad([{ role: 'user', content: 'x' }, { role: 'tool', content: 'x' }]), (e) => e.param === 'input[1].role');
    assert.throws(() => parseResponsesRequest({ model: 'm', input: 'x', max_output_tokens: 65 }, limits, () => null, store), (e) => e.param === 'max_output_tokens');
  });

  test('Messages: tool_use and tool_result blocks, tool_choice, top_k; refusals name the Messages field', () => {
    const req = parseMessagesRequest({
      model: 'm', max_tokens: 8, system: [{ type: 'text', text: 'Sys.' }], top_k: 5,
      tools: [{ name: 'w', input_schema: { type: 'object' } }], tool_choice: { type: 'any', disable_parallel_tool_use: true },
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: [{ type: 'text', text: 'Let me see.' }, { type: 'tool_use', id: 't1', name: 'w', input: { city: 'Paris' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'sun' }] }, { type: 'text', text: 'Thanks' }] },
      ],
    }, limits);
    assert.deepEqual(req.messages.map((m) => m.role), ['system', 'user', 'assistant', 'tool', 'user']);
    assert.equal(req.messages[2].tool_calls[0].function.arguments, '{"city":"Paris"}');
    assert.equal(req.toolChoice, 'required');
    assert.equal(req.parallelToolCalls, false);
    assert.equal(req.options.topK, 5);
    const bad = (body) => () => parseMessagesRequest({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'x' }], ...body }, limits);
    assert.throws(bad({ messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'zz', content: 'x' }] }] }),
      (e) => e.param === 'messages[0].content[0].tool_call_id');
    assert.throws(bad({ stop_sequences: 'x' }), (e) => e.param === 'stop_sequences');
    assert.throws(bad({ max_tokens: 100 }), (e) => e.param === 'max_tokens');
    assert.deepEqual(anthropicError(new ApiError(429, 'slow down', { code: 'rate_limit_exceeded' })),
      { type: 'error', error: { type: 'rate_limit_error', message: 'slow down', code: 'rate_limit_exceeded' } });
  });
});
