// The call queue on its own (src/queue.js): calls run one at a time in order; one generation at
// a time, a suspended stream superseded by the next; release() forgets calls that will never
// continue, and their late bookkeeping (an older epoch) changes nothing.
import assert from 'node:assert/strict';
import { describe, test } from './harness.js';
import { CallQueue, SUPERSEDED } from '../src/queue.js';

/** A queue over a target that counts its idle moments; `gone` makes entering throw. */
function queue() {
  const state = { idle: 0, gone: false };
  const q = new CallQueue(() => {
    if (state.gone) throw Object.assign(new Error('gone'), { code: 'disposed' });
    return 'target';
  }, () => state.idle++);
  return { q, state };
}

/** A promise and its resolver. */
function gate() {
  let open = () => {};
  const opened = new Promise((resolve) => { open = resolve; });
  return { opened, open };
}

describe('CallQueue', () => {
  test('calls run one at a time, in order, each given the target', async () => {
    const { q, state } = queue();
    const log = [];
    const first = gate();
    const a = q.run(async (t) => { log.push(`a:${t}`); await first.opened; log.push('a done'); return 1; });
    const b = q.run(async () => { log.push('b'); return 2; });
    await new Promise((r) => setTimeout(r, 5));
    assert.equal(q.pending, 1);
    assert.deepEqual(log, ['a:target']);
    first.open();
    assert.deepEqual(await Promise.all([a, b]), [1, 2]);
    assert.deepEqual(log, ['a:target', 'a done', 'b']);
    assert.equal(q.pending, 0);
    // Idle each time no call runs: a queued call starts only once the one before has ended.
    assert.equal(state.idle, 2);
    // A failed call does not block the next.
    await assert.rejects(q.run(async () => { throw new Error('boom'); }), /boom/);
    assert.equal(await q.run(async () => 3), 3);
  });

  test('a call whose target is gone when it fails rejects as gone', async () => {
    const { q, state } = queue();
    const g = gate();
    const running = q.run(async () => { await g.opened; throw new Error('aborted'); });
    await new Promise((r) => setTimeout(r, 0));
    state.gone = true;
    g.open();
    await assert.rejects(running, { code: 'disposed' });
  });

  test('one generation at a time; a suspended stream is superseded by the next', async () => {
    const { q } = queue();
    const detached = [];
    const first = q.begin(true, () => detached.push('first'));
    assert.throws(() => q.begin(false, () => {}), { code: 'busy' });
    first.suspended = true;
    assert.ok(q.settled);
    const second = q.begin(false, () => detached.push('second'));
    assert.ok(first.superseded && !q.current(first) && q.current(second));
    assert.deepEqual(detached, ['first']);
    await assert.rejects(q.call(first, async () => 'late'), new RegExp(SUPERSEDED.slice(0, 30)));
    assert.equal(await q.call(second, async (t) => `${t}!`), 'target!');
    // A working generation is not superseded, even a preemptible one.
    q.end(second);
    const third = q.begin(true, () => {});
    assert.throws(() => q.begin(true, () => {}), /another generation is in progress/);
    q.end(first); // ending a superseded run changes nothing
    assert.ok(!q.idle);
    q.end(third);
    assert.ok(q.idle);
  });

  test('a call of a generation rejects with its signal\'s reason once aborted', async () => {
    const { q } = queue();
    const run = q.begin(false, () => {});
    const controller = new AbortController();
    const g = gate();
    const call = q.call(run, async () => { await g.opened; throw new Error('wasm said aborted'); }, controller.signal);
    await new Promise((r) => setTimeout(r, 0));
    assert.equal(q.calling, run);
    controller.abort(new Error('user cancelled'));
    g.open();
    await assert.rejects(call, /user cancelled/);
    assert.equal(q.calling, undefined);
    await assert.rejects(q.call(run, async () => 1, controller.signal), /user cancelled/);
  });

  test('release forgets calls that never continue; their late bookkeeping is ignored', async () => {
    const { q, state } = queue();
    const run = q.begin(false, () => {});
    const stuck = gate();
    const never = q.call(run, async () => stuck.opened);
    const queued = q.run(async () => 'behind the stuck one');
    await new Promise((r) => setTimeout(r, 0));
    assert.equal(q.pending, 1);
    assert.ok(!q.settled);
    q.release();
    assert.ok(run.superseded && q.idle && q.pending === 0);
    // The queue runs new calls at once, not behind the stuck one.
    assert.equal(await q.run(async () => 'fresh'), 'fresh');
    const idleBefore = state.idle;
    // The stuck call finally returns (its continuations ran after all): no count goes negative,
    // no idle is reported for it.
    stuck.open('late');
    assert.equal(await never, 'late');
    assert.equal(q.pending, 0);
    assert.equal(state.idle, idleBefore);
    void queued;
  });
});
