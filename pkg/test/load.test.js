// knot-serve under a burst (load.js): 48 requests at once on 127.0.0.1 — a quarter of the streams
// left mid-stream, some malformed — each answered or refused with 429 and retry-after, no 5xx,
// nothing hanging; afterwards nothing runs or waits, the KV caches are within the memory plan, and
// the next request is answered as it would be on a fresh server.
import assert from 'node:assert/strict';
import { after, before, describe, testIf } from './harness.js';
import { burst, judge } from './load.js';
import { post, startServer } from './servers.js';
import { ROOT, SMOL, haveSmol, sleep } from './support.js';

const BIN = `${ROOT}pkg/bin/knot-serve.js`;

describe('knot-serve under load', () => {
  let server;
  before(async () => {
    if (!haveSmol()) return;
    server = await startServer(process.execPath, [BIN, SMOL, '--port', '0', '--model-id', 'm', '--max-context', '1024',
      '--memory-budget-mb', '512', '--parallel', '4', '--queue', '2']);
  });
  after(() => server?.child.kill());

  testIf(haveSmol(), '48 requests at once: answered or 429, malformed refused, no 5xx, back to idle within the plan', async () => {
    const fresh = await post(server.url, '/v1/completions', { model: 'm', prompt: 'The sea is', max_tokens: 6, temperature: 0 });
    assert.equal(fresh.status, 200, fresh.text);
    const b = await burst(server.url, { maxTokens: 24 });
    const { found, counts } = judge(b);
    console.log(`knot-serve burst: ${JSON.stringify(counts)}`);
    assert.deepEqual(found, []);
    assert.ok(counts.answered >= 1, `some answered: ${JSON.stringify(counts)}`);
    // The line holds two: the burst is more than it takes.
    assert.ok(counts.refused >= 1, `some refused: ${JSON.stringify(counts)}`);
    assert.ok(counts.malformed === 6);
    // Idle again: nothing running or waiting, the KV caches within the plan.
    let s;
    for (let i = 0; i < 100; i++) {
      s = (await post(server.url, '/stats', undefined, { method: 'GET' })).json;
      if (s.sequences.active === 0 && s.queue.waiting === 0 && !s.queue.busy) break;
      await sleep(50);
    }
    assert.equal(s.sequences.active, 0);
    assert.equal(s.queue.waiting, 0);
    assert.ok(s.kvCacheBytes <= s.memoryPlan.kvCache + s.memoryPlan.prefillWindows, `KV ${s.kvCacheBytes} within the plan's ${s.memoryPlan.kvCache}`);
    assert.ok(s.wasmMemoryBytes <= s.memoryPlan.total + 64 * 2 ** 20, `wasm memory ${s.wasmMemoryBytes} near the plan's ${s.memoryPlan.total}`);
    // The server serves as before.
    const again = await post(server.url, '/v1/completions', { model: 'm', prompt: 'The sea is', max_tokens: 6, temperature: 0 });
    assert.equal(again.json.choices[0].text, fresh.json.choices[0].text);
  });
});
