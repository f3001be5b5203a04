// The real-model test of the Bun and Deno subsets (package.json test:bun, test:deno): SmolLM2's
// greedy tokens on every reference prompt. Not a *.test.js file: Node runs the same test in
// smollm2.test.js with the rest of the suite.
import { describe, testIf } from './harness.js';
import { haveSmol } from './support.js';
import { GREEDY_ON_REFERENCE, greedyOnReference } from './smollm2-greedy.js';

describe('SmolLM2 through the wasm package (the real-model smoke test)', () => {
  testIf(haveSmol(), GREEDY_ON_REFERENCE, greedyOnReference);
});
