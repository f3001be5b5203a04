// POST /v1/audio/speech in the Worker: not offered, and said so in OpenAI's shape. eSpeak NG
// (the package's synthesizer) was tried in workerd: docs/speech.md has what failed and the sizes.
import { ApiError } from 'knot-wasm/openai';

export const SPEECH_UNAVAILABLE = 'Speech synthesis is not available in the Worker: eSpeak NG needs a fixed 32 MiB of wasm '
  + 'memory beside the model in a 128 MB isolate, and its 18.5 MB wasm fills the 10 MB compressed bundle limit '
  + '(docs/speech.md). Use knot-serve for /v1/audio/speech.';

/**
 * The route's answer, before any model opens: 405 for a method other than POST, else 501
 * `speech_unavailable`.
 * @param {Request} request
 * @returns {never}
 */
export function refuseSpeech(request) {
  if (request.method !== 'POST') {
    throw new ApiError(405, `${request.method} is not allowed on /v1/audio/speech (use POST)`, { code: 'method_not_allowed', headers: { allow: 'POST' } });
  }
  throw new ApiError(501, SPEECH_UNAVAILABLE, { code: 'speech_unavailable' });
}
