// Anthropic's Messages API (`POST /v1/messages`) over the chat path: `system` and the messages'
// text, `tool_use` and `tool_result` blocks become chat messages, tools with `input_schema` chat
// tools, `tool_choice` (auto, any, tool, none) chat's; the chat request's own checks then run, and
// a refusal names the Messages field. The answer is a `message` object, or streamed as
// Anthropic's events (`message_start` … `message_stop`); errors take Anthropic's shape.
import { ApiError, badRequest as bad } from './errors.js';
import { newId } from './shapes.js';
import { parseChatRequest } from './request.js';

/** @param {unknown} v */
const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Fields a client may send that change nothing here. */
const IGNORED = new Set(['metadata', 'service_tier']);
/** Fields refused unless they ask for nothing (`thinking` may be `{ type: 'disabled' }`). */
const REFUSED = new Set(['container', 'mcp_servers', 'context_management']);
const FIELDS = new Set(['model', 'messages', 'system', 'max_tokens', 'stop_sequences', 'stream', 'temperature', 'top_p',
  'top_k', 'tools', 'tool_choice', 'thinking', 'moa', 'coltrane', 'draft_mode', 'health', 'knot']);

/** Anthropic's error type for an HTTP status. */
const ERROR_TYPE = { 400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error', 404: 'not_found_error',
  413: 'request_too_large', 429: 'rate_limit_error', 529: 'overloaded_error' };

/**
 * An error as Anthropic answers it: `{ type: 'error', error: { type, message } }` (the OpenAI
 * code and param kept beside, for what names the field).
 * @param {ApiError} e
 */
export function anthropicError(e) {
  const type = ERROR_TYPE[e.status] ?? (e.status >= 500 ? 'api_error' : 'invalid_request_error');
  return { type: 'error', error: { type, message: e.message, ...(e.param === null ? {} : { param: e.param }), ...(e.code === null ? {} : { code: e.code }) } };
}

/** @param {ApiError} e */
export function anthropicErrorResponse(e) {
  return Response.json(anthropicError(e), { status: e.status, headers: e.headers });
}

/**
 * A block list's text (text blocks only), or a string.
 * @param {unknown} content @param {string} at
 */
function blocksText(content, at) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw bad(`${at} must be a string or a list of content blocks`, at, 'invalid_value');
  return content.map((b, j) => {
    if (isObject(b) && b.type === 'text' && typeof b.text === 'string') return b.text;
    throw bad(`${at}[${j}]: only text blocks are supported here`, `${at}[${j}]`, 'unsupported_value');
  }).join('');
}

/**
 * The conversation as chat messages, each with the field it came from: an assistant turn's
 * `tool_use` blocks its calls, a user turn's `tool_result` blocks the tool messages answering
 * them (before the turn's text).
 * @returns {{ messages: object[], origin: string[] }}
 */
function chatMessages(list) {
  if (!Array.isArray(list) || list.length === 0) {
    throw bad("'messages' must be a non-empty list of { role, content }", 'messages', 'invalid_value');
  }
  const messages = [];
  const origin = [];
  list.forEach((m, i) => {
    const at = `messages[${i}]`;
    if (!isObject(m) || (m.role !== 'user' && m.role !== 'assistant')) {
      throw bad(`${at}.role must be 'user' or 'assistant'`, `${at}.role`, 'invalid_value');
    }
    if (typeof m.content === 'string') {
      messages.push({ role: m.role, content: m.content });
      origin.push(at);
      return;
    }
    if (!Array.isArray(m.content)) throw bad(`${at}.content must be a string or a list of content blocks`, `${at}.content`, 'invalid_value');
    let text = '';
    const calls = [];
    m.content.forEach((b, j) => {
      const bat = `${at}.content[${j}]`;
      if (!isObject(b)) throw bad(`${bat} must be a content block`, bat, 'invalid_value');
      if (b.type === 'text' && typeof b.text === 'string') {
        text += b.text;
      } else if (b.type === 'tool_use' && m.role === 'assistant') {
        if (typeof b.id !== 'string' || b.id === '' || typeof b.name !== 'string' || !isObject(b.input)) {
          throw bad(`${bat} must be { type: 'tool_use', id, name, input: {…} }`, bat, 'invalid_value');
        }
        calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input) } });
      } else if (b.type === 'tool_result' && m.role === 'user') {
        if (typeof b.tool_use_id !== 'string' || b.tool_use_id === '') {
          throw bad(`${bat}.tool_use_id must be the id of the tool_use it answers`, `${bat}.tool_use_id`, 'invalid_value');
        }
        const result = b.content === undefined ? '' : blocksText(b.content, `${bat}.content`);
        messages.push({ role: 'tool', tool_call_id: b.tool_use_id, content: b.is_error === true ? `Error: ${result}` : result });
        origin.push(bat);
      } else if (b.type === 'thinking' || b.type === 'redacted_thinking') {
        // A client echoing a turn back: nothing of it reaches the prompt.
      } else {
        throw bad(`${bat}.type '${b.type}' is not supported in a ${m.role} turn (text, ${m.role === 'user' ? 'tool_result' : 'tool_use'})`,
          `${bat}.type`, 'unsupported_value');
      }
    });
    if (m.role === 'assistant') {
      messages.push(calls.length > 0 ? { role: 'assistant', content: text === '' ? null : text, tool_calls: calls } : { role: 'assistant', content: text });
      origin.push(at);
    } else if (text !== '' || messages.at(-1)?.role !== 'tool') {
      messages.push({ role: 'user', content: text });
      origin.push(at);
    }
  });
  return { messages, origin };
}

/** `tools`: `[{ name, description?, input_schema }]` (client tools), as chat tools. */
function chatTools(tools) {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw bad("'tools' must be a list of tools", 'tools', 'invalid_value');
  return tools.map((t, i) => {
    if (!isObject(t)) throw bad(`tools[${i}] must be { name, description, input_schema }`, `tools[${i}]`, 'invalid_value');
    if (t.type !== undefined && t.type !== null && t.type !== 'custom') {
      throw bad(`tools[${i}].type '${t.type}' is not supported (client tools only)`, `tools[${i}].type`, 'unsupported_value');
    }
    const extra = Object.keys(t).find((k) => !['type', 'name', 'description', 'input_schema', 'cache_control'].includes(k));
    if (extra !== undefined) throw bad(`Unrecognized field tools[${i}].${extra}`, `tools[${i}].${extra}`, 'unknown_parameter');
    if (!isObject(t.input_schema)) throw bad(`tools[${i}].input_schema must be a JSON Schema object`, `tools[${i}].input_schema`, 'invalid_value');
    return { type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } };
  });
}

/** `tool_choice` as chat's, and whether calls may come several at once. */
function chatToolChoice(v) {
  if (v === undefined || v === null) return { choice: undefined, parallel: true };
  if (!isObject(v) || typeof v.type !== 'string') throw bad("'tool_choice' must be { type: 'auto' | 'any' | 'tool' | 'none' }", 'tool_choice', 'invalid_value');
  const parallel = v.disable_parallel_tool_use !== true;
  switch (v.type) {
    case 'auto': return { choice: 'auto', parallel };
    case 'any': return { choice: 'required', parallel };
    case 'none': return { choice: 'none', parallel };
    case 'tool':
      if (typeof v.name !== 'string') throw bad("'tool_choice' of type 'tool' must name the tool", 'tool_choice.name', 'invalid_value');
      return { choice: { type: 'function', function: { name: v.name } }, parallel };
    default: throw bad(`'tool_choice.type' '${v.type}' is not one of auto, any, tool, none`, 'tool_choice.type', 'invalid_value');
  }
}

/**
 * Renames a chat request's refusal to the Messages fields it came from.
 * @param {ApiError} e @param {string[]} origin
 */
function renamed(e, origin) {
  if (!(e instanceof ApiError) || typeof e.param !== 'string') return e;
  const swap = (s) => s
    .replace(/messages\[(\d+)\]/g, (_, i) => origin[Number(i)] ?? 'messages')
    .replace(/^stop\b/, 'stop_sequences')
    .replace(/tools\[(\d+)\]\.function\.parameters/g, 'tools[$1].input_schema')
    .replace(/tools\[(\d+)\]\.function\./g, 'tools[$1].');
  return new ApiError(e.status, swap(e.message).replace(/'stop'/g, "'stop_sequences'"), { type: e.type, param: swap(e.param), code: e.code, headers: e.headers });
}

/**
 * A failure after the request was read, named as the Messages API names its fields.
 * @param {ApiError} e
 */
export const messagesError = (e) => renamed(e, []);

/**
 * A Messages request, checked and read as the chat request it runs as.
 * @param {Record<string, unknown>} body
 * @param {Parameters<typeof parseChatRequest>[1]} limits
 */
export function parseMessagesRequest(body, limits) {
  for (const key of Object.keys(body)) {
    if (FIELDS.has(key) || IGNORED.has(key)) continue;
    if (REFUSED.has(key)) {
      const v = body[key];
      if (v === null || (Array.isArray(v) && v.length === 0)) continue;
      throw bad(`'${key}' is not supported by this server`, key, 'unsupported_parameter');
    }
    throw bad(`Unrecognized request argument supplied: ${key}`, key, 'unknown_parameter');
  }
  // Anthropic requires it.
  if (body.max_tokens === undefined || body.max_tokens === null) throw bad("'max_tokens' is required", 'max_tokens', 'missing_required_parameter');
  if (body.thinking !== undefined && body.thinking !== null && !(isObject(body.thinking) && body.thinking.type === 'disabled')) {
    throw bad("'thinking' is not supported by this server (only { type: 'disabled' })", 'thinking', 'unsupported_parameter');
  }
  if (body.temperature !== undefined && body.temperature !== null && !(typeof body.temperature === 'number' && body.temperature >= 0 && body.temperature <= 1)) {
    throw bad(`'temperature' must be a number between 0 and 1, got ${JSON.stringify(body.temperature)}`, 'temperature', 'invalid_value');
  }
  let topK;
  if (body.top_k !== undefined && body.top_k !== null) {
    if (!Number.isInteger(body.top_k) || /** @type {number} */ (body.top_k) < 0) throw bad("'top_k' must be a whole number ≥ 0", 'top_k', 'invalid_value');
    topK = body.top_k;
  }
  if (body.stop_sequences !== undefined && body.stop_sequences !== null && !Array.isArray(body.stop_sequences)) {
    throw bad("'stop_sequences' must be a list of strings", 'stop_sequences', 'invalid_value');
  }
  const system = body.system === undefined || body.system === null ? '' : blocksText(body.system, 'system');
  const { messages: turns, origin } = chatMessages(body.messages);
  const messages = system === '' ? turns : [{ role: 'system', content: system }, ...turns];
  const at = system === '' ? origin : ['system', ...origin];
  const { choice, parallel } = chatToolChoice(body.tool_choice);
  const chat = {
    model: body.model, messages, max_tokens: body.max_tokens,
    ...(body.tools !== undefined ? { tools: chatTools(body.tools) } : {}),
    ...(choice !== undefined ? { tool_choice: choice } : {}),
    ...(parallel ? {} : { parallel_tool_calls: false }),
    ...(body.stop_sequences !== undefined && body.stop_sequences !== null ? { stop: body.stop_sequences } : {}),
    // Anthropic's default temperature is 1, as OpenAI's.
  };
  for (const key of ['temperature', 'top_p', 'stream', 'moa', 'coltrane', 'draft_mode', 'health', 'knot']) {
    if (body[key] !== undefined) chat[key] = body[key];
  }
  let req;
  try {
    req = parseChatRequest(chat, limits, () => null);
  } catch (e) {
    throw renamed(e, at);
  }
  if (topK !== undefined) req.options.topK = topK;
  return { ...req, includeUsage: false };
}

/** Anthropic's stop reason for a finish. */
const STOP_REASON = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use' };

/** A call's `input` (its arguments parsed: they parse, or the call did not count). */
const inputOf = (call) => JSON.parse(call.function.arguments);

/**
 * The message object and its stream events for one request (`shapes` for `messages`): each
 * builder returns a list of `{ event, data }`; the text block first, then each tool_use block.
 * @param {string} model
 */
export function messagesShapes(model) {
  const id = newId('msg_');
  const ev = (type, fields = {}) => ({ event: type, data: { type, ...fields } });
  let index = -1;
  /** The block open now. @type {'text' | 'tool_use' | null} */
  let open = null;
  const close = () => {
    if (open === null) return [];
    open = null;
    return [ev('content_block_stop', { index })];
  };
  const stopOf = (finish, more) => ({
    stop_reason: more.stopSequence !== null && finish === 'stop' ? 'stop_sequence' : (STOP_REASON[finish] ?? 'end_turn'),
    stop_sequence: finish === 'stop' ? more.stopSequence : null,
  });
  const usageOf = (u, more) => ({
    input_tokens: u.prompt, output_tokens: u.completion,
    cache_creation_input_tokens: 0, cache_read_input_tokens: more.prefix?.reused ?? 0,
  });
  return {
    id,
    done: () => null,
    whole: (message, finish, u, knot, more) => ({
      id, type: 'message', role: 'assistant', model,
      content: [
        ...(message.content === null || message.content === '' ? [] : [{ type: 'text', text: message.content }]),
        ...message.toolCalls.map((c) => ({ type: 'tool_use', id: c.id, name: c.function.name, input: inputOf(c) })),
      ],
      ...stopOf(finish, more),
      usage: usageOf(u, more),
      knot,
    }),
    first: (u) => [ev('message_start', {
      message: {
        id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null,
        usage: { input_tokens: u.prompt, output_tokens: 0 },
      },
    })],
    piece: (text) => {
      const out = [];
      if (open !== 'text') {
        out.push(...close());
        open = 'text';
        out.push(ev('content_block_start', { index: ++index, content_block: { type: 'text', text: '' } }));
      }
      out.push(ev('content_block_delta', { index, delta: { type: 'text_delta', text } }));
      return out;
    },
    callStart: (_i, c) => {
      const out = close();
      open = 'tool_use';
      out.push(ev('content_block_start', { index: ++index, content_block: { type: 'tool_use', id: c.id, name: c.function.name, input: {} } }));
      return out;
    },
    callArguments: (_i, partial) => [ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: partial } })],
    last: (finish, knot, u, more) => [
      ...close(),
      ev('message_delta', { delta: stopOf(finish, more), usage: usageOf(u, more), knot }),
      ev('message_stop'),
    ],
    /** One of the project's events (an agentic loop's steps, calls and results). */
    event: (knot) => [ev('knot.event', { knot })],
    usage: () => null,
    error: (e) => [ev('error', { error: anthropicError(e).error })],
  };
}
