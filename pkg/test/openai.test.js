// knot-wasm/openai's pure parts, without a model: the generation queue, stop sequences, request
// checking (tools and tool histories included), the tool-call reader and the envelope's messages.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ApiError, CallReader, GenerationQueue, QueueFull, QueueTimeout, StopMatcher, parseChatRequest, parseCompletionRequest } from '../src/openai/index.js';
import { envelopeMessages, envelopeSchema, toolPlan } from '../src/openai/tools.js';
import { BACKEND_METHODS } from '../src/openai/index.js';
import { HostShim } from '../src/shim.js';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const queue = (options = {}) => new GenerationQueue({ max: 2, timeoutMs: 5000, stallMs: 5000, pollMs: 2, onStall: async () => {}, ...options });

describe('GenerationQueue', () => {
  test('one holder at a time, the others in order; past the bound, QueueFull with a Retry-After', async () => {
    const q = queue();
    const a = await q.acquire();
    const order = [];
    const b = q.acquire().then((l) => { order.push('b'); return l; });
    const c = q.acquire().then((l) => { order.push('c'); return l; });
    await sleep(10);
    await assert.rejects(q.acquire(), (e) => e instanceof QueueFull && e.retryAfter >= 1);
    a.release();
    const lb = await b;
    assert.deepEqual(order, ['b']);
    lb.release();
    lb.release(); // idempotent
    (await c).release();
    assert.deepEqual(order, ['b', 'c']);
    assert.equal(q.holders.size, 0);
    assert.equal(q.waiting.length, 0);
  });

  test('with slots, that many hold the model at once and the rest wait in order', async () => {
    const q = queue({ slots: 2 });
    const a = await q.acquire();
    const b = await q.acquire();
    assert.equal(q.busy, true);
    const order = [];
    const c = q.acquire().then((l) => { order.push('c'); return l; });
    const d = q.acquire().then((l) => { order.push('d'); return l; });
    await sleep(10);
    assert.deepEqual(order, []);
    b.release();
    const lc = await c;
    assert.deepEqual(order, ['c']);
    a.release();
    (await d).release();
    lc.release();
    assert.deepEqual(order, ['c', 'd']);
    assert.equal(q.holders.size, 0);
  });

  test('a waiter that leaves (signal) or waits too long gives up its place', async () => {
    const q = queue({ timeoutMs: 30 });
    const a = await q.acquire();
    const gone = new AbortController();
    const leaving = q.acquire(gone.signal);
    const timing = q.acquire();
    await sleep(5);
    gone.abort(new Error('client left'));
    await assert.rejects(leaving, /client left/);
    await assert.rejects(timing, (e) => e instanceof QueueTimeout);
    assert.equal(q.waiting.length, 0);
    a.release();
    (await q.acquire()).release();
  });

  test('a holder silent for stallMs is taken back, and the line moves on', async () => {
    let stalled = 0;
    const q = queue({ stallMs: 20, onStall: async () => { stalled++; } });
    const dead = await q.acquire(); // never released, as if its request died
    const next = await q.acquire();
    assert.equal(stalled, 1);
    assert.equal(dead.released, true);
    assert.equal(q.reclaimed, 1);
    // The dead holder's late release does not free the new holder's lease.
    dead.release();
    assert.deepEqual([...q.holders], [next]);
    // Progress keeps a holder alive.
    const q2 = queue({ stallMs: 40, onStall: async () => { stalled++; } });
    const busy = await q2.acquire();
    const timer = setInterval(busy.progress, 5);
    const waiter = q2.acquire();
    await sleep(120);
    assert.equal(stalled, 1);
    clearInterval(timer);
    busy.release();
    (await waiter).release();
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
