// The failure the Worker is built to avoid, in workerd: a generation run inside a request without
// `ctx.waitUntil`, whose reads hang, and whose client then goes away. workerd cancels the
// request's pending work — the read timeout's timer included — so the call never resumes and the
// shared shim stays busy for every later request. `HostShim.reclaim()` takes it back.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { sleep, startLocal } from './support.js';

let local;
before(async () => {
  local = await startLocal({ quiet: true, entry: fileURLToPath(new URL('./fixtures/no-wait-until.js', import.meta.url)) });
});
after(() => local?.dispose());

const get = async (path) => {
  const res = await fetch(local.url + path);
  return { status: res.status, json: await res.json() };
};

test('a call stranded by a canceled request keeps the shim busy until reclaim()', async () => {
  assert.deepEqual(await get('/answer'), { status: 200, json: { text: 'The capital of France is Paris.' } });
  // A story whose reads hang from its fourth token on; its client leaves.
  await new Promise((resolve) => {
    const req = http.get(`${local.url}/story?stall=1`, (res) => {
      let chunks = 0;
      res.on('data', () => {
        if (++chunks === 3) setTimeout(() => {
          req.destroy();
          resolve();
        }, 300);
      });
    });
    req.on('error', () => {});
  });
  await sleep(500);
  const stuck = await get('/answer');
  assert.equal(stuck.status, 409);
  assert.match(stuck.json.error, /another generation is in progress/);
  // Still stuck after its 5 s read timeout: the timer died with the request.
  await sleep(5500);
  assert.equal((await get('/answer')).status, 409);
  assert.deepEqual((await get('/reclaim')).json, { reclaimed: true });
  assert.deepEqual(await get('/answer'), { status: 200, json: { text: 'The capital of France is Paris.' } });
  assert.deepEqual((await get('/reclaim')).json, { reclaimed: false });
});
