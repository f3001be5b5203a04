// Gemma-3-270M (gemma3 architecture, Q4_K/Q5_0/Q6_K weights, SentencePiece vocabulary of 262144)
// through the wasm package: greedy parity with the HF reference (with and without speculative
// decoding), and the tokenizer in wasm.
// Skipped without the model unless KNOT_REQUIRE_MODELS is set (then it fails).
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { describe, testIf } from './harness.js';
import { FileKnotSource, HostShim } from '../src/node.js';
import { ROOT } from './support.js';

const GEMMA = process.env.KNOT_GEMMA3 ?? `${ROOT}models/gemma-3-270m.knot`;
const present = existsSync(GEMMA);
if (!present && process.env.KNOT_REQUIRE_MODELS) {
  throw new Error(`${GEMMA} is missing and KNOT_REQUIRE_MODELS is set (run scripts/prepare-model.sh --all)`);
}
const CASES = JSON.parse(readFileSync(`${ROOT}tests/fixtures/gemma3-270m.json`, 'utf8')).cases;
const TOKENIZER_CASES = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tokenizer/gemma3.json`, 'utf8')).cases;

describe('Gemma-3-270M through the wasm package', () => {
  testIf(present, 'greedy tokens equal the HF reference (16 tokens, including a prompt past the 512 window)', async () => {
    const source = await FileKnotSource.open(GEMMA);
    const shim = await HostShim.open(source, { lruCapacity: 18 });
    try {
      let verified = 0;
      for (const c of CASES) {
        const got = Array.from(await shim.generate(c.prompt_ids, 16));
        assert.deepEqual(got, c.greedy_ids.slice(0, got.length), `case ${c.name}`);
        assert.ok(got.length >= 1);
        // Speculative decoding: the same tokens (its verify passes are bit-identical to steps).
        const spec = Array.from(await shim.generate(c.prompt_ids, 16, { draftMode: { ngram: 2, adaptive: false, maxDraft: 4 } }));
        assert.deepEqual(spec, got, `case ${c.name} with draftMode`);
        verified += shim.stats().generation.verifyPasses;
      }
      assert.ok(verified > 0, 'some draft was verified');
      // The SentencePiece tokenizer inside wasm: ids identical to HF.
      for (const t of TOKENIZER_CASES.filter((x) => x.text !== undefined && x.ids !== undefined).slice(0, 60)) {
        const ids = Array.from(shim.encode(t.text));
        // encode adds BOS when the model asks for it; the fixtures have no special tokens added.
        const body = ids[0] === CASES[0].prompt_ids[0] && t.ids[0] !== ids[0] ? ids.slice(1) : ids;
        assert.deepEqual(body, t.ids, `encode ${JSON.stringify(t.text)}`);
      }
    } finally {
      shim.dispose();
      await source.close();
    }
  });
});
