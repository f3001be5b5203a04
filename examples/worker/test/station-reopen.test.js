// A Durable Object that workerd dropped while idle and constructed again in the same isolate
// takes the part this isolate already opened (stations.js): it neither reads the part from R2
// again nor holds it twice in wasm memory. workerd cannot be made to drop an object on demand,
// so the two instances are built here, in one Node isolate, over an R2-shaped bucket on the tiny
// fixture knot.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { wasmMemoryBytes } from 'knot-wasm';
import { LayerStation } from '../src/stations.js';
import { REPO } from './support.js';

const KEY = 'tiny.knot';
const bytes = readFileSync(join(REPO, 'tests/fixtures/tiny/llama-f16.knot'));

/** The R2 binding's `get` with a range, over bytes in memory, counting its reads. */
function bucket() {
  const b = {
    reads: 0,
    async get(key, { range }) {
      if (key !== KEY) return null;
      b.reads++;
      const part = bytes.subarray(range.offset, range.offset + range.length);
      return { arrayBuffer: async () => part.buffer.slice(part.byteOffset, part.byteOffset + part.byteLength) };
    },
  };
  return b;
}

const stats = async (station) => (await station.fetch(new Request('https://station/stats?layers=0-1'))).json();

test('a station constructed again in the same isolate takes the part already opened', async () => {
  const models = bucket();
  const env = { MODELS: models, MODEL_KEY: KEY };
  const first = new LayerStation({}, env);
  const a = await stats(first);
  assert.deepEqual(a.part, [0, 1]);
  const reads = models.reads;
  assert.ok(reads > 0);
  const memory = wasmMemoryBytes();

  const again = new LayerStation({}, env);
  const b = await stats(again);
  assert.deepEqual(b.part, [0, 1]);
  assert.equal(b.weightBytes, a.weightBytes);
  assert.equal(models.reads, reads, 'the part was read again');
  assert.equal(wasmMemoryBytes(), memory, 'the part was opened twice');

  // Another part is a station of its own.
  const other = new LayerStation({}, env);
  const c = await (await other.fetch(new Request('https://station/stats?layers=1-2'))).json();
  assert.deepEqual(c.part, [1, 2]);
  assert.ok(models.reads > reads);
});
