// OpenAI requests read and checked: the body (size-capped JSON), the parameters both endpoints
// share turned into the package's generation options, chat messages (tool calls and results
// included) and tools. Every refusal is a 400 (or 404, 413) naming the field.
import { ApiError, badRequest as bad } from './errors.js';

/** Parameters of OpenAI's API this server does not implement: named, not silently ignored. */
const UNSUPPORTED = new Set(['logprobs', 'top_logprobs', 'logit_bias', 'functions', 'function_call', 'audio', 'modalities', 'prediction', 'reasoning_effort', 'echo',
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
 * budget, and the project's extensions (`moa`, `coltrane`, `draft_mode`, `health`).
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
  if (body.health !== undefined && body.health !== null && body.health !== false) options.health = body.health;
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
  'response_format', 'tools', 'tool_choice', 'parallel_tool_calls', 'moa', 'coltrane', 'draft_mode', 'health', 'knot']);

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool']);

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
 * @param {{ maxTokens: number, defaultMaxTokens: number, modelId: string, maxMessages?: number, maxTools?: number }} limits
 *   maxMessages, maxTools: the most a request may send (the server's caps; unset: none)
 * @param {(format: object) => object | null} fromResponseFormat the package's mapping to COLTRANE
 */
export function parseChatRequest(body, limits, fromResponseFormat) {
  const c = common(body, CHAT_FIELDS, limits);
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    throw bad("'messages' must be a non-empty list of { role, content }", 'messages', 'invalid_value');
  }
  // Counted before anything is read from them: each is work (a template, a schema compiled).
  if (limits.maxMessages !== undefined && body.messages.length > limits.maxMessages) {
    throw bad(`'messages' has ${body.messages.length} messages, more than this server's limit of ${limits.maxMessages}`, 'messages', 'too_many_messages');
  }
  if (limits.maxTools !== undefined && Array.isArray(body.tools) && body.tools.length > limits.maxTools) {
    throw bad(`'tools' has ${body.tools.length} tools, more than this server's limit of ${limits.maxTools}`, 'tools', 'too_many_tools');
  }
  const messages = chatMessages(body.messages);
  const tools = toolList(body.tools);
  const toolChoice = toolChoiceOf(body.tool_choice, tools);
  // A choice of tools with no tools is for the agentic loop only (its servers bring the tools).
  const toolChoiceWithoutTools = tools.length === 0 && toolChoice !== 'none'
    ? bad("'tool_choice' is only allowed when 'tools' are given", 'tool_choice', 'invalid_value') : null;
  if (body.parallel_tool_calls !== undefined && body.parallel_tool_calls !== null && typeof body.parallel_tool_calls !== 'boolean') {
    throw bad("'parallel_tool_calls' must be true or false", 'parallel_tool_calls', 'invalid_value');
  }
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
  if (toolChoice !== 'none' && c.options.coltrane !== undefined) {
    throw bad("Tool calls are constrained by the server: give 'tools' or 'response_format' / 'coltrane', not both",
      body.response_format !== undefined ? 'response_format' : 'coltrane', 'invalid_value');
  }
  return {
    ...c,
    messages,
    tools,
    toolChoice,
    toolChoiceGiven: body.tool_choice !== undefined && body.tool_choice !== null,
    toolChoiceWithoutTools,
    agentic: agenticField(body.knot),
    parallelToolCalls: body.parallel_tool_calls !== false,
    maxTokens: maxTokens(body, limits, ['max_completion_tokens', 'max_tokens']),
  };
}

/** The fields of `knot.agentic` (the project's extension object on a chat request): budgets as numbers. */
const AGENTIC_BUDGETS = { max_steps: [2, 64], max_total_tokens: [1, 1 << 24], max_ms: [1, 3_600_000], tool_timeout_ms: [1, 600_000] };

/**
 * `knot`: `{ agentic?: true | false | { max_steps?, max_total_tokens?, max_ms?, tool_timeout_ms?,
 * servers? (which configured servers; default all), mcp_servers? (more, within the allow-list) } }`. The budgets are checked against the server's caps where the loop starts.
 * @returns {undefined | false | { budgets: Record<string, number>, mcpServers?: unknown, only?: string[] }}
 */
function agenticField(knot) {
  if (knot === undefined || knot === null) return undefined;
  if (!isObject(knot)) throw bad("'knot' must be an object ({ agentic })", 'knot', 'invalid_value');
  const extra = Object.keys(knot).find((k) => k !== 'agentic');
  if (extra !== undefined) throw bad(`Unrecognized field knot.${extra}`, `knot.${extra}`, 'unknown_parameter');
  const a = knot.agentic;
  if (a === undefined || a === null) return undefined;
  if (a === false) return false;
  if (a === true) return { budgets: {} };
  if (!isObject(a)) throw bad("'knot.agentic' must be true, false or an object of budgets and mcp_servers", 'knot.agentic', 'invalid_value');
  /** @type {Record<string, number>} */
  const budgets = {};
  if (a.servers !== undefined && (!Array.isArray(a.servers) || a.servers.some((n) => typeof n !== 'string'))) {
    throw bad("'knot.agentic.servers' must be a list of configured servers' names", 'knot.agentic.servers', 'invalid_value');
  }
  for (const key of Object.keys(a)) {
    if (key === 'mcp_servers' || key === 'servers') continue;
    if (!Object.hasOwn(AGENTIC_BUDGETS, key)) throw bad(`Unrecognized field knot.agentic.${key}`, `knot.agentic.${key}`, 'unknown_parameter');
    const [lo, hi] = AGENTIC_BUDGETS[key];
    const v = a[key];
    if (!Number.isInteger(v) || v < lo || v > hi) {
      throw bad(`'knot.agentic.${key}' must be an integer from ${lo} to ${hi}`, `knot.agentic.${key}`, 'invalid_value');
    }
    budgets[key] = v;
  }
  return {
    budgets,
    ...(a.mcp_servers !== undefined ? { mcpServers: a.mcp_servers } : {}),
    ...(a.servers !== undefined ? { only: a.servers } : {}),
  };
}

/** Tool and function names, as OpenAI allows them. */
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const MAX_TOOLS = 128;

/**
 * `tools`: `[{ type: 'function', function: { name, description?, parameters?, strict? } }]`.
 * @returns {{ name: string, description: string, parameters: object, strict: boolean }[]}
 */
function toolList(v) {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.length > MAX_TOOLS) throw bad(`'tools' must be a list of at most ${MAX_TOOLS} tools`, 'tools', 'invalid_value');
  const seen = new Set();
  return v.map((t, i) => {
    const at = `tools[${i}]`;
    if (!isObject(t) || t.type !== 'function' || !isObject(t.function)) {
      throw bad(`${at} must be { type: 'function', function: { name, parameters } }`, at, 'invalid_value');
    }
    const f = t.function;
    if (typeof f.name !== 'string' || !TOOL_NAME.test(f.name)) {
      throw bad(`${at}.function.name must be 1 to 64 letters, digits, '_' or '-'`, `${at}.function.name`, 'invalid_value');
    }
    if (seen.has(f.name)) throw bad(`${at}.function.name '${f.name}' is given twice`, `${at}.function.name`, 'invalid_value');
    seen.add(f.name);
    if (f.description !== undefined && f.description !== null && typeof f.description !== 'string') {
      throw bad(`${at}.function.description must be a string`, `${at}.function.description`, 'invalid_value');
    }
    if (f.parameters !== undefined && f.parameters !== null && !isObject(f.parameters)) {
      throw bad(`${at}.function.parameters must be a JSON Schema object`, `${at}.function.parameters`, 'invalid_value');
    }
    if (f.strict !== undefined && f.strict !== null && typeof f.strict !== 'boolean') {
      throw bad(`${at}.function.strict must be true or false`, `${at}.function.strict`, 'invalid_value');
    }
    // No parameters: the function takes none (OpenAI's reading).
    const parameters = f.parameters ?? { type: 'object', properties: {}, additionalProperties: false };
    return { name: f.name, description: f.description ?? '', parameters, strict: f.strict === true };
  });
}

/**
 * `tool_choice`: 'none' | 'auto' | 'required' | { type: 'function', function: { name } }; the
 * default is 'auto' with tools, 'none' without.
 * @returns {'none' | 'auto' | 'required' | { name: string }}
 */
function toolChoiceOf(v, tools) {
  if (v === undefined || v === null) return tools.length > 0 ? 'auto' : 'none';
  if (v === 'none' || v === 'auto' || v === 'required') return v;
  if (isObject(v) && v.type === 'function' && isObject(v.function) && typeof v.function.name === 'string') {
    // Without tools, the agentic loop's servers may have it: checked once they listed theirs.
    if (tools.length > 0 && !tools.some((t) => t.name === v.function.name)) {
      throw bad(`'tool_choice' names '${v.function.name}', which is not in 'tools'`, 'tool_choice', 'invalid_value');
    }
    return { name: v.function.name };
  }
  throw bad("'tool_choice' must be 'none', 'auto', 'required' or { type: 'function', function: { name } }", 'tool_choice', 'invalid_value');
}

/**
 * The conversation, checked: roles, text content, an assistant turn's `tool_calls` (ids, names,
 * arguments as a JSON string of an object) and each `tool` turn answering a call of the
 * assistant turn before it, once.
 * @returns {{ role: string, content: string | null, tool_calls?: { id: string, type: 'function',
 *   function: { name: string, arguments: string } }[], tool_call_id?: string, name?: string }[]}
 */
function chatMessages(list) {
  /** Calls of the last assistant turn not answered yet: id → name. */
  let open = new Map();
  return list.map((m, i) => {
    const at = `messages[${i}]`;
    if (!isObject(m) || typeof m.role !== 'string') throw bad(`${at} must be { role, content }`, at, 'invalid_value');
    if (!ROLES.has(m.role)) {
      throw bad(`${at}.role '${m.role}' is not supported (system, developer, user, assistant, tool)`, `${at}.role`, 'invalid_value');
    }
    if (m.role === 'tool') {
      if (typeof m.tool_call_id !== 'string' || m.tool_call_id === '') {
        throw bad(`${at}.tool_call_id must be the id of the call it answers`, `${at}.tool_call_id`, 'invalid_value');
      }
      if (!open.has(m.tool_call_id)) {
        throw bad(`${at}.tool_call_id '${m.tool_call_id}' does not match a call of the assistant message before it (or was answered already)`,
          `${at}.tool_call_id`, 'invalid_value');
      }
      const name = open.get(m.tool_call_id);
      open.delete(m.tool_call_id);
      return { role: 'tool', content: messageText(m.content, i), tool_call_id: m.tool_call_id, name };
    }
    open = new Map();
    if (m.role === 'assistant' && m.tool_calls !== undefined && m.tool_calls !== null) {
      if (!Array.isArray(m.tool_calls)) throw bad(`${at}.tool_calls must be a list`, `${at}.tool_calls`, 'invalid_value');
      const calls = m.tool_calls.map((call, j) => {
        const c = `${at}.tool_calls[${j}]`;
        if (!isObject(call) || typeof call.id !== 'string' || call.id === '' || !isObject(call.function)) {
          throw bad(`${c} must be { id, type: 'function', function: { name, arguments } }`, c, 'invalid_value');
        }
        if (call.type !== undefined && call.type !== 'function') throw bad(`${c}.type must be 'function'`, `${c}.type`, 'invalid_value');
        if (typeof call.function.name !== 'string' || call.function.name === '') {
          throw bad(`${c}.function.name must be a string`, `${c}.function.name`, 'invalid_value');
        }
        if (typeof call.function.arguments !== 'string') {
          throw bad(`${c}.function.arguments must be a string (the arguments as JSON)`, `${c}.function.arguments`, 'invalid_value');
        }
        let args;
        try {
          args = JSON.parse(call.function.arguments);
        } catch {
          args = undefined;
        }
        if (!isObject(args)) {
          throw bad(`${c}.function.arguments must be a JSON object written as a string`, `${c}.function.arguments`, 'invalid_value');
        }
        if (open.has(call.id)) throw bad(`${c}.id '${call.id}' is used twice`, `${c}.id`, 'invalid_value');
        open.set(call.id, call.function.name);
        return { id: call.id, type: 'function', function: { name: call.function.name, arguments: call.function.arguments } };
      });
      const content = m.content === null || m.content === undefined ? null : messageText(m.content, i);
      return calls.length > 0 ? { role: 'assistant', content, tool_calls: calls } : { role: 'assistant', content: content ?? '' };
    }
    // The chat templates know 'system'; OpenAI's 'developer' is the same instruction role.
    return { role: m.role === 'developer' ? 'system' : m.role, content: messageText(m.content, i) };
  });
}

const COMPLETION_FIELDS = new Set(['model', 'prompt', 'max_tokens', 'temperature', 'top_p', 'seed', 'stop',
  'presence_penalty', 'frequency_penalty', 'n', 'stream', 'stream_options', 'user', 'moa', 'coltrane', 'draft_mode', 'health']);

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
