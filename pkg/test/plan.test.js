// planStations through the package: the index read from a source (two small reads), the plan
// from Rust (crates/host/src/station/plan.rs, tested there in depth), its errors coded.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { BufferKnotSource, FileKnotSource, planStations } from '../src/node.js';
import { SMOL, TINY, haveSmol } from './support.js';

const MiB = 2 ** 20;

test('planStations: a layout from the index alone, and coded errors', async () => {
  const bytes = new Uint8Array(readFileSync(TINY));
  let reads = 0;
  const inner = new BufferKnotSource(bytes);
  const source = { size: inner.size, rangeGet: (s, e) => { reads++; return inner.rangeGet(s, e); } };
  const plan = await planStations(source, { memoryBudget: 64 * MiB });
  assert.deepEqual([plan.layers, plan.heads, plan.budget, plan.context], [1, 1, 64 * MiB, 128]);
  assert.deepEqual(plan.stations.map((s) => s.kind), ['layers', 'head', 'coordinator']);
  assert.deepEqual(plan.stations[0].layers, [0, 2]);
  assert.deepEqual(plan.stations[1].rows, [0, 256]);
  for (const s of plan.stations) {
    assert.equal(s.total, s.weights + s.tokenizer + s.kvCache + s.activations + s.logits + s.overhead);
  }
  assert.equal(reads, 2, 'the header and the metadata, nothing else');
  await assert.rejects(planStations(source, { memoryBudget: MiB }), (e) => e.code === 'over_budget' && /the coordinator alone needs/.test(e.message));
  await assert.rejects(planStations(source, {}), (e) => e.code === 'invalid_option' && /memoryBudget/.test(e.message));
  await assert.rejects(planStations(source, { memoryBudget: MiB, lruCapacity: 4 }), (e) => e.code === 'invalid_option' && /unknown option 'lruCapacity'/.test(e.message));
  await assert.rejects(planStations(source, 'x'), (e) => e.code === 'invalid_argument');
  await assert.rejects(planStations({}, { memoryBudget: MiB }), (e) => e.code === 'invalid_argument');
});

test('planStations: SmolLM2 at 96 MiB, f16, one conversation: 2 layer + 1 head stations', { skip: !haveSmol() }, async () => {
  const file = await FileKnotSource.open(SMOL);
  try {
    const plan = await planStations(file, { memoryBudget: 96 * MiB, kvCache: 'f16', maxConversations: 1 });
    assert.deepEqual([plan.layers, plan.heads], [2, 1]);
    assert.deepEqual(plan.stations.filter((s) => s.kind === 'layers').map((s) => s.layers), [[0, 16], [16, 30]]);
    assert.ok(plan.stations.every((s) => s.total <= 96 * MiB));
  } finally {
    await file.close();
  }
});
