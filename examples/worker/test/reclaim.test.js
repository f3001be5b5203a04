// The failure the Worker is built to avoid, in workerd: a generation run inside a request without
// `ctx.waitUntil`, whose reads hang, and whose client then goes away. workerd may cancel the
// request's pending work — the read timeout's timer included — so the step in flight never
// resumes; here every attempt of its read hangs, so it does not resume within its read timeouts
// either. The model's line takes it back once it has been in flight for `stallMs`
// (KNOT_STALL_MS): the next request waits until then, and is answered.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { sleep, startLocal } from './support.js';

const STALL_MS = 8000;
let local;
before(async () => {
  local = await startLocal({
    quiet: true, entry: fileURLToPath(new URL('./fixtures/no-wait-until.js', import.meta.url)), vars: { KNOT_STALL_MS: String(STALL_MS) },
  });
});
after(() => local?.dispose());

const get = async (path) => {
  const res = await fetch(local.url + path);
  return { status: res.status, json: await res.json() };
};
const ANSWER = { status: 200, json: { text: 'The capital of France is Paris.' } };

test('a step stranded by a canceled request is taken back after KNOT_STALL_MS; the next request is answered', async () => {
  assert.deepEqual(await get('/answer'), ANSWER);
  // A story whose reads hang from its fourth token on; its client leaves.
  let left = 0;
  await new Promise((resolve) => {
    const req = http.get(`${local.url}/story?stall=1`, (res) => {
      let chunks = 0;
      res.on('data', () => {
        if (++chunks === 3) setTimeout(() => {
          req.destroy();
          left = Date.now();
          resolve();
        }, 300);
      });
    });
    req.on('error', () => {});
  });
  // Past its first 5 s read timeout the step is still in flight.
  await sleep(6000);
  const stuck = (await get('/stats')).json;
  assert.equal(stuck.busy, true, JSON.stringify(stuck));
  assert.equal(stuck.reclaimed, 0);
  // The next request waits in line until the step has been in flight for KNOT_STALL_MS, then the
  // line takes the model back (aborting the call, forgetting its reads) and it is answered.
  assert.deepEqual(await get('/answer'), ANSWER);
  const waited = Date.now() - left;
  assert.ok(waited >= STALL_MS - 1000, `answered ${waited} ms after the client left`);
  const after = (await get('/stats')).json;
  assert.ok(after.reclaimed >= 1, JSON.stringify(after));
  assert.equal(after.busy, false);
  // And the model serves as before, at once.
  const t0 = Date.now();
  assert.deepEqual(await get('/answer'), ANSWER);
  assert.ok(Date.now() - t0 < STALL_MS, `${Date.now() - t0} ms`);
});
