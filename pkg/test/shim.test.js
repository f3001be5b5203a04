// The HostShim wrapper's own logic (argument conversion, the prompt crossing once, dispose, the
// line every call goes through: admissions, steps, jobs, its bounds, aborts, streams giving way,
// stalls), checked against a recording stand-in for the wasm-bindgen WasmHost; the real model
// (and what the arguments mean — option ranges, vocabulary, message shapes — which Rust checks)
// is tested through the built package.
import assert from 'node:assert/strict';
import { describe, test } from './harness.js';
import { HostShim } from '../src/shim.js';
import { QueueFull, QueueTimeout, SUPERSEDED } from '../src/scheduler.js';
import { messagesJson, optionsJson, toText, toTokenIds } from '../src/convert.js';
import { setWasmResolver } from '../src/resolver.js';
import { BufferKnotSource } from '../src/sources.js';
import { admits, hangingHost, recordingHost } from './fake-host.js';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const source = new BufferKnotSource(new Uint8Array(8));

/** A wasm namespace whose WasmHost.open records what it was given. */
function recordingWasm() {
  const opened = [];
  class WasmHost {
    static async open(source, json, onProgress) {
      opened.push({ source, options: JSON.parse(json), onProgress });
      return recordingHost();
    }
  }
  return { opened, WasmHost };
}

setWasmResolver(async (wasm, threads) => ({ ns: wasm, threads }));

describe('HostShim.open', () => {
  test('the options go to Rust as JSON, which checks them; onProgress stays a JS function', async () => {
    const wasm = recordingWasm();
    const onProgress = () => {};
    const all = { lruCapacity: 6, draftMode: { maxDraft: 4, margin: NaN }, kvCache: 'f16', lruCapcity: 2, onProgress };
    await HostShim.open(source, wasm, all);
    const { onProgress: _, ...rest } = all;
    assert.deepEqual(wasm.opened[0].options, { ...rest, draftMode: { maxDraft: 4, margin: 'NaN' } });
    assert.equal(wasm.opened[0].onProgress, onProgress);
    assert.equal(wasm.opened[0].source, source);
    // The namespace alone, or options alone.
    await HostShim.open(source, wasm);
    assert.deepEqual(wasm.opened[1].options, {});
  });

  test('the line\'s options stay in JS, checked; the rest go to Rust', async () => {
    const wasm = recordingWasm();
    await HostShim.open(source, wasm, {
      lruCapacity: 2, maxWaiting: 3, waitTimeoutMs: 100, stallMs: 50, preemptMs: 10, requestScopedIo: true, onTurn: () => {},
    });
    assert.deepEqual(wasm.opened[0].options, { lruCapacity: 2 });
    for (const [key, value] of [['maxWaiting', -1], ['waitTimeoutMs', 1.5], ['stallMs', '5'], ['preemptMs', null], ['requestScopedIo', 1], ['onTurn', 'f']]) {
      await assert.rejects(HostShim.open(source, wasm, { [key]: value }),
        (e) => e.code === 'invalid_option' && e.message.startsWith(`HostShim.open: ${key} must be`), key);
    }
    assert.equal(wasm.opened.length, 1);
  });

  test('a callback that is not one, and options that are not an object, are invalid arguments', async () => {
    const wasm = recordingWasm();
    await assert.rejects(HostShim.open(source, wasm, { onProgress: 3 }), { code: 'invalid_argument', message: /onProgress must be a function/ });
    await assert.rejects(HostShim.open(source, wasm, [1]), { code: 'invalid_argument', message: /options must be an object/ });
    await assert.rejects(HostShim.open(source, { WasmHost: {} }, {}), { code: 'invalid_argument', message: /not the knot-wasm bindings/ });
    assert.equal(wasm.opened.length, 0);
  });
});

describe('argument conversion', () => {
  test('text with a lone surrogate is refused, naming where (invalid_text)', () => {
    assert.equal(toText('a\uD83D\uDE00b', 'x'), 'a\uD83D\uDE00b');
    assert.throws(() => toText('ab\uD800', 'prompt'), { code: 'invalid_text', message: /prompt has a lone surrogate \(\\uD800\) at index 2: it is not valid Unicode text/ });
    assert.throws(() => toText('\uDE00a', 'x'), /lone surrogate \(\\uDE00\) at index 0/);
    assert.throws(() => toText(5, 'x'), { code: 'invalid_argument', message: /x must be a string/ });
    const shim = new HostShim(recordingHost());
    assert.throws(() => shim.applyChatTemplate([{ role: 'user', content: 'ok' }, { role: 'u\uDC01', content: 'x' }]),
      /message 1 role has a lone surrogate/);
    assert.throws(() => shim.encode('\uD800'), /encode: text has a lone surrogate/);
    // The shape of messages is Rust's to check: anything else goes as JSON.
    assert.equal(messagesJson([{ role: 'user' }, 3]), '[{"role":"user"},3]');
  });

  test('token ids: a Uint32Array as is, or an array of integers in [0, 2^32)', () => {
    assert.deepEqual(toTokenIds([1, 2, 3]), new Uint32Array([1, 2, 3]));
    const ids = new Uint32Array([4]);
    assert.equal(toTokenIds(ids), ids);
    // Whether an id is below the vocabulary is Rust's to say (token_out_of_range).
    assert.deepEqual(toTokenIds([70000]), new Uint32Array([70000]));
    assert.throws(() => toTokenIds([1, -2]), { code: 'invalid_argument', message: /index 1 must be an integer >= 0, got -2/ });
    assert.throws(() => toTokenIds([1.5]), /index 0 must be an integer/);
    assert.throws(() => toTokenIds(new Int32Array([1])), /Uint32Array or an array of integers/);
    assert.throws(() => toTokenIds('1,2'), /Uint32Array or an array of integers/);
  });

  test('options go to Rust as JSON; BigInt, NaN and Infinity survive the trip', () => {
    assert.equal(optionsJson({}), '{}');
    assert.deepEqual(JSON.parse(optionsJson({ seed: 2n ** 64n - 1n, temperature: NaN, topP: Infinity, minP: -Infinity, moa: { k: 3 } })),
      { seed: '18446744073709551615', temperature: 'NaN', topP: 'Infinity', minP: '-Infinity', moa: { k: 3 } });
    assert.equal(optionsJson({ temperature: undefined }), '{}');
    assert.throws(() => optionsJson(null, 'createMoaAgents: options'), { code: 'invalid_argument', message: /createMoaAgents: options must be an object/ });
  });
});

describe('HostShim over WasmHost', () => {
  test('generate: admit with the options, then one step per token; stops after end of text', async () => {
    const host = recordingHost('hi');
    const shim = new HostShim(host);
    const seen = [];
    const steps = [];
    const out = await shim.generate([5, 6], 10, {
      temperature: 0.5, seed: 7n, onToken: (t) => seen.push(t), onStep: (s) => steps.push(s.token),
    });
    assert.deepEqual(Array.from(out), [104, 105, 0]);
    // onToken gets what streamTokens yields, here as in the text APIs: the first token says how
    // the prompt was served, the last what the generation did.
    assert.deepEqual(seen, [
      { id: 104, text: 'h', finishReason: null, prompt: { tokens: 2, prefix: null } },
      { id: 105, text: 'i', finishReason: null },
      { id: 0, text: '', finishReason: 'stop', report: { promptTokens: 2, decodeTokens: 3, prefix: null } },
    ]);
    assert.deepEqual(steps, [104, 105, 0]);
    assert.deepEqual(host.calls, [
      ['admit', [5, 6], { temperature: 0.5, seed: '7', maxTokens: 10 }],
      'step', 'step', 'step',
    ]);
  });

  test('generate: n = 0 admits and ends at the first step; n tokens end with length', async () => {
    const host = recordingHost('abc');
    const shim = new HostShim(host);
    assert.deepEqual(await shim.generate([1], 0), new Uint32Array(0));
    assert.deepEqual(host.calls, [['admit', [1], { maxTokens: 0 }], 'step']);
    host.calls.length = 0;
    assert.deepEqual(Array.from(await shim.generate([1], 2)), [97, 98]);
    assert.deepEqual(host.calls, [['admit', [1], { maxTokens: 2 }], 'step', 'step']);
  });

  test('generate: bad n, ids and callbacks are rejected before wasm is called', async () => {
    const host = recordingHost();
    const shim = new HostShim(host);
    await assert.rejects(shim.generate([1], -1), /n \(tokens to generate\) must be an integer >= 0/);
    await assert.rejects(shim.generate([1], 1.5), /must be an integer >= 0/);
    await assert.rejects(shim.generate([1], 1, { signal: {} }), { code: 'invalid_argument', message: /signal must be an AbortSignal/ });
    await assert.rejects(shim.generate([1], 1, { onToken: 3 }), /onToken must be a function/);
    await assert.rejects(shim.generate([1], 1, { onStep: 'x' }), /onStep must be a function/);
    await assert.rejects(shim.generate([1], 1, { maxTokens: 3 }), /give the token count as n/);
    await assert.rejects(shim.generate([1], 1, [1]), /options must be an object/);
    await assert.rejects(shim.generate([1], 1, { priority: 1 }), { code: 'invalid_option', message: /priority must be true or false/ });
    assert.deepEqual(host.calls, []);
  });

  test('continue goes to Rust; a second generation waits its turn on one slot, runs beside the first on two', async () => {
    const host = recordingHost('xyz');
    const shim = new HostShim(host);
    await shim.generate([1], 1);
    host.calls.length = 0;
    await shim.generate([], 1, { continue: true });
    assert.deepEqual(host.calls[0], ['admit', [], { continue: true, maxTokens: 1 }]);
    host.calls.length = 0;
    const [a, b] = await Promise.all([shim.generate([1], 3), shim.generate([2], 2)]);
    assert.deepEqual([Array.from(a), Array.from(b)], [[120, 121, 122], [120, 121]]);
    // One slot: the second is admitted at the boundary after the first ended.
    assert.deepEqual(host.calls, [
      ['admit', [1], { maxTokens: 3 }], 'step', 'step', 'step', ['admit', [2], { maxTokens: 2 }], 'step', 'step',
    ]);
    const two = recordingHost('xyz', { maxSequences: 2 });
    const both = new HostShim(two);
    assert.equal(both.maxSequences, 2);
    const [c, d] = await Promise.all([both.generate([1], 3), both.generate([2], 2)]);
    assert.deepEqual([Array.from(c), Array.from(d)], [[120, 121, 122], [120, 121]]);
    // Two slots: both admitted at once, their tokens from the same steps.
    assert.deepEqual(two.calls, [['admit', [1], { maxTokens: 3 }], ['admit', [2], { maxTokens: 2 }], 'step', 'step', 'step']);
    assert.equal(both.stats().queue.peakActive, 2);
    assert.deepEqual(both.sequences, { active: 0, waiting: 0 });
  });

  test('AbortSignal stops generation with its reason; its sequence is canceled at once when nothing runs', async () => {
    const host = recordingHost('abcdef');
    const shim = new HostShim(host);
    const controller = new AbortController();
    const got = [];
    await assert.rejects(
      shim.generate([1], 6, { signal: controller.signal, onToken: (t) => { got.push(t.id); if (got.length === 2) controller.abort(new Error('stop now')); } }),
      /stop now/,
    );
    assert.equal(got.length, 2);
    // No later call is needed to end it: its slot is free, its conversation kept.
    assert.deepEqual(host.calls.at(-1), ['cancel', 1]);
    assert.equal(host.active, 0);
    assert.deepEqual(shim.sequences, { active: 0, waiting: 0 });
    // The same for a stream left with break.
    for await (const _ of shim.streamTokens('x', { maxTokens: 6 })) break;
    assert.deepEqual(host.calls.at(-1), ['cancel', 2]);
    assert.deepEqual(shim.sequences, { active: 0, waiting: 0 });
    const aborted = AbortSignal.abort();
    await assert.rejects(shim.generate([1], 1, { signal: aborted }), { name: 'AbortError' });
    assert.equal(admits(host).length, 2);
    assert.deepEqual(Array.from(await shim.generate([2], 1)), [97]);
    const cancel = host.calls.findIndex((c) => Array.isArray(c) && c[0] === 'cancel' && c[1] === 1);
    const admit = host.calls.findIndex((c) => Array.isArray(c) && c[0] === 'admit' && c[1][0] === 2);
    assert.ok(cancel >= 0 && cancel < admit, JSON.stringify(host.calls));
    assert.equal(host.active, 0);
  });

  test('generateText, stream and chat messages: the prompt crosses as it came, the text comes from the decode loop', async () => {
    const host = recordingHost('é ok');
    const shim = new HostShim(host);
    const pieces = [];
    const result = await shim.generateText('hi', { maxTokens: 20, onToken: (t) => pieces.push(t.text) });
    assert.equal(result.text, 'é ok');
    assert.equal(result.finishReason, 'stop');
    assert.deepEqual(Array.from(result.tokens), [0xc3, 0xa9, 0x20, 0x6f, 0x6b]);
    assert.equal(result.steps.length, 6);
    assert.deepEqual(pieces, ['', 'é', ' ', 'o', 'k', '']);
    // Text goes to Rust as text (it encodes it); the result says how the prompt was served and
    // what the generation did.
    assert.deepEqual(host.calls[0], ['admit', 'hi', { maxTokens: 20 }]);
    assert.equal(result.promptTokens, 2);
    assert.equal(result.prefix, null);
    assert.deepEqual(result.report, { promptTokens: 2, decodeTokens: 6, prefix: null });

    const streamed = [];
    for await (const piece of shim.stream([{ role: 'user', content: 'q' }], { maxTokens: 3 })) streamed.push(piece);
    assert.deepEqual(streamed, ['é', ' ']);
    assert.deepEqual(admits(host).at(-1), [{ chat: '[{"role":"user","content":"q"}]' }, { maxTokens: 3 }]);
    assert.equal((await shim.generateText('x', { maxTokens: 1 })).finishReason, 'length');
    const warm = await shim.generateText('hi', { maxTokens: 1, reusePrefix: true });
    assert.deepEqual(warm.prefix, { status: 'miss', reused: 0, prefilled: 2, window: 0, kind: 'implicit', id: null });
  });

  test('a prompt crosses once: token ids, text, messages or { messages, tools, suffix }; countTokens and the windows take the same', async () => {
    const host = recordingHost('ok');
    const shim = new HostShim(host);
    const messages = [{ role: 'user', content: 'q' }];
    const tools = [{ type: 'function', function: { name: 'f' } }];
    await shim.generateText(Uint32Array.of(1, 2), { maxTokens: 1 });
    await shim.generateText({ messages, tools, suffix: '<tool_call>\n', addGenerationPrompt: true }, { maxTokens: 1 });
    await shim.generateText({ messages }, { maxTokens: 1 });
    const chat = '[{"role":"user","content":"q"}]';
    assert.deepEqual(admits(host).map(([p]) => p), [
      [1, 2],
      { chat, tools: JSON.stringify(tools), addGenerationPrompt: true, suffix: '<tool_call>\n' },
      { chat },
    ]);
    assert.equal(shim.countTokens('hi'), 2);
    assert.equal(shim.countTokens(messages), 3);
    assert.equal(shim.countTokens(Uint32Array.of(1, 2, 3)), 3);
    // Anything else is refused before wasm is called.
    const before = host.calls.length;
    await assert.rejects(shim.generateText(/** @type {any} */ (5)), { code: 'invalid_argument', message: /a prompt is text, chat messages/ });
    await assert.rejects(shim.generateText({ messages, addGenerationPrompt: 'yes' }), { code: 'invalid_argument', message: /addGenerationPrompt must be true or false/ });
    await assert.rejects(shim.generateText('a\uD800'), { code: 'invalid_text' });
    await assert.rejects(shim.generateText({ messages, suffix: 3 }), { code: 'invalid_argument', message: /prompt\.suffix must be a string/ });
    assert.throws(() => shim.countTokens({ text: 'x' }), { code: 'invalid_argument' });
    assert.equal(host.calls.length, before);
    // A window's chat is the conversation so far: without the assistant turn's opening.
    assert.equal((await shim.createPrefillWindow(messages, { ttlMs: 5 })).id, 'pw-1-00000000');
    await shim.updatePrefillWindow('pw-1-00000000', { prompt: 'more', ttlMs: 6 });
    await shim.updatePrefillWindow('pw-1-00000000', { ttlMs: 7 });
    assert.deepEqual(host.calls.filter((c) => Array.isArray(c) && /PrefillWindow$/.test(c[0])), [
      ['createPrefillWindow', { chat, addGenerationPrompt: false }, { ttlMs: 5 }],
      ['updatePrefillWindow', 'pw-1-00000000', 'more', { ttlMs: 6 }],
      ['updatePrefillWindow', 'pw-1-00000000', undefined, { ttlMs: 7 }],
    ]);
    assert.equal(shim.prefillWindow('pw-1-00000000').tokens, 1);
    assert.throws(() => shim.prefillWindow(3), { code: 'invalid_argument' });
    assert.equal(shim.deletePrefillWindow('pw-1-00000000'), true);
  });

  test('prefetchLayer waits its turn, stats, reset, abort, encode/decode checks', async () => {
    const host = recordingHost();
    const shim = new HostShim(host);
    const generating = shim.generate([1], 1);
    const prefetched = shim.prefetchLayer(3);
    await Promise.all([generating, prefetched]);
    // In line behind the generation that came first: it runs at a boundary, after its admission.
    const at = (name) => host.calls.findIndex((c) => Array.isArray(c) && c[0] === name);
    assert.ok(at('admit') >= 0 && at('admit') < at('prefetch'), String(host.calls));
    await assert.rejects(shim.prefetchLayer('4'), { code: 'invalid_argument', message: /layer must be a number/ });
    const s = shim.stats();
    assert.equal(s.misses, 1);
    assert.equal(s.wasmMemoryBytes, undefined);
    // The line's figures, read now.
    assert.deepEqual({ ...s.queue, peakWaiting: undefined }, {
      slots: 1, active: 0, waiting: 0, busy: false, served: 1, rejected: 0, timedOut: 0, reclaimed: 0, superseded: 0, peakActive: 1, peakWaiting: undefined, steps: 1,
    });
    shim.reset();
    shim.abort();
    assert.deepEqual(host.calls.slice(-2), ['reset', 'abort']);
    assert.deepEqual(shim.encode('A'), new Uint32Array([65]));
    assert.equal(shim.decode([104, 105]), 'hi');
    assert.throws(() => shim.encode(5), /text must be a string/);
    assert.deepEqual(shim.info(), { name: 'fake', maxSequences: 1, chatTemplate: null });
  });

  test('dispose is idempotent, frees once, and later use fails', async () => {
    const host = recordingHost();
    const shim = new HostShim(host);
    shim.dispose();
    shim.dispose();
    assert.deepEqual(host.calls, ['free']);
    assert.throws(() => shim.encode('a'), { code: 'disposed', message: /used after dispose\(\)/ });
    assert.throws(() => shim.stats(), /used after dispose\(\)/);
    await assert.rejects(shim.generate([1], 1), /used after dispose\(\)/);
    await assert.rejects(shim.createPrefillWindow('x'), /used after dispose\(\)/);
  });

  test('an abort while a step carries only that generation aborts the step, and rejects with the reason', async () => {
    const host = hangingHost();
    const shim = new HostShim(host);
    const controller = new AbortController();
    const running = shim.generate([1], 3, { signal: controller.signal });
    while (!host.calls.includes('step')) await sleep(0);
    controller.abort(new Error('user cancelled'));
    await assert.rejects(running, /user cancelled/);
    assert.deepEqual(host.calls.slice(-2), ['step', 'abort']);
    assert.equal(host.active, 0);
    // An abort after the generation ended touches nothing.
    const later = new AbortController();
    await shim.generate([1], 1, { signal: later.signal });
    later.abort();
    assert.equal(host.calls.filter((c) => c === 'abort').length, 1);
  });

  test('an abort while a step also carries another generation leaves the step alone: the other goes on', async () => {
    const host = hangingHost('abc', { maxSequences: 2 });
    const shim = new HostShim(host);
    const controller = new AbortController();
    const leaving = shim.generate([1], 3, { signal: controller.signal });
    const staying = shim.generate([2], 3);
    while (!host.calls.includes('step')) await sleep(0);
    assert.equal(admits(host).length, 2);
    controller.abort(new Error('user cancelled'));
    host.release();
    await assert.rejects(leaving, /user cancelled/);
    assert.deepEqual(Array.from(await staying), [97, 98, 99]);
    assert.ok(!host.calls.includes('abort'));
    assert.equal(host.active, 0);
  });

  test('dispose during a call that never settles aborts it, then frees; the promise waits', async () => {
    const host = hangingHost();
    const shim = new HostShim(host);
    const running = shim.generate([1], 3);
    while (!host.calls.includes('step')) await sleep(0);
    const disposed = shim.dispose();
    assert.equal(host.calls.at(-1), 'abort');
    await disposed;
    assert.equal(host.calls.at(-1), 'free');
    await assert.rejects(running, /used after dispose\(\)/);
    await shim.dispose();
  });

  test('a stream not pulled gives way, past preemptMs, to a generation waiting for its slot, and then says superseded', async () => {
    const host = recordingHost('abcdefghijklmnopqrstuvwxyz', { stepMs: 2 });
    const shim = new HostShim(host, undefined, undefined, { preemptMs: 10 });
    const first = shim.stream('x', { maxTokens: 26 })[Symbol.asyncIterator]();
    assert.deepEqual(await first.next(), { value: 'a', done: false });
    // Not pulled any more (as if dropped without return()): the next generation waits for the
    // slot while the stream runs on, then takes it.
    assert.equal((await shim.generateText('y', { maxTokens: 2 })).text, 'ab');
    await assert.rejects(first.next(), (e) => e.message === SUPERSEDED);
    assert.deepEqual(await first.next(), { value: undefined, done: true });
    assert.equal(shim.stats().queue.superseded, 1);
    assert.ok(host.calls.some((c) => Array.isArray(c) && c[0] === 'cancel' && c[1] === 1));
    // Not pulled while nobody waits, a stream keeps its slot: it goes on when pulled again.
    const paused = shim.stream('x', { maxTokens: 3 })[Symbol.asyncIterator]();
    let text = (await paused.next()).value;
    await sleep(30);
    for (let p = await paused.next(); !p.done; p = await paused.next()) text += p.value;
    assert.equal(text, 'abc');
    // A running generate() is not pre-empted (it pulls every token): the next waits its turn.
    const [a, b] = await Promise.all([shim.generate([1], 12), shim.generate([2], 2)]);
    assert.deepEqual([a.length, b.length], [12, 2]);
    assert.equal(shim.stats().queue.superseded, 1);
  });

  test('the line\'s bounds: past maxWaiting a newcomer is refused, past waitTimeoutMs it gives up (busy, 429), a request with priority waits; onTurn gets who runs each turn', async () => {
    const host = recordingHost('abcdefghijklmnop', { stepMs: 5 });
    const tags = [];
    const shim = new HostShim(host, undefined, undefined, { maxWaiting: 1, waitTimeoutMs: 60, onTurn: (t) => tags.push(t) });
    const a = shim.generate([1], 16, { tag: 'a' });
    await sleep(2);
    const b = shim.generate([2], 1, { tag: 'b' });
    await assert.rejects(shim.generate([3], 1, { tag: 'x' }), (e) => e instanceof QueueFull && e.code === 'busy' && e.retryAfter >= 1);
    const c = shim.generate([4], 1, { priority: true, tag: 'c' });
    await assert.rejects(b, (e) => e instanceof QueueTimeout && e.code === 'busy' && e.retryAfter >= 1);
    assert.equal((await a).length, 16);
    assert.deepEqual(Array.from(await c), [97]);
    const q = shim.stats().queue;
    assert.deepEqual([q.rejected, q.timedOut, q.served], [1, 1, 2]);
    assert.deepEqual(admits(host).map(([p]) => p[0]), [1, 4]);
    assert.ok(tags.includes('a') && tags.includes('c') && tags.every((t) => ['a', 'b', 'c'].includes(t)), String(tags));
  });

  test('a burst before the first boundary: the free slots take their share, maxWaiting counts those left waiting', async () => {
    const host = recordingHost('ab', { maxSequences: 2 });
    const shim = new HostShim(host, undefined, undefined, { maxWaiting: 1 });
    // All at once, before any boundary has run: two for the free slots, one to wait, one too many.
    const runs = [1, 2, 3, 4].map((id) => shim.generate([id], 2));
    const [a, b, c, d] = await Promise.allSettled(runs);
    assert.deepEqual([a, b, c].map((r) => r.status), ['fulfilled', 'fulfilled', 'fulfilled']);
    assert.ok(d.status === 'rejected' && d.reason instanceof QueueFull, String(d.status));
    assert.deepEqual(admits(host).map(([p]) => p[0]), [1, 2, 3]);
    assert.equal(shim.stats().queue.rejected, 1);
  });

  test('stallMs: a step whose request went away (its call never comes back) is taken back, and the next generation runs', async () => {
    const host = hangingHost();
    host.unwindOnAbort = false;
    const shim = new HostShim(host, undefined, undefined, { stallMs: 30 });
    // Its caller is gone: nobody awaits it (the call in flight never returns).
    void shim.generate([1], 3);
    while (!host.calls.includes('step')) await sleep(1);
    const t0 = Date.now();
    assert.deepEqual(Array.from(await shim.generate([2], 2)), [97, 98]);
    assert.ok(Date.now() - t0 >= 25, `${Date.now() - t0} ms`);
    assert.deepEqual(host.calls.filter((c) => c === 'abort' || c === 'dropReads'), ['abort', 'dropReads']);
    assert.ok(host.calls.some((c) => Array.isArray(c) && c[0] === 'cancel' && c[1] === 1));
    assert.equal(shim.stats().queue.reclaimed, 1);
    assert.deepEqual(shim.sequences, { active: 0, waiting: 0 });
  });

  test('requestScopedIo: every step drains its reads', async () => {
    const host = recordingHost('ab', { maxSequences: 2 });
    const shim = new HostShim(host, undefined, undefined, { requestScopedIo: true });
    await Promise.all([shim.generate([1], 2), shim.generate([2], 2), shim.generate([3], 1)]);
    const steps = host.calls.filter((c) => c === 'step').length;
    assert.equal(steps, 3);
    host.calls.forEach((c, i) => {
      if (c === 'step') assert.equal(host.calls[i + 1], 'drain', JSON.stringify(host.calls));
    });
  });

  test('dispose during a call frees after the call finishes', async () => {
    const host = recordingHost('abc');
    const shim = new HostShim(host);
    const pending = shim.generate([1], 3, {
      onToken: () => shim.dispose(),
    });
    await assert.rejects(pending, /used after dispose\(\)/);
    assert.equal(host.calls.filter((c) => c === 'free').length, 1);
    assert.equal(host.calls.at(-1), 'free');
  });
});
