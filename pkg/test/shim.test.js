// The HostShim wrapper's own logic (validation, dispose, call order, text streaming), checked
// against a recording stand-in for the wasm-bindgen WasmHost; the real model is tested once the
// bindings exist.
import assert from 'node:assert/strict';
import { describe, test } from './harness.js';
import {
  DRAFT_MODE_UNSUPPORTED, HostShim, TextStreamer, checkOpenOptions, checkSampling, toTokenIds,
} from '../src/shim.js';
import { BufferKnotSource } from '../src/sources.js';

const utf8 = new TextDecoder();
/** Byte tokens: id = byte, decoded as lossy UTF-8 like a byte-level BPE. */
const decodeBytes = (ids) => utf8.decode(Uint8Array.from(ids));

/** Records calls; emits the bytes of `reply` one per step, then id 0 (end of text). */
function recordingHost(reply = 'ok') {
  const calls = [];
  const bytes = new TextEncoder().encode(reply);
  let pos = 0;
  return {
    calls,
    vocabSize: 256,
    layerCount: 4,
    eosIds: new Uint32Array([0]),
    encode: (text) => Uint32Array.from(new TextEncoder().encode(text)),
    decode: (ids) => decodeBytes(ids),
    chatPrompt: (json) => `<${JSON.parse(json).map((m) => m.content).join('|')}>`,
    reset() { calls.push('reset'); pos = 0; },
    setSampler(...args) { calls.push(['setSampler', ...args]); },
    async prefill(ids, moreFollows) { calls.push(['prefill', Array.from(ids), moreFollows]); },
    async step(moreFollows) { calls.push(['step', moreFollows]); return pos < bytes.length ? bytes[pos++] : 0; },
    async prefetchLayer(l) { calls.push(['prefetch', l]); },
    stats: () => JSON.stringify({ misses: 1 }),
    free() { calls.push('free'); },
  };
}

const source = new BufferKnotSource(new Uint8Array(8));

describe('HostShim.open validation', () => {
  test('draftMode true is rejected with a clear error', async () => {
    await assert.rejects(HostShim.open(source, { draftMode: true }), { message: DRAFT_MODE_UNSUPPORTED });
    await assert.rejects(HostShim.open(source, {}, { lruCapacity: 2, draftMode: true }), { message: DRAFT_MODE_UNSUPPORTED });
    assert.throws(() => checkOpenOptions({ draftMode: 'yes' }), /draftMode must be a boolean/);
    assert.deepEqual(checkOpenOptions({ draftMode: false, lruCapacity: 6 }).lruCapacity, 6);
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

  test('sampling options: defaults are greedy, bad values are named', () => {
    assert.deepEqual(checkSampling({}), { temperature: 0, topK: 0, topP: 1, minP: 0, repeatPenalty: 1, seed: 0n });
    assert.equal(checkSampling({ seed: 2n ** 63n }).seed, 2n ** 63n);
    assert.throws(() => checkSampling({ temperature: -1 }), /temperature must be a finite number >= 0/);
    assert.throws(() => checkSampling({ topK: 2.5 }), /topK/);
    assert.throws(() => checkSampling({ topP: 0 }), /topP must be in \(0, 1\]/);
    assert.throws(() => checkSampling({ minP: 1.5 }), /minP must be in \[0, 1\]/);
    assert.throws(() => checkSampling({ repeatPenalty: 0 }), /repeatPenalty must be a finite number > 0/);
    assert.throws(() => checkSampling({ seed: -1 }), /seed must be an integer >= 0/);
    assert.throws(() => checkSampling({ seed: 2n ** 64n }), /seed must be an integer in \[0, 2\^64\)/);
  });
});

describe('TextStreamer', () => {
  test('holds back split UTF-8 characters and never loses text', () => {
    const text = 'aé€😀 z';
    const streamer = new TextStreamer(decodeBytes);
    const pieces = [...new TextEncoder().encode(text)].map((b) => streamer.push(b));
    pieces.push(streamer.flush());
    assert.equal(pieces.join(''), text);
    assert.ok(!pieces.some((p) => p.includes('\uFFFD')));
    // The 4 bytes of 😀 come out as one piece, on its last byte.
    assert.ok(pieces.includes('😀'));
  });

  test('flush emits an incomplete character at the end', () => {
    const streamer = new TextStreamer(decodeBytes);
    assert.equal(streamer.push(0xc3), '');
    assert.equal(streamer.flush(), '\uFFFD');
  });
});

describe('HostShim over WasmHost', () => {
  test('generate: reset, sampler, prefill, then one step per token; stops after end of text', async () => {
    const host = recordingHost('hi');
    const shim = new HostShim(host);
    const seen = [];
    const out = await shim.generate([5, 6], 10, { temperature: 0.5, seed: 7, onToken: (id) => seen.push(id) });
    assert.deepEqual(Array.from(out), [104, 105, 0]);
    assert.deepEqual(seen, [104, 105, 0]);
    assert.deepEqual(host.calls, [
      'reset',
      ['setSampler', 0.5, 0, 1, 0, 1, 7n],
      ['prefill', [5, 6], true],
      ['step', true], ['step', true], ['step', true],
    ]);
  });

  test('generate: n = 0 only prefills; the last step says no more follows', async () => {
    const host = recordingHost('abc');
    const shim = new HostShim(host);
    assert.deepEqual(await shim.generate([1], 0), new Uint32Array(0));
    assert.deepEqual(host.calls.at(-1), ['prefill', [1], false]);
    host.calls.length = 0;
    assert.deepEqual(Array.from(await shim.generate([1], 2)), [97, 98]);
    assert.deepEqual(host.calls.slice(-2), [['step', true], ['step', false]]);
  });

  test('generate: bad n, ids, options are rejected before wasm is called', async () => {
    const host = recordingHost();
    const shim = new HostShim(host);
    await assert.rejects(shim.generate([1], -1), /n \(tokens to generate\) must be an integer >= 0/);
    await assert.rejects(shim.generate([1], 1.5), /must be an integer >= 0/);
    await assert.rejects(shim.generate([300], 1), /token id 300 at index 0 is not below the vocabulary size 256/);
    await assert.rejects(shim.generate([], 1), /the prompt is empty/);
    await assert.rejects(shim.generate([1], 1, { topk: 3 }), /unknown option 'topk'/);
    await assert.rejects(shim.generate([1], 1, { signal: {} }), /signal must be an AbortSignal/);
    assert.deepEqual(host.calls, []);
  });

  test('continue keeps the session; a second concurrent generation is refused', async () => {
    const host = recordingHost('xyz');
    const shim = new HostShim(host);
    await shim.generate([1], 1);
    host.calls.length = 0;
    await shim.generate([], 1, { continue: true });
    assert.ok(!host.calls.includes('reset'));
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

  test('generateText, stream and chat messages', async () => {
    const host = recordingHost('é ok');
    const shim = new HostShim(host);
    const pieces = [];
    const result = await shim.generateText('hi', { maxTokens: 20, onToken: (piece) => pieces.push(piece) });
    assert.equal(result.text, 'é ok');
    assert.equal(result.finishReason, 'stop');
    assert.deepEqual(Array.from(result.tokens), [0xc3, 0xa9, 0x20, 0x6f, 0x6b]);
    assert.equal(pieces.join(''), 'é ok');
    assert.deepEqual(host.calls[2], ['prefill', [104, 105], true]);

    const streamed = [];
    for await (const piece of shim.stream([{ role: 'user', content: 'q' }], { maxTokens: 3 })) streamed.push(piece);
    assert.deepEqual(streamed, ['é', ' ']);
    assert.deepEqual(host.calls.find((c) => c[0] === 'prefill' && c[1][0] === 60), ['prefill', [60, 113, 62], true]);
    assert.equal((await shim.generateText('x', { maxTokens: 1 })).finishReason, 'length');
    await assert.rejects(shim.generateText([{ role: 'user' }]), /message 0 must be \{ role: string, content: string \}/);
  });

  test('prefetchLayer waits its turn, stats, encode/decode checks', async () => {
    const host = recordingHost();
    const shim = new HostShim(host);
    const generating = shim.generate([1], 1);
    const prefetched = shim.prefetchLayer(3);
    await Promise.all([generating, prefetched]);
    // Queued behind the prefill that was already queued (it may run between two steps).
    const at = (name) => host.calls.findIndex((c) => Array.isArray(c) && c[0] === name);
    assert.ok(at('prefill') >= 0 && at('prefill') < at('prefetch'), String(host.calls));
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
