// knot-serve, started as a user starts it (the package's bin, in the runtime running this file:
// Node, Bun or Deno), answering the OpenAI API test file the Worker runs too; then its own parts:
// the tool-call tag path (a template that takes tools, given with --chat-template), bad
// command lines, a model without a chat template refused, and a graceful shutdown on SIGTERM;
// then several requests at once, and four multi-turn chats at once with no flags at all.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { after, before, describe, test } from './harness.js';

const describeIf = (condition, name, fn) => (condition ? describe(name, fn) : describe.skip(name, fn));
import { openaiApiSuite } from './openai-api.js';
import { agentApisSuite } from './agent-apis.js';
import { FOUR_ASKS, answerTogether, nativeGenerator, post, runtimeCommand, startServer } from './servers.js';
import { CHATS, atOnceAndAlone, problems } from './chats.js';
import { KNOT_BIN, ROOT, SMOL, TINY, haveNative, haveSmol } from './support.js';

const BIN = `${ROOT}pkg/bin/knot-serve.js`;
const MODEL = 'SmolLM2-135M-Instruct';
const run = promisify(execFile);
const g = /** @type {any} */ (globalThis);

const runtime = runtimeCommand;

/**
 * Starts knot-serve on a free port; resolves with its URL (from the startup line) and the process.
 * @param {string[]} args
 */
function startServe(args) {
  return startServer(...runtime(BIN, [SMOL, '--port', '0', '--model-id', MODEL, '--max-tokens', '400', '--max-context', '2048', ...args]));
}

/** The native CLI's generation on SmolLM2: the reference the server must equal. */
const generate = nativeGenerator(KNOT_BIN);
const native = (input, n, flags) => generate(input, n, flags, SMOL);

const ready = haveSmol() && haveNative();

describeIf(ready, 'knot-serve', () => {
  /** @type {{ url: string, child: import('node:child_process').ChildProcess, line: string }} */
  let server;
  before(async () => {
    server = await startServe([]);
  });
  after(() => server?.child.kill('SIGKILL'));

  test('the startup line names the URL, the requests at once and the chat template', () => {
    assert.match(server.line, /^knot-serve: SmolLM2-135M-Instruct on http:\/\/127\.0\.0\.1:\d+ \(OpenAI API at http:\/\/127\.0\.0\.1:\d+\/v1; (Node|Bun|Deno); 30 layers resident/);
    assert.match(server.line, /context 2048, 4 requests at once, prefix reuse on, file chat template, opened in \d+ ms\)$/);
  });

  test('GET /health', async () => {
    const h = await (await fetch(`${server.url}/health`)).json();
    assert.deepEqual(h, {
      status: 'ok', model: MODEL, architecture: 'llama', hidden_dim: 576, vocab_size: 49152, layers: 30, context_length: 2048,
      max_sequences: 4, prefix_reuse: true, prefill_windows: true, chat_template: { source: 'file', name: null },
      queue: { active: 0, waiting: 0 },
    });
  });

  // Node runs the whole API file; Bun and Deno the quick subset (the same server code).
  const other = g.Bun !== undefined || g.Deno !== undefined;
  openaiApiSuite({ url: () => server.url, model: MODEL, native, quick: other, windows: !other });
  agentApisSuite({ url: () => server.url, model: MODEL, quick: other });

  test('/stats: each request\'s prefill (prompt and prefilled tokens, ttft, tok/s); a prefix hit prefills less', async () => {
    // A prompt of a few hundred tokens no earlier request began with (only the template's
    // system prompt may be reused), asked twice: the second is a prefix hit.
    const facts = Array.from({ length: 14 }, (_, i) => `Fact ${i + 1}: the lighthouse keeper counted ${(i * 37) % 101} gulls on day ${i + 1}.`);
    const body = {
      model: MODEL, temperature: 0, max_tokens: 6,
      messages: [{ role: 'user', content: `Note ${Date.now()}. ${facts.join(' ')} Which day had the most gulls?` }],
    };
    const ask = async () => {
      const r = await post(server.url, '/v1/chat/completions', body);
      assert.equal(r.status, 200, r.text);
      const { recent } = await (await fetch(`${server.url}/stats`)).json();
      // Its record (by id: a request an earlier test left may end after it).
      const rec = recent.find((x) => x.id === r.json.id);
      assert.ok(rec !== undefined, `${r.json.id} among ${JSON.stringify(recent.map((x) => x.id))}`);
      assert.equal(rec.prompt_tokens, r.json.usage.prompt_tokens);
      assert.equal(rec.prefilled_tokens, rec.prompt_tokens - r.json.knot.prefill.reused, JSON.stringify(rec));
      assert.ok(rec.prefilled_tokens >= 1 && rec.prefilled_tokens <= rec.prompt_tokens, JSON.stringify(rec));
      assert.ok(rec.ttft_ms > 0 && rec.prefill_ms > 0, JSON.stringify(rec));
      // Alone on the server, the generation's last token came: the host's own prefill time and
      // the wait in line, which together fit in the time to the first token.
      assert.ok(rec.queue_ms >= 0 && rec.prefill_ms + rec.queue_ms <= rec.ttft_ms + 0.2, JSON.stringify(rec));
      assert.ok(rec.ttft_ms <= rec.ms + 1, JSON.stringify(rec));
      // tok/s is prefilled_tokens over the prefill's seconds (prefill_ms is to a tenth of a ms).
      const lo = rec.prefilled_tokens / ((rec.prefill_ms + 0.05) / 1000);
      const hi = rec.prefilled_tokens / (Math.max(rec.prefill_ms - 0.05, 1e-3) / 1000);
      assert.ok(rec.prefill_tok_s >= lo - 0.1 && rec.prefill_tok_s <= hi + 0.1, JSON.stringify(rec));
      return rec;
    };
    const cold = await ask();
    assert.ok(cold.prompt_tokens >= 250, `a long prompt: ${cold.prompt_tokens} tokens`);
    const warm = await ask();
    assert.equal(warm.prompt_tokens, cold.prompt_tokens);
    assert.ok(warm.prefilled_tokens < cold.prefilled_tokens, `${warm.prefilled_tokens} < ${cold.prefilled_tokens}`);
    console.log(`/stats prefill: cold ${cold.prefilled_tokens}/${cold.prompt_tokens} tokens in ${cold.prefill_ms} ms `
      + `(${cold.prefill_tok_s} tok/s, ttft ${cold.ttft_ms} ms); warm ${warm.prefilled_tokens} in ${warm.prefill_ms} ms (ttft ${warm.ttft_ms} ms)`);
  });
});

describeIf(ready, 'knot-serve: its own parts', () => {
  test('a template that takes tools: the model calls inside its <tool_call> tag, always validly', async () => {
    const s = await startServe(['--chat-template', `${ROOT}tests/fixtures/chat/chatml-tools.jinja`]);
    try {
      const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false } } }];
      const res = await fetch(`${s.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools, tool_choice: 'required', temperature: 0, max_tokens: 48 }),
      });
      const r = await res.json();
      assert.equal(r.knot.tools.path, 'tag');
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      const [call] = r.choices[0].message.tool_calls;
      assert.equal(call.function.name, 'get_weather');
      assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');
    } finally {
      s.child.kill('SIGKILL');
    }
  });

  test('--no-prefill-windows turns the routes off; SIGTERM shuts it down gracefully (exit 0); a bad command line exits 2 with the reason', async () => {
    const s = await startServe(['--no-prefill-windows']);
    const off = await post(s.url, '/prefill/windows', { prompt: 'Once upon a time' });
    assert.equal(off.status, 404, off.text);
    assert.equal(off.json.error.code, 'prefill_windows_disabled');
    const stats = await (await fetch(`${s.url}/stats`)).json();
    assert.equal(stats.prefillWindows.max, 0, JSON.stringify(stats.prefillWindows));
    const code = await new Promise((resolve) => {
      s.child.on('exit', (c) => resolve(c));
      s.child.kill('SIGTERM');
    });
    // Deno's node:child_process reports a child it signalled as killed (code null) whatever
    // its status (0 when run from a shell): there the last line says the shutdown completed.
    if (g.Deno === undefined) assert.equal(code, 0, s.stderr());
    assert.match(s.stderr(), /SIGTERM, shutting down\nknot-serve: stopped\n$/);
    const [cmd, argv] = runtime(BIN, [SMOL, '--terminal-prosody', 'loud']);
    await assert.rejects(run(cmd, argv), (e) => e.code === 2 && /--terminal-prosody must be bias, observe or off/.test(e.stderr));
    // A model with no chat template, whose special tokens imply none, is refused at start.
    const [tcmd, targv] = runtime(BIN, [TINY, '--port', '0']);
    await assert.rejects(run(tcmd, targv), (e) => e.code === 2
      && /has no chat template and its special tokens imply none .* give one with --chat-template FILE/.test(e.stderr));
  });
});

// Several requests at once (Node only: the same server code runs in Bun and Deno).
describeIf(ready && g.Bun === undefined && g.Deno === undefined, 'knot-serve --parallel', () => {
  test('four requests at once, one leaving mid-stream: each answer equals the native CLI alone', async () => {
    const s = await startServe(['--parallel', '4']);
    try {
      assert.match(s.line, /4 requests at once/);
      const openai = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 120_000 });
      const asks = FOUR_ASKS;
      const want = await Promise.all(asks.map((m) => native(m, 24)));
      // A stream whose client leaves after three chunks, beside them.
      const leaving = (async () => {
        const ac = new AbortController();
        const stream = await openai.chat.completions.create({ model: MODEL, messages: asks[3], temperature: 0, max_tokens: 200, stream: true }, { signal: ac.signal });
        let chunks = 0;
        try {
          for await (const _ of stream) if (++chunks === 3) ac.abort();
        } catch (e) {
          if (!ac.signal.aborted) throw e;
        }
        return chunks;
      })();
      const answers = await answerTogether(openai, MODEL, asks, 24);
      assert.equal(await leaving, 3);
      answers.forEach((a, i) => assert.equal(a, want[i].text, `request ${i}`));
      // Every slot is free again, and the prefill windows work beside generations run together.
      let stats = await (await fetch(`${s.url}/stats`)).json();
      for (let i = 0; i < 50 && (stats.sequences.active > 0 || stats.queue.busy); i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        stats = await (await fetch(`${s.url}/stats`)).json();
      }
      assert.deepEqual([stats.sequences.active, stats.queue.active, stats.queue.waiting], [0, 0, 0], JSON.stringify(stats.queue));
      assert.equal(stats.queue.peakActive, 4);
      assert.equal((await post(s.url, '/prefill/windows', { prompt: 'x' })).status, 201);
      const [cmd, argv] = runtime(BIN, [SMOL, '--parallel', '0']);
      await assert.rejects(run(cmd, argv), (e) => e.code === 2 && /--parallel must be an integer >= 1/.test(e.stderr));
    } finally {
      s.child.kill('SIGKILL');
    }
  });
});

// Four people each holding a four-turn chat with one knot-serve started with no flags but its port
// and the model's id (Node only, as above): every later turn reuses the conversation so far, and
// every answer equals the same chat's run alone.
describeIf(ready && g.Bun === undefined && g.Deno === undefined, 'knot-serve as shipped: four chats at once', () => {
  test('4 clients x 4 turns at once: every later turn a prefix hit reusing the previous prompt, answers equal alone', async () => {
    const s = await startServer(...runtime(BIN, [SMOL, '--port', '0', '--model-id', 'm']));
    try {
      const run = await atOnceAndAlone(s.url, CHATS, { maxTokens: 12 });
      const later = run.together.flatMap((turns) => turns.slice(1));
      const hits = later.filter((t) => t.prefill === 'hit').length;
      const reused = later.reduce((n, t) => n + t.reused, 0);
      const prompts = later.reduce((n, t) => n + t.promptTokens, 0);
      console.log(`knot-serve, 4 chats x 4 turns: at once ${run.togetherMs} ms, one after another ${run.aloneMs} ms `
        + `(${(run.togetherMs / run.aloneMs).toFixed(3)}x); later turns ${hits}/${later.length} hits, `
        + `${reused} of their ${prompts} prompt tokens reused`);
      assert.deepEqual(problems(run), []);
      const stats = await (await fetch(`${s.url}/stats`)).json();
      assert.equal(stats.sequences.max, 4);
      assert.ok(stats.prefixReuse.hits >= later.length, JSON.stringify(stats.prefixReuse));
    } finally {
      s.child.kill('SIGKILL');
    }
  });
});
