// OpenAI's Responses API (`POST /v1/responses`) over the chat path: a request's `instructions`
// and `input` items become chat messages, its flat function tools chat tools, `text.format` a
// response format, `max_output_tokens` the budget; the chat request's own checks then run, and a
// refusal names the Responses field. The answer is a `response` object, or streamed as the
// Responses events (`response.created` … `response.completed`). `previous_response_id` continues
// a stored response: its conversation is kept (a bounded store, newest kept), and the prompt's
// shared prefix is served by prefix reuse, as a chat's next turn is.
import { ApiError, badRequest as bad } from './errors.js';
import { newId } from './shapes.js';
import { parseChatRequest } from './request.js';

/** @param {unknown} v */
const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Fields a client may send that change nothing here (kept in the response where it has them). */
const IGNORED = new Set(['metadata', 'user', 'service_tier', 'prompt_cache_key', 'safety_identifier', 'truncation']);
/** Fields refused unless they ask for nothing. */
const REFUSED = new Set(['background', 'reasoning', 'include', 'conversation', 'prompt', 'top_logprobs', 'max_tool_calls']);
/** The fields read here, and the project's extensions passed through to the chat request. */
const FIELDS = new Set(['model', 'input', 'instructions', 'tools', 'tool_choice', 'parallel_tool_calls', 'text',
  'max_output_tokens', 'temperature', 'top_p', 'seed', 'stream', 'store', 'previous_response_id',
  'moa', 'coltrane', 'draft_mode', 'health', 'knot']);

/**
 * Responses to continue from, by id: their conversation so far (chat messages), newest last —
 * at most `max` of them and `maxBytes` of their text in all (a Worker's isolate has 128 MB).
 */
export class ResponseStore {
  /** @param {number} max @param {number} maxBytes */
  constructor(max = 256, maxBytes = 8 << 20) {
    this.max = max;
    this.maxBytes = maxBytes;
    this.bytes = 0;
    /** @type {Map<string, { messages: object[], bytes: number }>} */
    this.map = new Map();
  }

  /** @param {string} id */
  get(id) {
    return this.map.get(id)?.messages;
  }

  /** @param {string} id @param {object[]} messages */
  put(id, messages) {
    const bytes = 2 * JSON.stringify(messages).length;
    this.#drop(id);
    this.map.set(id, { messages, bytes });
    this.bytes += bytes;
    while (this.map.size > this.max || (this.bytes > this.maxBytes && this.map.size > 1)) this.#drop(this.map.keys().next().value);
  }

  /** @param {string} id */
  #drop(id) {
    const e = this.map.get(id);
    if (e === undefined) return;
    this.bytes -= e.bytes;
    this.map.delete(id);
  }
}

/**
 * A message item's content: a string, or input/output text parts.
 * @param {unknown} content @param {string} at
 */
function itemText(content, at) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((part, j) => {
      if (isObject(part) && (part.type === 'input_text' || part.type === 'output_text') && typeof part.text === 'string') return part.text;
      throw bad(`${at}.content[${j}]: only input_text and output_text parts are supported`, `${at}.content`, 'unsupported_value');
    }).join('');
  }
  throw bad(`${at}.content must be a string or a list of text parts`, `${at}.content`, 'invalid_value');
}

/**
 * `input` (a string or items) as chat messages, each with the field it came from.
 * @returns {{ messages: object[], origin: string[] }}
 */
function inputMessages(input) {
  if (typeof input === 'string') {
    if (input === '') throw bad("'input' must not be empty", 'input', 'invalid_value');
    return { messages: [{ role: 'user', content: input }], origin: ['input'] };
  }
  if (!Array.isArray(input) || input.length === 0) {
    throw bad("'input' must be a non-empty string or a list of items", 'input', 'invalid_value');
  }
  const messages = [];
  const origin = [];
  input.forEach((item, i) => {
    const at = `input[${i}]`;
    if (!isObject(item)) throw bad(`${at} must be an item object`, at, 'invalid_value');
    const type = item.type ?? 'message';
    if (type === 'message') {
      if (!['user', 'assistant', 'system', 'developer'].includes(/** @type {string} */ (item.role))) {
        throw bad(`${at}.role must be user, assistant, system or developer`, `${at}.role`, 'invalid_value');
      }
      messages.push({ role: item.role, content: itemText(item.content, at) });
      origin.push(at);
    } else if (type === 'function_call') {
      if (typeof item.call_id !== 'string' || item.call_id === '' || typeof item.name !== 'string' || typeof item.arguments !== 'string') {
        throw bad(`${at} must be { type: 'function_call', call_id, name, arguments }`, at, 'invalid_value');
      }
      const call = { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } };
      // A turn's calls (after its text, if it said any) are one assistant message's.
      const last = messages.at(-1);
      if (last?.role === 'assistant') {
        last.tool_calls = [...(last.tool_calls ?? []), call];
      } else {
        messages.push({ role: 'assistant', content: null, tool_calls: [call] });
        origin.push(at);
      }
    } else if (type === 'function_call_output') {
      if (typeof item.call_id !== 'string' || item.call_id === '') {
        throw bad(`${at}.call_id must be the call_id of the function_call it answers`, `${at}.call_id`, 'invalid_value');
      }
      messages.push({ role: 'tool', tool_call_id: item.call_id, content: itemText(item.output, at) });
      origin.push(at);
    } else {
      throw bad(`${at}.type '${type}' is not supported (message, function_call, function_call_output)`, `${at}.type`, 'unsupported_value');
    }
  });
  return { messages, origin };
}

/** `tools`: flat function tools, as chat tools. */
function chatTools(tools) {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw bad("'tools' must be a list of function tools", 'tools', 'invalid_value');
  return tools.map((t, i) => {
    if (!isObject(t) || t.type !== 'function') {
      throw bad(`tools[${i}].type must be 'function' (built-in tools are not supported)`, `tools[${i}].type`, 'unsupported_value');
    }
    const extra = Object.keys(t).find((k) => !['type', 'name', 'description', 'parameters', 'strict'].includes(k));
    if (extra !== undefined) throw bad(`Unrecognized field tools[${i}].${extra}`, `tools[${i}].${extra}`, 'unknown_parameter');
    return { type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters, strict: t.strict } };
  });
}

/** `tool_choice` as chat's. */
function chatToolChoice(v) {
  if (v === undefined || v === null || typeof v === 'string') return v;
  if (isObject(v) && v.type === 'function' && typeof v.name === 'string') return { type: 'function', function: { name: v.name } };
  throw bad("'tool_choice' must be 'none', 'auto', 'required' or { type: 'function', name }", 'tool_choice', 'invalid_value');
}

/** `text`: `{ format: { type: 'text' | 'json_object' } | { type: 'json_schema', name, schema, strict? } }`. */
function responseFormat(text) {
  if (text === undefined || text === null) return undefined;
  if (!isObject(text)) throw bad("'text' must be an object ({ format })", 'text', 'invalid_value');
  const extra = Object.keys(text).find((k) => k !== 'format' && k !== 'verbosity');
  if (extra !== undefined) throw bad(`Unrecognized field text.${extra}`, `text.${extra}`, 'unknown_parameter');
  const f = text.format;
  if (f === undefined || f === null) return undefined;
  if (!isObject(f)) throw bad("'text.format' must be an object", 'text.format', 'invalid_value');
  if (f.type === 'json_schema') {
    return { type: 'json_schema', json_schema: { name: f.name, schema: f.schema, strict: f.strict, description: f.description } };
  }
  return f;
}

/**
 * Renames a chat request's refusal to the Responses fields it came from (`origin`: each chat
 * message's; `textFormat`: the request gave `text.format`, which a schema refusal is about).
 * @param {ApiError} e @param {string[]} origin @param {boolean} [textFormat]
 */
function renamed(e, origin, textFormat = true) {
  if (!(e instanceof ApiError) || typeof e.param !== 'string') return e;
  const swap = (s) => s
    .replace(/^messages\[(\d+)\]/, (_, i) => origin[Number(i)] ?? 'input')
    .replace(/^messages\b/, 'input')
    .replace(/^max_tokens\b/, 'max_output_tokens')
    .replace(textFormat ? /^(response_format|coltrane)\b/ : /^response_format\b/, 'text.format')
    .replace(/^tools\[(\d+)\]\.function\./, 'tools[$1].');
  const param = swap(e.param);
  const message = e.message.replace(/messages\[(\d+)\]/g, (_, i) => origin[Number(i)] ?? 'input')
    .replace(/'max_tokens'/g, "'max_output_tokens'").replace(/'response_format'/g, "'text.format'")
    .replace(/tools\[(\d+)\]\.function\./g, 'tools[$1].');
  return new ApiError(e.status, message, { type: e.type, param, code: e.code, headers: e.headers });
}

/**
 * A failure after the request was read (a schema COLTRANE cannot enforce, a prompt past the
 * context), named as the Responses API names its fields.
 * @param {ApiError} e @param {boolean} textFormat the request gave `text.format`
 */
export const responsesError = (e, textFormat) => renamed(e, [], textFormat);

/**
 * A Responses request, checked and read as the chat request it runs as: the parsed chat request,
 * with `previous` (the conversation it continues), `input` (the messages this request adds) and
 * the fields its response repeats.
 * @param {Record<string, unknown>} body
 * @param {Parameters<typeof parseChatRequest>[1]} limits
 * @param {(format: object) => object | null} fromResponseFormat
 * @param {ResponseStore} store
 */
export function parseResponsesRequest(body, limits, fromResponseFormat, store) {
  for (const key of Object.keys(body)) {
    if (FIELDS.has(key) || IGNORED.has(key)) continue;
    if (REFUSED.has(key)) {
      const v = body[key];
      if (v === null || v === false || (Array.isArray(v) && v.length === 0)) continue;
      throw bad(`'${key}' is not supported by this server`, key, 'unsupported_parameter');
    }
    throw bad(`Unrecognized request argument supplied: ${key}`, key, 'unknown_parameter');
  }
  if (body.truncation !== undefined && body.truncation !== null && body.truncation !== 'disabled') {
    throw bad("Only 'truncation': 'disabled' is supported (a prompt past the context is refused)", 'truncation', 'unsupported_value');
  }
  if (body.store !== undefined && body.store !== null && typeof body.store !== 'boolean') {
    throw bad("'store' must be true or false", 'store', 'invalid_value');
  }
  if (body.instructions !== undefined && body.instructions !== null && typeof body.instructions !== 'string') {
    throw bad("'instructions' must be a string", 'instructions', 'invalid_value');
  }
  let previous = [];
  const prev = body.previous_response_id;
  if (prev !== undefined && prev !== null) {
    if (typeof prev !== 'string') throw bad("'previous_response_id' must be a response's id", 'previous_response_id', 'invalid_value');
    const kept = store.get(prev);
    if (kept === undefined) {
      throw new ApiError(404, `Previous response with id '${prev}' not found (this server keeps its last ${store.max} stored responses)`,
        { param: 'previous_response_id', code: 'previous_response_not_found' });
    }
    previous = kept;
  }
  const { messages: input, origin } = inputMessages(body.input);
  // Instructions lead the prompt; a previous response's are not carried over (OpenAI's rule).
  const system = typeof body.instructions === 'string' && body.instructions !== '' ? [{ role: 'system', content: body.instructions }] : [];
  const history = previous.filter((m) => m.role !== 'system');
  const messages = [...system, ...history, ...input];
  const at = [...system.map(() => 'instructions'), ...history.map(() => 'previous_response_id'), ...origin];
  const chat = {
    model: body.model, messages,
    ...(body.tools !== undefined ? { tools: chatTools(body.tools) } : {}),
    ...(body.tool_choice !== undefined ? { tool_choice: chatToolChoice(body.tool_choice) } : {}),
    ...(body.parallel_tool_calls !== undefined ? { parallel_tool_calls: body.parallel_tool_calls } : {}),
    ...(responseFormat(body.text) !== undefined ? { response_format: responseFormat(body.text) } : {}),
    ...(body.max_output_tokens !== undefined ? { max_tokens: body.max_output_tokens } : {}),
  };
  for (const key of ['temperature', 'top_p', 'seed', 'stream', 'moa', 'coltrane', 'draft_mode', 'health', 'knot']) {
    if (body[key] !== undefined) chat[key] = body[key];
  }
  let req;
  try {
    req = parseChatRequest(chat, limits, fromResponseFormat);
  } catch (e) {
    throw renamed(e, at);
  }
  return {
    ...req,
    // The whole stream's events carry the usage: there is no separate usage chunk.
    includeUsage: false,
    previous: [...history, ...input],
    echo: {
      instructions: body.instructions ?? null,
      max_output_tokens: body.max_output_tokens ?? null,
      metadata: isObject(body.metadata) ? body.metadata : {},
      parallel_tool_calls: body.parallel_tool_calls !== false,
      previous_response_id: prev ?? null,
      store: body.store !== false,
      temperature: body.temperature ?? 1,
      text: { format: isObject(body.text) && isObject(body.text.format) ? body.text.format : { type: 'text' } },
      tool_choice: body.tool_choice ?? 'auto',
      tools: Array.isArray(body.tools) ? body.tools : [],
      top_p: body.top_p ?? 1,
      truncation: 'disabled',
      user: body.user ?? null,
    },
  };
}

const usageOf = (u, cached) => ({
  input_tokens: u.prompt,
  input_tokens_details: { cached_tokens: cached },
  output_tokens: u.completion,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: u.prompt + u.completion,
});

/**
 * The response object and its stream events for one request (`shapes` for `responses`): each
 * builder returns a list of `{ event, data }`; the stream's items are opened and closed in order,
 * text first, then each function call.
 * @param {string} model
 * @param {{ echo: object }} req
 * @param {(id: string, output: object[]) => void} keep stores the finished response (store: true)
 */
export function responsesShapes(model, req, keep) {
  const id = newId('resp_');
  const created = Math.floor(Date.now() / 1000);
  let seq = 0;
  const ev = (type, fields) => ({ event: type, data: { type, sequence_number: seq++, ...fields } });
  /** Output items so far (the stream's), and the text item open now. */
  const output = [];
  /** @type {{ item: any, index: number } | null} */
  let text = null;
  /** @type {{ item: any, index: number } | null} */
  let call = null;
  const response = (status, extra = {}) => ({
    id, object: 'response', created_at: created, status, error: null, incomplete_details: null,
    model, output: [...output], ...req.echo, usage: null, ...extra,
  });
  const closeText = () => {
    if (text === null) return [];
    const { item, index } = text;
    text = null;
    item.status = 'completed';
    const part = item.content[0];
    return [
      ev('response.output_text.done', { item_id: item.id, output_index: index, content_index: 0, text: part.text, logprobs: [] }),
      ev('response.content_part.done', { item_id: item.id, output_index: index, content_index: 0, part }),
      ev('response.output_item.done', { output_index: index, item }),
    ];
  };
  const closeCall = () => {
    if (call === null) return [];
    const { item, index } = call;
    call = null;
    item.status = 'completed';
    return [
      ev('response.function_call_arguments.done', { item_id: item.id, output_index: index, arguments: item.arguments }),
      ev('response.output_item.done', { output_index: index, item }),
    ];
  };
  const ending = (finish) => (finish === 'length'
    ? { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } }
    : { status: 'completed', incomplete_details: null });
  const finished = (finish, u, knot, more) => {
    const { status, incomplete_details } = ending(finish);
    const r = response(status, { incomplete_details, usage: usageOf(u, more.prefix?.reused ?? 0), knot });
    if (req.echo.store) keep(id, output);
    return r;
  };
  return {
    id,
    sse: true,
    done: () => null,
    whole: (message, finish, u, knot, more) => {
      // The answer's items as the run ended (the stream's builders ran too, unsent).
      output.length = 0;
      if (message.content !== null && message.content !== '') {
        output.push({ id: newId('msg_'), type: 'message', status: 'completed', role: 'assistant',
          content: [{ type: 'output_text', text: message.content, annotations: [], logprobs: [] }] });
      }
      for (const c of message.toolCalls) {
        output.push({ id: newId('fc_'), type: 'function_call', status: 'completed', call_id: c.id, name: c.function.name, arguments: c.function.arguments });
      }
      return finished(finish, u, knot, more);
    },
    first: () => [ev('response.created', { response: response('in_progress') }), ev('response.in_progress', { response: response('in_progress') })],
    piece: (delta) => {
      const out = [];
      if (text === null) {
        out.push(...closeCall());
        const item = { id: newId('msg_'), type: 'message', status: 'in_progress', role: 'assistant', content: [] };
        text = { item, index: output.length };
        output.push(item);
        out.push(ev('response.output_item.added', { output_index: text.index, item: { ...item, content: [] } }));
        const part = { type: 'output_text', text: '', annotations: [], logprobs: [] };
        item.content.push(part);
        out.push(ev('response.content_part.added', { item_id: item.id, output_index: text.index, content_index: 0, part: { ...part } }));
      }
      text.item.content[0].text += delta;
      out.push(ev('response.output_text.delta', { item_id: text.item.id, output_index: text.index, content_index: 0, delta, logprobs: [] }));
      return out;
    },
    callStart: (_i, c) => {
      const out = [...closeText(), ...closeCall()];
      const item = { id: newId('fc_'), type: 'function_call', status: 'in_progress', call_id: c.id, name: c.function.name, arguments: '' };
      call = { item, index: output.length };
      output.push(item);
      out.push(ev('response.output_item.added', { output_index: call.index, item: { ...item } }));
      return out;
    },
    callArguments: (_i, delta) => {
      if (call === null) return [];
      call.item.arguments += delta;
      return [ev('response.function_call_arguments.delta', { item_id: call.item.id, output_index: call.index, delta })];
    },
    last: (finish, knot, u, more) => {
      const out = [...closeText(), ...closeCall()];
      const r = finished(finish, u, knot, more);
      out.push(ev(r.status === 'completed' ? 'response.completed' : 'response.incomplete', { response: r }));
      return out;
    },
    /** One of the project's events (an agentic loop's steps, calls and results). */
    event: (knot) => [ev('knot.event', { knot })],
    usage: () => null,
    error: (e) => [ev('error', { code: e.code, message: e.message, param: e.param })],
  };
}
