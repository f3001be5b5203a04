// Settings that need a Worker of their own: prefix reuse off or expiring, and a model that is
// not in the bucket yet (the open fails, and is retried by the next request).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MODEL, native, post, sleep, startLocal } from './support.js';
import { modelFile, uploadFile } from '../scripts/local.mjs';

const turn1 = [{ role: 'user', content: 'Tell me one fact about octopuses.' }];
const chat = (url, messages) => post(url, '/v1/chat/completions', { model: MODEL, messages, temperature: 0, max_tokens: 24 });

describe('a Worker of its own', () => {
  test('a model missing from the bucket: 502 read_failed naming the key, and the next request opens it once it is there', async () => {
    const local = await startLocal({ quiet: true, vars: { MODEL_KEY: 'later.knot', KNOT_PREFIX_REUSE: '0' } });
    try {
      const missing = await chat(local.url, turn1);
      // The status is the code's (read_failed: the upstream, R2, failed), as for every failure.
      assert.equal(missing.status, 502, missing.text);
      assert.equal(missing.json.error.code, 'read_failed');
      assert.match(missing.json.error.message, /R2 object 'later\.knot' not found/);
      const health = await fetch(`${local.url}/health`);
      assert.equal(health.status, 502);
      await uploadFile(local.r2, 'later.knot', modelFile());
      const r1 = await chat(local.url, turn1);
      assert.equal(r1.status, 200, r1.text);
      // With prefix reuse off, every prompt is prefilled whole, and the output is the same.
      assert.equal(r1.headers.get('x-knot-prefill'), 'disabled');
      const turn2 = [...turn1, { role: 'assistant', content: r1.json.choices[0].message.content }, { role: 'user', content: 'And squids?' }];
      const r2 = await chat(local.url, turn2);
      assert.equal(r2.headers.get('x-knot-prefill'), 'disabled');
      assert.equal(r2.json.choices[0].message.content, (await native(turn2, 24)).text);
    } finally {
      await local.dispose();
    }
  });

  test('a window older than KNOT_PREFIX_TTL_MS is not reused: x-knot-prefill expired', async () => {
    const local = await startLocal({ quiet: true, vars: { KNOT_PREFIX_TTL_MS: '200' } });
    try {
      const r1 = await chat(local.url, turn1);
      assert.equal(r1.headers.get('x-knot-prefill'), 'miss');
      const turn2 = [...turn1, { role: 'assistant', content: r1.json.choices[0].message.content }, { role: 'user', content: 'And squids?' }];
      await sleep(400);
      const r2 = await chat(local.url, turn2);
      assert.equal(r2.headers.get('x-knot-prefill'), 'expired');
      assert.equal(r2.headers.get('x-knot-prefill-reused'), '0');
      // Within the time to live (counted from the last token), the next turn hits.
      const turn3 = [...turn2, { role: 'assistant', content: r2.json.choices[0].message.content }, { role: 'user', content: 'Thanks.' }];
      const r3 = await chat(local.url, turn3);
      assert.equal(r3.headers.get('x-knot-prefill'), 'hit');
      assert.equal(r2.json.choices[0].message.content, (await native(turn2, 24)).text);
      assert.equal(r3.json.choices[0].message.content, (await native(turn3, 24)).text);
    } finally {
      await local.dispose();
    }
  });
});
