// What the OpenAI servers' tests share (pkg/test/serve.test.js for knot-serve,
// examples/worker/test for the Worker): raw requests, and the native CLI as the reference.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * The command that runs a script in this runtime: Deno needs `run` and its permissions.
 * @param {string} script
 * @param {string[]} args
 * @returns {[string, string[]]}
 */
export function runtimeCommand(script, args) {
  const g = /** @type {any} */ (globalThis);
  return g.Deno !== undefined ? [g.Deno.execPath(), ['run', '--allow-all', script, ...args]] : [process.execPath, [script, ...args]];
}

/**
 * A request with fetch, JSON in (a string or stream as it is) and read back: the error routes,
 * and what the client library hides. `init`: method (default POST), headers, duplex.
 */
export async function post(url, path, body, init = {}) {
  const res = await fetch(url + path, {
    method: init.method ?? 'POST',
    headers: { 'content-type': 'application/json', ...(init.headers ?? {}) },
    body: body === undefined ? undefined : typeof body === 'string' || body instanceof ReadableStream ? body : JSON.stringify(body),
    ...(init.duplex ? { duplex: init.duplex } : {}),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

/**
 * The native CLI's generation for chat messages (or a plain prompt) on `model`, as the servers
 * run it: with terminal prosody `bias`, their default on prose (unless `flags` name one). Asynchronous, so a server living
 * in this process (Miniflare's R2) is not stalled meanwhile.
 * @param {string} knotBin
 * @returns {(input: object[] | string, n: number, flags: string[] | undefined, model: string) => Promise<any>}
 */
export function nativeGenerator(knotBin) {
  const tmp = mkdtempSync(join(tmpdir(), 'knot-native-'));
  let files = 0;
  return async (input, n, flags = ['--temperature', '0'], model) => {
    if (!existsSync(knotBin)) throw new Error(`${knotBin} is missing: run scripts/prepare-model.sh`);
    const prosody = flags.includes('--prosody') ? [] : ['--prosody', 'bias'];
    const args = ['generate', model, '-n', String(n), '--json', ...flags, ...prosody];
    if (typeof input === 'string') {
      args.push('--prompt', input);
    } else {
      const file = join(tmp, `messages-${files++}.json`);
      writeFileSync(file, JSON.stringify(input));
      args.push('--messages', file);
    }
    const { stdout } = await run(knotBin, args, { encoding: 'utf8', maxBuffer: 1 << 26 });
    return JSON.parse(stdout);
  };
}

/**
 * Starts a server process that prints its URL in a startup line (`… on http://host:port …`);
 * resolves once that line is whole, with the URL, the process, and what it printed so far.
 * @param {string} cmd
 * @param {string[]} argv
 * @param {Record<string, string>} [env] added to this process's environment
 */
export function startServer(cmd, argv, env = {}) {
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let err = '';
  let out = '';
  child.stderr.on('data', (d) => { err += d; });
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /on (http:\/\/\S+) .*\n/.exec(out);
      if (m) resolve({ url: m[1], child, line: out.split('\n')[0], out: () => out, stderr: () => err });
    });
    child.on('exit', (code) => reject(new Error(`${cmd} exited (${code}) before listening: ${out}${err}`)));
  });
}

/** Four chat questions the servers' concurrency tests ask at once. */
export const FOUR_ASKS = ['What is the capital of France?', 'Name three fruits.', 'Write one sentence about the sea.', 'Count from one to five.']
  .map((content) => [{ role: 'user', content }]);

/**
 * Asks every conversation of `asks` at once through the official client (greedy, `maxTokens`),
 * the even ones whole and the odd ones streamed; resolves with each answer's text.
 * @param {import('openai').OpenAI} openai
 * @param {string} model
 * @param {object[][]} asks
 * @param {number} maxTokens
 */
export function answerTogether(openai, model, asks, maxTokens) {
  return Promise.all(asks.map(async (messages, i) => {
    const body = { model, messages, temperature: 0, max_tokens: maxTokens };
    if (i % 2 === 0) return (await openai.chat.completions.create(body)).choices[0].message.content;
    let text = '';
    for await (const c of await openai.chat.completions.create({ ...body, stream: true })) text += c.choices[0]?.delta?.content ?? '';
    return text;
  }));
}
