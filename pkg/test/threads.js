// Output identical at every thread count through the wasm package: the one-thread build at 1,
// the threaded build (dist/wasm-threads, workers started by the package) at 2 and 4. A test of
// threads.test.js (Node) and of the Bun and Deno subsets (smoke.js).
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { FileKnotSource, HostShim } from '../src/node.js';
import { SMOL, SMOL_CASES, knotLayout } from './support.js';

export const THREADS_IDENTITY = 'SmolLM2: greedy (= the HF reference), seeded and MOA tokens identical at 1, 2 and 4 threads; the pool swapped under an open model';

const SAMPLED = { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, seed: 42 };

export async function threadsIdentity() {
  const file = await FileKnotSource.open(SMOL);
  const layers = knotLayout(SMOL).layers.length;
  try {
    /** @type {Map<string, number[]>} what 1 thread gives */
    const want = new Map();
    for (const threads of [1, 2, 4]) {
      const shim = await HostShim.open(file, { threads, lruCapacity: layers });
      try {
        assert.equal(shim.threads, threads);
        assert.equal(shim.wasmBuild, threads === 1 ? 'single' : 'threads');
        for (const c of SMOL_CASES.slice(0, 3)) {
          const got = Array.from(await shim.generate(c.prompt_ids, 16));
          assert.deepEqual(got, c.greedy_ids.slice(0, got.length), `${threads} threads, case ${c.name}`);
        }
        const ids = SMOL_CASES[0].prompt_ids;
        for (const [name, options] of [['seeded', SAMPLED], ['moa', { moa: { k: 4, temperatureSpread: 0.6 }, seed: 7 }]]) {
          const got = Array.from(await shim.generate(ids, 16, options));
          if (!want.has(name)) want.set(name, got);
          assert.deepEqual(got, want.get(name), `${name} at ${threads} threads`);
        }
      } finally {
        shim.dispose();
      }
    }
    // A second model asking for another count swaps the instance's pool under the first.
    const a = await HostShim.open(file, { threads: 2, lruCapacity: layers });
    const b = await HostShim.open(file, { threads: 4, lruCapacity: layers });
    try {
      assert.equal(a.threads, 4);
      assert.deepEqual(Array.from(await a.generate(SMOL_CASES[0].prompt_ids, 16, SAMPLED)), want.get('seeded'));
    } finally {
      a.dispose();
      b.dispose();
    }
    // Unasked: every core up to 8, on the threaded build when that is more than one.
    // (Deno: one thread unless asked, see node.js.)
    const cores = 'Deno' in globalThis ? 1 : Math.min(availableParallelism(), 8);
    const auto = await HostShim.open(file, { lruCapacity: 1 });
    try {
      assert.equal(auto.threads, cores);
      assert.equal(auto.wasmBuild, cores > 1 ? 'threads' : 'single');
    } finally {
      auto.dispose();
    }
  } finally {
    await file.close();
  }
}
