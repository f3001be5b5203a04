// POST /v1/audio/speech: OpenAI's text-to-speech route, synthesized locally by eSpeak NG.
// It never touches the model: no place in the generation line, so chat streams on beside it.
import { ApiError, badRequest } from './errors.js';
import { loadEspeak } from './espeak.js';
import { readJson } from './request.js';
import { espeakVoice } from './voices.js';
import { encodePcm, encodeWav } from './wav.js';

/** OpenAI's cap on `input`, in characters. */
export const MAX_SPEECH_INPUT = 4096;
/** OpenAI's `speed` range, and its default. */
export const SPEED_RANGE = Object.freeze([0.25, 4]);
/** eSpeak's words per minute at speed 1 (its default), and the range its build accepts (no
 * Sonic here, so nothing faster than 450). */
export const BASE_WPM = 175;
export const WPM_RANGE = Object.freeze([80, 450]);

const FORMATS = ['wav', 'pcm'];
const OPENAI_ONLY_FORMATS = ['mp3', 'opus', 'aac', 'flac'];

/**
 * A speech request's fields, checked; each failure a 400 naming its field.
 * @param {Record<string, unknown>} body
 * @returns {{ model: string, input: string, voice: string, format: 'wav' | 'pcm', speed: number }}
 */
export function parseSpeechRequest(body) {
  const { model, input, voice } = body;
  if (typeof model !== 'string' || model === '') throw badRequest('`model` must be a non-empty string (any name: tts-1, for one)', 'model');
  if (typeof input !== 'string') throw badRequest('`input` must be a string: the text to speak', 'input');
  if (input.trim() === '') throw badRequest('`input` is empty: give the text to speak', 'input', 'empty_input');
  const length = [...input].length;
  if (length > MAX_SPEECH_INPUT) {
    throw badRequest(`\`input\` is ${length} characters, more than the ${MAX_SPEECH_INPUT} allowed`, 'input', 'input_too_long');
  }
  if (typeof voice !== 'string' || voice === '') throw badRequest('`voice` must be a non-empty string', 'voice', 'invalid_voice');
  const format = body.response_format ?? 'wav';
  if (typeof format !== 'string' || !FORMATS.includes(format)) {
    const also = typeof format === 'string' && OPENAI_ONLY_FORMATS.includes(format) ? ` (${format} is OpenAI's, not encoded here)` : '';
    throw badRequest(`\`response_format\` must be wav or pcm${also}, got ${JSON.stringify(format)}`, 'response_format', 'unsupported_format');
  }
  const speed = body.speed ?? 1;
  if (typeof speed !== 'number' || !Number.isFinite(speed) || speed < SPEED_RANGE[0] || speed > SPEED_RANGE[1]) {
    throw badRequest(`\`speed\` must be a number from ${SPEED_RANGE[0]} to ${SPEED_RANGE[1]}, got ${JSON.stringify(speed)}`, 'speed', 'invalid_speed');
  }
  return { model, input, voice, format: /** @type {'wav' | 'pcm'} */ (format), speed };
}

/** eSpeak's rate for OpenAI's speed: 175 words per minute times it, within what eSpeak does. */
export const wordsPerMinute = (speed) => Math.min(WPM_RANGE[1], Math.max(WPM_RANGE[0], Math.round(BASE_WPM * speed)));

/**
 * @typedef {{ engine?: () => Promise<import('./espeak.js').SpeechEngine>, unavailable?: string,
 *   onAudio?: (wav: Uint8Array, info: { voice: string, seconds: number }) => Record<string, string> | Promise<Record<string, string>> }} SpeechOptions
 */

/**
 * Answers POST /v1/audio/speech: the audio whole, as WAV or as raw PCM.
 * @param {Request} request
 * @param {{ maxBodyBytes: number, speech: SpeechOptions | false | undefined }} s
 * @returns {Promise<Response>}
 */
export async function speechResponse(request, s) {
  if (s.speech === false || s.speech?.unavailable !== undefined) {
    throw new ApiError(501, s.speech ? s.speech.unavailable : 'Speech synthesis is not available on this server', { code: 'speech_unavailable' });
  }
  const options = s.speech ?? {};
  const req = parseSpeechRequest(await readJson(request, s.maxBodyBytes));
  // OpenAI's voice names are answered before the engine loads; eSpeak's need its lists.
  const named = espeakVoice(req.voice, null);
  const engine = await (options.engine ?? loadEspeak)();
  const voice = named ?? /** @type {string} */ (espeakVoice(req.voice, engine));
  const wpm = wordsPerMinute(req.speed);
  const t0 = Date.now();
  const { samples, sampleRate } = await engine.synthesize({ text: req.input, voice, wpm });
  const synthesisMs = Date.now() - t0;
  const seconds = samples.length / sampleRate;
  const wav = encodeWav(samples, sampleRate);
  const extra = options.onAudio === undefined ? {} : await options.onAudio(wav, { voice, seconds });
  const headers = {
    ...extra,
    'x-knot-tts-voice': voice,
    'x-knot-tts-wpm': String(wpm),
    'x-knot-audio-seconds': seconds.toFixed(3),
    'x-knot-synthesis-ms': String(synthesisMs),
    'x-knot-sample-rate': String(sampleRate),
  };
  if (req.format === 'wav') return new Response(wav, { headers: { 'content-type': 'audio/wav', ...headers } });
  return new Response(encodePcm(samples), {
    headers: { 'content-type': 'audio/pcm', 'x-knot-sample-format': 's16le', 'x-knot-channels': '1', ...headers },
  });
}
