// Tool calling on small models, made valid by construction. Two ways, chosen by the template:
//
// - tag: a template that takes `tools` and writes calls as `<tool_call>{json}</tool_call>` (Hermes,
//   Qwen 2.5/3, SmolLM3) gets the tools through the template; the model writes freely until it
//   opens its call tag, then writes the call under a COLTRANE JSON-Schema mask: a union, over the
//   tools, of `{ "name": const, "arguments": that tool's parameters }`.
// - envelope: any other template (SmolLM2, Gemma 3) gets a system block listing the tools, and
//   the whole answer is one JSON value under a mask from its first token: `{"tool_call": call}`
//   or `{"response": "text"}`.
//
// `required` and a named tool force a call from the first token (the tag path starts inside the
// tag); `none` offers no tool. A call that the token budget cut short is never reported as one.

/**
 * @typedef {{ name: string, description: string, parameters: object, strict: boolean }} Tool
 * @typedef {'none' | 'auto' | 'required' | { name: string }} ToolChoice
 * @typedef {ToolChoice | 'answer'} LoopChoice 'answer' (the agentic loop's last word): no tool,
 *   and with the envelope, an answer in it
 * @typedef {{ role: string, content: string | null, tool_calls?: { id: string, type: 'function',
 *   function: { name: string, arguments: string } }[], tool_call_id?: string, name?: string }} Message
 */

/** The agentic loop's last word to the model, said after the results. */
const ANSWER_NOW = 'Now answer my question using this result.';

/**
 * The schema of one call: a union over the tools it may name.
 * @param {Tool[]} tools
 */
export function callSchema(tools) {
  const one = (t) => ({
    type: 'object',
    properties: { name: { const: t.name }, arguments: ownResource(t.parameters, t.name) },
    required: ['name', 'arguments'],
    additionalProperties: false,
  });
  return tools.length === 1 ? one(tools[0]) : { anyOf: tools.map(one) };
}

/**
 * A tool's parameters as embedded in a call's schema: a schema resource of their own (an `$id`),
 * so the `$ref`s inside (`#/$defs/…`, `#`) keep meaning the parameters, not the call around
 * them. Parameters that name their own resource keep it.
 * @param {object} parameters @param {string} name
 */
export function ownResource(parameters, name) {
  if (parameters === null || typeof parameters !== 'object' || Array.isArray(parameters)) return parameters;
  if (typeof parameters.$id === 'string' || typeof parameters.id === 'string') return parameters;
  return { $id: `urn:knot:tool:${encodeURIComponent(name)}`, ...parameters };
}

/**
 * The envelope's schema: a call, or (with `auto`) a text answer.
 * @param {Tool[]} tools
 * @param {boolean} mayAnswer
 */
export function envelopeSchema(tools, mayAnswer) {
  const answer = { type: 'object', properties: { response: { type: 'string' } }, required: ['response'], additionalProperties: false };
  if (tools.length === 0) return answer;
  const call = { type: 'object', properties: { tool_call: callSchema(tools) }, required: ['tool_call'], additionalProperties: false };
  if (!mayAnswer) return call;
  return { anyOf: [call, answer] };
}

/** The tools a choice offers. @param {Tool[]} tools @param {ToolChoice} choice */
export function offered(tools, choice) {
  if (choice === 'none') return [];
  if (typeof choice === 'object') return tools.filter((t) => t.name === choice.name);
  return tools;
}

/** The tools as templates receive them (OpenAI's shape, which Hugging Face templates read). */
export const templateTools = (tools) => tools.map((t) => ({
  type: 'function',
  function: { name: t.name, description: t.description, parameters: t.parameters },
}));

/**
 * Messages as a template that takes tools reads them: calls' arguments as objects.
 * @param {Message[]} messages
 */
export function tagMessages(messages) {
  return messages.map((m) => (m.tool_calls === undefined ? m : {
    ...m,
    content: m.content ?? '',
    tool_calls: m.tool_calls.map((c) => ({ ...c, function: { name: c.function.name, arguments: JSON.parse(c.function.arguments) } })),
  }));
}

/**
 * The envelope's instructions, put in the system turn.
 * @param {Tool[]} tools
 * @param {ToolChoice} choice
 */
function envelopeInstructions(tools, choice) {
  const list = tools.map((t) => JSON.stringify({ name: t.name, description: t.description, parameters: t.parameters })).join('\n');
  const call = '{"tool_call": {"name": "<tool name>", "arguments": {<arguments>}}}';
  const how = choice === 'auto'
    ? `To call a tool, reply with exactly ${call}. To answer without a tool, reply with {"response": "<your answer>"}.`
    : typeof choice === 'object'
      ? `Call the tool ${choice.name}: reply with exactly {"tool_call": {"name": "${choice.name}", "arguments": {<arguments>}}}.`
      : `Call one of the tools: reply with exactly ${call}.`;
  return `You can call these tools (JSON Schema of their arguments):\n${list}\n${how}`;
}

/**
 * Messages for a template without tools: the tools listed in the system turn, past calls written
 * as the envelope the model would have written, and tool results as a user turn (templates such
 * as Gemma's allow only alternating user and assistant turns).
 * @param {Message[]} messages
 * @param {Tool[]} tools offered now (none: only the history is rewritten)
 * @param {ToolChoice} choice
 * @returns {{ role: string, content: string }[]}
 */
export function envelopeMessages(messages, tools, choice) {
  /** @type {{ role: string, content: string }[]} */
  const out = [];
  /** Whether the last turn in `out` holds tool results (the next result joins it). */
  let results = false;
  for (const m of messages) {
    if (m.role === 'tool') {
      const result = `Result of the tool ${m.name} (call ${m.tool_call_id}):\n${m.content}`;
      if (results) out[out.length - 1].content += `\n\n${result}`;
      else out.push({ role: 'user', content: result });
      results = true;
      continue;
    }
    results = false;
    if (m.tool_calls !== undefined) {
      const calls = m.tool_calls.map((c) => JSON.stringify({ tool_call: { name: c.function.name, arguments: JSON.parse(c.function.arguments) } }));
      out.push({ role: 'assistant', content: (m.content ? `${m.content}\n` : '') + calls.join('\n') });
    } else {
      out.push({ role: m.role, content: m.content ?? '' });
    }
  }
  if (choice === 'answer') {
    // Said last, after the results: small models keep to what they read last (in the system
    // turn, SmolLM2 answered from the question and not from the result).
    const last = out[out.length - 1];
    if (last?.role === 'user') last.content += `\n\n${ANSWER_NOW}`;
    else out.push({ role: 'user', content: ANSWER_NOW });
    return out;
  }
  if (tools.length === 0) return out;
  const text = envelopeInstructions(tools, choice);
  if (out[0]?.role === 'system') out[0] = { role: 'system', content: `${out[0].content}\n\n${text}` };
  else out.unshift({ role: 'system', content: text });
  return out;
}

/**
 * How a chat request with tools is run.
 * @param {{ messages: Message[], tools: Tool[], toolChoice: LoopChoice, parallelToolCalls: boolean }} req
 * @param {{ takesTools: boolean, callTag: string | null }} template
 * @returns {{ mode: 'plain' | 'envelope' | 'tag', messages: object[], templateTools?: object[],
 *   tools: Tool[], forced: boolean, callTag: string | null, closeTag: string | null, maxCalls: number }}
 */
export function toolPlan(req, template) {
  if (req.toolChoice === 'answer') return answerPlan(req, template);
  const tools = offered(req.tools, req.toolChoice);
  const forced = req.toolChoice === 'required' || typeof req.toolChoice === 'object';
  const maxCalls = req.parallelToolCalls ? 8 : 1;
  const history = req.messages.some((m) => m.role === 'tool' || m.tool_calls !== undefined);
  if (template.takesTools && template.callTag !== null) {
    const closeTag = template.callTag.replace('<', '</');
    return {
      mode: tools.length > 0 ? 'tag' : 'plain',
      messages: tagMessages(req.messages),
      // Even with `none`, a template shows the conversation's tools if the request has them.
      templateTools: req.tools.length > 0 ? templateTools(req.tools) : undefined,
      tools, forced, callTag: template.callTag, closeTag, maxCalls,
    };
  }
  if (tools.length === 0 && !history) {
    return { mode: 'plain', messages: req.messages, tools, forced, callTag: null, closeTag: null, maxCalls };
  }
  return {
    mode: tools.length > 0 ? 'envelope' : 'plain',
    messages: envelopeMessages(req.messages, tools, req.toolChoice),
    tools, forced, callTag: null, closeTag: null, maxCalls: 1,
  };
}

/**
 * The agentic loop's last turn: no tool offered, the model answers from the results it has —
 * with the envelope, inside it (a model that has written envelopes all along keeps to the form;
 * set free, it writes one more call as text).
 * @param {{ messages: Message[] }} req
 * @param {{ takesTools: boolean, callTag: string | null }} template
 */
function answerPlan(req, template) {
  const none = { tools: [], forced: false, callTag: null, closeTag: null, maxCalls: 0 };
  if (template.takesTools && template.callTag !== null) {
    return { ...none, mode: 'plain', messages: [...tagMessages(req.messages), { role: 'user', content: ANSWER_NOW }] };
  }
  return { ...none, mode: 'envelope', messages: envelopeMessages(req.messages, [], 'answer') };
}
