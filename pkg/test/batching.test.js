// Many generations at once through the wasm package (`maxSequences`): four concurrent
// generations of different prompt lengths, started at different times, one aborted mid-way, each
// equal to the same generation on a one-at-a-time shim — greedy, seeded sampling, MOA and
// COLTRANE, on SmolLM2 and Gemma-3-270M. Then the edges: waiting for a slot, a stream left early
// freeing its slot, a bad request failing alone, `continue` beside others, refused options.
// Skipped without the models unless KNOT_REQUIRE_MODELS is set (then it fails).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, test, testIf } from './harness.js';
import { FileKnotSource, HostShim } from '../src/node.js';
import { ROOT, SMOL, TINY, haveSmol } from './support.js';

const GEMMA = process.env.KNOT_GEMMA3 ?? `${ROOT}models/gemma-3-270m.knot`;
const haveGemma = existsSync(GEMMA);
if (!haveGemma && process.env.KNOT_REQUIRE_MODELS) {
  throw new Error(`${GEMMA} is missing and KNOT_REQUIRE_MODELS is set (run scripts/prepare-model.sh --all)`);
}

const PROMPTS = [
  'The capital of France is',
  'def fibonacci(n):',
  'List three colours:',
  'Once upon a time, in a small village at the edge of a great forest, there lived a woodcutter and his two children. One morning',
];
const OPTIONS = [
  { maxTokens: 10, temperature: 0.8, topP: 0.95, seed: 11 },
  { maxTokens: 10 },
  { maxTokens: 16, coltrane: { preset: 'json' } },
  { maxTokens: 10, moa: true, seed: 5 },
];

/**
 * Four generations on `shim` together: the first two at once, the third after the first token
 * of the first, the fourth after its third token; the second aborted after its fourth token.
 * Returns each one's token ids (the aborted one's up to the abort) and how it ended.
 * @param {HostShim} shim
 */
async function together(shim) {
  const ids = PROMPTS.map((p) => shim.encode(p));
  const tokens = PROMPTS.map(() => /** @type {number[]} */ ([]));
  const abort = new AbortController();
  /** @type {((n: number) => void)[]} */
  const later = [];
  const run = (i) => shim.generateText(ids[i], {
    ...OPTIONS[i],
    signal: i === 1 ? abort.signal : undefined,
    onToken: (t) => {
      tokens[i].push(t.id);
      if (i === 0) for (const f of later) f(tokens[0].length);
      if (i === 1 && tokens[1].length === 4) abort.abort(new Error('enough'));
    },
  });
  const started = [run(0), run(1)];
  started.push(new Promise((resolve) => later.push((n) => n === 1 && resolve(run(2)))));
  started.push(new Promise((resolve) => later.push((n) => n === 3 && resolve(run(3)))));
  const settled = await Promise.allSettled(started);
  return { tokens, settled };
}

/** @param {string} path @param {string} what */
async function checkModel(path, what) {
  const file = await FileKnotSource.open(path);
  const many = await HostShim.open(file, { maxSequences: 4 });
  const one = await HostShim.open(file, {});
  try {
    const { tokens, settled } = await together(many);
    assert.equal(settled[1].status, 'rejected', `${what}: the aborted one rejects`);
    assert.equal(/** @type {any} */ (settled[1]).reason.message, 'enough');
    for (const i of [0, 2, 3]) assert.equal(settled[i].status, 'fulfilled', `${what}: generation ${i}`);
    for (let i = 0; i < PROMPTS.length; i++) {
      /** @type {number[]} */
      const alone = [];
      await one.generateText(one.encode(PROMPTS[i]), { ...OPTIONS[i], onToken: (t) => alone.push(t.id) });
      const want = i === 1 ? alone.slice(0, 4) : alone;
      assert.deepEqual(tokens[i], want, `${what}: generation ${i} equals it alone`);
    }
    // The JSON one is JSON, and every slot is free again.
    assert.doesNotThrow(() => JSON.parse(/** @type {any} */ (settled[2]).value.text));
    assert.deepEqual(many.sequences, { active: 0, waiting: 0 });
  } finally {
    many.dispose();
    one.dispose();
    await file.close();
  }
}

describe('many generations at once (maxSequences)', () => {
  testIf(haveSmol(), 'SmolLM2: together equal alone (greedy, seeded, MOA, COLTRANE; staggered; one aborted)', async () => {
    await checkModel(SMOL, 'SmolLM2');
  });

  testIf(haveGemma, 'Gemma-3-270M: together equal alone', async () => {
    await checkModel(GEMMA, 'Gemma');
  });

  test('waiting for a slot, a stream left early, a bad request alone, continue, refused options', async () => {
    const file = await FileKnotSource.open(TINY);
    try {
      for (const maxSequences of [0, 65, 1.5, 'two']) {
        await assert.rejects(HostShim.open(file, { maxSequences }), (e) => e.code === 'invalid_option' && /maxSequences/.test(e.message), String(maxSequences));
      }
      // Bad thread counts are refused by name (threads.test.js has the rest).
      for (const threads of [0, 'four']) {
        await assert.rejects(HostShim.open(file, { threads }), (e) => e.code === 'invalid_option' && /threads/.test(e.message), String(threads));
      }
      await (await HostShim.open(file, { threads: 1, maxSequences: 2 })).dispose();
      const shim = await HostShim.open(file, { maxSequences: 2 });
      const one = await HostShim.open(file, {});
      assert.equal(shim.maxSequences, 2);
      assert.equal(one.maxSequences, 1);
      assert.equal(shim.info().maxSequences, 2);
      const opts = { maxTokens: 8, ignoreEos: true };
      const want = [];
      for (const p of [[1, 2, 3], [4, 5], [6]]) want.push(await one.generate(p, 8, {}));
      // Three at once on two slots: the third waits, then runs; all three equal alone.
      const got = await Promise.all([[1, 2, 3], [4, 5], [6]].map((p) => shim.generate(p, 8, {})));
      assert.deepEqual(got, want);
      // A stream left after two tokens frees its slot: the next generations run.
      for await (const _ of shim.streamTokens(Uint32Array.of(1, 2, 3), opts)) break;
      const [bad, good] = await Promise.allSettled([
        shim.generateText(Uint32Array.of(4, 5), { ...opts, temperature: -1 }),
        shim.generate([4, 5], 8, {}),
      ]);
      assert.equal(bad.status, 'rejected');
      assert.equal(/** @type {any} */ (bad).reason.code, 'invalid_option');
      assert.equal(/** @type {any} */ (bad).reason.param, 'temperature');
      assert.deepEqual(/** @type {any} */ (good).value, want[1], 'the good one beside it runs');
      // `continue` appends to the conversation that ended last (here [4, 5] and its tokens), as
      // on a shim running one at a time.
      await one.generate([4, 5], 8, {});
      const continued = await one.generate([1], 4, { continue: true, ignoreEos: true });
      assert.deepEqual(await shim.generate([1], 4, { continue: true, ignoreEos: true }), continued);
      await assert.rejects(shim.generate([1, 999999], 4), (e) => e.code === 'token_out_of_range');
      // An abort before the start, and the shim keeps serving.
      await assert.rejects(shim.generate([1], 4, { signal: AbortSignal.abort() }), (e) => e.name === 'AbortError');
      assert.deepEqual(await shim.generate([6], 8, {}), want[2]);
      assert.deepEqual(shim.sequences, { active: 0, waiting: 0 });
      shim.dispose();
      one.dispose();
    } finally {
      await file.close();
    }
  });
});
