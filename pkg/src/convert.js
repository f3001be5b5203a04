// Arguments converted for the wasm side: JS values to what Rust reads (token ids as a
// Uint32Array, options and messages as JSON, text as well-formed Unicode). Only conversion
// happens here: what the values mean (an id below the vocabulary, an option in range, a message
// of a known shape) is checked once, in Rust, which names the problem and its code.
import { coded } from './errors.js';

/** @param {unknown} v */
export const isPlainObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v) &&
  !ArrayBuffer.isView(v);

/**
 * An options object as the JSON the Rust side reads. JSON has no BigInt, NaN or Infinity: a
 * BigInt goes as its decimal string, NaN and ±Infinity as "NaN" / "Infinity" / "-Infinity", so
 * Rust can name them in its errors.
 * @param {unknown} options
 * @param {string} where who is asking, for the error
 * @returns {string}
 */
export function optionsJson(options, where = 'options') {
  if (!isPlainObject(options)) throw coded('invalid_argument', `${where} must be an object`);
  return toJson(options);
}

/**
 * Any value as JSON, BigInt, NaN and ±Infinity spelled as {@link optionsJson} does.
 * @param {unknown} value
 * @returns {string}
 */
export function toJson(value) {
  return JSON.stringify(value, (_key, v) => {
    if (typeof v === 'bigint') return v.toString();
    if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
    return v;
  }) ?? 'null';
}

/**
 * Token ids as a Uint32Array: a Uint32Array as is, or an array of integers in [0, 2^32).
 * @param {unknown} ids
 * @returns {Uint32Array}
 */
export function toTokenIds(ids) {
  if (ids instanceof Uint32Array) return ids;
  if (!Array.isArray(ids)) {
    throw coded('invalid_argument', 'token ids must be a Uint32Array or an array of integers');
  }
  const out = new Uint32Array(ids.length);
  ids.forEach((id, i) => {
    if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) {
      throw coded('invalid_argument', `token id at index ${i} must be an integer >= 0, got ${String(id)}`);
    }
    out[i] = id;
  });
  return out;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Text as Rust receives it must be well-formed UTF-16: a lone surrogate has no UTF-8 form, and
 * the conversion would turn it into U+FFFD silently.
 * @param {unknown} text
 * @param {string} what
 * @returns {string}
 */
export function toText(text, what) {
  if (typeof text !== 'string') throw coded('invalid_argument', `${what} must be a string`);
  const wellFormed = typeof (/** @type {any} */ (text)).isWellFormed === 'function'
    ? /** @type {any} */ (text).isWellFormed()
    : !LONE_SURROGATE.test(text);
  if (!wellFormed) {
    const at = text.search(LONE_SURROGATE);
    const unit = text.charCodeAt(at).toString(16).toUpperCase();
    throw coded('invalid_text', `${what} has a lone surrogate (\\u${unit}) at index ${at}: it is not valid Unicode text`);
  }
  return text;
}

/**
 * Chat messages as JSON, their text checked as {@link toText} does (their shape is Rust's to
 * check).
 * @param {unknown} messages
 * @returns {string}
 */
export function messagesJson(messages) {
  if (Array.isArray(messages)) {
    messages.forEach((m, i) => {
      if (!isPlainObject(m)) return;
      for (const key of ['role', 'content']) {
        if (typeof m[key] === 'string') toText(m[key], `message ${i} ${key}`);
      }
    });
  }
  return JSON.stringify(messages);
}

/**
 * An optional callback.
 * @param {unknown} f
 * @param {string} name
 * @returns {Function | undefined}
 */
export function toCallback(f, name) {
  if (f !== undefined && typeof f !== 'function') throw coded('invalid_argument', `${name} must be a function`);
  return /** @type {Function | undefined} */ (f);
}

/**
 * An optional AbortSignal.
 * @param {unknown} signal
 * @returns {AbortSignal | undefined}
 */
export function toSignal(signal) {
  if (signal !== undefined && (typeof signal !== 'object' || signal === null ||
    typeof (/** @type {any} */ (signal)).aborted !== 'boolean')) {
    throw coded('invalid_argument', 'signal must be an AbortSignal');
  }
  return /** @type {AbortSignal | undefined} */ (signal);
}

/**
 * A prompt as a model's `admit` takes it (WasmHost's and the stations' WasmCoordinator's): token
 * ids, text, or chat messages (`{ role, content }[]`, or `{ messages, tools?, suffix?,
 * addGenerationPrompt? }`) as `{ chat, tools?, addGenerationPrompt?, suffix? }` with the
 * messages and tools in JSON, rendered and encoded in Rust so that the prompt crosses once.
 * @param {unknown} prompt
 * @param {boolean} [addGenerationPrompt] for messages (default true)
 */
export function toPrompt(prompt, addGenerationPrompt) {
  if (ArrayBuffer.isView(prompt)) return toTokenIds(prompt);
  if (typeof prompt === 'string') return toText(prompt, 'prompt');
  // A list of numbers is token ids (an empty list is messages: none, which Rust refuses).
  if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((x) => typeof x === 'number')) return toTokenIds(prompt);
  if (Array.isArray(prompt)) {
    return { chat: messagesJson(prompt), ...(addGenerationPrompt === undefined ? {} : { addGenerationPrompt }) };
  }
  if (isPlainObject(prompt) && Array.isArray(/** @type {any} */ (prompt).messages)) {
    const { messages, tools, suffix, addGenerationPrompt: add = addGenerationPrompt } = /** @type {any} */ (prompt);
    if (add !== undefined && typeof add !== 'boolean') {
      throw coded('invalid_argument', 'prompt.addGenerationPrompt must be true or false');
    }
    return {
      chat: messagesJson(messages),
      ...(tools === undefined ? {} : { tools: toJson(tools) }),
      ...(add === undefined ? {} : { addGenerationPrompt: add }),
      ...(suffix === undefined ? {} : { suffix: toText(suffix, 'prompt.suffix') }),
    };
  }
  throw coded('invalid_argument', 'a prompt is text, chat messages ({ role, content }[] or { messages, tools }), or token ids');
}
