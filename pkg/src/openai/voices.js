// Which eSpeak NG voice a /v1/audio/speech `voice` is: OpenAI's names map onto fixed eSpeak
// voices and variants (the same name always sounds the same), and eSpeak's own names
// (`en-us`, `de+f3`) are taken as they are when the engine lists them.
import { badRequest } from './errors.js';

/** OpenAI's voices → an eSpeak language voice and a variant (espeak-ng-data/voices/!v). */
export const OPENAI_VOICES = Object.freeze({
  alloy: 'en-us',
  ash: 'en-us+m3',
  ballad: 'en-gb-x-rp+m2',
  coral: 'en-us+f2',
  echo: 'en-us+m7',
  fable: 'en-gb+m5',
  onyx: 'en-us+m1',
  nova: 'en-us+f3',
  sage: 'en-gb+f1',
  shimmer: 'en-us+f4',
  verse: 'en-us+m2',
});

/**
 * The eSpeak voice a request's `voice` names: an OpenAI voice, or `language[+variant]` from
 * the engine's lists (case does not matter). eSpeak itself ignores an unknown variant
 * silently, so it is refused here.
 * @param {unknown} voice
 * @param {{ languages: Set<string>, variants: Set<string> } | null} lists the engine's, or null
 *   before it is loaded (then only OpenAI's names can be answered)
 * @returns {string | null} null: the engine's lists are needed to decide
 */
export function espeakVoice(voice, lists) {
  if (typeof voice !== 'string' || voice === '') throw badRequest('`voice` must be a non-empty string', 'voice', 'invalid_voice');
  const name = voice.toLowerCase();
  if (Object.hasOwn(OPENAI_VOICES, name)) return OPENAI_VOICES[name];
  if (lists === null) return null;
  const [language, variant, ...rest] = name.split('+');
  if (rest.length === 0 && lists.languages.has(language) && (variant === undefined || lists.variants.has(variant))) return name;
  throw badRequest(`Unknown voice '${voice}': use one of ${Object.keys(OPENAI_VOICES).join(', ')}, `
    + 'or an eSpeak NG voice such as en-us or de+f3 (see docs/speech.md)', 'voice', 'invalid_voice');
}
