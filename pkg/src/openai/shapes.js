// The response and stream-chunk shapes of OpenAI's chat and (legacy) completion endpoints, for
// one request. The project's own figures ride in a `knot` field (OpenAI's clients keep unknown
// fields).

/** Ids like OpenAI's: a prefix and 24 random alphanumerics. */
export function newId(prefix) {
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  return `${prefix}${prefix.endsWith('_') ? '' : '-'}${Array.from(bytes, (b) => alphabet[b % alphabet.length]).join('')}`;
}

/**
 * An id like OpenAI's, derived from `key`: the same key gives the same id. A tool call's id is
 * written into the prompt of the turn that answers it (the client echoes it back, the agentic
 * loop renders it), so a random one would make greedy answers differ between equal requests.
 * @param {string} prefix @param {string} key
 */
export function derivedId(prefix, key) {
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
  // Four 32-bit FNV-1a lanes with different offsets, mixed (murmur3's finalizer): 24 characters.
  const lanes = [0x811c9dc5, 0x01000193, 0x9e3779b9, 0x85ebca6b];
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    for (let l = 0; l < 4; l++) lanes[l] = Math.imul(lanes[l] ^ c ^ (l << 16), 0x01000193);
  }
  let out = '';
  for (let l = 0; l < 4; l++) {
    let h = lanes[l];
    for (let k = 0; k < 6; k++) {
      h ^= h >>> 16;
      h = Math.imul(h, 0x85ebca6b);
      h ^= h >>> 13;
      h = Math.imul(h, 0xc2b2ae35);
      h ^= h >>> 16;
      out += alphabet[(h >>> 0) % alphabet.length];
      h = (h + 0x9e3779b9 + k) | 0;
    }
  }
  return `${prefix}${out}`;
}

/**
 * @typedef {{ id: string, type: 'function', function: { name: string, arguments: string } }} ToolCall
 * @typedef {{ prompt: number, completion: number }} Usage
 */

const usageOf = (u) => ({ prompt_tokens: u.prompt, completion_tokens: u.completion, total_tokens: u.prompt + u.completion });

/**
 * Response and chunk builders for one request.
 * @param {'chat' | 'completion'} kind
 * @param {string} model
 */
export function shapes(kind, model) {
  const id = newId(kind === 'chat' ? 'chatcmpl' : 'cmpl');
  const created = Math.floor(Date.now() / 1000);
  if (kind === 'chat') {
    const chunk = (delta, finish = null) => ({
      id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    });
    return {
      id,
      done: () => 'data: [DONE]\n\n',
      /**
       * @param {{ content: string | null, toolCalls: ToolCall[] }} message
       * @param {string} finish
       * @param {Usage} u
       * @param {object} knot the project's figures
       */
      whole: (message, finish, u, knot) => ({
        id, object: 'chat.completion', created, model,
        choices: [{
          index: 0,
          message: {
            role: 'assistant', content: message.content, refusal: null,
            ...(message.toolCalls.length > 0 ? { tool_calls: message.toolCalls } : {}),
          },
          logprobs: null,
          finish_reason: finish,
        }],
        usage: usageOf(u),
        knot,
      }),
      first: () => chunk({ role: 'assistant', content: '' }),
      piece: (text) => chunk({ content: text }),
      /** A call's first chunk: its index, id, type and name (arguments follow in pieces). */
      callStart: (index, call) => chunk({
        tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.function.name, arguments: '' } }],
      }),
      callArguments: (index, fragment) => chunk({ tool_calls: [{ index, function: { arguments: fragment } }] }),
      last: (finish, knot) => ({ ...chunk({}, finish), knot }),
      /** One of the project's events (an agentic loop's steps, calls and results): no delta. */
      event: (knot) => ({ ...chunk({}), knot }),
      usage: (u) => ({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: usageOf(u) }),
    };
  }
  const chunk = (text, finish = null) => ({
    id, object: 'text_completion', created, model, choices: [{ text, index: 0, logprobs: null, finish_reason: finish }],
  });
  return {
    id,
    done: () => 'data: [DONE]\n\n',
    whole: (message, finish, u, knot) => ({
      id, object: 'text_completion', created, model,
      choices: [{ text: message.content ?? '', index: 0, logprobs: null, finish_reason: finish }],
      usage: usageOf(u),
      knot,
    }),
    first: () => null,
    piece: (text) => chunk(text),
    callStart: () => null,
    callArguments: () => null,
    last: (finish, knot) => ({ ...chunk('', finish), knot }),
    event: () => null,
    usage: (u) => ({ id, object: 'text_completion', created, model, choices: [], usage: usageOf(u) }),
  };
}
