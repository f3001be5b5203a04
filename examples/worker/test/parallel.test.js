// Several requests at once on one isolate (KNOT_MAX_SEQUENCES=4): their generations run
// together, one forward pass per step for all of them, with wrangler.toml's settings otherwise
// (layers streamed from R2 through an LRU, a 96 MiB budget). Each answer equals the native CLI's
// alone; the isolate stays within its memory plan; a client leaving frees its place.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, client, native, post, startLocal, stats } from './support.js';
import { FOUR_ASKS, answerTogether } from '../../../pkg/test/servers.js';

const MiB = 2 ** 20;

test('four requests at once on one isolate: each equals the native CLI alone, within the memory budget', async () => {
  // Four KV caches take the budget: no explicit prefill window beside them.
  const local = await startLocal({ quiet: true, vars: { KNOT_MAX_SEQUENCES: '4', KNOT_PREFILL_WINDOWS: '0' } });
  try {
    const openai = client(local.url);
    const asks = FOUR_ASKS;
    const want = await Promise.all(asks.map((m) => native(m, 24)));
    const answers = await answerTogether(openai, MODEL, asks, 24);
    answers.forEach((a, i) => assert.equal(a, want[i].text, `request ${i}`));
    const s = await stats(local.url);
    console.log(`4 at once: peak ${s.queue.peakActive} at once; wasm memory ${(s.wasmMemoryBytes / MiB).toFixed(1)} MiB, plan ${(s.memoryPlan.total / MiB).toFixed(1)} MiB (KV ${(s.memoryPlan.kvCache / MiB).toFixed(1)} MiB)`);
    assert.ok(s.queue.peakActive >= 2, `generations ran together: peak ${s.queue.peakActive}`);
    assert.equal(s.queue.active, 0);
    assert.ok(s.memoryPlan.total <= 96 * MiB, `plan ${s.memoryPlan.total}`);
    assert.ok(s.wasmMemoryBytes <= 96 * MiB, `wasm memory ${s.wasmMemoryBytes}`);
    // Prefill windows are off while generations run together; a bad request is refused alone.
    assert.equal((await post(local.url, '/prefill/windows', { prompt: 'x' })).status, 404);
    const bad = await post(local.url, '/v1/chat/completions', { model: MODEL, messages: asks[0], temperature: -1 });
    assert.equal(bad.status, 400, bad.text);
    const again = await openai.chat.completions.create({ model: MODEL, messages: asks[0], temperature: 0, max_tokens: 24 });
    assert.equal(again.choices[0].message.content, want[0].text);
  } finally {
    await local.dispose();
  }
});
