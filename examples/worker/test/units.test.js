// The Worker's pure parts, without workerd: the generation queue, stop sequences, request
// checking, and the station chain's route and answer bundle.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ApiError, parseChatRequest, parseCompletionRequest } from '../src/openai.js';
import { GenerationQueue, QueueFull, QueueTimeout } from '../src/queue.js';
import { StopMatcher } from '../src/stop.js';
import { StationError, bundleAnswers, chainTimeout, parseRoute, unbundleAnswers } from '../src/chain.js';

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
    assert.equal(q.holder, null);
    assert.equal(q.waiting.length, 0);
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
    assert.equal(q.holder, next);
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

describe('the station chain', () => {
  const ns = { idFromName: () => ({}) };
  const env = { LAYERS_1: ns, HEADS_0: ns, HEADS_1: ns, MODEL_KEY: 'x.knot' };
  const hop = (binding, name, query) => ({ binding, name, query });
  const route = {
    next: [hop('LAYERS_1', 'layers-15-30', 'layers=15-30')],
    heads: [hop('HEADS_0', 'rows-0-24576', 'rows=0-24576'), hop('HEADS_1', 'rows-24576-49152', 'rows=24576-49152')],
    top: 4,
    timeoutMs: 1000,
  };

  test('a route is read back as sent, and no header means no route', () => {
    assert.deepEqual(parseRoute(JSON.stringify(route), env), route);
    assert.deepEqual(parseRoute(JSON.stringify({ ...route, heads: null }), env).heads, null);
    assert.equal(parseRoute(null, env), null);
    assert.equal(parseRoute('', env), null);
    // One timeout for the next station, two for the head shards (a retry), one for the called one.
    assert.equal(chainTimeout(route), 4000);
    assert.equal(chainTimeout({ ...route, next: [], heads: null }), 1000);
  });

  test('a bad route is refused with a 400 naming what is wrong', () => {
    const bad = [
      ['{', /not JSON/],
      ['3', /must be an object/],
      [JSON.stringify({ ...route, next: 'x' }), /next must be a list/],
      [JSON.stringify({ ...route, next: [hop('LAYERS_1', 'a', 'layers=1')] }), /layers=A-B/],
      [JSON.stringify({ ...route, next: [hop('MODEL_KEY', 'a', 'layers=1-2')] }), /MODEL_KEY is not a Durable Object binding/],
      [JSON.stringify({ ...route, heads: [hop('NOPE', 'a', 'rows=1-2')] }), /NOPE is not a Durable Object binding/],
      [JSON.stringify({ ...route, next: Array(65).fill(route.next[0]) }), /at most 64/],
      [JSON.stringify({ ...route, top: -1 }), /top must be a whole number/],
      [JSON.stringify({ ...route, timeoutMs: 0 }), /timeoutMs must be > 0/],
    ];
    for (const [header, why] of bad) {
      assert.throws(() => parseRoute(header, env), (e) => e.status === 400 && why.test(e.message), header);
    }
  });

  test('head answers survive the bundle, errors as StationErrors; a malformed bundle is a StationError', () => {
    const answers = [new Uint8Array([1, 2, 3]), new Error('head 1: did not answer'), new Uint8Array(0)];
    const back = unbundleAnswers(bundleAnswers(answers), 3);
    assert.deepEqual([...back[0]], [1, 2, 3]);
    assert.ok(back[1] instanceof StationError);
    assert.equal(back[1].message, 'head 1: did not answer');
    assert.equal(back[1].code, 'station_failed');
    assert.equal(back[2].byteLength, 0);
    const good = bundleAnswers(answers);
    const broken = [
      [new Uint8Array(4), /does not start with KNHB/],
      [good, /holds 3 answers for 2/, 2],
      [good.subarray(0, good.byteLength - 1), /ends inside|malformed/],
      [Uint8Array.from([...good, 0]), /1 bytes after/],
      [(() => { const b = good.slice(); b[8] = 7; return b; })(), /answer 0 is malformed \(kind 7/],
    ];
    for (const [bytes, why, count = 3] of broken) {
      assert.throws(() => unbundleAnswers(bytes, count), (e) => e instanceof StationError && why.test(e.message));
    }
  });
});
