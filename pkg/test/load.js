// A burst of requests at one server, as a busy afternoon brings them: 48 at once — chats and
// completions, streamed and whole, a quarter of the streams aborted by their clients mid-stream,
// some malformed. Shared by knot-serve's load test (load.test.js) and the Worker's
// (examples/worker/test/load.test.js). What must hold: every well-formed request is answered (200)
// or refused with 429 and `retry-after`; every malformed one gets its 4xx with an OpenAI-shaped
// error; no 5xx; nothing hangs (each request has a deadline); afterwards the server is idle.

/** The malformed requests for a server of `model`, each with the status it must get. */
const malformed = (model) => [
  { body: `{"model": "${model}", "messages": [`, status: 400, why: 'not JSON' },
  { body: JSON.stringify({ model, messages: 'hello' }), status: 400, why: 'messages not a list' },
  { body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: -3 }), status: 400, why: 'negative max_tokens' },
  { body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hi' }], temperature: 'hot' }), status: 400, why: 'temperature a string' },
  { body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hi' }], tools: [{ type: 'function' }] }), status: 400, why: 'a tool without a function' },
  { body: JSON.stringify({ model: `not-${model}`, messages: [{ role: 'user', content: 'Hi' }] }), status: 404, why: 'an unknown model' },
];

/**
 * Sends the burst and waits for every answer (or its deadline).
 * @param {string} url
 * @param {{ model?: string, total?: number, deadlineMs?: number, maxTokens?: number }} [o]
 * @returns {Promise<{ outcomes: { kind: string, status: number | null, error?: string, retryAfter?: string | null, ms: number }[] }>}
 */
export async function burst(url, o = {}) {
  const model = o.model ?? 'm';
  const total = o.total ?? 48;
  const deadlineMs = o.deadlineMs ?? 120_000;
  const maxTokens = o.maxTokens ?? 8;
  const jobs = [];
  for (let i = 0; i < total; i++) {
    if (i % 8 === 7) {
      const bad = malformed(model);
      const m = bad[(i >> 3) % bad.length];
      jobs.push({ kind: `malformed: ${m.why}`, want: m.status, body: m.body, stream: false, abort: false });
      continue;
    }
    const stream = i % 2 === 1;
    // A quarter of the requests are streams their clients leave after the first chunk.
    const abort = i % 4 === 1;
    const body = i % 3 === 0
      ? { model, prompt: `Item ${i}: the weather today is`, max_tokens: maxTokens, temperature: 0, stream }
      : { model, messages: [{ role: 'user', content: `Question ${i}: name a colour.` }], max_tokens: maxTokens, temperature: 0.7, seed: i, stream };
    jobs.push({ kind: `${body.prompt ? 'completion' : 'chat'}${stream ? ' stream' : ''}${abort ? ' aborted' : ''}`, want: 200, body: JSON.stringify(body), stream, abort, path: body.prompt ? '/v1/completions' : '/v1/chat/completions' });
  }
  const outcomes = await Promise.all(jobs.map((j) => one(url, j, deadlineMs)));
  return { outcomes };
}

/** One request: its status, and for a stream, whether it ended (or was left on purpose). */
async function one(url, job, deadlineMs) {
  const t0 = Date.now();
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new Error('deadline')), deadlineMs);
  try {
    const res = await fetch(`${url}${job.path ?? '/v1/chat/completions'}`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: job.body, signal: ac.signal,
    });
    const out = { kind: job.kind, want: job.want, status: res.status, retryAfter: res.headers.get('retry-after'), ms: 0 };
    if (res.status !== 200 || !job.stream) {
      const text = await res.text();
      if (res.status !== 200) {
        try {
          const e = JSON.parse(text).error;
          if (typeof e?.message !== 'string' || !('code' in e)) out.error = `not an OpenAI error: ${text.slice(0, 200)}`;
        } catch {
          out.error = `not JSON: ${text.slice(0, 200)}`;
        }
      }
    } else {
      const reader = /** @type {ReadableStream<Uint8Array>} */ (res.body).getReader();
      let text = '';
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
        if (job.abort && text.includes('data: ')) {
          // The client leaves mid-stream.
          ac.abort(new Error('left'));
          await reader.cancel().catch(() => {});
          break;
        }
      }
      if (!job.abort && !text.includes('data: [DONE]')) out.error = `the stream ended without [DONE]: ${text.slice(-200)}`;
    }
    out.ms = Date.now() - t0;
    return out;
  } catch (e) {
    const left = job.abort && /** @type {any} */ (e)?.message === 'left';
    return { kind: job.kind, want: job.want, status: left ? 200 : null, error: left ? undefined : String(/** @type {any} */ (e)?.message ?? e), ms: Date.now() - t0 };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * What does not hold of a burst's outcomes (empty when everything does), and the counts.
 * @param {Awaited<ReturnType<typeof burst>>} b
 */
export function judge(b) {
  const found = [];
  const counts = { answered: 0, refused: 0, malformed: 0, aborted: 0 };
  for (const o of b.outcomes) {
    if (o.error !== undefined) found.push(`${o.kind}: ${o.error}`);
    if (o.status === null) continue;
    if (o.status >= 500) found.push(`${o.kind}: ${o.status}`);
    if (o.want !== 200) {
      counts.malformed++;
      if (o.status !== o.want) found.push(`${o.kind}: ${o.status}, want ${o.want}`);
    } else if (o.status === 429) {
      counts.refused++;
      if (!(Number(o.retryAfter) >= 1)) found.push(`${o.kind}: 429 without retry-after`);
    } else if (o.status === 200) {
      if (o.kind.endsWith('aborted')) counts.aborted++;
      else counts.answered++;
    } else {
      found.push(`${o.kind}: ${o.status}`);
    }
  }
  return { found, counts };
}
