// The single Worker's open policy in workerd: without KNOT_STREAM_LAYERS every layer is
// resident. A model that does not fit the budget that way is refused with an OpenAI-shaped
// error naming the split across stations that fits (and streaming, with its cost), by every
// route that needs the model, and the Worker keeps serving; one that fits is read once and then
// decodes with no R2 read at all. The split the error names runs, each isolate within its plan.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FileKnotSource, planStations } from 'knot-wasm';
import { MODEL, client, native, post, startLocal, stats } from './support.js';
import { modelFile, startStations } from '../scripts/local.mjs';

const CAPITAL = [{ role: 'user', content: 'What is the capital of France? Answer in one sentence.' }];
/** Every layer resident: wrangler.toml's streaming and LRU settings taken away. */
const RESIDENT = { KNOT_STREAM_LAYERS: '0', KNOT_LRU_CAPACITY: '' };

describe('every layer resident', () => {
  test('over the budget: every model route answers the over_budget error naming the split; the Worker keeps serving', async () => {
    const local = await startLocal({ quiet: true, vars: { ...RESIDENT, KNOT_MEMORY_BUDGET_MB: '96' } });
    try {
      const check = (status, json) => {
        assert.equal(status, 500, JSON.stringify(json));
        const { message, type, code } = json.error;
        assert.equal(code, 'over_budget');
        assert.equal(type, 'server_error');
        assert.match(message, new RegExp(`^${MODEL} does not fit KNOT_MEMORY_BUDGET_MB=96 with every layer resident: `));
        // The host's plan at its smallest context, with the numbers.
        assert.match(message, /at its smallest context of 256 positions it needs \d+\.\d MiB in all/);
        // The split that fits the same budget, at this Worker's settings.
        assert.match(message, /split it across stations: 2 layer \+ 1 head stations fit 96 MiB each \(the largest takes \d+\.\d MiB; planned for 2048 positions, an f16 KV cache and 1 conversation per layer station/);
        assert.match(message, /or set KNOT_STREAM_LAYERS=1 to stream layers from R2 on every token \(up to 30 R2 reads per token\)\.$/);
        return message;
      };
      const health = await fetch(`${local.url}/health`);
      const first = check(health.status, await health.json());
      console.log(`the error: ${first}`);
      const models = await fetch(`${local.url}/v1/models`);
      check(models.status, await models.json());
      const chat = await post(local.url, '/v1/chat/completions', { model: MODEL, messages: CAPITAL, max_tokens: 4 });
      check(chat.status, chat.json);
      const completion = await post(local.url, '/v1/completions', { model: MODEL, prompt: 'Hi', max_tokens: 4 });
      check(completion.status, completion.json);
      // The official client sees OpenAI's error.
      await assert.rejects(
        client(local.url).chat.completions.create({ model: MODEL, messages: CAPITAL, max_tokens: 4 }),
        (e) => e.status === 500 && e.code === 'over_budget' && /2 layer \+ 1 head stations/.test(e.message),
      );
      // Nothing was kept open: /stats (which needs the model) answers the same; an unknown route
      // needs none and answers 404 as always; the next request tries the open again and gets
      // the same answer.
      const st = await fetch(`${local.url}/stats`);
      check(st.status, await st.json());
      const nowhere = await fetch(`${local.url}/nowhere`);
      assert.equal(nowhere.status, 404);
      assert.equal((await nowhere.json()).error.code, 'unknown_url');
      const again = await fetch(`${local.url}/health`);
      assert.equal(check(again.status, await again.json()), first);
    } finally {
      await local.dispose();
    }
  });

  test('within the budget: read once, then tokens without R2 reads, output equal to the native CLI', async () => {
    // 163 MiB planned with every layer resident at 2048 positions, and 11.25 MiB for the prefill
    // window (more than a deployed isolate holds; workerd here has no such limit): the path a
    // model that fits takes.
    const local = await startLocal({ quiet: true, vars: { ...RESIDENT, KNOT_MEMORY_BUDGET_MB: '182' } });
    try {
      const openai = client(local.url);
      const want = await native(CAPITAL, 48);
      const r = await openai.chat.completions.create({ model: MODEL, messages: CAPITAL, temperature: 0, max_tokens: 48 });
      assert.equal(r.choices[0].message.content, want.text);
      const s1 = await stats(local.url);
      assert.equal(s1.residentLayers, 30, JSON.stringify(s1));
      assert.ok(s1.memoryPlan.total <= 182 * 2 ** 20 && s1.contextLength === 2048, JSON.stringify(s1.memoryPlan));
      const other = [{ role: 'user', content: 'Name three primary colours.' }];
      const r2 = await openai.chat.completions.create({ model: MODEL, messages: other, temperature: 0, max_tokens: 32 });
      assert.equal(r2.choices[0].message.content, (await native(other, 32)).text);
      const s2 = await stats(local.url);
      assert.equal(s2.range_reads, s1.range_reads, 'a generation after the first read from R2');
      assert.equal(s2.bytes_read, s1.bytes_read);
    } finally {
      await local.dispose();
    }
  });

  test('the split it names runs in workerd, every isolate within its plan', async () => {
    // This Worker's settings, as the error plans them: 96 MiB, 2048 positions, f16, one
    // conversation per layer station.
    const file = await FileKnotSource.open(modelFile());
    let plan;
    try {
      plan = await planStations(file, { memoryBudget: 96 * 2 ** 20, maxContext: 2048, kvCache: 'f16', maxConversations: 1 });
    } finally {
      await file.close();
    }
    const local = await startStations({
      layers: plan.layers, heads: plan.heads, vars: { KNOT_KV_CACHE: 'f16', KNOT_STATION_CONVERSATIONS: '1' },
    });
    try {
      const openai = client(local.url);
      const r = await openai.chat.completions.create({ model: MODEL, messages: CAPITAL, temperature: 0, max_tokens: 24 });
      assert.equal(r.choices[0].message.content, (await native(CAPITAL, 24)).text);
      const { stations } = await (await fetch(`${local.url}/stations`)).json();
      const planned = plan.stations.filter((p) => p.kind !== 'coordinator');
      assert.equal(stations.length, planned.length);
      stations.forEach((s, i) => {
        const p = planned[i];
        assert.deepEqual(s.part, p.layers ?? p.rows, JSON.stringify({ s, p }));
        assert.ok(s.wasmMemoryBytes <= p.total, `${s.station}: ${s.wasmMemoryBytes} bytes of wasm, planned ${p.total}`);
        assert.ok(s.weightBytes <= p.weights, JSON.stringify({ s, p }));
      });
      const coordinator = plan.stations.at(-1);
      const c = await stats(local.url);
      assert.ok(c.wasmMemoryBytes <= coordinator.total, `coordinator: ${c.wasmMemoryBytes} > ${coordinator.total}`);
      console.log('planned / measured wasm (MiB):', JSON.stringify([...stations.map((s, i) => [s.station, +(planned[i].total / 2 ** 20).toFixed(1), +(s.wasmMemoryBytes / 2 ** 20).toFixed(1)]),
        ['coordinator', +(coordinator.total / 2 ** 20).toFixed(1), +(c.wasmMemoryBytes / 2 ** 20).toFixed(1)]]));
    } finally {
      await local.dispose();
    }
  });
});
