// The line on its own (src/scheduler.js), over a scripted target: first come first served with
// `slots` sequences at once, one step for all of them; jobs at a boundary, in line order; the
// bounds (429s) and who may pass them; a generation ending alone (abort, consumer leaving, its
// own failure) while the others go on; a stream away while others wait gives way; a stall is
// taken back; request-scoped I/O polls and drains; dispose ends everything.
import assert from 'node:assert/strict';
import { describe, test } from './harness.js';
import { QueueFull, QueueTimeout, SUPERSEDED, Scheduler } from '../src/scheduler.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A promise and its resolver (Node 20 has no Promise.withResolvers). */
function gate() {
  let resolve = () => {};
  const promise = new Promise((r) => { resolve = r; });
  return { promise, resolve };
}

/**
 * A target whose sequences make `maxTokens` tokens (ids 1, 2, …), one per step; `log` records
 * every call. `hold` makes the next step wait for its promise; `failAdmit` / `failStep` script
 * failures; a prompt 'bad' fails its own sequence at its first step.
 */
function target() {
  const t = {
    log: [],
    seqs: new Map(),
    next: 1,
    steps: 0,
    busy: false,
    drains: 0,
    /** @type {Promise<void> | null} */
    hold: null,
    /** Milliseconds every step takes. */
    delayMs: 0,
    admit(prompt, json) {
      if (prompt === 'refused') throw Object.assign(new Error('refused'), { code: 'invalid_option' });
      const id = t.next++;
      t.seqs.set(id, { prompt, left: JSON.parse(json).maxTokens ?? 3, made: 0 });
      t.log.push(`admit ${prompt}`);
      return { id, promptTokens: String(prompt).length, prefix: null };
    },
    cancel(id) {
      t.log.push(`cancel ${t.seqs.get(id)?.prompt}`);
      return t.seqs.delete(id);
    },
    async step() {
      t.busy = true;
      t.steps++;
      try {
        if (t.hold !== null) {
          const h = t.hold;
          t.hold = null;
          await h;
        }
        if (t.delayMs > 0) await sleep(t.delayMs);
        const events = [];
        for (const [id, s] of t.seqs) {
          if (s.prompt === 'bad') {
            events.push({ sequence: id, token: null, done: true, finishReason: null, error: Object.assign(new Error('bad'), { code: 'read_failed' }) });
            t.seqs.delete(id);
            continue;
          }
          s.made++;
          s.left--;
          const done = s.left <= 0;
          events.push({
            sequence: id, done, finishReason: done ? 'length' : null,
            token: { id: s.made, text: `${s.prompt}${s.made} `, finishReason: done ? 'length' : null, step: {} },
            ...(done ? { report: { decodeTokens: s.made } } : {}),
          });
          if (done) t.seqs.delete(id);
        }
        t.log.push(`step ${events.map((e) => t.promptOf(e)).join(',')}`);
        return events;
      } finally {
        t.busy = false;
      }
    },
    promptOf: (e) => e.token?.text.split(/\d/)[0] ?? 'x',
    async drainReads() {
      t.drains++;
    },
    abort() {
      t.log.push('abort');
    },
    dropReads() {
      t.log.push('dropReads');
    },
  };
  return t;
}

/** Every token text of a generation. */
async function all(gen) {
  const out = [];
  for await (const e of gen) out.push(e.text.trim());
  return out;
}

const json = (maxTokens) => JSON.stringify({ maxTokens });

describe('Scheduler', () => {
  test('generations run together, one step for all; the line admits in order as slots free', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 2 });
    const [a, b, c] = await Promise.all([
      all(line.generate('a', json(2))), all(line.generate('b', json(3))), all(line.generate('c', json(1))),
    ]);
    assert.deepEqual([a, b, c], [['a1', 'a2'], ['b1', 'b2', 'b3'], ['c1']]);
    // a and b arrive together and share steps; c is admitted when a's slot frees.
    assert.deepEqual(t.log, ['admit a', 'admit b', 'step a,b', 'step a,b', 'admit c', 'step b,c']);
    assert.equal(line.stats.served, 3);
    assert.equal(line.stats.peakActive, 2);
    assert.ok(line.idle);
  });

  test('the first token says how the prompt was served, the last carries the report', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 1 });
    const tokens = [];
    for await (const e of line.generate('abc', json(2))) tokens.push(e);
    assert.deepEqual(tokens[0].prompt, { tokens: 3, prefix: null });
    assert.equal(tokens[1].prompt, undefined);
    assert.deepEqual(tokens[1].report, { decodeTokens: 2 });
  });

  test('a job runs at a boundary, in line order: after the step in flight, before later generations', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 2 });
    const held = gate();
    t.hold = held.promise;
    const a = all(line.generate('a', json(2)));
    while (!t.busy) await sleep(1);
    const job = line.exclusive(async () => {
      t.log.push('job');
      return 42;
    });
    const b = all(line.generate('b', json(1)));
    held.resolve();
    assert.equal(await job, 42);
    await Promise.all([a, b]);
    assert.deepEqual(t.log, ['admit a', 'step a', 'job', 'admit b', 'step a,b']);
    // A job that fails rejects its caller only.
    await assert.rejects(line.exclusive(async () => { throw new Error('job failed'); }), /job failed/);
    assert.deepEqual(await all(line.generate('c', json(1))), ['c1']);
  });

  test('past maxWaiting the line refuses (429) unless the request has priority; a wait past the timeout fails', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 1, maxWaiting: 1, waitTimeoutMs: 60 });
    const release = gate();
    t.hold = release.promise;
    const a = all(line.generate('a', json(1)));
    await sleep(5);
    const b = assert.rejects(all(line.generate('b', json(1))), (e) => e instanceof QueueTimeout);
    await assert.rejects(all(line.generate('c', json(1))), (e) => e instanceof QueueFull && e.code === 'busy' && e.retryAfter >= 1);
    assert.equal(line.stats.rejected, 1);
    // An agentic request's later turn waits however long the line is.
    const d = all(line.generate('d', json(1), { priority: true }));
    await b;
    release.resolve();
    assert.deepEqual(await a, ['a1']);
    assert.deepEqual(await d, ['d1']);
    assert.equal(line.stats.timedOut, 1);
  });

  test('an abort ends that generation alone: out of the line while waiting, canceled at the next boundary when running', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 1 });
    const running = new AbortController();
    const waiting = new AbortController();
    const seen = [];
    const a = (async () => {
      for await (const e of line.generate('a', json(5), { signal: running.signal })) {
        seen.push(e.text.trim());
        if (seen.length === 2) running.abort(new Error('client left'));
      }
    })();
    const b = assert.rejects(all(line.generate('b', json(1), { signal: waiting.signal })), /b left/);
    const c = all(line.generate('c', json(1)));
    waiting.abort(new Error('b left'));
    await assert.rejects(a, /client left/);
    await b;
    assert.deepEqual(await c, ['c1']);
    assert.deepEqual(seen, ['a1', 'a2']);
    assert.ok(t.log.includes('cancel a'));
    assert.ok(!t.log.includes('admit b'));
  });

  test('a consumer leaving the loop ends its generation; a refused admission and a failed sequence fail alone', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 3 });
    const early = (async () => {
      for await (const e of line.generate('e', json(9))) if (e.text.trim() === 'e2') break;
    })();
    const [, others, refused, bad] = await Promise.allSettled([
      early, all(line.generate('o', json(3))), all(line.generate('refused', json(1))), all(line.generate('bad', json(1))),
    ]);
    assert.deepEqual(others.value, ['o1', 'o2', 'o3']);
    assert.equal(refused.reason.code, 'invalid_option');
    assert.equal(bad.reason.code, 'read_failed');
    assert.ok(t.log.includes('cancel e'));
    assert.equal(t.seqs.size, 0);
  });

  test('a step that throws ends every running generation; the line serves the next', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 2 });
    const step = t.step;
    t.step = async () => { t.step = step; throw Object.assign(new Error('boom'), { code: 'internal' }); };
    const results = await Promise.allSettled([all(line.generate('a', json(2))), all(line.generate('b', json(2)))]);
    assert.deepEqual(results.map((r) => r.reason?.message), ['boom', 'boom']);
    t.seqs.clear();
    assert.deepEqual(await all(line.generate('c', json(1))), ['c1']);
  });

  test('a stream whose consumer is away gives way when another waits for its slot', async () => {
    const t = target();
    t.delayMs = 5;
    const line = new Scheduler(t, { slots: 1, preemptMs: 20 });
    const away = line.generate('s', json(100), { preemptible: true });
    assert.equal((await away.next()).value.text.trim(), 's1');
    // Its consumer stops pulling; the next generation waits for the slot, then takes it.
    await sleep(5);
    assert.deepEqual(await all(line.generate('n', json(2))), ['n1', 'n2']);
    assert.equal(line.stats.superseded, 1);
    await assert.rejects(away.next(), (e) => e.message === SUPERSEDED);
    // A generation that is not preemptible (generateText pulls every token) is never superseded.
    const kept = line.generate('k', json(12));
    await kept.next();
    const other = all(line.generate('o', json(1)));
    assert.deepEqual(await other, ['o1']);
    assert.equal(line.stats.superseded, 1);
    await kept.return();
  });

  test('with request-scoped I/O, waiters poll and every step drains its reads', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 2, requestScopedIo: true });
    await Promise.all([all(line.generate('a', json(2))), all(line.generate('b', json(2)))]);
    assert.ok(t.drains >= t.steps, `${t.drains} drains for ${t.steps} steps`);
    // A generation's last token comes after the drain of the step that made it: what the step
    // left to tell the stations happens inside the request that ended.
    t.drainReads = async () => {
      await sleep(5);
      t.log.push('drained');
    };
    t.log.length = 0;
    const take = async (prompt, n) => {
      for await (const e of line.generate(prompt, json(n))) t.log.push(`got ${e.text.trim()}`);
    };
    // Whichever request runs the step, 'c' ends only after the drain that followed it.
    await Promise.all([take('d', 3), take('c', 1)]);
    const step = t.log.findIndex((l) => l.startsWith('step') && l.includes('c'));
    const drained = t.log.indexOf('drained', step);
    assert.ok(drained !== -1 && drained < t.log.indexOf('got c1'), t.log.join(', '));
  });

  test('a step stalled past stallMs (its request went away) is taken back; the line moves on', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 1, stallMs: 30 });
    t.hold = new Promise(() => {}); // a step whose continuation never runs, as in a dead request
    const stuck = line.generate('a', json(2));
    void stuck.next(); // its caller is gone: nobody awaits it
    await sleep(5);
    // The wasm side unwound (not busy) but the JS after it never ran: released by the next waiter.
    t.busy = false;
    t.seqs.clear();
    assert.deepEqual(await all(line.generate('b', json(1))), ['b1']);
    assert.equal(line.stats.reclaimed, 1);
    assert.ok(t.log.includes('abort') && t.log.includes('dropReads'));
  });

  test('dispose fails what waits and what runs; later calls fail as disposed', async () => {
    const t = target();
    const line = new Scheduler(t, { slots: 1 });
    const release = gate();
    t.hold = release.promise;
    const a = assert.rejects(all(line.generate('a', json(3))), { code: 'disposed' });
    await sleep(2);
    const b = assert.rejects(all(line.generate('b', json(1))), { code: 'disposed' });
    const gone = Object.assign(new Error('disposed'), { code: 'disposed' });
    line.dispose(gone);
    release.resolve();
    await a;
    await b;
    await assert.rejects(all(line.generate('c', json(1))), { code: 'disposed' });
    await assert.rejects(line.exclusive(async () => 1), { code: 'disposed' });
  });
});
