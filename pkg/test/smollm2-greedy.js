// SmolLM2's greedy tokens through the wasm package, equal to the reference (which the native
// engine matches) on every reference prompt: a test of smollm2.test.js (Node) and the one
// real-model test of the Bun and Deno subsets (smoke.js).
import assert from 'node:assert/strict';
import { FileKnotSource, HostShim } from '../src/node.js';
import { SMOL, SMOL_CASES, knotLayout } from './support.js';

export const GREEDY_ON_REFERENCE = 'greedy tokens equal the native engine for every reference prompt (24 tokens)';

export async function greedyOnReference() {
  const file = await FileKnotSource.open(SMOL);
  const shim = await HostShim.open(file, { lruCapacity: knotLayout(SMOL).layers.length });
  try {
    for (const c of SMOL_CASES) {
      const n = 24;
      const got = Array.from(await shim.generate(c.prompt_ids, n));
      assert.deepEqual(got, c.greedy_ids.slice(0, got.length), `case ${c.name}`);
      // Shorter only when an end-of-text token ended it.
      assert.ok(got.length === n || [2].includes(got.at(-1)), `case ${c.name}: ${got.length} tokens`);
    }
  } finally {
    shim.dispose();
    await file.close();
  }
}
