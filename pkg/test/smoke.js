// The real-model tests of the Bun and Deno subsets (package.json test:bun, test:deno): SmolLM2's
// greedy tokens on every reference prompt, and identity at 1, 2 and 4 threads (the threaded
// build's workers in these runtimes). Not a *.test.js file: Node runs the same tests in
// smollm2.test.js and threads.test.js with the rest of the suite.
import { describe, testIf } from './harness.js';
import { haveSmol } from './support.js';
import { GREEDY_ON_REFERENCE, greedyOnReference } from './smollm2-greedy.js';
import { THREADS_IDENTITY, threadsIdentity } from './threads.js';

describe('SmolLM2 through the wasm package (the real-model smoke test)', () => {
  testIf(haveSmol(), GREEDY_ON_REFERENCE, greedyOnReference);
  testIf(haveSmol(), THREADS_IDENTITY, threadsIdentity);
});
