// What a long-lived host (a Workers isolate) needs from the package: a memory budget checked at
// open, the f16 KV cache, prefill in chunks, prefix reuse across turns, token streams, and a
// line that takes the model back from a step whose caller went away (`stallMs`).
// Skipped without the models unless KNOT_REQUIRE_MODELS is set (then it fails).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, test, testIf } from './harness.js';
import { BufferKnotSource, FileKnotSource, HostShim } from '../src/node.js';
import { ROOT, SMOL, TINY, countingSource, haveSmol } from './support.js';
import { readFileSync } from 'node:fs';

const GEMMA = process.env.KNOT_GEMMA3 ?? `${ROOT}models/gemma-3-270m.knot`;
const haveGemma = existsSync(GEMMA);
if (!haveGemma && process.env.KNOT_REQUIRE_MODELS) {
  throw new Error(`${GEMMA} is missing and KNOT_REQUIRE_MODELS is set (run scripts/prepare-model.sh --all)`);
}
const MiB = 2 ** 20;
const CHAT = [{ role: 'user', content: 'What is the capital of France? Answer in one sentence.' }];

/**
 * A wasm instance of its own: memory never shrinks, so the instance every other test shares
 * (Bun runs all files in one process) would show their high-water mark, not this test's.
 */
async function freshWasm() {
  const ns = await import(`../dist/wasm/host.js?instance=${Math.random()}`);
  ns.initSync({ module: readFileSync(new URL('../dist/wasm/host_bg.wasm', import.meta.url)) });
  return ns;
}

/** @param {string} path @param {object} options @param {object} [wasm] */
async function open(path, options, wasm) {
  const file = await FileKnotSource.open(path);
  const source = countingSource(file);
  const shim = await HostShim.open(source, wasm, options);
  return { shim, source, close: async () => { await shim.dispose(); await file.close(); } };
}

describe('memory budget, KV cache and prefix reuse', () => {
  testIf(haveGemma, 'Gemma-3-270M is refused in a 128 MiB isolate with the numbers, before its tensors are read', async () => {
    const file = await FileKnotSource.open(GEMMA);
    const source = countingSource(file);
    try {
      await assert.rejects(HostShim.open(source, { memoryBudget: 128 * MiB, lruCapacity: 2, kvCache: 'f16' }),
        /does not fit the memory budget of 134217728 bytes \(128\.0 MiB\): at its smallest context of 256 positions it needs [\d.]+ MiB in all: resident tensors 17\d\.\d MiB/);
      assert.equal(source.reads.length, 2, 'header and metadata only');
    } finally {
      await file.close();
    }
  });

  testIf(haveSmol(), 'SmolLM2 under a 96 MiB budget: the context is what fits, and memory stays within the plan', async () => {
    const { shim, close } = await open(SMOL, { memoryBudget: 96 * MiB, lruCapacity: 4, kvCache: 'f16' }, await freshWasm());
    try {
      const plan = shim.stats().memoryPlan;
      assert.ok(plan.total <= 96 * MiB, JSON.stringify(plan));
      assert.equal(shim.contextLength, plan.context);
      assert.equal(shim.info().contextLength, plan.context);
      // The default explicit prefill window (512 positions, 11.25 MiB in f16) is counted too.
      assert.ok(plan.context >= 768 && plan.prefillWindows === 512 * 30 * 2 * 192 * 2, JSON.stringify(plan));
      // The KV cache is allocated up front.
      assert.equal(shim.stats().kvCacheBytes, plan.kvCache);
      // A long prompt (prefilled in chunks of 256), a constraint and a long generation.
      const long = 'Here is a list: ' + Array.from({ length: 120 }, (_, i) => `item ${i}`).join(', ');
      const chunked = await shim.generateText(long, { maxTokens: 16, coltrane: { preset: 'balanced' } });
      assert.ok(chunked.report.prefillTokens > 256, `prefill ${chunked.report.prefillTokens}`);
      assert.equal(shim.stats().generation.prefillTokens, chunked.report.prefillTokens);
      await shim.generateText(CHAT, { maxTokens: 256, ignoreEos: true });
      // A full prefill window, used by a generation.
      const w = await shim.createPrefillWindow(new Uint32Array(512).fill(28));
      await shim.generate(new Uint32Array(520).fill(28), 8, { prefillWindow: w.id });
      assert.equal(shim.stats().generation.prefix.status, 'hit');
      const s = shim.stats();
      assert.ok(s.wasmMemoryBytes <= plan.total, `wasm ${s.wasmMemoryBytes} > plan ${plan.total}`);
      // A prompt longer than the context that fits is refused.
      const tooLong = new Uint32Array(plan.context + 1).fill(28);
      await assert.rejects(shim.generate(tooLong, 1), /exceeds the context length/);
    } finally {
      await close();
    }
  });

  test('options the JS side lets through are checked in Rust', async () => {
    const source = new BufferKnotSource(readFileSync(TINY));
    await assert.rejects(HostShim.open(source, { prefixWindows: 65 }), /prefixWindows must be an integer in \[0, 64\], got 65/);
    await assert.rejects(HostShim.open(source, { memoryBudget: 1000 }), /does not fit the memory budget of 1000 bytes/);
  });

  testIf(haveSmol(), 'the f16 KV cache takes half the bytes and keeps the greedy tokens', async () => {
    const results = [];
    for (const kvCache of ['f32', 'f16']) {
      const { shim, close } = await open(SMOL, { lruCapacity: 30, kvCache });
      try {
        const r = await shim.generateText(CHAT, { maxTokens: 24 });
        results.push({ text: r.text, kv: shim.stats().kvCacheBytes });
      } finally {
        await close();
      }
    }
    assert.equal(results[0].text, results[1].text);
    assert.equal(results[0].kv, 2 * results[1].kv);
  });

  testIf(haveSmol(), 'a second turn reuses the first: x-knot-prefill hit, and the tokens of a cold run', async () => {
    const { shim, close } = await open(SMOL, { lruCapacity: 30, kvCache: 'f16', maxBatch: 16 });
    const cold = await open(SMOL, { lruCapacity: 30, kvCache: 'f16' });
    try {
      const first = await shim.generateText(CHAT, { maxTokens: 32, reusePrefix: true });
      assert.equal(first.prefix.status, 'miss');
      const turn2 = [...CHAT, { role: 'assistant', content: first.text }, { role: 'user', content: 'And of Italy?' }];
      const warm = await shim.generateText(turn2, { maxTokens: 32, reusePrefix: true });
      const p = warm.prefix;
      assert.equal(p.status, 'hit');
      assert.ok(p.reused > 40 && p.prefilled < 20, JSON.stringify(p));
      // The whole of the first turn's prompt was reused, and only the rest prefilled.
      assert.ok(p.reused >= first.promptTokens, `${p.reused} of ${first.promptTokens}`);
      assert.equal(warm.report.prefillTokens, p.prefilled);
      assert.deepEqual(warm.report.prefix, p);
      assert.deepEqual(shim.stats().generation.prefix, p);
      assert.equal(shim.stats().prefixReuse.hits, 1);
      const again = await cold.shim.generateText(turn2, { maxTokens: 32 });
      assert.equal(warm.text, again.text);
      assert.deepEqual(Array.from(warm.tokens), Array.from(again.tokens));
      // Another conversation does not match the window.
      // Another conversation shares only the template's opening with the one kept: the tokens
      // they share are reused, and it says mismatch.
      const other = await shim.generateText([{ role: 'user', content: 'Name a colour.' }], { maxTokens: 4, reusePrefix: true });
      assert.equal(other.prefix.status, 'mismatch');
      assert.equal(shim.stats().prefixReuse.mismatches, 1);
      await assert.rejects(shim.generateText(CHAT, { reusePrefix: true, continue: true }), /reusePrefix must be false with continue/);
    } finally {
      await close();
      await cold.close();
    }
  });

  testIf(haveSmol(), 'streamTokens gives ids, text and the finish reason; leaving early ends the generation', async () => {
    const { shim, close } = await open(SMOL, { lruCapacity: 2 });
    try {
      const events = [];
      for await (const e of shim.streamTokens(CHAT, { maxTokens: 64 })) events.push(e);
      const last = events.at(-1);
      assert.deepEqual([last.finishReason, last.text], ['stop', '']);
      assert.equal(events.map((e) => e.text).join(''), 'The capital of France is Paris.');
      const whole = await shim.generateText(CHAT, { maxTokens: 64 });
      assert.deepEqual(events.slice(0, -1).map((e) => e.id), Array.from(whole.tokens));
      // From token ids, left after three tokens: nothing stays busy, no read is in flight.
      const ids = shim.encode(shim.applyChatTemplate(CHAT));
      let n = 0;
      for await (const e of shim.streamTokens(ids, { maxTokens: 64 })) {
        assert.equal(typeof e.id, 'number');
        if (++n === 3) break;
      }
      assert.equal((await shim.generateText(CHAT, { maxTokens: 64 })).text, whole.text);
    } finally {
      await close();
    }
  });

  testIf(haveSmol(), 'stallMs: nothing taken back while steps progress; a step stalled on a hung read is taken back and the next generation is right', async () => {
    const file = await FileKnotSource.open(SMOL);
    let hang = false;
    const source = {
      size: file.size,
      rangeGet: (start, end) => (hang ? new Promise(() => {}) : file.rangeGet(start, end)),
    };
    const shim = await HostShim.open(source, { lruCapacity: 1, readTimeoutMs: 0, stallMs: 300 });
    try {
      const want = (await shim.generateText(CHAT, { maxTokens: 64 })).text;
      assert.equal(want, 'The capital of France is Paris.');
      // Steps that progress (every layer read from the file, ~10 ms each) are never taken back.
      assert.equal(shim.stats().queue.reclaimed, 0);
      hang = true;
      const stuck = shim.generateText(CHAT, { maxTokens: 8 });
      const failed = stuck.then(() => 'resolved', (e) => e.name);
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(shim.stats().queue.busy, true);
      // The next generation waits its turn; past stallMs the stalled step is taken back (its
      // read abandoned), its generation fails, and the next one runs.
      hang = false;
      const t0 = Date.now();
      const next = await shim.generateText(CHAT, { maxTokens: 64 });
      assert.equal(next.text, want);
      assert.ok(Date.now() - t0 >= 200, `answered after ${Date.now() - t0} ms`);
      assert.equal(await failed, 'AbortError');
      assert.equal(shim.stats().queue.reclaimed, 1);
      assert.deepEqual(shim.sequences, { active: 0, waiting: 0 });
      // abort() with nothing running changes nothing.
      shim.abort();
      assert.equal((await shim.generateText(CHAT, { maxTokens: 64 })).text, want);
    } finally {
      await shim.dispose();
      await file.close();
    }
  });
});
