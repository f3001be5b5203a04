// The real wasm package on SmolLM2-135M-Instruct (30 layers): greedy parity with the native
// engine, LRU read accounting at capacity 2 and 1, prefetch overlap with a slow source, chat,
// streaming and HTTP. Skipped without the model unless KNOT_REQUIRE_MODELS is set (then it fails).
import assert from 'node:assert/strict';
import { describe, test, testIf } from './harness.js';
import { FileKnotSource, HostShim, HttpKnotSource } from '../src/node.js';
import { startRangeServer } from './range-server.js';
import { GREEDY_ON_REFERENCE, greedyOnReference } from './smollm2-greedy.js';
import { SMOL, SMOL_CASES, countingSource, haveNative, haveSmol, knotLayout, nativeGenerate } from './support.js';

const present = haveSmol();
const layout = present ? knotLayout(SMOL) : undefined;
const LAYERS = layout?.layers.length ?? 0;

/** Opens SmolLM2 from the file through a counting wrapper. */
async function openSmol(lruCapacity, wrap = {}, options = {}) {
  const file = await FileKnotSource.open(SMOL);
  const source = countingSource(file, wrap);
  const shim = await HostShim.open(source, { lruCapacity, ...options });
  return { shim, source, close: async () => { shim.dispose(); await file.close(); } };
}

describe('SmolLM2 through the wasm package', () => {
  testIf(present, GREEDY_ON_REFERENCE, greedyOnReference);

  testIf(present && haveNative(), 'greedy and seeded tokens equal the native CLI run now', async () => {
    const { shim, close } = await openSmol(2);
    try {
      // Greedy on every reference prompt is held above; one prompt ties the CLI run now to it.
      const greedyIds = Array.from(shim.encode('def fibonacci(n):'));
      assert.deepEqual(Array.from(await shim.generate(greedyIds, 16)), nativeGenerate(SMOL, greedyIds, 16));
      const ids = Array.from(shim.encode('Write a haiku about rain.'));
      const flags = ['--temperature', '0.8', '--top-k', '40', '--top-p', '0.95', '--min-p', '0.05', '--seed', '42'];
      const sampled = await shim.generate(ids, 16, { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, seed: 42 });
      assert.deepEqual(Array.from(sampled), nativeGenerate(SMOL, ids, 16, flags));
      // COLTRANE: the same constrained tokens natively and in wasm, and the JSON parses.
      const ask = Array.from(shim.encode(shim.applyChatTemplate([{ role: 'user', content: 'Describe a cat as JSON with name and age.' }])));
      const json = await shim.generateText([{ role: 'user', content: 'Describe a cat as JSON with name and age.' }],
        { maxTokens: 48, coltrane: { preset: 'json' } });
      assert.doesNotThrow(() => JSON.parse(json.text), json.text);
      const native = nativeGenerate(SMOL, ask, 48, ['--temperature', '0', '--constraint', 'json']);
      assert.deepEqual([...json.tokens, ...(json.finishReason === 'stop' ? [native.at(-1)] : [])], native);
      // Seeded MOA: the same tokens natively and in wasm (deterministic exp/ln, fixed orders).
      for (const [seed, spec, moa] of [[42, '', true], [7, 'k=4,spread=0.6,merge=vote,top-k=0', { k: 4, temperatureSpread: 0.6, merge: 'vote', topK: 0 }]]) {
        const wasmIds = Array.from(await shim.generate(ids, 16, { moa, seed }));
        assert.deepEqual(wasmIds, nativeGenerate(SMOL, ids, 16, ['--moa', spec, '--seed', String(seed)]), `moa ${spec}`);
      }
    } finally {
      await close();
    }
  });

  testIf(present, 'draftMode: greedy tokens the reference\'s on every reference prompt; copying reads fewer layers', async () => {
    const plain = await openSmol(2);
    // Fixed draft lengths: adaptive ones follow measured pass times, and this test counts passes.
    const spec = await openSmol(2, {}, { draftMode: { adaptive: false } });
    try {
      let verified = 0;
      // The reference's tokens (up to 32, or to SmolLM2's end of text, <|im_end|> = 2): what plain
      // decoding gives, as the reference tests above check.
      for (const c of SMOL_CASES) {
        const end = c.greedy_ids.slice(0, 32).indexOf(2);
        const want = c.greedy_ids.slice(0, end < 0 ? 32 : end + 1);
        assert.deepEqual(Array.from(await spec.shim.generate(c.prompt_ids, 32)), want, `case ${c.name}`);
        verified += spec.shim.stats().generation.verifyPasses;
      }
      assert.ok(verified > 0, 'some draft was verified');
      // A copy-heavy chat prompt, streamed through 2 layers: fewer passes, fewer layer reads.
      const ask = [{ role: 'user', content: 'Repeat the following text exactly, word for word:\n\nThe lighthouse ' +
        'stood on a rocky point at the edge of the bay. Every evening the keeper climbed the spiral stairs, ' +
        'trimmed the wick, and lit the great lamp.' }];
      const a = await plain.shim.generateText(ask, { maxTokens: 48 });
      const b = await spec.shim.generateText(ask, { maxTokens: 48 });
      assert.equal(b.text, a.text);
      const [p, s] = [a.report, b.report];
      assert.ok(s.tokensPerPass > 3, `tokens per pass ${s.tokensPerPass}`);
      assert.ok(s.layerReadsPerToken < p.layerReadsPerToken / 3, `${s.layerReadsPerToken} vs ${p.layerReadsPerToken}`);
    } finally {
      await plain.close();
      await spec.close();
    }
  });

  testIf(present && haveNative(), 'draftMode: sampled tokens equal the native CLI with --draft for the same seed', async () => {
    const { shim, close } = await openSmol(LAYERS, {}, { draftMode: true });
    try {
      const ids = Array.from(shim.encode('Monday, Tuesday, Wednesday, Thursday, Friday. Monday, Tuesday, Wednesday,'));
      const flags = ['--temperature', '0.7', '--top-k', '40', '--top-p', '1', '--min-p', '0', '--seed', '9',
        '--draft', 'lookup:k=6,adaptive=0'];
      const got = await shim.generate(ids, 24, { temperature: 0.7, topK: 40, seed: 9, draftMode: { maxDraft: 6, adaptive: false } });
      assert.deepEqual(Array.from(got), nativeGenerate(SMOL, ids, 24, flags));
      assert.deepEqual(Array.from(got), nativeGenerate(SMOL, ids, 24, flags.slice(0, -2)), 'and without --draft');
      assert.ok(shim.stats().generation.accepted > 0, JSON.stringify(shim.stats().generation));
    } finally {
      await close();
    }
  });

  testIf(present, 'capacity >= layers: no misses and no reads after the first token; bytes are the spans', async () => {
    const { shim, source, close } = await openSmol(LAYERS);
    try {
      let afterFirst;
      await shim.generate(SMOL_CASES[0].prompt_ids, 8, {
        onToken: () => { afterFirst ??= { reads: source.reads.length, misses: shim.stats().misses }; },
      });
      const s = shim.stats();
      assert.equal(source.reads.length, afterFirst.reads);
      assert.equal(s.misses, afterFirst.misses);
      assert.equal(s.residentLayers, LAYERS);
      const spans = (list) => list.reduce((sum, [a, b]) => sum + b - a, 0);
      const [tokStart] = layout.tokenizer;
      const [, resEnd] = layout.resident;
      assert.equal(s.bytesFetched, layout.payload + (resEnd - tokStart) + spans(layout.layers));
      assert.equal(s.rangeReads, 3 + LAYERS);
    } finally {
      await close();
    }
  });

  for (const capacity of [2, 1]) {
    testIf(present, `capacity ${capacity}: exactly one range read per layer per forward pass, never more`, async () => {
      const n = 4;
      const { shim, source, close } = await openSmol(capacity);
      try {
        const opened = source.reads.length;
        const c = SMOL_CASES[1];
        assert.deepEqual(Array.from(await shim.generate(c.prompt_ids, n)), c.greedy_ids.slice(0, n));
        const layers = source.reads.slice(opened).map((r) => layout.layerOf(r.start, r.end));
        // Prefill, then n - 1 forward passes (the first token comes from the prefill's logits).
        assert.deepEqual(layers, Array.from({ length: n * LAYERS }, (_, i) => i % LAYERS));
        const s = shim.stats();
        assert.ok(s.residentLayers <= capacity);
        assert.equal(s.bytesFetched, source.bytes);
        // The peak holds the layers cached plus the one being prefetched.
        const biggest = Math.max(...layout.layers.map(([a, b]) => b - a));
        assert.ok(s.peakLayerBytes <= (capacity + 1) * biggest, `peak ${s.peakLayerBytes}`);
      } finally {
        await close();
      }
    });
  }

  testIf(present, 'prefetch overlap in prefill: reads for the next layers travel while a layer computes', async () => {
    // Checked structurally rather than by the clock: with lruCapacity 8 the host requests layers
    // l+1..l+7 before layer l computes, so up to 7 reads are in flight at once. Without prefetch
    // there would never be more than one.
    const prompt = SMOL_CASES[3].prompt_ids;
    const { shim, source, close } = await openSmol(8);
    try {
      source.latencyMs = 5;
      await shim.generate(prompt, 1);
      assert.equal(source.maxInFlight, 7, `at most ${source.maxInFlight} reads were in flight at once`);
    } finally {
      await close();
    }
    const none = await openSmol(8, {}, { prefetchDepth: 0 });
    try {
      none.source.latencyMs = 5;
      await none.shim.generate(prompt, 2);
      assert.equal(none.source.maxInFlight, 1);
    } finally {
      await none.close();
    }
  });

  testIf(present, 'prefetch overlap in decode: a slow source costs a token far less than layers x latency', async () => {
    // Decode computes for well under a millisecond per layer, so the overlap is between reads:
    // with lruCapacity 8 a token waits for about its reads / 7 latencies instead of one latency per
    // read. The bounds are latency counts of each run's own reads per token (the cache keeps some
    // layers across tokens, so a token reads fewer than LAYERS) with wide margins (the machine may
    // be loaded): the deep case must beat half its serial time, the one-layer-ahead case cannot
    // beat the serial floor of its reads.
    const latency = 40;
    const prompt = SMOL_CASES[0].prompt_ids;
    const perToken = async (options) => {
      const { shim, source, close } = await openSmol(8, {}, options);
      try {
        source.latencyMs = latency;
        const readsAt = [];
        await shim.generate(prompt, 6, { onToken: () => readsAt.push(source.reads.length) });
        // The time between its tokens (from the first on: the first comes from the prompt's pass).
        const steps = shim.stats().generation.tokenMs;
        const ms = steps.reduce((a, b) => a + b, 0) / steps.length;
        const reads = (readsAt[readsAt.length - 1] - readsAt[0]) / (readsAt.length - 1);
        return { ms, reads, serial: reads * latency };
      } finally {
        await close();
      }
    };
    const deep = await perToken({});
    const shallow = await perToken({ prefetchDepth: 1 });
    if (process.env.KNOT_TEST_VERBOSE) console.log({ deep, shallow });
    assert.ok(deep.reads >= 20, `a decode token read only ${deep.reads} layers; the test needs reads to overlap`);
    assert.ok(deep.ms < 0.5 * deep.serial, `a decode token took ${deep.ms.toFixed(0)} ms; ${deep.reads} reads x ${latency} ms = ${deep.serial} ms`);
    assert.ok(shallow.ms > 0.9 * shallow.serial, `one layer ahead: ${shallow.ms.toFixed(0)} ms per token for ${shallow.reads} reads x ${latency} ms`);
  });

  testIf(present, 'chat messages through the template, generateText, stream and onToken agree', async () => {
    const { shim, close } = await openSmol(LAYERS);
    try {
      const c = SMOL_CASES.find((x) => x.chat !== undefined);
      const messages = c.chat.messages ?? c.chat;
      assert.deepEqual(Array.from(shim.encode(shim.applyChatTemplate(messages))), c.prompt_ids);
      const pieces = [];
      const result = await shim.generateText(messages, { maxTokens: 16, onToken: (t) => pieces.push(t.text) });
      assert.deepEqual(Array.from(result.tokens), c.greedy_ids.slice(0, result.tokens.length));
      // Rendered and encoded in Rust as the template wrote it (no extra BOS), as HF does.
      assert.equal(result.promptTokens, c.prompt_ids.length);
      assert.equal(shim.countTokens(messages), c.prompt_ids.length);
      assert.equal(result.text, shim.decode(result.tokens));
      assert.equal(pieces.join(''), result.text);
      let streamed = '';
      for await (const piece of shim.stream(messages, { maxTokens: 16 })) streamed += piece;
      assert.equal(streamed, result.text);
      assert.equal(shim.decode(shim.encode('Hello, world! 123')), 'Hello, world! 123');
    } finally {
      await close();
    }
  });

  testIf(present, 'over HTTP from the range server: same tokens as from the file', async () => {
    const server = await startRangeServer(layout.bytes);
    try {
      const shim = await HostShim.open(await HttpKnotSource.open(server.url), { lruCapacity: LAYERS });
      try {
        const c = SMOL_CASES[0];
        assert.deepEqual(Array.from(await shim.generate(c.prompt_ids, 8)), c.greedy_ids.slice(0, 8));
        assert.equal(shim.stats().rangeReads, 3 + LAYERS);
      } finally {
        shim.dispose();
      }
    } finally {
      await server.close();
    }
  });
});
