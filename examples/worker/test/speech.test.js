// POST /v1/audio/speech in workerd: not offered (docs/speech.md says why), answered in OpenAI's
// shape, through the official client too, and without opening the model: the Worker here names a
// model its bucket does not hold, so every route that opens it fails (502), and speech does not.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SPEECH_UNAVAILABLE } from '../src/speech.js';
import { client, post, startLocal } from './support.js';

/** @type {Awaited<ReturnType<typeof startLocal>>} */
let local;
before(async () => {
  local = await startLocal({ quiet: true, vars: { MODEL_KEY: 'absent.knot' } });
});
after(() => local?.dispose());

test('501 speech_unavailable, saying why, before any model opens', async () => {
  const r = await post(local.url, '/v1/audio/speech', { model: 'tts-1', input: 'Hello.', voice: 'alloy' });
  assert.equal(r.status, 501);
  assert.deepEqual(r.json.error, { message: SPEECH_UNAVAILABLE, type: 'server_error', param: null, code: 'speech_unavailable' });
  // A route that opens the model fails: this one never tried.
  const stats = await post(local.url, '/stats', undefined, { method: 'GET' });
  assert.equal(stats.status, 502, stats.text);
  assert.equal(stats.json.error.code, 'read_failed');
});

test('the official client reads it as an API error', async () => {
  await assert.rejects(
    client(local.url).audio.speech.create({ model: 'tts-1', input: 'Hello.', voice: 'alloy' }),
    (e) => e.status === 501 && e.code === 'speech_unavailable' && /docs\/speech\.md/.test(e.message),
  );
});

test('405 for GET', async () => {
  const r = await post(local.url, '/v1/audio/speech', undefined, { method: 'GET' });
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'POST');
  assert.equal(r.json.error.code, 'method_not_allowed');
});
