// The HostShim wrapper's own logic (argument conversion, dispose, call order, pumping the Rust
// decode loop), checked against a recording stand-in for the wasm-bindgen WasmHost; the real
// model (and what the arguments mean — option ranges, vocabulary, message shapes — which Rust
// checks) is tested through the built package.
import assert from 'node:assert/strict';
import { describe, test } from './harness.js';
import { HostShim } from '../src/shim.js';
import { messagesJson, optionsJson, toText, toTokenIds } from '../src/convert.js';
import { setWasmResolver } from '../src/resolver.js';
import { BufferKnotSource } from '../src/sources.js';

const utf8 = new TextDecoder();
/** Byte tokens: id = byte, decoded as lossy UTF-8 like a byte-level BPE. */
const decodeBytes = (ids) => utf8.decode(Uint8Array.from(ids));

/**
 * Records calls and plays the Rust decode loop's part: `start` takes the options JSON, `next`
 * emits the bytes of `reply` one per token with the text a streaming decoder would give
 * (a split character comes out whole on its last byte), then id 0 (end of text, 'stop'), or
 * 'length' at maxTokens.
 */
function recordingHost(reply = 'ok') {
  const calls = [];
  const bytes = [...new TextEncoder().encode(reply)];
  let pos = 0;
  let left = 0;
  let held = [];
  return {
    calls,
    vocabSize: 256,
    layerCount: 4,
    eosIds: new Uint32Array([0]),
    encode: (text) => Uint32Array.from(new TextEncoder().encode(text)),
    decode: (ids) => decodeBytes(ids),
    chatPrompt: (json) => `<${JSON.parse(json).map((m) => m.content).join('|')}>`,
    reset() { calls.push('reset'); pos = 0; },
    async start(ids, json) {
      const options = JSON.parse(json);
      calls.push(['start', Array.from(ids), options]);
      if (!options.continue) pos = 0;
      left = options.maxTokens ?? 256;
      held = [];
    },
    async next() {
      calls.push('next');
      if (left === 0) return null;
      left--;
      const id = pos < bytes.length ? bytes[pos++] : 0;
      let text = '';
      if (id !== 0) {
        held.push(id);
        const piece = decodeBytes(held);
        if (!piece.endsWith('\uFFFD')) { text = piece; held = []; }
      }
      const finishReason = id === 0 ? 'stop' : left === 0 ? 'length' : null;
      if (finishReason !== null) left = 0;
      return { id, text, finishReason, step: { token: id, picker: 'greedy' } };
    },
    async prefetchLayer(l) { calls.push(['prefetch', l]); },
    stats: () => ({ misses: 1 }),
    abort() { calls.push('abort'); },
    free() { calls.push('free'); },
  };
}

/**
 * A recording host whose `next` hangs (a read that never settles) until `abort()`, which makes
 * it reject as the wasm side does: an AbortError.
 */
function hangingHost() {
  const host = recordingHost('abc');
  /** @type {((err: Error) => void) | undefined} */
  let fail;
  host.next = () => {
    host.calls.push('next');
    return new Promise((_resolve, reject) => {
      fail = reject;
    });
  };
  host.abort = () => {
    host.calls.push('abort');
    const err = new Error('the call was aborted');
    err.name = 'AbortError';
    fail?.(err);
  };
  return host;
}

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
  test('generate: start with the options, then one next per token; stops after end of text', async () => {
    const host = recordingHost('hi');
    const shim = new HostShim(host);
    const seen = [];
    const steps = [];
    const out = await shim.generate([5, 6], 10, {
      temperature: 0.5, seed: 7n, onToken: (t) => seen.push(t), onStep: (s) => steps.push(s.token),
    });
    assert.deepEqual(Array.from(out), [104, 105, 0]);
    // onToken gets what streamTokens yields, here as in the text APIs.
    assert.deepEqual(seen, [
      { id: 104, text: 'h', finishReason: null },
      { id: 105, text: 'i', finishReason: null },
      { id: 0, text: '', finishReason: 'stop' },
    ]);
    assert.deepEqual(steps, [104, 105, 0]);
    assert.deepEqual(host.calls, [
      ['start', [5, 6], { temperature: 0.5, seed: '7', maxTokens: 10 }],
      'next', 'next', 'next',
    ]);
  });

  test('generate: n = 0 only starts; n tokens end with length', async () => {
    const host = recordingHost('abc');
    const shim = new HostShim(host);
    assert.deepEqual(await shim.generate([1], 0), new Uint32Array(0));
    assert.deepEqual(host.calls, [['start', [1], { maxTokens: 0 }], 'next']);
    host.calls.length = 0;
    assert.deepEqual(Array.from(await shim.generate([1], 2)), [97, 98]);
    assert.deepEqual(host.calls.slice(1), ['next', 'next']);
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
    assert.deepEqual(host.calls, []);
  });

  test('continue keeps the session; a second concurrent generation is refused', async () => {
    const host = recordingHost('xyz');
    const shim = new HostShim(host);
    await shim.generate([1], 1);
    host.calls.length = 0;
    await shim.generate([], 1, { continue: true });
    assert.deepEqual(host.calls[0], ['start', [], { continue: true, maxTokens: 1 }]);
    const first = shim.generate([1], 3);
    await assert.rejects(shim.generate([1], 3), { code: 'busy', message: /another generation is in progress/ });
    await first;
  });

  test('AbortSignal stops generation with its reason', async () => {
    const shim = new HostShim(recordingHost('abcdef'));
    const controller = new AbortController();
    const got = [];
    await assert.rejects(
      shim.generate([1], 6, { signal: controller.signal, onToken: (t) => { got.push(t.id); if (got.length === 2) controller.abort(new Error('stop now')); } }),
      /stop now/,
    );
    assert.equal(got.length, 2);
    const aborted = AbortSignal.abort();
    await assert.rejects(shim.generate([1], 1, { signal: aborted }), { name: 'AbortError' });
  });

  test('generateText, stream and chat messages: text comes from the decode loop', async () => {
    const host = recordingHost('é ok');
    const shim = new HostShim(host);
    const pieces = [];
    const result = await shim.generateText('hi', { maxTokens: 20, onToken: (t) => pieces.push(t.text) });
    assert.equal(result.text, 'é ok');
    assert.equal(result.finishReason, 'stop');
    assert.deepEqual(Array.from(result.tokens), [0xc3, 0xa9, 0x20, 0x6f, 0x6b]);
    assert.equal(result.steps.length, 6);
    assert.deepEqual(pieces, ['', 'é', ' ', 'o', 'k', '']);
    assert.deepEqual(host.calls[0], ['start', [104, 105], { maxTokens: 20 }]);

    const streamed = [];
    for await (const piece of shim.stream([{ role: 'user', content: 'q' }], { maxTokens: 3 })) streamed.push(piece);
    assert.deepEqual(streamed, ['é', ' ']);
    assert.deepEqual(host.calls.find((c) => c[0] === 'start' && c[1][0] === 60), ['start', [60, 113, 62], { maxTokens: 3 }]);
    assert.equal((await shim.generateText('x', { maxTokens: 1 })).finishReason, 'length');
  });

  test('prefetchLayer waits its turn, stats, encode/decode checks', async () => {
    const host = recordingHost();
    const shim = new HostShim(host);
    const generating = shim.generate([1], 1);
    const prefetched = shim.prefetchLayer(3);
    await Promise.all([generating, prefetched]);
    // Queued behind the start that was already queued (it may run between two tokens).
    const at = (name) => host.calls.findIndex((c) => Array.isArray(c) && c[0] === name);
    assert.ok(at('start') >= 0 && at('start') < at('prefetch'), String(host.calls));
    await assert.rejects(shim.prefetchLayer('4'), { code: 'invalid_argument', message: /layer must be a number/ });
    assert.deepEqual(shim.stats(), { misses: 1, wasmMemoryBytes: undefined });
    assert.deepEqual(shim.encode('A'), new Uint32Array([65]));
    assert.equal(shim.decode([104, 105]), 'hi');
    assert.throws(() => shim.encode(5), /text must be a string/);
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
  });

  test('an abort while a wasm call is in flight aborts that call, and rejects with the reason', async () => {
    const host = hangingHost();
    const shim = new HostShim(host);
    const controller = new AbortController();
    const running = shim.generate([1], 3, { signal: controller.signal });
    while (!host.calls.includes('next')) await new Promise((resolve) => setTimeout(resolve, 0));
    controller.abort(new Error('user cancelled'));
    await assert.rejects(running, /user cancelled/);
    assert.deepEqual(host.calls.slice(-2), ['next', 'abort']);
    // An abort after the generation ended touches nothing.
    const later = new AbortController();
    host.next = async () => null;
    await shim.generate([1], 1, { signal: later.signal });
    later.abort();
    assert.equal(host.calls.filter((c) => c === 'abort').length, 1);
  });

  test('dispose during a call that never settles aborts it, then frees; the promise waits', async () => {
    const host = hangingHost();
    const shim = new HostShim(host);
    const running = shim.generate([1], 3);
    while (!host.calls.includes('next')) await new Promise((resolve) => setTimeout(resolve, 0));
    const disposed = shim.dispose();
    assert.equal(host.calls.at(-1), 'abort');
    await disposed;
    assert.equal(host.calls.at(-1), 'free');
    await assert.rejects(running, /used after dispose\(\)/);
    await shim.dispose();
  });

  test('a stream waiting for its consumer gives way to a new call and then says superseded', async () => {
    const host = recordingHost('abcdef');
    const shim = new HostShim(host);
    const first = shim.stream('x', { maxTokens: 6 })[Symbol.asyncIterator]();
    assert.deepEqual(await first.next(), { value: 'a', done: false });
    // Not pulled any more (as if dropped without return()): the next generation runs.
    assert.equal((await shim.generateText('y', { maxTokens: 2 })).text, 'ab');
    await assert.rejects(first.next(), /superseded by a later call/);
    assert.deepEqual(await first.next(), { value: undefined, done: true });
    // A running generate() is not pre-empted: it is working, not waiting for a consumer.
    const running = shim.generate([1], 3);
    await assert.rejects(shim.generate([1], 3), /another generation is in progress/);
    await running;
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
