// Threads through the wasm package: identity at 1, 2 and 4 threads (threads.js, also run in Bun
// and Deno by smoke.js), Gemma on the one-thread build against the HF reference (its own suite
// runs threaded by default), and bad counts refused by name.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { describe, test, testIf } from './harness.js';
import { FileKnotSource, HostShim } from '../src/node.js';
import { ROOT, TINY, haveSmol } from './support.js';
import { THREADS_IDENTITY, threadsIdentity } from './threads.js';

const GEMMA = process.env.KNOT_GEMMA3 ?? `${ROOT}models/gemma-3-270m.knot`;
const GEMMA_CASES = JSON.parse(readFileSync(`${ROOT}tests/fixtures/gemma3-270m.json`, 'utf8')).cases;

describe('threads', () => {
  testIf(haveSmol(), THREADS_IDENTITY, threadsIdentity);

  testIf(existsSync(GEMMA), 'Gemma-3-270M: greedy tokens equal the HF reference on the one-thread build and at 2 threads', async () => {
    const file = await FileKnotSource.open(GEMMA);
    try {
      for (const threads of [1, 2]) {
        const shim = await HostShim.open(file, { threads, lruCapacity: 18 });
        try {
          for (const c of GEMMA_CASES.slice(0, 2)) {
            const got = Array.from(await shim.generate(c.prompt_ids, 12));
            assert.deepEqual(got, c.greedy_ids.slice(0, got.length), `${threads} threads, case ${c.name}`);
          }
        } finally {
          shim.dispose();
        }
      }
    } finally {
      await file.close();
    }
  });

  test('bad thread counts are refused by name, and the model opens after', async () => {
    const file = await FileKnotSource.open(TINY);
    try {
      for (const threads of [0, 257, 1.5, -2, 'four', null, Infinity]) {
        await assert.rejects(HostShim.open(file, { threads }),
          (e) => e.code === 'invalid_option' && e.param === 'threads' && /threads/.test(e.message), String(threads));
      }
      const shim = await HostShim.open(file, { threads: 2 });
      assert.equal(shim.threads, 2);
      assert.deepEqual(Array.from(await shim.generate([1, 2, 3], 4)).length, 4);
      shim.dispose();
    } finally {
      await file.close();
    }
  });
});
