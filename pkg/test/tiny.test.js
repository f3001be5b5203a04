// The real wasm package on the tiny fixture model (2 layers, vocab 256): token parity, LRU and
// read accounting, prefetch, every error path, HTTP. Fast, so it runs everywhere.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test, testIf } from './harness.js';
import {
  BufferKnotSource, FileKnotSource, HostShim, HttpKnotSource, coltraneFromResponseFormat,
  createMoaAgents, deficitWeightedMerge, loadWasm,
} from '../src/node.js';
import { startRangeServer } from './range-server.js';
import { TINY, TINY_CASES, countingSource, haveNative, knotLayout, median, nativeGenerate, sleep } from './support.js';

const layout = knotLayout(TINY);
const LAYERS = layout.layers.length;
const [LEN1_CASE] = TINY_CASES;
const PROMPT = TINY_CASES.find((c) => c.prompt_ids.length > 2)?.prompt_ids ?? [1, 2, 3];

/** Greedy ids from a fresh shim over the whole file in memory: the reference for recovery tests. */
async function freshTokens(ids, n) {
  const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: LAYERS });
  try {
    return Array.from(await shim.generate(ids, n));
  } finally {
    shim.dispose();
  }
}

/** The reads `open` must issue: fixed header, the rest of the prefix, tokenizer+resident span(s). */
function expectedOpenReads() {
  const [tokStart, tokEnd] = layout.tokenizer;
  const [resStart, resEnd] = layout.resident;
  const head = [[0, 10], [10, layout.payload]];
  // The host reads tokenizer and resident tensors at once when only alignment padding parts them.
  return resStart >= tokEnd && resStart - tokEnd < 64
    ? [...head, [tokStart, resEnd]]
    : [...head, [tokStart, tokEnd], [resStart, resEnd]];
}

describe('tiny model through the wasm package', () => {
  test('greedy tokens equal the reference fixture (which the native engine matches)', async () => {
    const file = await FileKnotSource.open(TINY);
    const shim = await HostShim.open(file, { lruCapacity: 1 });
    try {
      assert.equal(shim.vocabSize, 256);
      assert.equal(shim.layerCount, LAYERS);
      for (const c of TINY_CASES) {
        const got = Array.from(await shim.generate(c.prompt_ids, c.greedy_ids.length));
        assert.deepEqual(got, c.greedy_ids, `case ${c.name}`);
      }
    } finally {
      shim.dispose();
      await file.close();
    }
  });

  testIf(haveNative(), 'greedy and seeded sampled tokens equal the native CLI', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 2 });
    try {
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 24)), nativeGenerate(TINY, PROMPT, 24));
      const flags = ['--temperature', '0.9', '--top-k', '40', '--top-p', '0.95', '--min-p', '0.05', '--seed', '7'];
      const sampled = await shim.generate(PROMPT, 24, { temperature: 0.9, topK: 40, topP: 0.95, minP: 0.05, seed: 7 });
      assert.deepEqual(Array.from(sampled), nativeGenerate(TINY, PROMPT, 24, flags));
    } finally {
      shim.dispose();
    }
  });

  test('open reads the header, the metadata, then tokenizer+resident spans, and no layer', async () => {
    const source = countingSource(new BufferKnotSource(layout.bytes));
    const progress = [];
    const shim = await HostShim.open(source, { onProgress: (p) => progress.push(p) });
    try {
      assert.deepEqual(source.reads.map((r) => [r.start, r.end]), expectedOpenReads());
      const s = shim.stats();
      assert.equal(s.rangeReads, source.reads.length);
      assert.equal(s.bytesFetched, source.bytes);
      assert.equal(s.misses + s.hits, 0);
      assert.deepEqual(progress.at(-1), { bytesLoaded: source.bytes, rangeReads: source.reads.length });
      assert.equal(progress.length, source.reads.length);
      assert.equal(shim.info().config.n_layers, LAYERS);
    } finally {
      shim.dispose();
    }
  });

  test('capacity >= layers: every layer read once, no misses or reads after the first token', async () => {
    const source = countingSource(new BufferKnotSource(layout.bytes));
    const shim = await HostShim.open(source, { lruCapacity: LAYERS + 3 });
    try {
      const opened = source.reads.length;
      let afterFirst;
      await shim.generate(PROMPT, 12, {
        onToken: () => {
          afterFirst ??= { reads: source.reads.length, misses: shim.stats().misses };
        },
      });
      assert.ok(afterFirst);
      const s = shim.stats();
      assert.equal(s.misses, afterFirst.misses);
      assert.equal(source.reads.length, afterFirst.reads);
      assert.deepEqual(source.reads.slice(opened).map((r) => layout.layerOf(r.start, r.end)), [...Array(LAYERS).keys()]);
      assert.equal(s.evictions, 0);
      assert.equal(s.residentLayers, LAYERS);
      // Nothing fetched beyond the spans: prefix, tokenizer+resident, each layer once.
      const layerBytes = layout.layers.reduce((sum, [a, b]) => sum + b - a, 0);
      const openBytes = expectedOpenReads().reduce((sum, [a, b]) => sum + b - a, 0);
      assert.equal(s.bytesFetched, openBytes + layerBytes);
      assert.equal(source.bytes, s.bytesFetched);
      // A new conversation on the same shim reads nothing.
      await shim.generate(PROMPT.slice(1), 4);
      assert.equal(source.reads.length, afterFirst.reads);
    } finally {
      shim.dispose();
    }
  });

  test('capacity 1: one read per layer per forward pass, tokens unchanged', async () => {
    const n = 10;
    const source = countingSource(new BufferKnotSource(layout.bytes));
    const shim = await HostShim.open(source, { lruCapacity: 1 });
    try {
      const opened = source.reads.length;
      const ids = Array.from(await shim.generate(PROMPT, n));
      assert.deepEqual(ids, await freshTokens(PROMPT, n));
      // The prefill and each of the n - 1 later tokens run every layer once (the first token is
      // sampled from the prefill's logits).
      const layers = source.reads.slice(opened).map((r) => layout.layerOf(r.start, r.end));
      assert.deepEqual(layers, Array.from({ length: n * LAYERS }, (_, i) => i % LAYERS));
      const s = shim.stats();
      assert.ok(s.residentLayers <= 1, `residentLayers ${s.residentLayers}`);
      assert.equal(s.evictions, n * LAYERS - 1);
    } finally {
      shim.dispose();
    }
  });

  test('prefetch: layer 0 of the next token is fetched while the caller handles this one', async () => {
    // Each read waits LATENCY ms. Layer l + 1 is requested just before layer l computes; with a
    // near-zero compute per layer that hides little of a back-to-back token (measured below), but
    // the wrap-around prefetch of layer 0 overlaps whatever the caller does between tokens: a
    // consumer that spends LATENCY ms per token gets each token after only the other layers' reads.
    const LATENCY = 40;
    const source = countingSource(new BufferKnotSource(layout.bytes));
    const shim = await HostShim.open(source, { lruCapacity: 1 });
    try {
      source.latencyMs = LATENCY;
      const n = 16;
      // How long each token after the first takes from the consumer's asking for it, after a
      // pause of LATENCY ms (a step runs when its consumer asks: the line has no pump of its own).
      const paused = [];
      const tokens = shim.streamTokens('abc', { maxTokens: n })[Symbol.asyncIterator]();
      for (let first = true; ; first = false) {
        const asked = performance.now();
        if ((await tokens.next()).done) break;
        if (!first) paused.push(performance.now() - asked);
        await sleep(LATENCY);
      }
      assert.ok(paused.length >= 4, `only ${paused.length} steps followed a pause`);
      const slowConsumer = median(paused);
      // Back to back: the generation's own figures (the time between its tokens).
      const { report } = await shim.generateText(Uint32Array.from(PROMPT), { maxTokens: n, ignoreEos: true });
      assert.equal(report.tokenMs.length, n - 1);
      const backToBack = median(report.tokenMs);
      assert.ok(slowConsumer < 0.75 * LAYERS * LATENCY,
        `token took ${slowConsumer.toFixed(1)} ms with layer 0 prefetched; ${LAYERS} layers x ${LATENCY} ms = ${LAYERS * LATENCY} ms`);
      // Back to back, every layer's read is waited for (prefetch depth is one layer).
      assert.ok(backToBack >= (LAYERS - 0.5) * LATENCY * 0.9, `back-to-back token ${backToBack.toFixed(1)} ms`);
    } finally {
      shim.dispose();
    }
  });

  test('prefetchLayer resolves once the layer is resident; the next token does not read it', async () => {
    const source = countingSource(new BufferKnotSource(layout.bytes));
    const shim = await HostShim.open(source, { lruCapacity: LAYERS });
    try {
      const opened = source.reads.length;
      await shim.prefetchLayer(LAYERS - 1);
      assert.equal(source.reads.length, opened + 1);
      assert.equal(layout.layerOf(source.reads.at(-1).start, source.reads.at(-1).end), LAYERS - 1);
      await Promise.all([shim.prefetchLayer(LAYERS - 1), shim.prefetchLayer(LAYERS - 1)]);
      assert.equal(source.reads.length, opened + 1);
      await shim.generate(PROMPT, 2);
      assert.equal(source.reads.length, opened + LAYERS);
      await assert.rejects(shim.prefetchLayer(LAYERS), { code: 'invalid_argument', message: /layer 2 does not exist/ });
      await assert.rejects(shim.prefetchLayer(-1), /layer must be an integer/);
    } finally {
      shim.dispose();
    }
  });
});

describe('errors from the source reach JS as clear Errors, and the shim recovers', () => {
  /** @type {[string, RegExp, boolean][]} fault, message, whether a retry may cure it */
  const FAULTS = [
    ['reject', /rangeGet rejected: injected rejection/, true],
    ['throw', /rangeGet threw: injected synchronous failure/, true],
    ['short', /the source returned \d+ bytes, expected \d+/, true],
    ['long', /the source returned \d+ bytes, expected \d+/, true],
    ['arraybuffer', /rangeGet must resolve to a Uint8Array/, false],
    ['array', /rangeGet must resolve to a Uint8Array/, false],
    ['string', /rangeGet must resolve to a Uint8Array/, false],
  ];
  const NO_RETRY = { lruCapacity: 1, readRetries: 0 };

  for (const [fault, message, transient] of FAULTS) {
    test(`${fault}: at open, and at a layer read mid-generation`, async () => {
      // At open, without retries: the first read fails, or the metadata read.
      for (const index of [0, 1]) {
        const source = countingSource(new BufferKnotSource(layout.bytes), { fault: (r) => (r.index === index ? fault : undefined) });
        await assert.rejects(HostShim.open(source, NO_RETRY), message);
      }
      // With the default retries, one transient failure costs a read and nothing else.
      const once = countingSource(new BufferKnotSource(layout.bytes), { fault: (r) => (r.index === 1 ? fault : undefined) });
      if (transient) {
        const shim = await HostShim.open(once, { lruCapacity: 1, readBackoffMs: 1 });
        assert.equal(shim.stats().readRetries, 1);
        shim.dispose();
      } else {
        await assert.rejects(HostShim.open(once, { lruCapacity: 1 }), message);
        assert.equal(once.reads.length, 2, 'a permanent failure is not retried');
      }

      // Mid-generation: layer 1 fails twice (its prefetch, then the read the step makes itself),
      // then the source is healthy.
      const source = countingSource(new BufferKnotSource(layout.bytes));
      const shim = await HostShim.open(source, NO_RETRY);
      try {
        const [start, end] = layout.layers[1];
        const failed = [];
        source.fault = (r) => {
          if (r.start !== start || r.end !== end || failed.length === 2) return undefined;
          failed.push(r);
          return fault;
        };
        await assert.rejects(shim.generate(PROMPT, 6), message);
        assert.equal(failed.length, 2);
        // The same shim (and wasm instance: no panic) goes on and matches a fresh one.
        assert.deepEqual(Array.from(await shim.generate(PROMPT, 6)), await freshTokens(PROMPT, 6));
        // The host counts only reads that came back right; the wrapper tallies every span asked.
        const lost = failed.reduce((sum, r) => sum + r.end - r.start, 0);
        assert.equal(shim.stats().bytesFetched, source.bytes - lost);
      } finally {
        shim.dispose();
      }
    });
  }

  test('a continued session survives a failed step and resumes where it was', async () => {
    const source = countingSource(new BufferKnotSource(layout.bytes));
    const shim = await HostShim.open(source, NO_RETRY);
    try {
      const first = Array.from(await shim.generate(PROMPT, 3));
      const [start] = layout.layers[1];
      let failures = 0;
      source.fault = (r) => (r.start === start && failures++ < 2 ? 'reject' : undefined);
      await assert.rejects(shim.generate([], 3, { continue: true }), /injected rejection/);
      const rest = Array.from(await shim.generate([], 3, { continue: true }));
      assert.deepEqual([...first, ...rest], await freshTokens(PROMPT, 6));
    } finally {
      shim.dispose();
    }
  });

  test('a source whose reads fail for good: every call rejects, dispose still works', async () => {
    const source = countingSource(new BufferKnotSource(layout.bytes));
    const shim = await HostShim.open(source, { lruCapacity: 1, readRetries: 2, readBackoffMs: 1 });
    source.fault = () => 'reject';
    for (let i = 0; i < 3; i++) {
      await assert.rejects(shim.generate(PROMPT, 2), /rangeGet rejected: injected rejection at read \d+ \(gave up after 3 attempts\)/);
    }
    await assert.rejects(shim.prefetchLayer(0), /rangeGet rejected/);
    shim.dispose();
    shim.dispose();
  });

  test('not a knot file, a truncated file', async () => {
    await assert.rejects(HostShim.open(new BufferKnotSource(new Uint8Array(64))), /not a valid knot file/);
    const truncated = layout.bytes.subarray(0, layout.resident[0] + 10);
    await assert.rejects(HostShim.open(new BufferKnotSource(truncated)), Error);
  });
});

describe('argument errors and dispose, on the real package', () => {
  test('bad open options', async () => {
    const source = new BufferKnotSource(layout.bytes);
    for (const lruCapacity of [0, 1.5, '2', -1, NaN]) {
      await assert.rejects(HostShim.open(source, { lruCapacity }), /lruCapacity must be an integer >= 1/);
    }
    const wasm = await loadWasm();
    for (const [draftMode, message] of [
      [{ maxDraft: 0 }, /draftMode\.maxDraft must be an integer in \[1, 32\], got 0/],
      [{ ngram: 9 }, /ngram must be an integer in \[1, 8\], got 9/],
      [{ margin: -1 }, /draftMode\.margin must be a finite number >= 0, got -1/],
      [{ k: 3 }, /unknown option 'draftMode\.k'/],
      ['on', /draftMode must be true, false or/],
    ]) {
      await assert.rejects(HostShim.open(source, wasm, { lruCapacity: 2, draftMode }), message);
    }
    // The seed's call shape works.
    const shim = await HostShim.open(source, wasm, { lruCapacity: 6, draftMode: false });
    assert.equal((await shim.generate(new Uint32Array([1, 2, 3]), 4)).length, 4);
    shim.dispose();
  });

  test('bad generate arguments reject and leave the shim usable', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 2 });
    try {
      await assert.rejects(shim.generate(PROMPT, -1), /n \(tokens to generate\) must be an integer >= 0, got -1/);
      await assert.rejects(shim.generate(PROMPT, 1.5), /must be an integer >= 0/);
      await assert.rejects(shim.generate([1, 256], 2), { code: 'token_out_of_range', message: /token id 256 is out of range for a vocabulary of 256/ });
      await assert.rejects(shim.generate([], 2), /prompt is empty/);
      // Options are checked in one place, the Rust decode loop, and named there.
      const bad = [
        [{ temperature: -1 }, /temperature must be a finite number >= 0 \(0 is greedy\), got -1/],
        [{ temperature: NaN }, /temperature must be a finite number >= 0 \(0 is greedy\), got NaN/],
        [{ topK: 2.5 }, /topK must be an integer >= 0 \(0 disables it\), got 2.5/],
        [{ topP: 0 }, /topP must be a number in \(0, 1\], got 0/],
        [{ minP: 1.5 }, /minP must be a number in \[0, 1\], got 1.5/],
        [{ repeatPenalty: Infinity }, /repeatPenalty must be a finite number > 0 \(1 disables it\), got Infinity/],
        [{ seed: -1 }, /seed must be an integer in \[0, 2\^64\), got -1/],
        [{ seed: 2n ** 64n }, /seed must be an integer in \[0, 2\^64\)/],
        [{ topk: 3 }, /unknown option 'topk'/],
        [{ continue: 'yes' }, /continue must be true or false/],
        [{ moa: 3 }, /moa must be true, false or an object, got 3/],
        [{ moa: { k: 0 } }, /moa.k must be an integer in \[1, 32\], got 0/],
        [{ moa: { baseTemperature: -1 } }, /moa.baseTemperature must be a finite number > 0, got -1/],
        [{ moa: { merge: 'max' } }, /moa.merge must be deficit, uniform or vote/],
        [{ moa: { kk: 1 } }, /unknown option 'moa.kk'/],
        [{ moa: true, temperature: 0.5 }, /temperature does not apply with moa/],
        [{ coltrane: { preset: 'xml' } }, /coltrane.preset must be json, balanced or json_schema/],
        [{ coltrane: { schema: { type: 'string', pattern: '(?=a)' } } }, /unsupported JSON Schema keyword "pattern with a lookahead"/],
        [{ coltrane: { maxDepth: 0 } }, /coltrane.maxDepth must be an integer in \[1, 64\], got 0/],
        [{ coltrane: { fallbackMass: NaN } }, /coltrane.fallbackMass must be a number in \[0, 1\], got NaN/],
        [{ coltrane: { prosody: 'loud' } }, /coltrane.prosody must be off, observe or bias/],
        [{ coltrane: true }, /coltrane must be false or an object/],
      ];
      for (const [options, message] of bad) {
        const code = /unsupported JSON Schema/.test(String(message)) ? 'unsupported_schema' : 'invalid_option';
        await assert.rejects(shim.generate(PROMPT, 2, options), (err) => {
          assert.match(String(err.message), message);
          assert.equal(err.code, code, String(message));
          return true;
        });
      }
      await assert.rejects(shim.generateText('hi', { maxTokens: -1 }), /maxTokens must be an integer >= 0, got -1/);
      assert.throws(() => shim.decode([300]), { code: 'token_out_of_range', message: /token id 300 is outside the vocabulary of 256/ });
      // The engine's own check, past the wrapper: a continued generation with nothing before it.
      await assert.rejects(shim.generate([], 1, { continue: true }), /nothing to continue from/);
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 5)), await freshTokens(PROMPT, 5));
    } finally {
      shim.dispose();
    }
  });

  test('use after dispose rejects; dispose is idempotent; a call in flight finishes first', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 2 });
    const running = shim.generate(PROMPT, 3);
    shim.dispose();
    shim.dispose();
    await assert.rejects(running, /used after dispose\(\)/);
    await assert.rejects(shim.generate(PROMPT, 1), /used after dispose\(\)/);
    await assert.rejects(shim.prefetchLayer(0), /used after dispose\(\)/);
    assert.throws(() => shim.stats(), /used after dispose\(\)/);
    assert.throws(() => shim.encode('a'), /used after dispose\(\)/);
    // The wasm instance is fine.
    assert.deepEqual(await freshTokens(LEN1_CASE.prompt_ids, 4), LEN1_CASE.greedy_ids.slice(0, 4));
  });

  test('AbortSignal stops a generation; the next one matches a fresh shim', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 1 });
    try {
      const controller = new AbortController();
      const seen = [];
      await assert.rejects(
        shim.generate(PROMPT, 20, { signal: controller.signal, onToken: (t) => { seen.push(t.id); if (seen.length === 3) controller.abort(); } }),
        { name: 'AbortError' },
      );
      assert.equal(seen.length, 3);
      assert.deepEqual(seen, (await freshTokens(PROMPT, 3)));
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 8)), await freshTokens(PROMPT, 8));
    } finally {
      shim.dispose();
    }
  });

  test('draftMode: the same tokens with and without speculation, at open and per call; stats count it', async () => {
    // A prompt that repeats itself, so prompt lookup finds drafts.
    const ids = [...PROMPT, ...PROMPT, ...PROMPT];
    const plain = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 1 });
    const spec = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 1, draftMode: true });
    try {
      for (const opts of [{}, { temperature: 0.9, topK: 40, seed: 5 }, { moa: true, seed: 2 }]) {
        const want = Array.from(await plain.generate(ids, 24, opts));
        const base = plain.stats().generation;
        assert.deepEqual(Array.from(await spec.generate(ids, 24, opts)), want, JSON.stringify(opts));
        // The report of the generation that ended last.
        const s = spec.stats().generation;
        for (const key of ['decodeTokens', 'forwardPasses', 'verifyPasses', 'drafted', 'accepted',
          'tokensPerPass', 'layerReadsPerToken', 'decodeLayerReads']) {
          assert.equal(typeof s[key], 'number', key);
        }
        assert.equal(s.decodeTokens, want.length);
        assert.equal(base.verifyPasses, 0);
        assert.ok(s.accepted <= s.drafted);
        // Capacity 1: every pass reads each layer once, whatever its batch (layer 0 of the first
        // pass may have been read ahead during the prompt's pass).
        assert.ok(Math.abs(s.decodeLayerReads - s.forwardPasses * LAYERS) <= 1, JSON.stringify(s));
      }
      // Per call: on for a shim opened without it, off for one opened with it.
      const want = Array.from(await plain.generate(ids, 16));
      assert.deepEqual(Array.from(await plain.generate(ids, 16, { draftMode: { maxDraft: 4, ngram: 2, adaptive: false } })), want);
      assert.ok(plain.stats().generation.drafted > 0, 'drafts when asked per call');
      assert.deepEqual(Array.from(await spec.generate(ids, 16, { draftMode: false })), want);
      assert.equal(spec.stats().generation.drafted, 0);
      await assert.rejects(plain.generate(ids, 4, { draftMode: { maxDraft: 40 } }),
        /draftMode\.maxDraft must be an integer in \[1, 32\], got 40/);
      assert.deepEqual(Array.from(await plain.generate(ids, 16)), want, 'usable after a bad option');
    } finally {
      plain.dispose();
      spec.dispose();
    }
  });

  test('seeded sampling is reproducible, and the seed matters', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 2 });
    try {
      const opts = (seed) => ({ temperature: 1.0, topK: 0, seed });
      const a = Array.from(await shim.generate(PROMPT, 24, opts(11)));
      const b = Array.from(await shim.generate(PROMPT, 24, opts(11n)));
      const c = Array.from(await shim.generate(PROMPT, 24, opts(12)));
      assert.deepEqual(a, b);
      assert.notDeepEqual(a, c);
    } finally {
      shim.dispose();
    }
  });
});

describe('MOA through the wasm package', () => {
  test('seeded MOA is reproducible, reports every step, and differs from plain sampling', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 2 });
    try {
      const steps = [];
      const a = Array.from(await shim.generate(PROMPT, 24, { moa: true, seed: 5, onStep: (s) => steps.push(s) }));
      const b = Array.from(await shim.generate(PROMPT, 24, { moa: {}, seed: 5n }));
      assert.deepEqual(a, b);
      assert.equal(steps.length, a.length);
      for (const [i, s] of steps.entries()) {
        assert.equal(s.token, a[i]);
        assert.equal(s.picker, 'moa');
        assert.equal(s.temperatures.length, 3);
        assert.ok(Math.abs(s.weights.reduce((x, y) => x + y, 0) - 1) < 1e-9);
        assert.equal(typeof s.spread, 'number');
        assert.equal(s.fallback, false);
        // 256 tokens, 40 candidates, 3 agents: (3 − 1) + (256 − 40).
        assert.equal(s.deficit, 2 + 216);
      }
      assert.deepEqual(steps[0].temperatures, [0.5, 0.7, 0.9]);
      const vote = Array.from(await shim.generate(PROMPT, 24, { moa: { merge: 'vote', temperatureSpread: 0.6 }, seed: 5 }));
      assert.notDeepEqual(vote, a);
      const r = await shim.generateText('Hello', { maxTokens: 6, moa: { k: 2, topK: 0 } });
      assert.equal(r.steps.length, 6);
      assert.deepEqual(r.steps[0].temperatures, [0.5, 0.9]);
      assert.equal(r.steps[0].deficit, 1);
    } finally {
      shim.dispose();
    }
  });

  test('createMoaAgents and deficitWeightedMerge: the issue vectors, without a model', () => {
    assert.deepEqual(createMoaAgents(), [0.5, 0.7, 0.9]);
    assert.deepEqual(createMoaAgents({ temperatureSpread: 0.6 }), [0.4, 0.7, 1.0]);
    assert.deepEqual(createMoaAgents({ k: 1 }), [0.7]);
    assert.deepEqual(createMoaAgents({ k: 3, baseTemperature: 0.1, temperatureSpread: 1, minTemperature: 0.05 }), [0.05, 0.1, 0.6]);
    assert.throws(() => createMoaAgents({ k: 0 }), /moa.k must be an integer in \[1, 32\], got 0/);
    assert.throws(() => createMoaAgents({ merge: 'vote' }), /unknown option 'merge'/);
    assert.throws(() => createMoaAgents(null), /options must be an object/);

    const close = (got, want) => got.every((x, i) => Math.abs(x - want[i]) < 1e-5) && got.length === want.length;
    let m = deficitWeightedMerge([[1, 0], [0, 1]]);
    assert.deepEqual(m.weights, [0.5, 0.5]);
    m = deficitWeightedMerge([[1, 0], [1, 0], [0, 1]]);
    assert.deepEqual(m.weights, [0.25, 0.25, 0.5]);
    assert.deepEqual(m.merged, [0.5, 0.5]);
    assert.equal(m.deficit, 2);
    m = deficitWeightedMerge([[0.7, 0.2, 0.1], [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]], { strategy: 'deficit' });
    assert.ok(close(m.weights, [0.40221, 0.11155, 0.48624]), String(m.weights));
    assert.ok(close(m.merged, [0.43457, 0.25978, 0.30565]), String(m.merged));
    m = deficitWeightedMerge([[0.2, 0.8], [NaN, 1], [0.4, 0.6]], { strategy: 'uniform' });
    assert.ok(close(m.merged, [0.3, 0.7]) && close(m.weights, [0.5, 0, 0.5]));
    assert.equal(m.deficit, 1);
    assert.ok(deficitWeightedMerge([[0.7, 0.3], [0.1, 0.9]], { useKl: true }).weights.every((w) => w > 0));
    assert.throws(() => deficitWeightedMerge([[1], [0.5, 0.5]]), /same length/);
    assert.throws(() => deficitWeightedMerge([[1, 'a']]), /arrays of numbers/);
    assert.throws(() => deficitWeightedMerge([[-1, 2]]), /non-negative/);
    assert.throws(() => deficitWeightedMerge([[Infinity]]), /finite/);
    assert.throws(() => deficitWeightedMerge([[1]], { strategy: 'vote' }), /'deficit' or 'uniform'/);
    assert.throws(() => deficitWeightedMerge('x'), /arrays of numbers/);
  });
});

describe('COLTRANE through the wasm package', () => {
  test('json: the tiny model writes a complete JSON value within any budget, sampled or greedy', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 2 });
    try {
      for (const maxTokens of [1, 4, 12, 40]) {
        for (const sampling of [{}, { temperature: 1.0, seed: maxTokens }]) {
          const steps = [];
          const r = await shim.generateText('data:', { maxTokens, coltrane: { preset: 'json' }, ...sampling, onStep: (s) => steps.push(s) });
          assert.doesNotThrow(() => JSON.parse(r.text), `maxTokens ${maxTokens}: ${JSON.stringify(r.text)}`);
          assert.equal(r.constraint.closed, true);
          const last = steps.at(-1).stages.find((st) => st.stage === 'coltrane');
          assert.ok(last.allowed >= 1 && typeof last.maskUs === 'number');
        }
      }
      // A schema: an object with a required integer.
      const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false };
      const r = await shim.generateText('x', { maxTokens: 16, coltrane: { preset: 'json', schema } });
      const v = JSON.parse(r.text);
      assert.ok(Number.isInteger(v.n) && Object.keys(v).length === 1, r.text);
    } finally {
      shim.dispose();
    }
  });

  test('balanced and eddy report their metrics; response_format maps onto presets', async () => {
    const shim = await HostShim.open(new BufferKnotSource(layout.bytes), { lruCapacity: 2 });
    try {
      const r = await shim.generateText('(', { maxTokens: 20, temperature: 1, seed: 3, coltrane: { preset: 'balanced', eddy: true, prosody: 'observe' } });
      assert.equal(r.constraint.closed, true, JSON.stringify(r.text));
      assert.equal(typeof r.constraint.fallbacks, 'number');
    } finally {
      shim.dispose();
    }
    assert.deepEqual(coltraneFromResponseFormat({ type: 'json_object' }), { preset: 'json' });
    assert.deepEqual(coltraneFromResponseFormat({ type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer' } } }),
      { preset: 'json', schema: { type: 'integer' } });
    assert.equal(coltraneFromResponseFormat({ type: 'text' }), null);
    assert.throws(() => coltraneFromResponseFormat({ type: 'yaml' }), /invalid response_format: unknown type "yaml"/);
    assert.throws(() => coltraneFromResponseFormat('json'), /invalid response_format/);
  });
});

describe('HttpKnotSource against a real range server', () => {
  const bytes = readFileSync(TINY);
  const reference = () => freshTokens(PROMPT, 8);

  test('206 server: open and generate over HTTP, one request per read', async () => {
    const server = await startRangeServer(bytes);
    try {
      const source = await HttpKnotSource.open(server.url);
      const before = server.requestCount;
      const shim = await HostShim.open(source, { lruCapacity: 1 });
      try {
        assert.deepEqual(Array.from(await shim.generate(PROMPT, 8)), await reference());
        assert.equal(server.requestCount - before, shim.stats().rangeReads);
      } finally {
        shim.dispose();
      }
    } finally {
      await server.close();
    }
  });

  test('server answering 200 to range requests: open fails naming the cause', async () => {
    const server = await startRangeServer(bytes, { mode: 'full' });
    try {
      const source = new HttpKnotSource(server.url, { size: bytes.byteLength });
      await assert.rejects(HostShim.open(source), /answered 200 with the whole file \(it does not support Range requests\)/);
    } finally {
      await server.close();
    }
  });

  test('server answering the wrong range: rejected naming both ranges', async () => {
    const server = await startRangeServer(bytes, { mode: 'wrong-range' });
    try {
      const source = new HttpKnotSource(server.url, { size: bytes.byteLength });
      await assert.rejects(HostShim.open(source), /asked for bytes 0-9 of .*, the server answered Content-Range "bytes 1-10\//);
    } finally {
      await server.close();
    }
  });

  test('server failing transiently: retried, and generation matches', async () => {
    const server = await startRangeServer(bytes, { mode: 'transient', failFirst: 3 });
    try {
      const source = new HttpKnotSource(server.url, { retryDelayMs: 1 });
      const shim = await HostShim.open(source, { lruCapacity: 1 });
      try {
        assert.deepEqual(Array.from(await shim.generate(PROMPT, 8)), await reference());
        assert.ok(server.requests.length >= 3 + shim.stats().rangeReads);
      } finally {
        shim.dispose();
      }
    } finally {
      await server.close();
    }
  });

  test('server sending a short body: rejected, and the shim recovers once the server heals', async () => {
    const good = await startRangeServer(bytes);
    const bad = await startRangeServer(bytes, { mode: 'short-body' });
    try {
      let url = good.url;
      const http = () => new HttpKnotSource(url, { size: bytes.byteLength, retries: 0 });
      // A source that reads through whichever server is current.
      const source = { size: bytes.byteLength, rangeGet: (s, e) => http().rangeGet(s, e) };
      const shim = await HostShim.open(source, { lruCapacity: 1 });
      try {
        url = bad.url;
        await assert.rejects(shim.generate(PROMPT, 4), /the body had \d+ bytes/);
        url = good.url;
        assert.deepEqual(Array.from(await shim.generate(PROMPT, 8)), await reference());
      } finally {
        shim.dispose();
      }
    } finally {
      await good.close();
      await bad.close();
    }
  });
});
