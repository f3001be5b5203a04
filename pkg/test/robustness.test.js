// The real wasm package against sources and callers that misbehave: reads that never settle,
// aborts and dispose() during a read, failed prefetches, queries during a call, streams dropped
// unfinished while others wait, oversized answers, bad sizes and limits, lone surrogates, a full context, and a
// short soak through a fault-injecting source. Every "never settles" case ends because of a
// timeout or an abort; before those existed it hung.
import assert from 'node:assert/strict';
import { describe, test } from './harness.js';
import { BufferKnotSource, HostShim } from '../src/node.js';
import { TINY, countingSource, knotLayout } from './support.js';
import { faultySource } from './fault-source.js';

const layout = knotLayout(TINY);
const LAYERS = layout.layers.length;
const PROMPT = [1, 7, 42, 99];

/** Greedy ids from a shim whose reads never fail. */
async function reference(ids, n, options = {}) {
  const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: LAYERS });
  try {
    return Array.from(await shim.generate(ids, n, options));
  } finally {
    shim.dispose();
  }
}

/** A counting source whose reads of layer `layer` hang while `hang()` says so. */
function hangingSource(layer, hang) {
  const [start, end] = layout.layers[layer];
  const inner = countingSource(new BufferKnotSource(layout.bytes));
  const hung = [];
  return {
    hung,
    size: inner.size,
    rangeGet(s, e) {
      if (s === start && e + 1 === end && hang()) {
        hung.push(s);
        return new Promise(() => {});
      }
      return inner.rangeGet(s, e);
    },
  };
}

describe('reads that never settle', () => {
  test('open times out (readTimeoutMs) instead of hanging', async () => {
    const source = {
      size: layout.bytes.byteLength,
      rangeGet: (s, e) => (s === 0 ? new Promise(() => {}) : Promise.resolve(layout.bytes.subarray(s, e + 1))),
    };
    await assert.rejects(HostShim.open(source, { readTimeoutMs: 50, readRetries: 0 }),
      /reading bytes 0\.\.10 timed out after 50 ms/);
    await assert.rejects(HostShim.open(source, { readTimeoutMs: 20, readRetries: 1, readBackoffMs: 1 }),
      /timed out after 20 ms \(gave up after 2 attempts\)/);
  });

  test('a layer read that hangs once is retried and the tokens are unchanged', async () => {
    let left = 1;
    const source = hangingSource(1, () => left-- > 0);
    const shim = await HostShim.open(source, { lruCapacity: 1, readTimeoutMs: 50, readBackoffMs: 1 });
    try {
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 6)), await reference(PROMPT, 6));
      assert.equal(source.hung.length, 1);
      const s = shim.stats();
      assert.equal(s.readTimeouts, 1);
      assert.equal(s.readRetries, 1);
    } finally {
      shim.dispose();
    }
  });

  test('dispose() during a read that never settles resolves, and the call rejects', async () => {
    let hang = false;
    const source = hangingSource(1, () => hang);
    // No timeout: only dispose can end the read.
    const shim = await HostShim.open(source, { lruCapacity: 1, readTimeoutMs: 0 });
    await shim.generate(PROMPT, 2);
    hang = true;
    const running = shim.generate(PROMPT, 4);
    while (source.hung.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    await shim.dispose();
    await assert.rejects(running, /used after dispose\(\)/);
    assert.throws(() => shim.stats(), /used after dispose\(\)/);
  });

  test('an AbortSignal abandons a read in flight; the next generation is right', async () => {
    let hang = false;
    const source = hangingSource(1, () => hang);
    const shim = await HostShim.open(source, { lruCapacity: 1, readTimeoutMs: 0 });
    try {
      const controller = new AbortController();
      const seen = [];
      const running = shim.generate(PROMPT, 8, {
        signal: controller.signal,
        onToken: (t) => {
          seen.push(t.id);
          if (seen.length === 2) hang = true;
        },
      });
      while (source.hung.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
      controller.abort(new Error('enough'));
      await assert.rejects(running, /enough/);
      hang = false;
      const want = await reference(PROMPT, 8);
      assert.deepEqual(seen, want.slice(0, 2));
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 8)), want);
      // The same after an abort with the default reason.
      hang = true;
      const again = new AbortController();
      const second = shim.generate(PROMPT, 8, { signal: again.signal });
      while (source.hung.length < 2) await new Promise((resolve) => setTimeout(resolve, 1));
      again.abort();
      await assert.rejects(second, { name: 'AbortError' });
      hang = false;
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 8)), want);
    } finally {
      shim.dispose();
    }
  });
});

describe('prefetch, queries during a call, streams left unfinished', () => {
  test('a failed background prefetch does not fail the next token', async () => {
    const source = countingSource(new BufferKnotSource(layout.bytes));
    // No retries: the prefetch's failure would be the token's error.
    const shim = await HostShim.open(source, { lruCapacity: 1, readRetries: 0 });
    try {
      const opened = source.reads.length;
      // The prompt reads layer 0, then layer 1 ahead, then layer 0 ahead for the next token.
      source.fault = (r) => (r.index === opened + LAYERS ? 'reject' : undefined);
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 6)), await reference(PROMPT, 6));
      const failed = source.reads[opened + LAYERS];
      assert.equal(layout.layerOf(failed.start, failed.end), 0);
    } finally {
      shim.dispose();
    }
  });

  test('stats, encode, decode, applyChatTemplate and info work while a call is running', async () => {
    const inner = new BufferKnotSource(layout.bytes);
    /** @type {HostShim | undefined} */
    let shim;
    /** Each query's answer, or its error's message (the tiny model has no chat template). */
    const ask = () => [
      () => shim.stats().rangeReads, () => shim.encode('ab'), () => shim.decode([104, 105]),
      () => shim.applyChatTemplate([{ role: 'user', content: 'hi' }]), () => shim.info().config.n_layers,
    ].map((q) => {
      try {
        return q();
      } catch (err) {
        return err.message;
      }
    });
    /** @type {unknown[] | undefined} */
    let during;
    const source = {
      size: inner.size,
      rangeGet(s, e) {
        // Called from inside a wasm call: a layer read of the running generation.
        if (shim !== undefined && layout.layerOf(s, e + 1) >= 0) during ??= ask();
        return inner.rangeGet(s, e);
      },
    };
    shim = await HostShim.open(source, { lruCapacity: 1 });
    try {
      const idle = ask();
      await shim.generate(PROMPT, 2);
      assert.ok(during !== undefined);
      assert.ok(!String(during).includes('busy'), String(during));
      // stats as the call began: the same counters as before it.
      assert.deepEqual(during, idle);
      assert.equal(idle[2], 'hi');
      assert.equal(idle[4], LAYERS);
    } finally {
      shim.dispose();
    }
  });

  test('a stream dropped without return() gives way, past preemptMs, to the call waiting for its slot; it then says superseded', async () => {
    // Layer reads that take a few milliseconds: the dropped stream is still running when its
    // time is up.
    const source = countingSource(new BufferKnotSource(layout.bytes), { latencyMs: 2 });
    const shim = await HostShim.open(source, { lruCapacity: 1, preemptMs: 20 });
    try {
      const dropped = shim.stream('abc', { maxTokens: 100, ignoreEos: true })[Symbol.asyncIterator]();
      assert.equal((await dropped.next()).done, false);
      // A generation waits for the one slot: the stream, no longer pulled, gives way to it.
      const r = await shim.generateText('abc', { maxTokens: 6 });
      assert.ok(r.tokens.length > 0);
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 5)), await reference(PROMPT, 5));
      await assert.rejects(dropped.next(), /superseded: its consumer stopped pulling while others waited for its slot/);
      assert.deepEqual(await dropped.next(), { value: undefined, done: true });
      assert.equal(shim.stats().queue.superseded, 1);
      // A stream pulled to its end is unaffected, and so is the shim.
      let text = '';
      for await (const piece of shim.stream('abc', { maxTokens: 6 })) text += piece;
      assert.equal(text, r.text);
      // A stream not pulled while nobody waits keeps its slot: it goes on when pulled again.
      const paused = shim.stream('abc', { maxTokens: 6 })[Symbol.asyncIterator]();
      let again = (await paused.next()).value;
      await new Promise((resolve) => setTimeout(resolve, 50));
      for (let p = await paused.next(); !p.done; p = await paused.next()) again += p.value;
      assert.equal(again, r.text);
      assert.equal(shim.stats().queue.superseded, 1);
    } finally {
      shim.dispose();
    }
  });
});

describe('bad sizes, limits and text', () => {
  test('a source answering far more bytes than asked is refused before the copy', async () => {
    const HUGE = 64 << 20;
    const inner = new BufferKnotSource(layout.bytes);
    const [start] = layout.layers[0];
    let oversized = 0;
    const source = {
      size: inner.size,
      rangeGet(s, e) {
        if (s === start && oversized++ === 0) return Promise.resolve(new Uint8Array(HUGE));
        return inner.rangeGet(s, e);
      },
    };
    const shim = await HostShim.open(source, { lruCapacity: 1, readRetries: 0 });
    try {
      const memory = shim.stats().wasmMemoryBytes;
      await assert.rejects(shim.generate(PROMPT, 2), new RegExp(`the source returned ${HUGE} bytes, expected \\d+`));
      // Nothing of the 64 MiB reached wasm memory.
      assert.ok(shim.stats().wasmMemoryBytes - memory < HUGE / 2,
        `wasm memory grew from ${memory} to ${shim.stats().wasmMemoryBytes}`);
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 4)), await reference(PROMPT, 4));
    } finally {
      shim.dispose();
    }
  });

  test('a source size that is not a number is refused, not ignored', async () => {
    for (const [size, shown] of [['123', 'a string'], [10n, 'a bigint'], [-1, '-1'], [1.5, '1.5'], [{}, 'a object']]) {
      const source = { size, rangeGet: (s, e) => Promise.resolve(layout.bytes.subarray(s, e + 1)) };
      await assert.rejects(HostShim.open(source),
        new RegExp(`source\\.size must be a non-negative integer or undefined, got ${shown}`));
    }
    const shim = await HostShim.open({ size: null, rangeGet: (s, e) => Promise.resolve(layout.bytes.subarray(s, e + 1)) });
    shim.dispose();
  });

  test('limits above 2^32 − 1 work (they mean "all"); topK ≥ 2^32 does not wrap', async () => {
    const source = new BufferKnotSource(layout.bytes);
    const shim = await HostShim.open(source, { lruCapacity: 2 ** 32, prefetchDepth: 2 ** 32, maxResidentBytes: 2 ** 40 });
    try {
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 4)), await reference(PROMPT, 4));
      const sampled = (topK) => shim.generate(PROMPT, 12, { temperature: 1, seed: 9, topK });
      const all = Array.from(await sampled(0));
      assert.deepEqual(Array.from(await sampled(2 ** 32)), all);
      assert.deepEqual(Array.from(await sampled(2 ** 32 + 1)), all);
      assert.notDeepEqual(Array.from(await sampled(1)), all);
    } finally {
      shim.dispose();
    }
    await assert.rejects(HostShim.open(source, { readRetries: -1 }), /readRetries must be an integer >= 0, got -1/);
    await assert.rejects(HostShim.open(source, { readTimeoutMs: 1.5 }), /readTimeoutMs must be an integer >= 0, got 1.5/);
    await assert.rejects(HostShim.open(source, { readBackoffMs: '5' }), /readBackoffMs must be an integer >= 0, got "5"/);
  });

  test('lone surrogates get a clear error from applyChatTemplate, encode and generateText', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 2 });
    try {
      assert.throws(() => shim.applyChatTemplate([{ role: 'user', content: 'a\uD800b' }]),
        /message 0 content has a lone surrogate \(\\uD800\) at index 1: it is not valid Unicode text/);
      assert.throws(() => shim.encode('x\uDC00'), /encode: text has a lone surrogate \(\\uDC00\) at index 1/);
      await assert.rejects(shim.generateText('\uDBFFz'), /prompt has a lone surrogate \(\\uDBFF\) at index 0/);
      // A proper pair is fine.
      assert.ok(shim.encode('a\uD83D\uDE00').length > 0);
    } finally {
      shim.dispose();
    }
  });

  test('a context that fills mid-generation finishes with length and keeps the text', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 2 });
    try {
      const context = /** @type {number} */ (shim.info().config.context_length);
      const prompt = 'a'.repeat(context - 5);
      const r = await shim.generateText(prompt, { maxTokens: 50, ignoreEos: true });
      assert.equal(r.finishReason, 'length');
      assert.equal(r.tokens.length, 5);
      let streamed = '';
      for await (const piece of shim.stream(prompt, { maxTokens: 50, ignoreEos: true })) streamed += piece;
      assert.equal(streamed, r.text);
      // Continuing a full conversation yields nothing more, still without an error.
      const more = await shim.generateText('', { continue: true, maxTokens: 5, ignoreEos: true });
      assert.deepEqual([more.finishReason, more.tokens.length], ['length', 0]);
    } finally {
      shim.dispose();
    }
  });

  test('a source error marked permanent is not retried', async () => {
    const inner = new BufferKnotSource(layout.bytes);
    let reads = 0;
    const source = {
      size: inner.size,
      rangeGet(s, e) {
        reads++;
        if (s === 0) return Promise.reject(Object.assign(new Error('no such object'), { permanent: true }));
        return inner.rangeGet(s, e);
      },
    };
    await assert.rejects(HostShim.open(source, { readRetries: 5 }), /failed for good: rangeGet rejected: no such object/);
    assert.equal(reads, 1);
  });
});

describe('soak through a fault-injecting source', () => {
  test('5% faults of every kind: the same greedy tokens, flat wasm memory over the second half', async () => {
    const source = faultySource(new BufferKnotSource(layout.bytes), { seed: 7, faultRate: 0.05, maxDelayMs: 2 });
    source.enabled = false;
    const shim = await HostShim.open(source, { lruCapacity: 1, readTimeoutMs: 40, readRetries: 6, readBackoffMs: 1 });
    const clean = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: LAYERS });
    try {
      // Memory is read half-way and at the end: every shim of this file shares one wasm
      // instance, so where its heap settles depends on the tests before; a leak grows it
      // steadily, which the second half shows.
      const prompts = Array.from({ length: 24 }, (_, i) => [1 + i, 7 * i % 256, 42, 99 - i]);
      let tokens = 0;
      let warm;
      source.enabled = true;
      for (const [i, p] of prompts.entries()) {
        const got = Array.from(await shim.generate(p, 48, { ignoreEos: true }));
        assert.deepEqual(got, Array.from(await clean.generate(p, 48, { ignoreEos: true })), `prompt ${i}`);
        tokens += got.length;
        if (i === prompts.length / 2 - 1) warm = shim.stats().wasmMemoryBytes;
      }
      assert.equal(tokens, prompts.length * 48);
      assert.ok(source.faults >= 20, `only ${source.faults} faults injected`);
      for (const kind of ['reject', 'throw', 'short', 'long', 'hang']) assert.ok(source.injected[kind] > 0, kind);
      assert.equal(shim.stats().wasmMemoryBytes, warm, 'wasm memory grew after warm-up');
    } finally {
      shim.dispose();
      clean.dispose();
    }
  });
});

describe('no read outlives the generation that began it', () => {
  // In workerd a read begun by one request can never complete inside the next: a layer
  // prefetched for a token that never came (a consumer that stopped, an end-of-text token) would
  // hang the next request. With request-scoped I/O (workerd's default) every step ends only once
  // its reads have finished.
  test('with requestScopedIo, a stream left early with break leaves no read in flight, and the next call is right', async () => {
    const source = countingSource(new BufferKnotSource(layout.bytes), { latencyMs: 5 });
    const shim = await HostShim.open(source, { lruCapacity: 1, prefetchDepth: 1, requestScopedIo: true });
    try {
      let pieces = 0;
      for await (const _ of shim.stream('abc', { maxTokens: 20, ignoreEos: true })) {
        if (++pieces === 2) break;
      }
      assert.equal(source.inFlight, 0, 'reads still in flight after the generation ended');
      const ids = await shim.generate(PROMPT, 3);
      assert.deepEqual(Array.from(ids), await reference(PROMPT, 3));
    } finally {
      await shim.dispose();
    }
  });
});
