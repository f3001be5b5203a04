// What the Worker's tests share: a Worker in workerd (Miniflare) with the model in its local R2,
// the official `openai` client pointed at it, and the native CLI as the reference.
import { join } from 'node:path';
import OpenAI from 'openai';
import { Agent, setGlobalDispatcher } from 'undici';
import { CONFIG, REPO, modelFile, startLocal } from '../scripts/local.mjs';
import { nativeGenerator } from '../../../pkg/test/servers.js';

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

// Raw requests, and the native CLI as the reference (with the Worker's terminal prosody), as the
// package's server tests have them.
export { post } from '../../../pkg/test/servers.js';
const generate = nativeGenerator(KNOT_BIN);

/**
 * The native CLI's generation for chat messages (or a plain prompt): what the Worker must give
 * for the same request.
 * @param {{ role: string, content: string }[] | string} input
 * @param {number} n
 * @param {string[]} [flags] sampling flags; greedy by default
 * @param {string} [model] the knot file (default: the Worker's model)
 */
export const native = (input, n, flags = undefined, model = modelFile()) => generate(input, n, flags, model);

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The Worker's /stats. */
export async function stats(url) {
  return (await fetch(`${url}/stats`)).json();
}
