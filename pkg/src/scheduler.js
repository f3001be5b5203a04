// The one line in front of a model. Every call that runs the model — a generation, a prefill
// window's prefill, a layer load — enters here, and nowhere else waits or serialises:
//
//   - The line is first come, first served. A generation leaves it when a sequence slot is free
//     (the host's `maxSequences`) and it is first; a job (a prefill window, a layer load) when it
//     is first, at the next step boundary. Past `maxWaiting` the line refuses (QueueFull, 429);
//     a wait past `waitTimeoutMs` fails (QueueTimeout, 429). A generation continuing a request
//     the server already answers (`priority`, an agentic turn) waits without those bounds.
//   - Between steps (the boundary): sequences whose consumers left are canceled (their
//     conversations stay for prefix reuse), then the line is admitted in order. Then one step
//     runs every admitted sequence: one forward pass for all of them (the host's continuous
//     batching), each token handed to its generation.
//   - There is no pump of its own: a caller waiting for a token (or a job's turn) with nothing
//     in flight runs the next boundary and step itself, so every step runs inside a call that is
//     still going. Each turn first yields to the event loop, so consumers read their tokens and
//     new requests get in line between steps. A stream whose consumer stops pulling does not
//     stop the others; one away for `preemptMs` while the line waits for its slot gives way (it
//     ends, superseded).
//   - Where a request's I/O belongs to it (workerd, `requestScopedIo`), a waiter never awaits a
//     promise another request settles — it polls on its own timers — and each step drains the
//     reads it left in flight, so none is awaited by another request.
//   - A step or job in flight for `stallMs` (its request canceled mid-call) is taken back: the
//     host is aborted, its sequences fail (`stalled`), and the line moves on.
//
// Nothing here knows about wasm: the target is any object with `admit(prompt, json) → { id,
// promptTokens, prefix }`, `cancel(id)`, `step() → events`, `drainReads()`, `abort()`, `busy`
// (WasmHost, or a stations coordinator), so it is tested on its own (test/scheduler.test.js).
import { coded } from './errors.js';

export const SUPERSEDED = 'this stream was superseded: its consumer stopped pulling while others waited for its slot';

/** The line refused a newcomer: too many wait. */
export class QueueFull extends Error {
  /** @param {number} retryAfter seconds */
  constructor(retryAfter) {
    super('The server is busy: too many requests are waiting for the model');
    this.code = 'busy';
    this.retryAfter = retryAfter;
  }
}

/** A newcomer waited too long. */
export class QueueTimeout extends Error {
  /** @param {number} retryAfter seconds */
  constructor(retryAfter) {
    super('The server is busy: this request waited too long for the model');
    this.code = 'busy';
    this.retryAfter = retryAfter;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const POLL_MS = 2;

/**
 * A turn of the event loop (a macrotask): consumers read their tokens, the runtime takes new
 * requests and notices clients that left, before the next step computes.
 */
const yieldToEventLoop = typeof globalThis.setImmediate === 'function'
  ? () => new Promise((resolve) => globalThis.setImmediate(resolve))
  : () => sleep(0);

/**
 * A token as a step hands it over, and what came with it.
 * @typedef {{ id: number, text: string, finishReason: 'stop' | 'length' | null, step: object,
 *   constraint?: object, health?: object }} Token
 * @typedef {{ sequence: number, token: Token | null, done: boolean, finishReason: string | null,
 *   report?: object, prefix?: object, error?: unknown }} StepEvent
 */

export class Scheduler {
  /** @type {any} */
  #target;
  #slots;
  #maxWaiting;
  #waitTimeoutMs;
  #stallMs;
  #preemptMs;
  #requestScopedIo;
  /** @type {(() => void) | undefined} */
  #onIdle;
  /** @type {((tag: unknown) => void) | undefined} */
  #onTurn;
  /** @type {(Generation | Job)[]} first come, first served */
  #line = [];
  /** @type {Map<number, Generation>} admitted, by their id in the target */
  #active = new Map();
  /** A boundary, step or job is in flight (run by some caller), and since when. */
  #busySince = 0;
  /** A step (not a job) is in flight. */
  #stepping = false;
  /** The turn (its start) a stall was last seen in. */
  #reclaiming = 0;
  #epoch = 0;
  #disposed = false;
  /** Figures for /stats. */
  #counts = { served: 0, rejected: 0, timedOut: 0, reclaimed: 0, superseded: 0, peakActive: 0, peakWaiting: 0, steps: 0 };
  /** Mean seconds a generation stays admitted, for Retry-After. */
  #meanHoldS = 1;

  /**
   * @param {any} target
   * @param {{ slots: number, maxWaiting?: number, waitTimeoutMs?: number, stallMs?: number,
   *   preemptMs?: number, requestScopedIo?: boolean, onIdle?: () => void,
   *   onTurn?: (tag: unknown) => void }} options (`onIdle`: called when a turn ends with nothing
   *   left to run; `onTurn`: before each turn, with the tag of the caller who runs it — what its
   *   I/O counts against, a Worker's per-request meter)
   */
  constructor(target, options) {
    this.#target = target;
    this.#slots = options.slots;
    this.#maxWaiting = options.maxWaiting ?? Infinity;
    this.#waitTimeoutMs = options.waitTimeoutMs ?? Infinity;
    this.#stallMs = options.stallMs ?? Infinity;
    this.#preemptMs = options.preemptMs ?? 500;
    this.#requestScopedIo = options.requestScopedIo ?? false;
    this.#onIdle = options.onIdle;
    this.#onTurn = options.onTurn;
  }

  /** Sequences at once. */
  get slots() {
    return this.#slots;
  }

  /** The line and what runs, for /stats and /health. */
  get stats() {
    return {
      slots: this.#slots,
      active: this.#active.size,
      waiting: this.#line.length,
      busy: this.#busySince !== 0,
      ...this.#counts,
    };
  }

  /** Nothing runs or waits. */
  get idle() {
    return this.#busySince === 0 && this.#active.size === 0 && this.#line.length === 0;
  }

  /** Seconds until a newcomer would likely be admitted. */
  retryAfter() {
    return Math.max(1, Math.ceil(this.#meanHoldS * (Math.floor(this.#line.length / this.#slots) + 1)));
  }

  /**
   * A place in the line, or the refusal.
   * @param {boolean} priority
   */
  #enter(priority) {
    if (this.#disposed) throw coded('disposed', 'HostShim: used after dispose()', Error);
    // Those in line that the free slots take at the next boundary are not waiting for one (a
    // burst arrives before that boundary runs).
    const free = Math.max(0, this.#slots - this.#active.size);
    if (!priority && this.#line.length - free >= this.#maxWaiting) {
      this.#counts.rejected++;
      throw new QueueFull(this.retryAfter());
    }
  }

  /**
   * One generation, token by token: it waits in line, is admitted at a boundary, and is stepped
   * with the others. `signal` aborting or the consumer leaving ends it alone (canceled at the next
   * boundary). The first token carries `prompt: { tokens, prefix }` (how its prompt was served),
   * the last `report` (what it did).
   * @param {unknown} prompt as the target's `admit` takes it
   * @param {string} json the generation options
   * @param {{ signal?: AbortSignal, priority?: boolean, preemptible?: boolean, tag?: unknown }} [options]
   * @returns {AsyncGenerator<Token & { prompt?: object, report?: object }>}
   */
  async *generate(prompt, json, options = {}) {
    const { signal, priority = false, preemptible = false, tag } = options;
    signal?.throwIfAborted();
    this.#enter(priority);
    const g = new Generation(prompt, json, priority, preemptible);
    g.tag = tag;
    this.#line.push(g);
    this.#counts.peakWaiting = Math.max(this.#counts.peakWaiting, this.#line.length);
    const onAbort = () => this.#leave(g);
    signal?.addEventListener?.('abort', onAbort);
    try {
      for (;;) {
        const t = await this.#next(g, signal);
        if (t === null) return;
        g.pulled = Date.now();
        yield t;
        if (t.finishReason !== null) return;
      }
    } finally {
      signal?.removeEventListener?.('abort', onAbort);
      this.#leave(g);
    }
  }

  /**
   * Runs `fn(target)` at a step boundary, in line order (a prefill window's prefill, a layer
   * load): the sequences wait for it, and it waits for the step in flight.
   * @template T
   * @param {(target: any) => Promise<T>} fn
   * @param {{ signal?: AbortSignal, tag?: unknown }} [options]
   * @returns {Promise<T>}
   */
  async exclusive(fn, options = {}) {
    const { signal, tag } = options;
    signal?.throwIfAborted();
    this.#enter(false);
    const job = new Job(fn);
    job.tag = tag;
    this.#line.push(job);
    try {
      for (;;) {
        signal?.throwIfAborted();
        if (job.settled) return job.result();
        this.#checkWait(job);
        if (this.#busySince === 0) {
          await this.#turn(job);
          continue;
        }
        this.#checkStall();
        await this.#wait(job);
      }
    } finally {
      this.#remove(job);
    }
  }

  /**
   * The next token of `g`, null once it ended; throws what ended it when that was a failure, or
   * the signal's reason.
   * @param {Generation} g
   * @param {AbortSignal} [signal]
   */
  async #next(g, signal) {
    for (;;) {
      signal?.throwIfAborted();
      const t = g.take();
      if (t !== undefined) return t;
      if (g.failure !== undefined) throw g.failure.error;
      if (g.ended) return null;
      if (g.id === undefined) this.#checkWait(g);
      if (this.#busySince === 0) {
        await this.#turn(g);
        continue;
      }
      this.#checkStall();
      await this.#wait(g);
    }
  }

  /**
   * Waits for a notification (or polls, where a request's promises are its own) — no longer
   * than until its time in line is up or a stall would be seen.
   */
  async #wait(waiter) {
    if (this.#requestScopedIo) {
      await sleep(POLL_MS);
      return;
    }
    let ms = this.#stallMs === Infinity ? Infinity : Math.min(this.#stallMs, 1000);
    if (!waiter.priority && this.#waitTimeoutMs !== Infinity && this.#line.includes(waiter)) {
      ms = Math.min(ms, Math.max(1, waiter.since + this.#waitTimeoutMs - Date.now() + 1));
    }
    await waiter.wait(ms === Infinity ? undefined : ms);
  }

  /** A waiter still in line past the timeout fails. */
  #checkWait(waiter) {
    if (waiter.priority || !this.#line.includes(waiter)) return;
    if (Date.now() - waiter.since > this.#waitTimeoutMs) {
      this.#counts.timedOut++;
      this.#remove(waiter);
      throw new QueueTimeout(this.retryAfter());
    }
  }

  /**
   * A step or job in flight for longer than `stallMs` belongs to a request that will never
   * resume it (workerd cancels a request's pending work when its client leaves): take the host
   * back so the line moves on.
   */
  #checkStall() {
    if (this.#busySince === 0 || Date.now() - this.#busySince <= this.#stallMs) return;
    // Counted once per stalled turn: aborting it is taking it back (a read that never settles
    // is abandoned, and the step unwinds by itself if its continuation still runs).
    if (this.#reclaiming !== this.#busySince) {
      this.#reclaiming = this.#busySince;
      this.#counts.reclaimed++;
    }
    this.#target.abort?.();
    if (this.#target.busy) return; // the abort reaches it within a layer: the next waiter sees
    // The target unwound, but the JS continuation of its call never ran: release its place
    // here, forget its reads, and end the sequences its step carried (the target ended them).
    this.#epoch++;
    this.#busySince = 0;
    this.#target.dropReads?.();
    const stalled = coded('aborted', 'the step in flight stalled (its request went away) and was taken back', Error);
    for (const [id, g] of this.#active) {
      this.#target.cancel(id);
      g.fail(stalled);
    }
    this.#active.clear();
    this.#notifyAll();
  }

  /**
   * One turn, run by `driver`: the boundary (cancellations, the line), then a step if any
   * sequence runs.
   * @param {Waiter} driver
   */
  async #turn(driver) {
    const epoch = this.#epoch;
    this.#busySince = Date.now();
    try {
      // Every turn lets the event loop run first: the tokens of the last step reach their
      // consumers, and new requests get in line, before this one computes.
      await yieldToEventLoop();
      this.#onTurn?.(driver.tag);
      await this.#boundary();
      if (this.#active.size > 0) await this.#step();
    } catch (err) {
      // The target failed as a whole (disposed): everything ends with it.
      for (const g of this.#active.values()) g.fail(err);
      this.#active.clear();
      for (const w of this.#line.splice(0)) w.fail(err);
    } finally {
      if (epoch === this.#epoch) {
        // Consumers that left during the step: no later boundary may come to cancel them.
        this.#cancelClosed();
        // Nothing left to run: the reads still in flight end inside this request (workerd).
        if (this.#requestScopedIo && this.#active.size === 0 && this.#line.length === 0) await this.#drain();
        this.#busySince = 0;
        this.#notifyAll();
        if (this.idle) this.#onIdle?.();
      }
    }
  }

  /**
   * Between steps: cancel the generations whose consumers left (or gave way), then admit the
   * line in order while slots are free; a job at the head runs now.
   */
  async #boundary() {
    const now = Date.now();
    const waiting = this.#line.some((w) => w instanceof Generation);
    for (const [id, g] of this.#active) {
      const away = g.preemptible && g.buffered && now - g.pulled > this.#preemptMs;
      if (!g.closed && !(away && waiting && this.#active.size >= this.#slots)) continue;
      if (!g.closed) {
        this.#counts.superseded++;
        g.supersede();
      }
      this.#target.cancel(id);
      this.#end(id);
    }
    while (this.#line.length > 0) {
      const w = this.#line[0];
      if (w instanceof Job) {
        this.#line.shift();
        await w.run(this.#target);
        continue;
      }
      if (this.#active.size >= this.#slots) break;
      this.#line.shift();
      if (w.closed) continue;
      try {
        const admitted = this.#target.admit(w.prompt, w.json);
        w.admitted(admitted);
        this.#active.set(admitted.id, w);
        this.#counts.peakActive = Math.max(this.#counts.peakActive, this.#active.size);
      } catch (err) {
        w.fail(err);
      }
    }
  }

  /** One step of every admitted sequence; every token handed to its generation. */
  async #step() {
    /** @type {StepEvent[]} */
    this.#stepping = true;
    let events;
    try {
      events = await this.#target.step();
    } finally {
      this.#stepping = false;
    }
    this.#counts.steps++;
    const hand = (e) => {
      const g = this.#active.get(e.sequence);
      if (g === undefined) return;
      // A target may learn how a prompt was served only at its first step (a stations claim).
      if (e.prefix !== undefined) g.served(e.prefix);
      if (e.error !== undefined) g.fail(e.error);
      else if (e.token !== null) g.push(e.token, e.done ? e.report : undefined);
      if (e.done) this.#end(e.sequence, e.report);
    };
    if (!this.#requestScopedIo) {
      events.forEach(hand);
      return;
    }
    // The reads a step leaves (the stations told what to keep of a sequence that ended) end
    // inside this request, before a sequence's last token ends its response: work left after a
    // response may be cut off (workerd) and would be counted against no request.
    events.filter((e) => !e.done).forEach(hand);
    await this.#drain();
    events.filter((e) => e.done).forEach(hand);
  }

  /**
   * Generation `id` ended (its slot is free).
   * @param {number} id
   * @param {object} [report]
   */
  #end(id, report) {
    const g = this.#active.get(id);
    if (g === undefined) return;
    this.#active.delete(id);
    g.end(report);
    this.#counts.served++;
    const held = (Date.now() - g.since) / 1000;
    this.#meanHoldS += (held - this.#meanHoldS) / Math.min(this.#counts.served, 20);
  }

  /** The reads a step left in flight end inside this request (workerd). */
  async #drain() {
    await this.#target.drainReads?.()?.catch?.(() => {});
  }

  /**
   * A generation's consumer left (or its signal aborted): out of the line now; canceled now when
   * nothing runs, else once the turn in flight ends. A step in flight that carries only
   * generations whose consumers left is aborted: nobody waits for it, and a read that never
   * settles would hold it (and the line) for good.
   * @param {Generation} g
   */
  #leave(g) {
    g.close();
    this.#remove(g);
    if (g.id === undefined || this.#active.get(g.id) !== g) return;
    if (this.#busySince === 0) {
      this.#cancelClosed();
      if (this.idle) this.#onIdle?.();
    } else if (this.#stepping && [...this.#active.values()].every((a) => a.closed)) {
      this.#target.abort?.();
    }
  }

  /** Cancels the admitted generations whose consumers left (between steps only). */
  #cancelClosed() {
    for (const [id, g] of this.#active) {
      if (!g.closed) continue;
      this.#target.cancel(id);
      this.#end(id);
    }
  }

  #remove(waiter) {
    const i = this.#line.indexOf(waiter);
    if (i >= 0) this.#line.splice(i, 1);
  }

  #notifyAll() {
    for (const g of this.#active.values()) g.notify();
    for (const w of this.#line) w.notify();
  }

  /**
   * No new calls; everything waiting fails with `error`, the generations admitted too (canceled
   * at the next boundary, which the caller runs or the call in flight reaches).
   * @param {unknown} error
   */
  dispose(error) {
    this.#disposed = true;
    for (const w of this.#line.splice(0)) w.fail(error);
    for (const g of this.#active.values()) g.fail(error);
    this.#notifyAll();
  }
}

/** A waiter: woken by `notify`, or after `ms` (so a stall is noticed). */
class Waiter {
  since = Date.now();
  /** What the caller's I/O counts against (see `onTurn`). */
  tag = /** @type {unknown} */ (undefined);
  /** @type {(() => void) | undefined} */
  #wake;
  /** @type {{ error: unknown } | undefined} */
  failure;

  notify() {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** @param {number} [ms] */
  wait(ms) {
    return new Promise((resolve) => {
      const timer = ms === undefined ? undefined : setTimeout(() => this.notify(), ms);
      this.#wake = () => {
        if (timer !== undefined) clearTimeout(timer);
        resolve(undefined);
      };
    });
  }

  /** @param {unknown} error */
  fail(error) {
    this.failure ??= { error };
    this.notify();
  }
}

/** One generation's side: its place, then the tokens handed to it, read one at a time. */
class Generation extends Waiter {
  /** @type {Token[]} */
  #tokens = [];
  /** @type {number | undefined} its id in the target once admitted */
  id;
  /** @type {object | undefined} `{ tokens, prefix }` once admitted, on its first token */
  #prompt;
  ended = false;
  /** Its consumer left: canceled at the next boundary. */
  closed = false;
  /** When its consumer last took a token. */
  pulled = Date.now();

  /**
   * @param {unknown} prompt @param {string} json @param {boolean} priority
   * @param {boolean} preemptible
   */
  constructor(prompt, json, priority, preemptible) {
    super();
    this.prompt = prompt;
    this.json = json;
    this.priority = priority;
    this.preemptible = preemptible;
  }

  /** @param {{ id: number, promptTokens: number, prefix: object | null }} a */
  admitted(a) {
    this.id = a.id;
    this.since = Date.now();
    this.pulled = Date.now();
    this.#prompt = { tokens: a.promptTokens, prefix: a.prefix ?? null };
  }

  get buffered() {
    return this.#tokens.length > 0;
  }

  /** How its prompt was served, learned after admission: what its first token says. */
  served(prefix) {
    if (this.#prompt !== undefined) this.#prompt = { ...this.#prompt, prefix };
  }

  /** @param {Token} token @param {object} [report] */
  push(token, report) {
    if (this.closed) return;
    let t = token;
    if (this.#prompt !== undefined) {
      t = { ...t, prompt: this.#prompt };
      this.#prompt = undefined;
    }
    if (report !== undefined) t = { ...t, report };
    this.#tokens.push(t);
    this.notify();
  }

  take() {
    return this.#tokens.shift();
  }

  /** @param {object} [report] what it did, when it ended without a last token to carry it */
  end(report) {
    this.ended = true;
    if (report !== undefined) this.report = report;
    this.notify();
  }

  /** @param {unknown} error */
  fail(error) {
    this.ended = true;
    super.fail(error);
  }

  close() {
    this.closed = true;
    this.notify();
  }

  /** It gave way: what it had not taken is dropped, and its next pull says why. */
  supersede() {
    this.#tokens.length = 0;
    this.fail(new Error(SUPERSEDED));
  }
}

/** A call that runs at a boundary, alone. */
class Job extends Waiter {
  settled = false;
  priority = false;
  /** @type {{ ok: true, value: any } | { ok: false, error: unknown } | undefined} */
  #outcome;

  /** @param {(target: any) => Promise<any>} fn */
  constructor(fn) {
    super();
    this.fn = fn;
  }

  /** @param {any} target */
  async run(target) {
    try {
      this.#outcome = { ok: true, value: await this.fn(target) };
    } catch (error) {
      this.#outcome = { ok: false, error };
    }
    this.settled = true;
    this.notify();
  }

  /** @param {unknown} error */
  fail(error) {
    this.#outcome ??= { ok: false, error };
    this.settled = true;
    super.fail(error);
  }

  result() {
    const o = /** @type {any} */ (this.#outcome);
    if (!o.ok) throw o.error;
    return o.value;
  }
}
