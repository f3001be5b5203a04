// The APIs agent clients speak, against a server of ours (knot-serve in test/serve.test.js, the
// Worker in examples/worker/test/worker.test.js), through the official clients: OpenAI's
// Responses API with the `openai` package (`client.responses.create`, plain, streamed, a function
// tool round trip with `function_call_output`, `text.format` json_schema, `previous_response_id`)
// and Anthropic's Messages API with `@anthropic-ai/sdk` (`client.messages.create` and `.stream`,
// a tool round trip, a forced `tool_choice`). Greedy text equals chat completions' for the same
// conversation; every refused field is named in a 400 of that API's shape.
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import Ajv from 'ajv';
import { describe, test, testIf } from './harness.js';
import { post } from './servers.js';

const CAPITAL = 'What is the capital of France? Answer in one sentence.';
const WEATHER_SCHEMA = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };

/**
 * `quick`: one plain request through each client (the Worker and Bun/Deno run that; the module's
 * code is the same everywhere).
 * @param {{ url(): string, model: string, quick?: boolean }} server
 */
export function agentApisSuite(server) {
  const full = (name, fn) => testIf(!server.quick, name, fn);
  /** @type {OpenAI | undefined} */
  let openaiClient;
  /** @type {Anthropic | undefined} */
  let anthropicClient;
  const openai = () => (openaiClient ??= new OpenAI({ baseURL: `${server.url()}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 120_000 }));
  const anthropic = () => (anthropicClient ??= new Anthropic({ baseURL: server.url(), apiKey: 'not-needed', maxRetries: 0, timeout: 120_000 }));
  /** Chat completions' greedy answer to `messages`, the reference. */
  const chat = async (messages, maxTokens, extra = {}) => {
    const r = await openai().chat.completions.create({ model: server.model, messages, temperature: 0, max_tokens: maxTokens, ...extra });
    return r.choices[0].message;
  };

  describe('the Responses API (POST /v1/responses, the openai client)', () => {
    test('plain: greedy output_text equals chat completions, with instructions as the system message', async () => {
      const want = await chat([{ role: 'system', content: 'You are terse.' }, { role: 'user', content: CAPITAL }], 32);
      const r = await openai().responses.create({ model: server.model, instructions: 'You are terse.', input: CAPITAL, temperature: 0, max_output_tokens: 32 });
      assert.equal(r.object, 'response');
      assert.equal(r.status, 'completed');
      assert.equal(r.output_text, want.content);
      assert.equal(r.output.length, 1);
      assert.equal(r.output[0].type, 'message');
      assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
      assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    });

    full('streamed: the Responses events in order, the text as the whole answer; the SDK\'s stream helper reads it', async () => {
      const whole = await openai().responses.create({ model: server.model, input: CAPITAL, temperature: 0, max_output_tokens: 24 });
      const stream = await openai().responses.create({ model: server.model, input: CAPITAL, temperature: 0, max_output_tokens: 24, stream: true });
      const types = [];
      let text = '';
      let last = -1;
      let completed;
      for await (const e of stream) {
        assert.ok(e.sequence_number > last, 'sequence numbers increase');
        last = e.sequence_number;
        types.push(e.type);
        if (e.type === 'response.output_text.delta') text += e.delta;
        if (e.type === 'response.completed') completed = e.response;
      }
      const distinct = types.filter((t, i) => t !== types[i - 1]);
      assert.deepEqual(distinct, ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
        'response.output_text.delta', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
      assert.equal(text, whole.output_text);
      assert.equal(completed.output[0].content[0].text, text);
      // (cached_tokens: what prefix reuse served, which depends on the requests before.)
      assert.equal(completed.usage.input_tokens, whole.usage.input_tokens);
      assert.equal(completed.usage.output_tokens, whole.usage.output_tokens);
      const final = await openai().responses.stream({ model: server.model, input: CAPITAL, temperature: 0, max_output_tokens: 24 }).finalResponse();
      assert.equal(final.output_text, whole.output_text);
      // The budget cut it: incomplete, as OpenAI says so.
      const cut = await openai().responses.create({ model: server.model, input: CAPITAL, temperature: 0, max_output_tokens: 3 });
      assert.equal(cut.status, 'incomplete');
      assert.deepEqual(cut.incomplete_details, { reason: 'max_output_tokens' });
    });

    full('a function tool round trip: the call validates, its output continues by previous_response_id and by items alike', async () => {
      const tools = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_SCHEMA, strict: true }];
      const first = await openai().responses.create({ model: server.model, input: 'What is the weather in Paris?', tools, tool_choice: 'required', temperature: 0, max_output_tokens: 64 });
      const call = first.output.find((o) => o.type === 'function_call');
      assert.ok(call !== undefined, JSON.stringify(first.output));
      assert.equal(call.name, 'get_weather');
      const args = JSON.parse(call.arguments);
      assert.ok(new Ajv().validate(WEATHER_SCHEMA, args), call.arguments);
      // Streamed, the same call: its item added, its arguments in deltas, done.
      const stream = await openai().responses.create({ model: server.model, input: 'What is the weather in Paris?', tools, tool_choice: 'required', temperature: 0, max_output_tokens: 64, stream: true });
      let streamedArgs = '';
      const seen = [];
      for await (const e of stream) {
        if (e.type === 'response.function_call_arguments.delta') streamedArgs += e.delta;
        if (e.type.startsWith('response.function_call') || e.type.startsWith('response.output_item')) seen.push(e.type);
      }
      assert.equal(streamedArgs, call.arguments);
      assert.deepEqual(seen.filter((t, i) => t !== seen[i - 1]), ['response.output_item.added', 'response.function_call_arguments.delta',
        'response.function_call_arguments.done', 'response.output_item.done']);
      const result = { type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 °C' };
      const chained = await openai().responses.create({ model: server.model, previous_response_id: first.id, input: [result], tools, temperature: 0, max_output_tokens: 32 });
      const spelled = await openai().responses.create({
        model: server.model, tools, temperature: 0, max_output_tokens: 32, store: false,
        input: [{ role: 'user', content: 'What is the weather in Paris?' }, { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments }, result],
      });
      assert.equal(chained.output_text, spelled.output_text);
      // As chat completions answers the same conversation.
      const want = await chat([
        { role: 'user', content: 'What is the weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: call.call_id, type: 'function', function: { name: call.name, arguments: call.arguments } }] },
        { role: 'tool', tool_call_id: call.call_id, content: 'Sunny, 21 °C' },
      ], 32, { tools: [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_SCHEMA, strict: true } }] });
      assert.equal(spelled.output_text, want.content);
      // A response stored with store: false cannot be continued.
      const err = await openai().responses.create({ model: server.model, previous_response_id: spelled.id, input: 'And tomorrow?' }).catch((e) => e);
      assert.equal(err.status, 404);
      assert.equal(err.code, 'previous_response_not_found');
      assert.equal(err.param, 'previous_response_id');
    });

    full('text.format json_schema: the output parses and validates', async () => {
      const schema = { type: 'object', properties: { capital: { type: 'string' } }, required: ['capital'], additionalProperties: false };
      const r = await openai().responses.create({
        model: server.model, input: 'Give the capital of France as JSON.', temperature: 0, max_output_tokens: 48,
        text: { format: { type: 'json_schema', name: 'capital', schema, strict: true } },
      });
      assert.ok(new Ajv().validate(schema, JSON.parse(r.output_text)), r.output_text);
      assert.deepEqual(r.text.format.type, 'json_schema');
    });

    full('bad requests: each refused field named in a 400 of OpenAI\'s shape', async () => {
      const base = { model: server.model, input: 'Hi' };
      const cases = [
        [{ ...base, reasoning: { effort: 'high' } }, 'reasoning', 'unsupported_parameter'],
        [{ ...base, frobnicate: 1 }, 'frobnicate', 'unknown_parameter'],
        [{ ...base, input: [{ type: 'input_image', image_url: 'x' }] }, 'input[0].type', 'unsupported_value'],
        [{ ...base, input: [{ role: 'user', content: [{ type: 'input_image' }] }] }, 'input[0].content', 'unsupported_value'],
        [{ ...base, tools: [{ type: 'web_search' }] }, 'tools[0].type', 'unsupported_value'],
        [{ ...base, tools: [{ type: 'function', name: 'a b' }] }, 'tools[0].name', 'invalid_value'],
        [{ ...base, max_output_tokens: 100000 }, 'max_output_tokens', 'invalid_value'],
        [{ ...base, temperature: 3 }, 'temperature', 'invalid_value'],
        // (A schema COLTRANE cannot enforce: 422, as on chat completions.)
        [{ ...base, text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object', patternProperties: { a: {} } } } } }, 'text.format', 'unsupported_schema'],
        [{ ...base, input: [{ type: 'function_call_output', call_id: 'nope', output: 'x' }] }, 'input[0].tool_call_id', 'invalid_value'],
        [{ ...base, previous_response_id: 'resp_missing' }, 'previous_response_id', 'previous_response_not_found'],
        [{ input: 'Hi' }, 'model', 'missing_model'],
      ];
      for (const [body, param, code] of cases) {
        const r = await post(server.url(), '/v1/responses', body);
        assert.ok([400, 404, 422].includes(r.status), `${JSON.stringify(body)}: ${r.status} ${r.text}`);
        assert.equal(r.json.error.param, param, r.text);
        assert.equal(r.json.error.code, code, r.text);
        assert.equal(typeof r.json.error.message, 'string');
      }
    });
  });

  describe('the Messages API (POST /v1/messages, the @anthropic-ai/sdk client)', () => {
    test('plain: greedy text equals chat completions, whole and streamed', async () => {
      const want = await chat([{ role: 'system', content: 'You are terse.' }, { role: 'user', content: CAPITAL }], 32);
      const m = await anthropic().messages.create({ model: server.model, max_tokens: 32, temperature: 0, system: 'You are terse.', messages: [{ role: 'user', content: CAPITAL }] });
      assert.equal(m.type, 'message');
      assert.equal(m.role, 'assistant');
      assert.deepEqual(m.content, [{ type: 'text', text: want.content }]);
      assert.equal(m.stop_reason, 'end_turn');
      assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0);
      const stream = anthropic().messages.stream({ model: server.model, max_tokens: 32, temperature: 0, system: 'You are terse.', messages: [{ role: 'user', content: CAPITAL }] });
      let text = '';
      stream.on('text', (t) => { text += t; });
      const final = await stream.finalMessage();
      assert.equal(text, want.content);
      assert.deepEqual(final.content, m.content);
      assert.equal(final.stop_reason, 'end_turn');
      assert.equal(final.usage.output_tokens, m.usage.output_tokens);
    });

    full('stop reasons: max_tokens and a stop sequence (named)', async () => {
      const cut = await anthropic().messages.create({ model: server.model, max_tokens: 3, temperature: 0, messages: [{ role: 'user', content: CAPITAL }] });
      assert.equal(cut.stop_reason, 'max_tokens');
      const stopped = await anthropic().messages.create({ model: server.model, max_tokens: 32, temperature: 0, stop_sequences: ['Paris'], messages: [{ role: 'user', content: CAPITAL }] });
      assert.equal(stopped.stop_reason, 'stop_sequence');
      assert.equal(stopped.stop_sequence, 'Paris');
      assert.ok(!stopped.content[0].text.includes('Paris'));
    });

    full('tools: a forced tool_choice {type: tool} call validates; its tool_result continues as chat completions would', async () => {
      const tools = [{ name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER_SCHEMA }];
      const ask = { role: 'user', content: 'What is the weather in Paris?' };
      const forced = await anthropic().messages.create({ model: server.model, max_tokens: 64, temperature: 0, tools, tool_choice: { type: 'tool', name: 'get_weather' }, messages: [ask] });
      assert.equal(forced.stop_reason, 'tool_use');
      const use = forced.content.find((b) => b.type === 'tool_use');
      assert.equal(use.name, 'get_weather');
      assert.ok(new Ajv().validate(WEATHER_SCHEMA, use.input), JSON.stringify(use.input));
      // Streamed, the same call (its input from input_json_delta pieces).
      const streamed = await anthropic().messages.stream({ model: server.model, max_tokens: 64, temperature: 0, tools, tool_choice: { type: 'any' }, messages: [ask] }).finalMessage();
      assert.deepEqual(streamed.content.find((b) => b.type === 'tool_use').input, use.input);
      const answered = await anthropic().messages.create({
        model: server.model, max_tokens: 32, temperature: 0, tools,
        messages: [ask, { role: 'assistant', content: forced.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 °C' }] }],
      });
      const want = await chat([
        ask,
        { role: 'assistant', content: null, tool_calls: [{ id: use.id, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify(use.input) } }] },
        { role: 'tool', tool_call_id: use.id, content: 'Sunny, 21 °C' },
      ], 32, { tools: [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_SCHEMA } }] });
      assert.equal(answered.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), want.content ?? '');
    });

    full('bad requests: each refused field named in a 400 of Anthropic\'s shape; the SDK reads it', async () => {
      const base = { model: server.model, max_tokens: 8, messages: [{ role: 'user', content: 'Hi' }] };
      const cases = [
        [{ model: server.model, messages: base.messages }, 'max_tokens'],
        [{ ...base, temperature: 1.5 }, 'temperature'],
        [{ ...base, tools: [{ name: 'f' }] }, 'tools[0].input_schema'],
        [{ ...base, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, 'messages[0].content[0].type'],
        [{ ...base, messages: [{ role: 'system', content: 'x' }] }, 'messages[0].role'],
        [{ ...base, tool_choice: { type: 'sometimes' } }, 'tool_choice.type'],
        [{ ...base, thinking: { type: 'enabled', budget_tokens: 1024 } }, 'thinking'],
        [{ ...base, stop_sequences: ['a', ''] }, 'stop_sequences'],
        [{ ...base, frobnicate: 1 }, 'frobnicate'],
      ];
      for (const [body, param] of cases) {
        const r = await post(server.url(), '/v1/messages', body);
        assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
        assert.equal(r.json.type, 'error', r.text);
        assert.equal(r.json.error.type, 'invalid_request_error', r.text);
        assert.equal(r.json.error.param, param, r.text);
        assert.equal(typeof r.json.error.message, 'string');
      }
      const err = await anthropic().messages.create({ ...base, model: 'no-such-model' }).catch((e) => e);
      assert.ok(err instanceof Anthropic.NotFoundError, String(err));
      assert.equal(err.error.error.type, 'not_found_error');
      // And it keeps serving.
      const ok = await anthropic().messages.create(base);
      assert.equal(ok.type, 'message');
    });
  });
}
