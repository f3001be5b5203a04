// POST /v1/audio/speech: the WAV encoder on its own, knot-serve's playback choices, then the
// route in a real knot-serve (file mode, the tiny model with a chat template given: knot-serve
// refuses a model without one) through the official client and raw
// requests: the audio's header, length, loudness and formats, every refused field, requests at
// once; and the answers without eSpeak NG (not installed, or turned off).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { openaiResponse } from '../src/openai/index.js';
import { loadEspeak } from '../src/openai/espeak.js';
import { encodePcm, encodeWav, readWav } from '../src/openai/wav.js';
import { aplayCommand, autoAudioMode, parseAudioMode, probeAudio } from '../src/speech-playback.js';
import { after, before, describe, test } from './harness.js';
import { post, runtimeCommand, startServer } from './servers.js';
import { ROOT, TINY } from './support.js';

const BIN = `${ROOT}pkg/bin/knot-serve.js`;
const run = promisify(execFile);
/** The tiny model has no chat template (and its vocabulary implies none): knot-serve needs one. */
const TEMPLATE = ['--chat-template', `${ROOT}tests/fixtures/chat/chatml-tools.jinja`];

const rms = (s) => Math.sqrt(s.reduce((a, x) => a + x * x, 0) / s.length);
const peak = (s) => s.reduce((a, x) => Math.max(a, Math.abs(x)), 0);
const THREE_SENTENCES = 'The sun rose over the hills. Birds sang in the trees. A new day had begun.';

describe('WAV', () => {
  test('the header: RIFF sizes, PCM format 1, mono, 16 bits, the rate; samples little-endian', () => {
    const samples = Int16Array.from([0, 1, -1, 32767, -32768]);
    const wav = encodeWav(samples, 8000);
    const v = new DataView(wav.buffer);
    const tag = (at) => String.fromCharCode(...wav.subarray(at, at + 4));
    assert.equal(wav.byteLength, 44 + 10);
    assert.deepEqual([tag(0), tag(8), tag(12), tag(36)], ['RIFF', 'WAVE', 'fmt ', 'data']);
    assert.equal(v.getUint32(4, true), wav.byteLength - 8);
    assert.deepEqual([v.getUint32(16, true), v.getUint16(20, true), v.getUint16(22, true)], [16, 1, 1]);
    assert.deepEqual([v.getUint32(24, true), v.getUint32(28, true), v.getUint16(32, true), v.getUint16(34, true)], [8000, 16000, 2, 16]);
    assert.equal(v.getUint32(40, true), 10);
    assert.deepEqual([...wav.subarray(44)], [0, 0, 1, 0, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x80]);
    assert.deepEqual(encodePcm(samples), wav.subarray(44));
    const back = readWav(wav);
    assert.deepEqual([back.format, back.channels, back.sampleRate, back.bitsPerSample, back.dataBytes], [1, 1, 8000, 16, 10]);
    assert.deepEqual(back.samples, samples);
  });

  test('reading walks past other chunks (odd sizes padded) and refuses what is not WAVE', () => {
    const wav = encodeWav(Int16Array.from([5, -6]), 22050);
    const list = Uint8Array.from([...'LIST'].map((c) => c.charCodeAt(0)).concat([3, 0, 0, 0, 1, 2, 3, 0]));
    const withList = new Uint8Array(wav.byteLength + list.byteLength);
    withList.set(wav.subarray(0, 36));
    withList.set(list, 36);
    withList.set(wav.subarray(36), 36 + list.byteLength);
    assert.deepEqual(readWav(withList).samples, Int16Array.from([5, -6]));
    assert.throws(() => readWav(new TextEncoder().encode('RIFX....WAVEfmt ')), /not a RIFF\/WAVE/);
  });
});

describe('knot-serve speech playback', () => {
  test('auto: ALSA only on Linux with aplay and a sound card, else files', () => {
    assert.equal(autoAudioMode({ platform: 'linux', aplay: true, soundDevice: true }), 'alsa');
    assert.equal(autoAudioMode({ platform: 'linux', aplay: true, soundDevice: false }), 'file');
    assert.equal(autoAudioMode({ platform: 'linux', aplay: false, soundDevice: true }), 'file');
    assert.equal(autoAudioMode({ platform: 'darwin', aplay: true, soundDevice: true }), 'file');
  });

  // This machine, probed: where neither ALSA's /proc entry nor /dev/snd exists, auto is files.
  // (Deno will not look at /proc or /dev without --allow-all: there, both count as absent.)
  const seen = (path) => {
    try {
      return existsSync(path);
    } catch {
      return false;
    }
  };
  const noSound = !seen('/proc/asound') && !seen('/dev/snd');
  (noSound ? test : test.skip)('auto on a machine without a sound device is file', () => {
    const machine = probeAudio();
    assert.equal(machine.soundDevice, false);
    assert.equal(autoAudioMode(machine), 'file');
  });

  test('alsa plays the WAV from standard input with aplay; modes are checked', () => {
    assert.deepEqual(aplayCommand(), { command: 'aplay', args: ['-q', '-t', 'wav', '-'] });
    assert.equal(parseAudioMode('auto'), 'auto');
    assert.throws(() => parseAudioMode('loud'), /must be none, file, alsa, auto, got 'loud'/);
  });

  test('a bad mode stops knot-serve at start, exit 2', async () => {
    const r = await run(...runtimeCommand(BIN, [TINY, '--port', '0']), { env: { ...process.env, KNOT_TTS_AUDIO_MODE: 'loud' } })
      .then(() => null, (e) => e);
    assert.equal(r?.code, 2);
    assert.match(r.stderr, /--tts-audio-mode \(or KNOT_TTS_AUDIO_MODE\) must be none, file, alsa, auto, got 'loud'/);
  });
});

describe('POST /v1/audio/speech in knot-serve (file mode)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'knot-tts-test-'));
  /** @type {{ url: string, child: import('node:child_process').ChildProcess, out(): string }} */
  let server;
  /** @type {OpenAI} */
  let client;
  before(async () => {
    server = await startServer(...runtimeCommand(BIN, [TINY, '--port', '0', ...TEMPLATE]), { KNOT_TTS_AUDIO_MODE: 'file', KNOT_TTS_AUDIO_DIR: dir });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'not-needed', maxRetries: 0 });
  });
  after(() => server?.child.kill('SIGKILL'));

  /** A speech request's response: status, headers and bytes. */
  const speak = async (body) => {
    const res = await fetch(`${server.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, headers: res.headers, bytes: new Uint8Array(await res.arrayBuffer()) };
  };
  const samplesOf = async (body) => readWav((await speak({ model: 'tts-1', voice: 'alloy', ...body })).bytes).samples;

  test('the official client: a valid WAV, heard, and written where the header says', async () => {
    const res = await client.audio.speech.create({ model: 'tts-1', input: 'Hello from knot.', voice: 'alloy', response_format: 'wav' });
    const bytes = new Uint8Array(await res.arrayBuffer());
    assert.equal(res.headers.get('content-type'), 'audio/wav');
    const wav = readWav(bytes);
    assert.equal(wav.riffSize, bytes.byteLength - 8);
    assert.equal(wav.dataOffset, 44);
    assert.equal(wav.dataBytes, bytes.byteLength - 44);
    assert.deepEqual([wav.format, wav.channels, wav.bitsPerSample], [1, 1, 16]);
    assert.equal(wav.sampleRate, Number(res.headers.get('x-knot-sample-rate')));
    assert.equal(wav.sampleRate, 22050);
    assert.equal(res.headers.get('x-knot-tts-voice'), 'en-us');
    // Measured on this phrase: RMS 2525, peak 18530 (docs/speech.md); the floors are 40% of them.
    assert.ok(rms(wav.samples) > 1000, `RMS ${rms(wav.samples)}`);
    assert.ok(peak(wav.samples) > 7400, `peak ${peak(wav.samples)}`);
    const file = res.headers.get('x-knot-audio-file');
    assert.ok(file?.startsWith(dir), file ?? 'no x-knot-audio-file');
    assert.deepEqual(new Uint8Array(readFileSync(file)), bytes);
    assert.match(server.out(), new RegExp(`speech audio written to ${dir}`));
  });

  test('longer text, longer audio: three sentences against one word', async () => {
    const [word, sentences] = await Promise.all([samplesOf({ input: 'Hello.' }), samplesOf({ input: THREE_SENTENCES })]);
    assert.ok(sentences.length > 3 * word.length, `${sentences.length} samples against ${word.length}`);
  });

  test('speed 2 is shorter than speed 0.5', async () => {
    const fast = await samplesOf({ input: THREE_SENTENCES, speed: 2 });
    const slow = await samplesOf({ input: THREE_SENTENCES, speed: 0.5 });
    assert.ok(fast.length * 2 < slow.length, `${fast.length} samples at 2, ${slow.length} at 0.5`);
  });

  test('pcm: the WAV data chunk, without its header', async () => {
    const body = { model: 'tts-1', input: 'Raw samples.', voice: 'nova' };
    const [wav, pcm] = await Promise.all([speak(body), speak({ ...body, response_format: 'pcm' })]);
    assert.equal(pcm.headers.get('content-type'), 'audio/pcm');
    assert.deepEqual([pcm.headers.get('x-knot-sample-rate'), pcm.headers.get('x-knot-sample-format'), pcm.headers.get('x-knot-channels')], ['22050', 's16le', '1']);
    assert.deepEqual(pcm.bytes, wav.bytes.subarray(44));
  });

  test('at once: each answer equals the same request alone, and the model line is untouched', async () => {
    const { queue } = await (await fetch(`${server.url}/stats`)).json();
    const bodies = ['One.', 'Two and three.', THREE_SENTENCES].map((input, i) => ({ model: 'tts-1', input, voice: ['alloy', 'sage', 'de+f3'][i] }));
    const together = await Promise.all(bodies.map(speak));
    for (const [i, body] of bodies.entries()) assert.deepEqual(together[i].bytes, (await speak(body)).bytes, body.input);
    assert.equal((await (await fetch(`${server.url}/stats`)).json()).queue.served, queue.served);
  });

  test('eSpeak voices by name; text that looks like an option is spoken', async () => {
    const r = await speak({ model: 'tts-1', input: '-w /tmp/x --help', voice: 'EN-GB+whisper' });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-knot-tts-voice'), 'en-gb+whisper');
    assert.ok(readWav(r.bytes).samples.length > 22050 / 2);
  });

  const refused = [
    ['no input', { voice: 'alloy' }, 'input'],
    ['input not a string', { voice: 'alloy', input: 42 }, 'input'],
    ['empty input', { voice: 'alloy', input: '  ' }, 'input', 'empty_input'],
    ['input over 4096 characters', { voice: 'alloy', input: 'a'.repeat(4097) }, 'input', 'input_too_long'],
    ['an unknown voice', { input: 'Hi', voice: 'marvin' }, 'voice', 'invalid_voice'],
    ['an unknown eSpeak variant', { input: 'Hi', voice: 'en-us+nosuch' }, 'voice', 'invalid_voice'],
    ['no voice', { input: 'Hi' }, 'voice', 'invalid_voice'],
    ['mp3', { input: 'Hi', voice: 'alloy', response_format: 'mp3' }, 'response_format', 'unsupported_format'],
    ['speed 5', { input: 'Hi', voice: 'alloy', speed: 5 }, 'speed', 'invalid_speed'],
    ['speed as text', { input: 'Hi', voice: 'alloy', speed: 'fast' }, 'speed', 'invalid_speed'],
    ['no model', { model: undefined, input: 'Hi', voice: 'alloy' }, 'model'],
  ];
  for (const [name, body, param, code = null] of refused) {
    test(`400 for ${name}, naming ${param}`, async () => {
      const r = await post(server.url, '/v1/audio/speech', { model: 'tts-1', ...body });
      assert.equal(r.status, 400, r.text);
      assert.deepEqual({ ...r.json.error, message: undefined }, { message: undefined, type: 'invalid_request_error', param, code });
      if (code === 'unsupported_format') assert.match(r.json.error.message, /must be wav or pcm/);
    });
  }

  test('400 for a body that is not JSON; the next request is answered', async () => {
    const r = await post(server.url, '/v1/audio/speech', '{"model": "tts-1", "input": ');
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'invalid_json');
    assert.ok((await samplesOf({ input: 'Still here.' })).length > 0);
  });

  test('405 for GET', async () => {
    const r = await post(server.url, '/v1/audio/speech', undefined, { method: 'GET' });
    assert.equal(r.status, 405);
    assert.equal(r.headers.get('allow'), 'POST');
  });

  test('file mode wrote one WAV per answer', () => {
    assert.ok(readdirSync(dir).filter((f) => f.endsWith('.wav')).length >= 10);
  });
});

describe('speech without eSpeak NG', () => {
  const request = () => new Request('http://knot/v1/audio/speech', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tts-1', input: 'Hi', voice: 'alloy' }),
  });

  test('not installed: 501 speech_engine_missing, with the install command', async () => {
    const res = await openaiResponse(/** @type {any} */ ({}), request(), { modelId: 'm', speech: { engine: () => loadEspeak('espeak-ng-not-installed') } });
    const { error } = await res.json();
    assert.equal(res.status, 501);
    assert.equal(error.code, 'speech_engine_missing');
    assert.match(error.message, /npm install espeak-ng-not-installed@1\.0\.2/);
    assert.match(error.message, /GPL-3\.0-or-later/);
  });

  test('turned off: 501 speech_unavailable with the reason given', async () => {
    const res = await openaiResponse(/** @type {any} */ ({}), request(), { modelId: 'm', speech: { unavailable: 'no speech in this Worker' } });
    assert.equal(res.status, 501);
    assert.deepEqual((await res.json()).error, { message: 'no speech in this Worker', type: 'server_error', param: null, code: 'speech_unavailable' });
  });
});
