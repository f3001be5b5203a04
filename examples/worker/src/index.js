// An OpenAI-compatible LLM server in a Cloudflare Worker: the model streams from R2 through the
// knot-wasm package, opened once per isolate and shared by every request. The server itself —
// the OpenAI routes, /health, /stats, errors, the line of requests, generations run together
// with prefix reuse — is the package's (`knot-wasm/server` over a HostShim, or over the stations
// coordinator of `knot-wasm/stations`); this file is the shell: the Worker's settings (model.js),
// its own routes (/stations), what each request spends (meter.js), `waitUntil`, and production's
// costs in a local run (simulate.js).
//
//   GET  /health      what the server runs, and the simulated production profile (null deployed)
//   GET  /stats       the model's figures, its line, what the open and the last requests spent
//   GET  /stations    each station's figures, when the model is split (KNOT_STATIONS)
//   the OpenAI routes /v1/models, /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages
//   (Anthropic's), /prefill/windows[/:id];
//                     /v1/audio/speech answers 501 speech_unavailable (speech.js, docs/speech.md)
//
// Who may ask is settled first (access.js: API keys, limits, CORS), before the model opens: a
// stranger's request costs a hash, not a model. Every generation runs inside `ctx.waitUntil`, so a client that goes away cannot cancel it
// halfway (workerd cancels a request's pending work when its client disconnects, which would
// leave the shared model stuck); the client's going away aborts it instead, cleanly.
import { ApiError, errorResponseFor, openaiRoute } from 'knot-wasm/openai';
import { gateFor } from './access.js';
import { getModel } from './model.js';
import { resumeMeter, startMeter } from './meter.js';
import { simulate } from './simulate.js';
import { refuseSpeech } from './speech.js';

/** The routes of the shell and the server besides the OpenAI ones (model.js adds /stations). */
const OWN_ROUTES = ['/health', '/stats', '/stations'];

export default {
  /**
   * @param {Request} request
   * @param {Record<string, any>} env
   * @param {{ waitUntil(p: Promise<unknown>): void }} ctx
   */
  async fetch(request, env, ctx) {
    let cors = {};
    try {
      // Production's costs when a local run asked for them (KNOT_SIMULATE); deployed, env as is.
      env = simulate(env);
      const { pathname } = new URL(request.url);
      const admitted = await gateFor(env).admit(request, {
        openRoute: pathname === '/health', client: request.headers.get('cf-connecting-ip') ?? undefined,
      });
      if ('response' in admitted) return admitted.response;
      cors = admitted.cors;
      // A stranger's /health: up, and the model's id — without opening the model.
      if (admitted.principal === null) {
        return Response.json({ status: 'ok', model: env.MODEL_ID || String(env.MODEL_KEY ?? '').replace(/\.knot$/, '') }, { headers: cors });
      }
      // Answered before the model opens: the refusal needs no model, and neither does an unknown
      // route (a browser's /favicon.ico must not open a model).
      if (pathname === '/v1/audio/speech') refuseSpeech(request);
      if (openaiRoute(pathname) === null && !OWN_ROUTES.includes(pathname)) {
        throw new ApiError(404, `Unknown route: ${request.method} ${pathname}`, { code: 'unknown_url' });
      }
      const model = await getModel(env, ctx);
      // What this request spends: the steps it runs count their R2 reads and station calls here
      // (the model's line calls `onTurn` with this tag before each), so the subrequest limit is
      // checked per invocation, as production counts it.
      const meter = startMeter('request');
      const answer = await model.server.fetch(request, {
        admitted,
        waitUntil: (work) => ctx.waitUntil(work),
        tag: meter,
        onDone: (r) => {
          meter.tokens = r.tokens;
          model.lastMeter = meter;
          const { r2_reads, r2_bytes, do_calls, subrequests } = meter.report();
          return { r2_reads, r2_bytes, do_calls, subrequests };
        },
      });
      resumeMeter(null);
      return answer;
    } catch (e) {
      // A model that cannot open (over budget, a station that failed) answers with its code's
      // status, like every coded failure.
      const answer = errorResponseFor(new URL(request.url).pathname, e);
      for (const [k, v] of Object.entries(cors)) answer.headers.set(k, v);
      return answer;
    }
  },
};
