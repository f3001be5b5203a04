// Explicit prefill windows through the wasm package on the tiny fixture: create, get, update,
// delete, list; a generation served from a window gives the cold prefill's tokens bit for bit
// (twice: the window is left as it was); the statuses a generation's report gives (hit, miss,
// mismatch, expired, disabled); the limits; a window's prefill waiting its turn in the line; and
// windows used by generations running together.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from './harness.js';
import { BufferKnotSource, HostShim } from '../src/node.js';
import { TINY } from './support.js';

const BYTES = readFileSync(TINY);
const PROMPT = Uint32Array.from({ length: 24 }, (_, i) => ((i * 37 + 11) % 200) + 3);
/** Token ids: a prompt is ids as a Uint32Array (an array of numbers would be chat messages). */
const ids = (...xs) => Uint32Array.from(xs);
const N = 10;

/** @param {object} [options] */
const open = (options = {}) => HostShim.open(new BufferKnotSource(BYTES), options);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Greedy tokens, through `prefillWindow` when an id is given. */
async function greedy(shim, id) {
  const options = id === undefined ? { ignoreEos: true } : { ignoreEos: true, prefillWindow: id };
  return Array.from(await shim.generate(PROMPT, N, options));
}

describe('explicit prefill windows', () => {
  test('a hit gives the cold tokens, twice; create, get, list, update, delete', async () => {
    const cold = await open();
    const want = await greedy(cold);
    cold.dispose();

    const shim = await open({ prefillWindows: 2, prefillWindowMaxTokens: 20 });
    try {
      const before = Date.now();
      const w = await shim.createPrefillWindow(PROMPT.slice(0, 12));
      assert.equal(typeof w.id, 'string');
      assert.match(w.id, /^pw-1-[0-9a-f]{8}$/);
      assert.equal(w.tokens, 12);
      assert.equal(w.replaced, null);
      assert.ok(w.expiresAt >= before + 15000 && w.expiresAt <= Date.now() + 15000, `${w.expiresAt}`);
      assert.deepEqual(shim.prefillWindow(w.id), { id: w.id, tokens: 12, expiresAt: w.expiresAt });
      assert.deepEqual(shim.prefillWindows().map((x) => x.id), [w.id]);

      for (let i = 0; i < 2; i++) {
        assert.deepEqual(await greedy(shim, w.id), want);
        const p = shim.stats().generation.prefix;
        assert.deepEqual(p, { status: 'hit', reused: 12, prefilled: 12, window: 0, kind: 'explicit', id: w.id });
      }
      const s = shim.stats().prefillWindows;
      assert.equal(s.count, 1);
      assert.equal(s.max, 2);
      assert.equal(s.tokens, 12);
      assert.ok(s.kvBytes > 0);

      // Extended with the tokens that follow (only those are prefilled), then refreshed.
      await assert.rejects(shim.updatePrefillWindow(w.id, { prompt: ids(7, 7, 7) }), { code: 'invalid_argument' });
      const longer = await shim.updatePrefillWindow(w.id, { prompt: PROMPT.slice(0, 18) });
      assert.deepEqual(longer, { id: w.id, tokens: 18, expiresAt: w.expiresAt });
      assert.deepEqual(await greedy(shim, w.id), want);
      assert.equal(shim.stats().generation.prefix.reused, 18);
      const refreshed = await shim.updatePrefillWindow(w.id, { ttlMs: 60000 });
      assert.ok(refreshed.expiresAt > w.expiresAt);
      await assert.rejects(shim.updatePrefillWindow('pw-0-none', { ttlMs: 1 }), { code: 'not_found' });
      await assert.rejects(shim.updatePrefillWindow(w.id, { ttl: 1 }), { code: 'invalid_option' });

      // Over the limit: named.
      await assert.rejects(shim.createPrefillWindow(PROMPT.slice(0, 21)),
        (err) => err.code === 'invalid_argument' && /prefillWindowMaxTokens = 20/.test(err.message));

      // The least recently used is replaced when the count is full.
      const b = await shim.createPrefillWindow(ids(1, 2, 3));
      assert.equal(b.replaced, null);
      await greedy(shim, w.id);
      const c = await shim.createPrefillWindow(ids(4, 5));
      assert.equal(c.replaced, b.id);
      assert.equal(shim.prefillWindow(b.id), null);

      assert.equal(shim.deletePrefillWindow(w.id), true);
      assert.equal(shim.deletePrefillWindow(w.id), false);
      assert.equal(shim.prefillWindow(w.id), null);
      assert.deepEqual(shim.prefillWindows().map((x) => x.id), [c.id]);
    } finally {
      shim.dispose();
    }
  });

  test('miss, mismatch and expired prefill cold', async () => {
    const shim = await open({ prefillWindows: 3 });
    try {
      const want = await greedy(shim);
      assert.deepEqual(await greedy(shim, 'pw-9-00000000'), want);
      assert.equal(shim.stats().generation.prefix.status, 'miss');

      const other = await shim.createPrefillWindow(ids(9, 9, 9));
      assert.deepEqual(await greedy(shim, other.id), want);
      assert.deepEqual(shim.stats().generation.prefix, {
        status: 'mismatch', reused: 0, prefilled: PROMPT.length, window: 0, kind: 'explicit', id: other.id,
      });

      const brief = await shim.createPrefillWindow(PROMPT.slice(0, 8), { ttlMs: 1 });
      await sleep(5);
      assert.deepEqual(await greedy(shim, brief.id), want);
      assert.equal(shim.stats().generation.prefix.status, 'expired');
      assert.equal(shim.prefillWindow(brief.id), null);
      await assert.rejects(shim.createPrefillWindow(ids(1), { ttlMs: -1 }), { code: 'invalid_option', param: 'ttlMs' });
      await assert.rejects(shim.generate(PROMPT, 2, { prefillWindow: other.id, continue: true }),
        { code: 'invalid_option', param: 'prefillWindow' });
    } finally {
      shim.dispose();
    }
  });

  test('prefillWindows: 0 disables them', async () => {
    const shim = await open({ prefillWindows: 0 });
    try {
      const want = await greedy(shim);
      assert.deepEqual(await greedy(shim, 'pw-1-00000000'), want);
      assert.equal(shim.stats().generation.prefix.status, 'disabled');
      await assert.rejects(shim.createPrefillWindow(ids(1, 2)), { code: 'disabled' });
      assert.throws(() => shim.prefillWindow('x'), { code: 'disabled' });
      assert.throws(() => shim.deletePrefillWindow('x'), { code: 'disabled' });
      assert.equal(shim.stats().memoryPlan, null);
    } finally {
      shim.dispose();
    }
  });

  test('creating a window waits its turn at a step boundary; the generations beside it go on', async () => {
    const shim = await open();
    try {
      const cold = await greedy(shim);
      const twenty = Array.from(await shim.generate(PROMPT, 20, { ignoreEos: true }));
      // Asked while a generation runs: it is not refused, it runs between two of its steps.
      const running = shim.generate(PROMPT, 20, { ignoreEos: true });
      const first = await shim.createPrefillWindow(ids(1, 2));
      assert.deepEqual(Array.from(await running), twenty);
      // A stream waiting for its consumer does not give way to a window's prefill (only to a
      // generation waiting for its slot): it goes on where it was.
      const stream = shim.streamTokens(PROMPT, { maxTokens: N, ignoreEos: true });
      const got = [(await stream.next()).value.id];
      const w = await shim.createPrefillWindow(ids(1, 2));
      assert.equal(w.replaced, first.id);
      for await (const t of stream) got.push(t.id);
      assert.deepEqual(got, cold);
      assert.equal(shim.stats().queue.superseded, 0);
      // Answers while another call has the model.
      const pending = shim.generate(PROMPT, 5);
      assert.deepEqual(shim.prefillWindow(w.id), { id: w.id, tokens: 2, expiresAt: w.expiresAt });
      await pending;
      assert.throws(() => shim.prefillWindow(3), { code: 'invalid_argument' });
    } finally {
      shim.dispose();
    }
  });

  test('with maxSequences, generations running together each use their window', async () => {
    const cold = await open();
    const want = await greedy(cold);
    const other = Uint32Array.from([9, 8, 7, ...PROMPT.slice(3)]);
    const wantOther = Array.from(await cold.generate(other, N, { ignoreEos: true }));
    cold.dispose();
    const shim = await open({ maxSequences: 2, prefillWindows: 2 });
    try {
      const a = await shim.createPrefillWindow(PROMPT.slice(0, 16));
      const b = await shim.createPrefillWindow(other.slice(0, 10));
      const [ra, rb] = await Promise.all([
        shim.generateText(PROMPT, { maxTokens: N, ignoreEos: true, prefillWindow: a.id }),
        shim.generateText(other, { maxTokens: N, ignoreEos: true, prefillWindow: b.id }),
      ]);
      assert.deepEqual(Array.from(ra.tokens), want);
      assert.deepEqual(Array.from(rb.tokens), wantOther);
      assert.deepEqual([ra.prefix.status, ra.prefix.reused, ra.prefix.id], ['hit', 16, a.id]);
      assert.deepEqual([rb.prefix.status, rb.prefix.reused, rb.prefix.id], ['hit', 10, b.id]);
      assert.equal(shim.stats().queue.peakActive, 2);
    } finally {
      shim.dispose();
    }
  });
});
