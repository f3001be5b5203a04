// The OpenAI API's shapes: requests checked and turned into the package's generation options,
// responses and stream chunks built, errors in OpenAI's `{ error: { message, type, param, code } }`.

/** An error answered as OpenAI does. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   * @param {{ type?: string, param?: string | null, code?: string | null, headers?: Record<string, string> }} [more]
   */
  constructor(status, message, more = {}) {
    super(message);
    this.status = status;
    this.type = more.type ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
    this.param = more.param ?? null;
    this.code = more.code ?? null;
    this.headers = more.headers ?? {};
  }
}

/** @param {ApiError} e */
export function errorResponse(e) {
  const body = { error: { message: e.message, type: e.type, param: e.param, code: e.code } };
  return Response.json(body, { status: e.status, headers: e.headers });
}

const bad = (message, param, code = null) => new ApiError(400, message, { param, code });

/** Parameters of OpenAI's API this server does not implement: named, not silently ignored. */
const UNSUPPORTED = new Set(['logprobs', 'top_logprobs', 'logit_bias', 'tools', 'tool_choice', 'functions',
  'function_call', 'parallel_tool_calls', 'audio', 'modalities', 'prediction', 'reasoning_effort', 'echo',
  'suffix', 'best_of', 'web_search_options', 'store']);

/** A value of an unsupported parameter that asks for nothing (what some clients send by default). */
const neutral = (key, v) => v === null || v === false || (Array.isArray(v) && v.length === 0) ||
  (typeof v === 'object' && v !== null && Object.keys(v).length === 0) ||
  (key === 'best_of' && v === 1) || (key === 'suffix' && v === '');

/**
 * Reads a JSON body of at most `maxBytes`: 413 past it (told by Content-Length or found while
 * reading), 400 for anything but a JSON object.
 * @param {Request} request
 * @param {number} maxBytes
 */
export async function readJson(request, maxBytes) {
  const declared = Number(request.headers.get('content-length') ?? NaN);
  const tooLarge = () => new ApiError(413, `The request body is larger than ${maxBytes} bytes`, { code: 'request_too_large' });
  if (declared > maxBytes) throw tooLarge();
  if (request.body === null) throw bad('The request has no body: send a JSON object', null, 'invalid_json');
  const reader = request.body.getReader();
  const chunks = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge();
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.byteLength;
  }
  let body;
  try {
    body = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (e) {
    throw bad(`The request body is not valid JSON: ${e.message}`, null, 'invalid_json');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw bad('The request body must be a JSON object', null, 'invalid_json');
  }
  return body;
}

/** @param {unknown} v */
const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * @param {Record<string, unknown>} body
 * @param {string} name
 * @param {number} lo
 * @param {number} hi
 */
function number(body, name, lo, hi) {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi) {
    throw bad(`'${name}' must be a number between ${lo} and ${hi}, got ${JSON.stringify(v)}`, name, 'invalid_value');
  }
  return v;
}

/**
 * @param {Record<string, unknown>} body
 * @param {string} name
 * @param {number} lo
 * @param {number} hi
 */
function integer(body, name, lo, hi) {
  const v = number(body, name, -Infinity, Infinity);
  if (v === undefined) return undefined;
  if (!Number.isInteger(v) || v < lo || v > hi) {
    throw bad(`'${name}' must be an integer between ${lo} and ${hi}, got ${JSON.stringify(v)}`, name, 'invalid_value');
  }
  return v;
}

/** `stop`: a string or a list of up to 4 non-empty strings. */
function stopSequences(body) {
  const v = body.stop;
  if (v === undefined || v === null) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.length > 4 || list.some((s) => typeof s !== 'string' || s === '')) {
    throw bad("'stop' must be a non-empty string or a list of at most 4 non-empty strings", 'stop', 'invalid_value');
  }
  return list;
}

/**
 * The generation options both endpoints share: sampling, penalties, seed, stop, stream, the token
 * budget, and the project's extensions (`moa`, `coltrane`, `draft_mode`).
 * @param {Record<string, unknown>} body
 * @param {Set<string>} known the endpoint's own fields
 * @param {{ maxTokens: number, defaultMaxTokens: number, modelId: string }} limits
 */
function common(body, known, limits) {
  for (const key of Object.keys(body)) {
    if (known.has(key)) continue;
    if (UNSUPPORTED.has(key)) {
      if (neutral(key, body[key])) continue;
      throw bad(`'${key}' is not supported by this server`, key, 'unsupported_parameter');
    }
    throw bad(`Unrecognized request argument supplied: ${key}`, key, 'unknown_parameter');
  }
  if (typeof body.model !== 'string' || body.model === '') {
    throw bad("You must provide a model parameter ('model': a string)", 'model', 'missing_model');
  }
  if (body.model !== limits.modelId) {
    throw new ApiError(404, `The model '${body.model}' does not exist (this server has '${limits.modelId}')`,
      { param: 'model', code: 'model_not_found' });
  }
  const n = integer(body, 'n', 1, 128);
  if (n !== undefined && n !== 1) throw bad("Only 'n': 1 is supported (one choice per request)", 'n', 'unsupported_value');
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') {
    throw bad("'stream' must be true or false", 'stream', 'invalid_value');
  }
  const stream = body.stream === true;
  let includeUsage = false;
  if (body.stream_options !== undefined && body.stream_options !== null) {
    if (!stream) throw bad("'stream_options' is only allowed with 'stream': true", 'stream_options', 'invalid_value');
    if (!isObject(body.stream_options)) throw bad("'stream_options' must be an object", 'stream_options', 'invalid_value');
    const extra = Object.keys(body.stream_options).find((k) => k !== 'include_usage' && k !== 'include_obfuscation');
    if (extra) throw bad(`Unrecognized stream option: ${extra}`, 'stream_options', 'unknown_parameter');
    includeUsage = body.stream_options.include_usage === true;
  }
  /** @type {Record<string, unknown>} */
  const options = {};
  const temperature = number(body, 'temperature', 0, 2);
  const topP = number(body, 'top_p', 0, 1);
  if (topP === 0) throw bad("'top_p' must be above 0", 'top_p', 'invalid_value');
  const presence = number(body, 'presence_penalty', -2, 2);
  const frequency = number(body, 'frequency_penalty', -2, 2);
  const seed = integer(body, 'seed', Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
  // The project's extensions go to the package as they are: their fields are checked (and
  // named in the error) where they are read, in Rust.
  const moa = body.moa !== undefined && body.moa !== null && body.moa !== false;
  if (moa) options.moa = body.moa;
  if (temperature !== undefined || !moa) {
    // OpenAI's default: temperature 1 (MOA sets its own temperatures).
    options.temperature = temperature ?? 1;
  }
  if (topP !== undefined) options.topP = topP;
  if (presence) options.presencePenalty = presence;
  if (frequency) options.frequencyPenalty = frequency;
  // OpenAI's seeds are any 64-bit integer; ours are unsigned: the same bits. Without one, every
  // request samples differently, as OpenAI's do.
  options.seed = seed === undefined
    ? String(BigInt(Math.floor(Math.random() * 2 ** 53)))
    : String(BigInt.asUintN(64, BigInt(seed)));
  if (body.coltrane !== undefined && body.coltrane !== null && body.coltrane !== false) options.coltrane = body.coltrane;
  if (body.draft_mode !== undefined && body.draft_mode !== null) options.draftMode = body.draft_mode;
  return { options, stream, includeUsage, stop: stopSequences(body) };
}

/**
 * `max_tokens` (or `max_completion_tokens`): at most the server's cap.
 * @param {Record<string, unknown>} body
 * @param {{ maxTokens: number, defaultMaxTokens: number }} limits
 */
function maxTokens(body, limits, names) {
  const given = names.map((n) => [n, integer(body, n, 1, Number.MAX_SAFE_INTEGER)]).filter(([, v]) => v !== undefined);
  if (given.length === 0) return limits.defaultMaxTokens;
  const [name, v] = given[0];
  if (v > limits.maxTokens) {
    throw bad(`'${name}' is ${v}, more than this server's limit of ${limits.maxTokens}`, name, 'invalid_value');
  }
  return v;
}

const CHAT_FIELDS = new Set(['model', 'messages', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p',
  'seed', 'stop', 'presence_penalty', 'frequency_penalty', 'n', 'stream', 'stream_options', 'user',
  'response_format', 'moa', 'coltrane', 'draft_mode']);

const ROLES = new Set(['system', 'developer', 'user', 'assistant']);

/** A message's content: a string, or text parts. */
function messageText(content, i) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((part, j) => {
      if (isObject(part) && part.type === 'text' && typeof part.text === 'string') return part.text;
      throw bad(`messages[${i}].content[${j}]: only text parts are supported`, `messages[${i}].content`, 'unsupported_value');
    }).join('');
  }
  throw bad(`messages[${i}].content must be a string or a list of text parts`, `messages[${i}].content`, 'invalid_value');
}

/**
 * A chat completion request, checked.
 * @param {Record<string, unknown>} body
 * @param {{ maxTokens: number, defaultMaxTokens: number, modelId: string }} limits
 * @param {(format: object) => object | null} fromResponseFormat the package's mapping to COLTRANE
 */
export function parseChatRequest(body, limits, fromResponseFormat) {
  const c = common(body, CHAT_FIELDS, limits);
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    throw bad("'messages' must be a non-empty list of { role, content }", 'messages', 'invalid_value');
  }
  const messages = body.messages.map((m, i) => {
    if (!isObject(m) || typeof m.role !== 'string') throw bad(`messages[${i}] must be { role, content }`, `messages[${i}]`, 'invalid_value');
    if (!ROLES.has(m.role)) {
      throw bad(`messages[${i}].role '${m.role}' is not supported (system, developer, user, assistant)`, `messages[${i}].role`, 'invalid_value');
    }
    // The chat templates know 'system'; OpenAI's 'developer' is the same instruction role.
    return { role: m.role === 'developer' ? 'system' : m.role, content: messageText(m.content, i) };
  });
  if (body.response_format !== undefined && body.response_format !== null) {
    if (!isObject(body.response_format)) throw bad("'response_format' must be an object", 'response_format', 'invalid_value');
    if (c.options.coltrane !== undefined && body.response_format.type !== 'text') {
      throw bad("Give 'response_format' or 'coltrane', not both", 'response_format', 'invalid_value');
    }
    let coltrane;
    try {
      coltrane = fromResponseFormat(body.response_format);
    } catch (e) {
      throw bad(`'response_format': ${e.message}`, 'response_format', 'invalid_value');
    }
    if (coltrane !== null) c.options.coltrane = coltrane;
  }
  return { ...c, messages, maxTokens: maxTokens(body, limits, ['max_completion_tokens', 'max_tokens']) };
}

const COMPLETION_FIELDS = new Set(['model', 'prompt', 'max_tokens', 'temperature', 'top_p', 'seed', 'stop',
  'presence_penalty', 'frequency_penalty', 'n', 'stream', 'stream_options', 'user', 'moa', 'coltrane', 'draft_mode']);

/**
 * A (legacy) completion request, checked: `prompt` is a string, a list of one string, token ids,
 * or a list of one list of ids.
 * @param {Record<string, unknown>} body
 * @param {{ maxTokens: number, defaultMaxTokens: number, modelId: string }} limits
 */
export function parseCompletionRequest(body, limits) {
  const c = common(body, COMPLETION_FIELDS, limits);
  let p = body.prompt;
  if (Array.isArray(p) && p.length === 1 && (typeof p[0] === 'string' || Array.isArray(p[0]))) p = p[0];
  /** @type {string | number[]} */
  let prompt;
  if (typeof p === 'string') {
    if (p === '') throw bad("'prompt' must not be empty", 'prompt', 'invalid_value');
    prompt = p;
  } else if (Array.isArray(p) && p.length > 0 && p.every((t) => Number.isInteger(t) && t >= 0 && t <= 0xffffffff)) {
    prompt = p;
  } else {
    throw bad("'prompt' must be a non-empty string or a list of token ids (one prompt per request)", 'prompt', 'invalid_value');
  }
  // The legacy endpoint's default is 16 tokens.
  return { ...c, prompt, maxTokens: maxTokens(body, { ...limits, defaultMaxTokens: Math.min(16, limits.maxTokens) }, ['max_tokens']) };
}

/** Ids like OpenAI's: a prefix and 24 random alphanumerics. */
export function newId(prefix) {
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  return `${prefix}-${Array.from(bytes, (b) => alphabet[b % alphabet.length]).join('')}`;
}

/**
 * Response and chunk builders for one request.
 * @param {'chat' | 'completion'} kind
 * @param {string} model
 */
export function shapes(kind, model) {
  const id = newId(kind === 'chat' ? 'chatcmpl' : 'cmpl');
  const created = Math.floor(Date.now() / 1000);
  const usage = (prompt, completion) => ({ prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion });
  if (kind === 'chat') {
    return {
      id,
      whole: (text, finish, u) => ({
        id, object: 'chat.completion', created, model,
        choices: [{ index: 0, message: { role: 'assistant', content: text, refusal: null }, logprobs: null, finish_reason: finish }],
        usage: usage(u.prompt, u.completion),
      }),
      first: () => ({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] }),
      piece: (text) => ({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta: { content: text }, logprobs: null, finish_reason: null }] }),
      last: (finish) => ({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: finish }] }),
      usage: (u) => ({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: usage(u.prompt, u.completion) }),
    };
  }
  return {
    id,
    whole: (text, finish, u) => ({
      id, object: 'text_completion', created, model,
      choices: [{ text, index: 0, logprobs: null, finish_reason: finish }],
      usage: usage(u.prompt, u.completion),
    }),
    first: () => null,
    piece: (text) => ({ id, object: 'text_completion', created, model, choices: [{ text, index: 0, logprobs: null, finish_reason: null }] }),
    last: (finish) => ({ id, object: 'text_completion', created, model, choices: [{ text: '', index: 0, logprobs: null, finish_reason: finish }] }),
    usage: (u) => ({ id, object: 'text_completion', created, model, choices: [], usage: usage(u.prompt, u.completion) }),
  };
}
