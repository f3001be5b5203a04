// Tool-call validity and choice on real models, through knot-wasm/openai in-process (Fetch API
// Request → Response, no HTTP): 32 prompts that each want one of 8 tools, asked with
// tool_choice 'auto' (did the model call, which tool, the right one?) and 'required' (the right
// one?), greedy. Every call must parse and validate against its tool's schema (Ajv).
//
//   node bench/tools.mjs [model.knot ...] [--chat-template FILE] [--json]
//
// Default: SmolLM2-135M-Instruct and Gemma-3-270M (the envelope way; Gemma's file has no chat
// template, so Gemma 3's turns from tests/fixtures/chat), then SmolLM2 with the tool-declaring
// chatml template of tests/fixtures/chat (the tag way).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import Ajv from 'ajv';
import { FileKnotSource, HostShim } from '../src/node.js';
import { openaiResponse } from '../src/openai/index.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const obj = (properties, required = Object.keys(properties)) => ({ type: 'object', properties, required, additionalProperties: false });
const TOOLS = [
  ['get_weather', 'The current weather in a city', obj({ city: { type: 'string' } })],
  ['add', 'Adds two numbers', obj({ a: { type: 'number' }, b: { type: 'number' } })],
  ['web_search', 'Searches the web', obj({ query: { type: 'string' } })],
  ['send_email', 'Sends an email', obj({ to: { type: 'string' }, subject: { type: 'string' }, body: { type: 'string' } })],
  ['set_timer', 'Sets a timer', obj({ minutes: { type: 'integer' } })],
  ['convert_currency', 'Converts an amount between currencies', obj({ amount: { type: 'number' }, from: { type: 'string' }, to: { type: 'string' } })],
  ['get_time', 'The current time in a time zone', obj({ timezone: { type: 'string' } })],
  ['translate', 'Translates text', obj({ text: { type: 'string' }, language: { enum: ['French', 'German', 'Spanish', 'Italian'] } })],
].map(([name, description, parameters]) => ({ type: 'function', function: { name, description, parameters } }));

const PROMPTS = [
  ['What is the weather in Paris?', 'get_weather'], ['Is it raining in London right now?', 'get_weather'],
  ['How warm is it in Tokyo today?', 'get_weather'], ['Tell me the weather forecast for Berlin.', 'get_weather'],
  ['What is 1234 plus 5678?', 'add'], ['Add 3.5 and 4.25.', 'add'], ['What do 17 and 25 sum to?', 'add'], ['Compute 999 + 1.', 'add'],
  ['Search the web for the tallest building in the world.', 'web_search'], ['Find recent news about electric cars.', 'web_search'],
  ['Look up who won the 2018 World Cup.', 'web_search'], ['Search for a good pancake recipe.', 'web_search'],
  ['Email bob@example.com that the meeting moved to 3pm.', 'send_email'], ['Send an email to alice@example.com saying thank you.', 'send_email'],
  ['Write to hr@example.com to ask for a day off.', 'send_email'], ['Email my boss at boss@example.com that I am sick.', 'send_email'],
  ['Set a timer for 10 minutes.', 'set_timer'], ['Remind me in 25 minutes with a timer.', 'set_timer'],
  ['Start a 5 minute timer for my tea.', 'set_timer'], ['I need a timer of 45 minutes.', 'set_timer'],
  ['Convert 100 US dollars to euros.', 'convert_currency'], ['How many yen is 50 pounds?', 'convert_currency'],
  ['Change 20 euros into Swiss francs.', 'convert_currency'], ['What is 300 Canadian dollars in US dollars?', 'convert_currency'],
  ['What time is it in New York?', 'get_time'], ['Tell me the current time in Sydney.', 'get_time'],
  ['What is the time in Tokyo now?', 'get_time'], ['Current time in Europe/Berlin?', 'get_time'],
  ['Translate "good morning" into French.', 'translate'], ['How do you say "thank you" in German?', 'translate'],
  ['Translate "where is the station" to Spanish.', 'translate'], ['Say "I love pizza" in Italian.', 'translate'],
];

const args = process.argv.slice(2);
const asJson = args.includes('--json');
const tplAt = args.indexOf('--chat-template');
const files = args.filter((a, i) => a.endsWith('.knot') && i !== tplAt + 1);
const runs = files.length > 0
  ? files.map((f) => ({ file: f, template: tplAt >= 0 ? args[tplAt + 1] : undefined }))
  : [
    { file: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot` },
    // The Gemma GGUF carries no chat template: Gemma 3's turn format, from tests/fixtures/chat.
    { file: `${ROOT}models/gemma-3-270m.knot`, template: `${ROOT}tests/fixtures/chat/gemma3.jinja` },
    { file: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot`, template: `${ROOT}tests/fixtures/chat/chatml-tools.jinja` },
  ];

const ajv = new Ajv({ strict: false });
const validators = new Map(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

async function ask(shim, modelId, content, toolChoice) {
  const request = new Request('http://local/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: modelId, messages: [{ role: 'user', content }], tools: TOOLS, tool_choice: toolChoice, temperature: 0, max_tokens: 96 }),
  });
  const res = await openaiResponse(shim, request, { modelId, prefixReuse: true });
  const r = await res.json();
  if (res.status !== 200) throw new Error(`${res.status}: ${JSON.stringify(r)}`);
  return r;
}

const report = [];
for (const run of runs) {
  const source = await FileKnotSource.open(run.file);
  const shim = await HostShim.open(source, {
    kvCache: 'f16', maxContext: 2048, ...(run.template ? { chatTemplate: readFileSync(run.template, 'utf8') } : {}),
  });
  const modelId = run.file.replace(/^.*\//, '').replace(/\.knot$/, '');
  const row = { model: modelId, path: '', prompts: PROMPTS.length, calls: 0, valid: 0, auto: { called: 0, right: 0, byTool: {} }, required: { right: 0 }, ms: 0 };
  const t0 = Date.now();
  for (const [content, want] of PROMPTS) {
    for (const choice of ['auto', 'required']) {
      const r = await ask(shim, modelId, content, choice);
      row.path = r.knot.tools.path;
      const calls = r.choices[0].message.tool_calls ?? [];
      for (const c of calls) {
        row.calls++;
        let args;
        try {
          args = JSON.parse(c.function.arguments);
        } catch {
          args = undefined;
        }
        if (args !== undefined && validators.get(c.function.name)?.(args)) row.valid++;
        else console.error(`INVALID ${modelId} ${choice} ${content}: ${JSON.stringify(c)}`);
      }
      const name = calls[0]?.function.name;
      if (choice === 'auto') {
        if (calls.length > 0) row.auto.called++;
        if (name === want) row.auto.right++;
        if (name !== undefined) row.auto.byTool[name] = (row.auto.byTool[name] ?? 0) + 1;
      } else if (name === want) {
        row.required.right++;
      }
    }
  }
  row.ms = Date.now() - t0;
  row.template = run.template ? run.template.replace(/^.*\//, '') : null;
  report.push(row);
  await shim.dispose();
  await source.close?.();
  if (!asJson) {
    const pct = (n, d) => `${((100 * n) / d).toFixed(1)}%`;
    console.log(`${modelId}${row.template ? ` + ${row.template}` : ''} (${row.path}): calls ${row.calls}, valid ${pct(row.valid, row.calls)}; `
      + `auto: called ${pct(row.auto.called, row.prompts)}, right tool ${pct(row.auto.right, row.prompts)} `
      + `(${pct(row.auto.right, Math.max(1, row.auto.called))} of its calls); required: right tool ${pct(row.required.right, row.prompts)}; `
      + `tools chosen with auto ${JSON.stringify(row.auto.byTool)}; ${(row.ms / 1000).toFixed(0)} s`);
  }
}
if (asJson) console.log(JSON.stringify(report, null, 2));
const invalid = report.some((r) => r.valid !== r.calls);
process.exit(invalid ? 1 : 0);
