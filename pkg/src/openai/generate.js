// One completion run on a backend: the phases of a chat with tools (free text, then a call under
// its mask), the stop sequences, the token budget, and what it sends — server-sent events as the
// tokens come, or one JSON answer at the end.
import { CallReader } from './call-reader.js';
import { toApiError } from './errors.js';
import { derivedId, shapes } from './shapes.js';
import { StopMatcher } from './stop.js';
import { callSchema, envelopeSchema } from './tools.js';

const encoder = new TextEncoder();

/** The request field a prompt's failure is about, by API. */
const PROMPT_FIELD = { chat: 'messages', completion: 'prompt', responses: 'input', messages: 'messages' };

/** One server-sent event: a chunk (`data:` alone), or `{ event, data }` (a named event). */
const sse = (obj) => (typeof obj.event === 'string' && obj.data !== undefined
  ? `event: ${obj.event}\ndata: ${JSON.stringify(obj.data)}\n\n`
  : `data: ${JSON.stringify(obj)}\n\n`);


/**
 * @typedef {import('./tools.js').Tool} Tool
 * @typedef {{ mode: 'plain' | 'envelope' | 'tag', tools: Tool[], forced: boolean,
 *   callTag: string | null, closeTag: string | null, maxCalls: number }} Plan
 */

/**
 * Turns a call reader's events into OpenAI tool calls: a call starts once its name is known
 * (arguments written before it wait), its arguments go out in fragments, and it counts only
 * once it closed and its arguments parse.
 */
class Calls {
  /** @param {{ callStart(i: number, call: object): void, callArguments(i: number, text: string): void }} out */
  constructor(out) {
    this.out = out;
    /** @type {{ id: string, type: 'function', function: { name: string, arguments: string } }[]} */
    this.done = [];
    this.current = null;
    this.waiting = '';
    this.invalid = 0;
    /** What the ids of the current turn's calls derive from: its prompt. */
    this.key = '';
    /** Calls started in the current turn. */
    this.started = 0;
  }

  /** A new turn: its calls' ids derive from its prompt and their place in it. */
  turn(prompt) {
    this.key = typeof prompt === 'string' ? prompt : JSON.stringify(prompt);
    this.started = 0;
  }

  /** @param {ReturnType<CallReader['push']>} events @returns {string} the content among them */
  take(events) {
    let content = '';
    for (const e of events) {
      if (e.type === 'content') content += e.text;
      else if (e.type === 'name') {
        this.current = { id: derivedId('call_', `${this.started++}\u0000${this.key}`), type: 'function', function: { name: e.name, arguments: '' } };
        this.out.callStart(this.done.length, this.current);
        if (this.waiting !== '') this.#args(this.waiting);
        this.waiting = '';
      } else if (e.type === 'arguments') {
        if (this.current === null) this.waiting += e.text;
        else this.#args(e.text);
      } else if (e.type === 'end' && this.current !== null) {
        const call = this.current;
        this.current = null;
        try {
          JSON.parse(call.function.arguments);
          this.done.push(call);
        } catch {
          this.invalid++;
        }
      }
    }
    return content;
  }

  #args(text) {
    this.current.function.arguments += text;
    this.out.callArguments(this.done.length, text);
  }
}

/**
 * Runs one completion: one model turn (`knot`: more of the project's figures for the response).
 * `started` settles at the first token (with how the prompt's prefill went) or the first
 * failure; `done` with the result; a streaming request reads `body`, whose cancellation (the
 * client going away) aborts the work.
 * @param {Job} job
 * @param {object} [knot]
 */
export function runCompletion(job, knot = {}) {
  return respond(job, async (ctx) => {
    const turn = await ctx.turn(job.prompt, job.plan);
    return { finish: turn.finish, toolCalls: turn.calls, knot };
  });
}

/**
 * A prompt as the backend takes it: token ids, text, or chat messages with the tools the template
 * is given (`suffix`: text after the rendered chat, for a call phase's opening).
 * @typedef {Uint32Array | string | { messages: object[], tools?: object[], suffix?: string }} Prompt
 * @typedef {{
 *   backend: import('./index.js').Backend, kind: 'chat' | 'completion', modelId: string,
 *   req: { options: Record<string, unknown>, stream: boolean, includeUsage: boolean, stop: string[], maxTokens: number },
 *   prompt: Prompt, plan: Plan, signal?: AbortSignal,
 *   generation: Record<string, unknown>, prosody: string,
 * }} Job
 * @typedef {{ content: string, calls: import('./shapes.js').ToolCall[], invalid: number, finish: string, promptTokens: number }} Turn
 * @typedef {{
 *   turn(prompt: Prompt, plan: Plan): Promise<Turn>,
 *   emit(event: object): void,
 *   remaining(): number,
 *   signal: AbortSignal,
 * }} Turns
 */

/**
 * The response around model turns: the stream (or the one answer), the stop
 * sequences, the usage. `drive` runs the turns (one, or an agentic loop's several) and says how
 * the response ends: its finish reason, the tool calls its message carries, and any more of the
 * project's figures.
 * @param {Job} job
 * @param {(ctx: Turns) => Promise<{ finish: string, toolCalls: import('./shapes.js').ToolCall[], knot?: object }>} drive
 */
export function respond(job, drive) {
  const { backend, kind, req, signal } = job;
  const promptField = PROMPT_FIELD[kind];
  const shape = job.shape ?? shapes(/** @type {'chat' | 'completion'} */ (kind), job.modelId);
  const abort = new AbortController();
  const onClientGone = () => abort.abort(new DOMException('The client went away', 'AbortError'));
  signal?.addEventListener('abort', onClientGone);
  /** @type {ReadableStreamDefaultController<Uint8Array> | undefined} */
  let sink;
  /** Sends a chunk, a named event (`{ event, data }`) or a list of them; null: nothing. */
  const send = (obj) => {
    if (sink === undefined || obj === null) return;
    if (Array.isArray(obj)) {
      for (const o of obj) send(o);
      return;
    }
    try {
      // Never awaited: a slow client must not hold the model.
      sink.enqueue(encoder.encode(sse(obj)));
    } catch {
      onClientGone();
    }
  };
  const body = req.stream ? new ReadableStream({ start(c) { sink = c; }, cancel: onClientGone }) : null;
  let resolveStarted;
  let rejectStarted;
  const started = new Promise((resolve, reject) => {
    resolveStarted = resolve;
    rejectStarted = reject;
  });
  started.catch(() => {});
  let completion = 0;
  let promptTokens = 0;
  /**
   * How the prompts were prefilled, over every generation of the request (an agentic loop's
   * turns, a tool call's phases): the tokens run through the model (the prompt less what a
   * prefix window or prefill window served), the time it took (the backend's `report.prefillMs`,
   * admission to first token; without it, the generation's call to its first token, queue
   * included), the wait in line (call to first token less that; null once a generation had no
   * report), when the request's first token arrived (performance.now()).
   */
  const prefill = { tokens: 0, ms: 0, queueMs: /** @type {number | null} */ (0), timed: false, firstAt: /** @type {number | null} */ (null) };
  let first = true;
  let prefix = null;
  const begin = () => {
    if (!first) return;
    first = false;
    resolveStarted(prefix);
    send(shape.first({ prompt: promptTokens }));
  };
  let content = '';
  let constraint;
  /** What the health monitor saw over the last generation (request `health`). */
  let health;
  /** The tool path of the last turn that offered tools. */
  let toolPath = null;
  const stops = new StopMatcher(req.stop);
  /** Content said in the current turn. */
  let said = '';
  const say = (text) => {
    const out = stops.push(text);
    if (out !== '') {
      content += out;
      said += out;
      send(shape.piece(out));
    }
    return stops.stopped;
  };
  const calls = new Calls({
    callStart: (i, call) => send(shape.callStart(i, call)),
    callArguments: (i, text) => send(shape.callArguments(i, text)),
  });

  /** Generations after the request's first continue it: they wait in line without its bounds. */
  let continuing = false;
  /**
   * One generation over `prompt`, each token's text handed to `onText` (true from it stops).
   * Resolves with its tokens' text and how it ended.
   * @param {Prompt} prompt
   * @param {Record<string, unknown>} extra options of this phase
   * @param {(text: string) => boolean} onText
   */
  const phase = async (prompt, extra, onText) => {
    let raw = '';
    let ended = 'length';
    const options = {
      ...job.generation, ...extra,
      maxTokens: Math.max(1, req.maxTokens - completion),
      signal: abort.signal,
      ...(continuing ? { priority: true } : {}),
    };
    continuing = true;
    const called = performance.now();
    /** When this generation's first token arrived, and what the backend reported of it. */
    let arrived = null;
    let report;
    try {
      for await (const e of backend.streamTokens(prompt, options)) {
        if (arrived === null) {
          arrived = performance.now();
          prefill.firstAt ??= arrived;
        }
        if (e.prompt !== undefined) {
          promptTokens += e.prompt.tokens;
          prefill.tokens += Math.max(0, e.prompt.tokens - (e.prompt.prefix?.reused ?? 0));
          prefix ??= e.prompt.prefix ?? null;
        }
        if (e.report !== undefined) report = e.report;
        begin();
        completion++;
        if (e.constraint !== undefined) constraint = e.constraint;
        if (e.health !== undefined) health = e.health;
        raw += e.text;
        if (onText(e.text)) {
          ended = 'stop_sequence';
          break;
        }
        if (e.finishReason !== null) ended = e.finishReason;
        // (The backend's line yields to the event loop before every step: new requests get in
        // and a client that left is noticed between tokens.)
      }
    } finally {
      if (arrived !== null) {
        // The backend's own measure (admission to first token) when its last token reached us;
        // else (a stop sequence left before it) ours, from the call, with its wait in line.
        const toFirst = arrived - called;
        const hostMs = report?.prefillMs;
        const known = typeof hostMs === 'number' && Number.isFinite(hostMs);
        prefill.ms += known ? hostMs : toFirst;
        prefill.queueMs = known && prefill.queueMs !== null ? prefill.queueMs + Math.max(0, toFirst - hostMs) : null;
        prefill.timed = true;
      }
    }
    return { raw, ended };
  };

  const withProsody = (options) => {
    if (job.prosody === 'off' || options.coltrane !== undefined) return options;
    return { ...options, coltrane: { prosody: job.prosody } };
  };

  /** @type {Turns['turn']} */
  const turn = async (prompt, plan) => {
    const before = calls.done.length;
    const invalidBefore = calls.invalid;
    const promptBefore = promptTokens;
    calls.turn(prompt);
    said = '';
    let finish;
    if (plan.mode === 'plain') {
      const r = await phase(prompt, withProsody(req.options), say);
      finish = r.ended === 'stop_sequence' ? 'stop' : r.ended;
    } else if (plan.mode === 'envelope') {
      const reader = new CallReader('envelope');
      const coltrane = { preset: 'json_schema', schema: envelopeSchema(plan.tools, !plan.forced) };
      const r = await phase(prompt, { ...req.options, coltrane }, (text) => say(calls.take(reader.push(text))));
      // A stop sequence ends the response's text; otherwise an envelope that did not close was
      // cut by the budget.
      finish = calls.done.length > before ? 'tool_calls'
        : r.ended === 'stop_sequence' ? 'stop'
          : reader.done ? r.ended : 'length';
    } else {
      finish = await tagPhases({ ...job, prompt }, plan, {
        phase, withProsody, say, calls, remaining: () => req.maxTokens - completion,
      });
    }
    if (plan.mode !== 'plain') toolPath = plan.mode;
    return { content: said, calls: calls.done.slice(before), invalid: calls.invalid - invalidBefore, finish, promptTokens: promptTokens - promptBefore };
  };

  /** @type {Turns} */
  const ctx = {
    turn,
    emit: (event) => send(shape.event(event)),
    remaining: () => req.maxTokens - completion,
    signal: abort.signal,
  };

  const done = (async () => {
    try {
      const ending = await drive(ctx);
      const rest = stops.flush();
      if (rest !== '') {
        content += rest;
        send(shape.piece(rest));
      }
      begin();
      const usage = { prompt: promptTokens, completion };
      const knot = {
        prefill: prefix === null ? null : { status: prefix.status, reused: prefix.reused ?? 0 },
        terminal_prosody: job.prosody,
        constraint: constraint ?? null,
        ...(health === undefined ? {} : { health }),
        ...(toolPath === null ? {} : { tools: { path: toolPath, calls: calls.done.length, invalid_calls: calls.invalid } }),
        ...ending.knot,
      };
      const more = { prefix, stopSequence: stops.matched };
      send(shape.last(ending.finish, knot, usage, more));
      if (req.includeUsage) send(shape.usage(usage));
      if (sink !== undefined) {
        const tail = shape.done();
        if (tail !== null) sink.enqueue(encoder.encode(tail));
        sink.close();
      }
      const message = { content: ending.toolCalls.length > 0 && content === '' ? null : content, toolCalls: ending.toolCalls };
      return { message, finish: ending.finish, usage, prefix, shape, knot, more };
    } catch (e) {
      rejectStarted(e);
      if (sink !== undefined && !first) {
        // Mid-stream: OpenAI's error event, then the end of the stream.
        try {
          const error = toApiError(e, promptField);
          sink.enqueue(encoder.encode(shape.error === undefined ? sse(error.toJSON()) : shape.error(error).map(sse).join('')));
          sink.close();
        } catch {
          // The client is gone.
        }
      } else if (sink !== undefined) {
        try {
          sink.error(e);
        } catch {
          // Nobody reads it.
        }
      }
      throw e;
    } finally {
      signal?.removeEventListener('abort', onClientGone);
    }
  })();
  /**
   * The request's prefill so far: prompt tokens (as usage counts them), those prefilled, the
   * prefill's ms, the wait in line (null: not known), when its first token arrived.
   */
  const prefillTiming = () => ({
    promptTokens, prefilled: prefill.tokens, firstAt: prefill.firstAt,
    ms: prefill.timed ? prefill.ms : null, queueMs: prefill.timed ? prefill.queueMs : null,
  });
  return { started, done, body, shape, aborted: () => abort.signal.aborted, completion: () => completion, prefill: prefillTiming };
}

/**
 * The tag way: free text until the model opens its call tag (or, forced, straight into a call),
 * then the call under its schema; with parallel calls, free text again after it.
 * @returns {Promise<string>} the finish reason
 */
async function tagPhases(job, plan, { phase, withProsody, say, calls, remaining }) {
  const open = /** @type {string} */ (plan.callTag);
  const close = /** @type {string} */ (plan.closeTag);
  // What follows the rendered chat so far: each phase's prompt is the chat with it (rendered and
  // encoded in the backend; the tokens before it are reused by prefix reuse).
  const chat = /** @type {{ messages: object[], tools?: object[] }} */ (job.prompt);
  let suffix = '';
  const prompt = () => (suffix === '' ? chat : { ...chat, suffix });
  let inCall = plan.forced;
  const coltrane = { preset: 'json_schema', schema: callSchema(plan.tools) };
  for (;;) {
    if (!inCall && calls.done.length > 0) {
      // After a call only another call may follow: a few tokens tell whether the model opens
      // its tag again; anything else ends the turn (text after a call, before its result, is
      // not an answer).
      let seen = '';
      let again = false;
      await phase(prompt(), job.req.options, (t) => {
        seen += t;
        const start = seen.trimStart();
        again = start.startsWith(open);
        return again || !open.startsWith(start);
      });
      if (!again) return 'tool_calls';
    } else if (!inCall) {
      // Free text: the call tag ends it like a stop sequence, held back from the content.
      const tag = new StopMatcher([open]);
      const r = await phase(prompt(), withProsody(job.req.options), (t) => {
        const out = tag.push(t);
        return (out !== '' && say(out)) || tag.stopped;
      });
      if (!tag.stopped) {
        const rest = tag.flush();
        if (rest !== '') say(rest);
        return r.ended === 'stop_sequence' ? 'stop' : r.ended;
      }
      suffix += r.raw.slice(0, r.raw.indexOf(open));
    }
    if (remaining() <= 0) return 'length';
    suffix += `${open}\n`;
    const reader = new CallReader('call');
    const before = calls.done.length;
    const r = await phase(prompt(), { ...job.req.options, coltrane }, (t) => {
      calls.take(reader.push(t));
      return false;
    });
    if (calls.done.length === before) return 'length';
    const call = calls.done[calls.done.length - 1];
    suffix += `${JSON.stringify({ name: call.function.name, arguments: JSON.parse(call.function.arguments) })}\n${close}\n`;
    if (r.ended === 'length') return 'length';
    if (calls.done.length >= plan.maxCalls || remaining() <= 0) return 'tool_calls';
    inCall = false;
  }
}
