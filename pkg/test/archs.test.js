// The qwen2, qwen3 and gemma3 forward passes through the wasm package: tiny random models (GGUF
// and safetensors conversions) must give HF's greedy tokens, as they do natively.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from './harness.js';
import { FileKnotSource, HostShim } from '../src/node.js';
import { ROOT } from './support.js';

describe('qwen2, qwen3 and gemma3 through the wasm package', () => {
  for (const arch of ['qwen2', 'qwen3', 'gemma3']) {
    test(`${arch}: greedy tokens equal the HF reference from both conversions`, async () => {
      const { cases } = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny/${arch}-f32.json`, 'utf8'));
      for (const file of [`${arch}-f32.knot`, `${arch}-f32-hf.knot`]) {
        const source = await FileKnotSource.open(`${ROOT}tests/fixtures/tiny/${file}`);
        const shim = await HostShim.open(source, { lruCapacity: 2 });
        try {
          assert.equal(shim.info().architecture, arch);
          for (const c of cases) {
            const got = Array.from(await shim.generate(c.prompt_ids, c.greedy_ids.length));
            // Shorter only when the model's end-of-text id ended it.
            assert.ok(got.length >= 1);
            assert.deepEqual(got, c.greedy_ids.slice(0, got.length), `${file} ${c.name}`);
          }
        } finally {
          shim.dispose();
          await source.close();
        }
      }
    });
  }
});
