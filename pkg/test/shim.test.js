// The HostShim wrapper's own logic (argument conversion, dispose, call order, pumping the Rust
// decode loop), checked against a recording stand-in for the wasm-bindgen WasmHost; the real
// model (and the options validation, which is Rust's) is tested through the built package.
import assert from 'node:assert/strict';
import { describe, test } from './harness.js';
import {
  HostShim, checkOpenOptions, checkSourceSize, checkText, optionsJson, toTokenIds,
} from '../src/shim.js';
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
    stats: () => JSON.stringify({ misses: 1 }),
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

describe('HostShim.open validation', () => {
  test('draftMode: true, false or an object, sent to Rust as JSON (which checks its fields)', () => {
    const json = (/** @type {Record<string, unknown>} */ o) => JSON.parse(checkOpenOptions(o).json);
    assert.equal(json({ draftMode: true }).draftMode, true);
    assert.equal(json({ draftMode: false }).draftMode, false);
    assert.equal(json({}).draftMode, undefined);
    assert.equal(checkOpenOptions({ draftMode: { maxDraft: 4, margin: NaN } }).json,
      '{"draftMode":{"maxDraft":4,"margin":"NaN"}}');
    for (const bad of ['yes', 1, null, [true]]) {
      assert.throws(() => checkOpenOptions({ draftMode: bad }), /draftMode must be true, false or \{ ngram, maxDraft, adaptive, margin \}/);
    }
    assert.deepEqual(json({ draftMode: false, lruCapacity: 6 }).lruCapacity, 6);
  });

  test('readTimeoutMs, readRetries, readBackoffMs: integers >= 0, passed on', async () => {
    const o = JSON.parse(checkOpenOptions({ readTimeoutMs: 50, readRetries: 0, readBackoffMs: 2 }).json);
    assert.deepEqual([o.readTimeoutMs, o.readRetries, o.readBackoffMs], [50, 0, 2]);
    assert.equal(JSON.parse(checkOpenOptions({}).json).readTimeoutMs, undefined);
    for (const name of ['readTimeoutMs', 'readRetries', 'readBackoffMs']) {
      for (const bad of [-1, 0.5, '3', NaN, Infinity, null]) {
        await assert.rejects(HostShim.open(source, { [name]: bad }), new RegExp(`${name} must be an integer >= 0, got`));
      }
    }
  });

  test('kvCache, maxContext, maxBatch, memoryBudget, prefixWindows, prefixTtlMs are checked, then passed on', async () => {
    const all = { kvCache: 'f16', maxContext: 1024, maxBatch: 64, memoryBudget: 96 * 2 ** 20, prefixWindows: 2, prefixTtlMs: 15000, maxReadBytes: 2 ** 22 };
    assert.deepEqual(JSON.parse(checkOpenOptions(all).json), all);
    for (const [options, message] of [
      [{ kvCache: 'q8' }, /kvCache must be 'f32' or 'f16', got q8/],
      [{ kvCache: 16 }, /kvCache must be 'f32' or 'f16'/],
      [{ maxContext: 0 }, /maxContext must be an integer >= 1, got 0/],
      [{ maxBatch: 2.5 }, /maxBatch must be an integer >= 1, got 2.5/],
      [{ memoryBudget: -1 }, /memoryBudget must be an integer >= 1, got -1/],
      [{ prefixWindows: 0 }, /prefixWindows must be an integer >= 1, got 0/],
      [{ maxReadBytes: 0 }, /maxReadBytes must be an integer >= 1, got 0/],
      [{ prefixTtlMs: -5 }, /prefixTtlMs must be a number >= 0, got -5/],
      [{ prefixTtlMs: NaN }, /prefixTtlMs must be a number >= 0, got NaN/],
    ]) {
      await assert.rejects(HostShim.open(source, options), message);
    }
  });

  test('a source size must be a byte count or absent', async () => {
    for (const ok of [undefined, null, 0, 2 ** 40]) checkSourceSize(ok);
    for (const [bad, shown] of [['10', 'a string'], [10n, 'a bigint'], [-1, '-1'], [NaN, 'NaN'], [2 ** 60, String(2 ** 60)]]) {
      assert.throws(() => checkSourceSize(bad), new RegExp(`source\\.size must be a non-negative integer or undefined, got ${shown}`));
    }
    await assert.rejects(HostShim.open({ size: '10', rangeGet: async () => new Uint8Array(0) }), /source\.size must be/);
  });

  test('lruCapacity must be an integer >= 1', async () => {
    for (const bad of [0, -1, 1.5, '2', NaN, Infinity]) {
      await assert.rejects(HostShim.open(source, { lruCapacity: bad }), /lruCapacity must be an integer >= 1/);
    }
    assert.throws(() => checkOpenOptions({ maxResidentBytes: 0 }), /maxResidentBytes must be an integer >= 1/);
  });

  test('unknown options, bad callbacks and bad sources are rejected', async () => {
    await assert.rejects(HostShim.open(source, { lruCapcity: 2 }), /unknown option 'lruCapcity'/);
    await assert.rejects(HostShim.open(source, { onProgress: 3 }), /onProgress must be a function/);
    await assert.rejects(HostShim.open({}, {}), /source must implement rangeGet\(start, end\)/);
    await assert.rejects(HostShim.open(null), /source must implement rangeGet/);
  });
});

describe('argument checks', () => {
  test('text with a lone surrogate is refused, naming where', () => {
    assert.equal(checkText('a\uD83D\uDE00b', 'x'), 'a\uD83D\uDE00b');
    assert.throws(() => checkText('ab\uD800', 'prompt'), /prompt has a lone surrogate \(\\uD800\) at index 2: it is not valid Unicode text/);
    assert.throws(() => checkText('\uDE00a', 'x'), /lone surrogate \(\\uDE00\) at index 0/);
    const shim = new HostShim(recordingHost());
    assert.throws(() => shim.applyChatTemplate([{ role: 'user', content: 'ok' }, { role: 'u\uDC01', content: 'x' }]),
      /message 1 role has a lone surrogate/);
    assert.throws(() => shim.encode('\uD800'), /encode: text has a lone surrogate/);
  });

  test('token ids: Uint32Array or array of integers below the vocabulary', () => {
    assert.deepEqual(toTokenIds([1, 2, 3], 10), new Uint32Array([1, 2, 3]));
    const ids = new Uint32Array([4]);
    assert.equal(toTokenIds(ids, 10), ids);
    assert.throws(() => toTokenIds([1, -2], 10), /index 1 must be an integer >= 0, got -2/);
    assert.throws(() => toTokenIds([1.5], 10), /index 0 must be an integer/);
    assert.throws(() => toTokenIds(new Int32Array([1]), 10), /Uint32Array or an array of integers/);
    assert.throws(() => toTokenIds('1,2', 10), /Uint32Array or an array of integers/);
    assert.throws(() => toTokenIds([3, 10], 10), /token id 10 at index 1 is not below the vocabulary size 10/);
  });

  test('options go to Rust as JSON; BigInt, NaN and Infinity survive the trip', () => {
    assert.equal(optionsJson({}), '{}');
    assert.deepEqual(JSON.parse(optionsJson({ seed: 2n ** 64n - 1n, temperature: NaN, topP: Infinity, minP: -Infinity, moa: { k: 3 } })),
      { seed: '18446744073709551615', temperature: 'NaN', topP: 'Infinity', minP: '-Infinity', moa: { k: 3 } });
    assert.equal(optionsJson({ temperature: undefined }), '{}');
  });
});

describe('HostShim over WasmHost', () => {
  test('generate: start with the options, then one next per token; stops after end of text', async () => {
    const host = recordingHost('hi');
    const shim = new HostShim(host);
    const seen = [];
    const steps = [];
    const out = await shim.generate([5, 6], 10, {
      temperature: 0.5, seed: 7n, onToken: (id) => seen.push(id), onStep: (s) => steps.push(s.token),
    });
    assert.deepEqual(Array.from(out), [104, 105, 0]);
    assert.deepEqual(seen, [104, 105, 0]);
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
    await assert.rejects(shim.generate([300], 1), /token id 300 at index 0 is not below the vocabulary size 256/);
    await assert.rejects(shim.generate([1], 1, { signal: {} }), /signal must be an AbortSignal/);
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
    await assert.rejects(shim.generate([1], 3), /another generation is in progress/);
    await first;
  });

  test('AbortSignal stops generation with its reason', async () => {
    const shim = new HostShim(recordingHost('abcdef'));
    const controller = new AbortController();
    const got = [];
    await assert.rejects(
      shim.generate([1], 6, { signal: controller.signal, onToken: (id) => { got.push(id); if (got.length === 2) controller.abort(new Error('stop now')); } }),
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
    const result = await shim.generateText('hi', { maxTokens: 20, onToken: (piece) => pieces.push(piece) });
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
    await assert.rejects(shim.generateText([{ role: 'user' }]), /message 0 must be \{ role: string, content: string \}/);
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
    await assert.rejects(shim.prefetchLayer(4), /layer must be an integer in \[0, 4\), got 4/);
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
    assert.throws(() => shim.encode('a'), /used after dispose\(\)/);
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
