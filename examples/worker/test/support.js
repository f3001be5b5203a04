// What the Worker's tests share: a Worker in workerd (Miniflare) with the model in its local R2,
// the official `openai` client pointed at it, and the native CLI as the reference.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { Agent, setGlobalDispatcher } from 'undici';
import { CONFIG, REPO, modelFile, startLocal } from '../scripts/local.mjs';

export { CONFIG, REPO, startLocal };

// One connection per request. Miniflare's workerd accepts no new request while another is busy
// with R2 reads (seen: a second request waits until the first ends), and an idle keep-alive
// connection it closes meanwhile drops the request written to it ("other side closed").
setGlobalDispatcher(new Agent({ pipelining: 0 }));
export const MODEL = CONFIG.vars.MODEL_ID;

/** The `openai` client for a Worker at `url`. */
export const client = (url) => new OpenAI({
  baseURL: `${url}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 120_000,
  fetch: async (input, init) => {
    try {
      return await fetch(input, init);
    } catch (e) {
      console.error('[test] fetch failed:', e.cause ?? e);
      throw e;
    }
  },
});

/** The native CLI (built by the project's scripts; prepare-model.sh builds it). */
export const KNOT_BIN = process.env.KNOT_BIN ?? join(REPO, 'target/release/knot');

const tmp = mkdtempSync(join(tmpdir(), 'knot-worker-test-'));
let files = 0;

const run = promisify(execFile);

/**
 * The native CLI's generation for chat messages (or a plain prompt): what the Worker must give
 * for the same request (with the Worker's terminal prosody). Run asynchronously: Miniflare's R2 lives in this process, and a blocked
 * event loop would stall the Worker meanwhile.
 * @param {{ role: string, content: string }[] | string} input
 * @param {number} n
 * @param {string[]} [flags] sampling flags; greedy by default
 * @param {string} [model] the knot file (default: the Worker's model)
 */
export async function native(input, n, flags = ['--temperature', '0'], model = modelFile()) {
  if (!existsSync(KNOT_BIN)) throw new Error(`${KNOT_BIN} is missing: run scripts/prepare-model.sh`);
  // The Worker runs terminal prosody `bias` (TERMINAL_PROSODY's default) on prose: so does the
  // reference.
  const args = ['generate', model, '-n', String(n), '--json', ...flags, '--prosody', 'bias'];
  if (typeof input === 'string') {
    args.push('--prompt', input);
  } else {
    const file = join(tmp, `messages-${files++}.json`);
    writeFileSync(file, JSON.stringify(input));
    args.push('--messages', file);
  }
  const { stdout } = await run(KNOT_BIN, args, { encoding: 'utf8', maxBuffer: 1 << 26 });
  return JSON.parse(stdout);
}

/** POSTs JSON with fetch (the error routes, and what the client library hides). */
export async function post(url, path, body, init = {}) {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' || body instanceof ReadableStream ? body : JSON.stringify(body),
    ...init,
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

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The Worker's /stats. */
export async function stats(url) {
  return (await fetch(`${url}/stats`)).json();
}
