// Many generations at once on one HostShim (a host opened with `maxSequences`). Each generation
// is a sequence in the wasm host (`admit`); each `step()` runs one forward pass for all of them
// and hands every sequence its token. There is no pump of its own: a generation waiting for a
// token and finding no step in flight runs the next one itself (admissions and cancellations
// first — the host is busy during a step — then the step, then every sequence's token handed
// over), so each step runs inside the call of a generation that is still going. A generation
// that ends (its consumer leaves, its signal aborts) is canceled at the next step and never
// disturbs the others; past `maxSequences`, generations wait in order for a slot.
//
// Where I/O belongs to the request that began it (workerd, see `setRequestScopedIo`), a waiter
// never awaits a promise another generation settles — it polls on its own timer — and the reads
// a step leaves in flight are drained before the step ends, so none is awaited by another
// request's step.

import { CallQueue } from './queue.js';

let requestScopedIo = false;
const POLL_MS = 2;

/**
 * Called by the workerd entry: a request's I/O and promises belong to it.
 * @param {boolean} on
 */
export function setRequestScopedIo(on) {
  requestScopedIo = on;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A token as the wasm host's step hands it over.
 * @typedef {{ id: number, text: string, finishReason: 'stop' | 'length' | null, step: object,
 *   constraint?: object }} Token
 */

export class SequenceBatch {
  /** @type {import('./queue.js').CallQueue} */
  #calls;
  #max;
  /** @type {Map<number, Sequence>} sequences admitted into the host, by their id there */
  #active = new Map();
  /** @type {Sequence[]} sequences waiting for a slot, oldest first */
  #waiting = [];
  /** @type {import('./queue.js').Run | undefined} the batch's hold on the shim's calls */
  #run;
  /** A step is in flight (run by some generation). */
  #stepping = false;

  /**
   * @param {import('./queue.js').CallQueue} calls the shim's queue of wasm calls
   * @param {number} max the host's maxSequences
   */
  constructor(calls, max) {
    this.#calls = calls;
    this.#max = max;
  }

  /**
   * A batch stepping `target` directly rather than a HostShim's host: any object with
   * `admit(ids, json) → id`, `cancel(id)`, `step() → Promise<events>` (as `WasmHost.step`
   * gives them) and `drainReads() → Promise` (what a step leaves in flight, ended). A
   * coordinator over stations runs its conversations this way (examples/worker/src/split.js).
   * @param {any} target
   * @param {number} max sequences at once
   */
  static over(target, max) {
    return new SequenceBatch(new CallQueue(() => target, () => {}), max);
  }

  /**
   * One generation in the batch, token by token: admitted at the next step, stepped with the
   * others; `signal` aborting or the consumer leaving ends it alone.
   * @param {Uint32Array} ids
   * @param {string} json the generation options
   * @param {AbortSignal} [signal]
   * @returns {AsyncGenerator<Token>}
   */
  async *run(ids, json, signal) {
    signal?.throwIfAborted();
    const seq = this.add(ids, json);
    const onAbort = () => this.close(seq);
    signal?.addEventListener?.('abort', onAbort);
    try {
      for (;;) {
        const e = await this.next(seq, signal);
        if (e === null) return;
        yield e;
        if (e.finishReason !== null) return;
      }
    } finally {
      signal?.removeEventListener?.('abort', onAbort);
      this.close(seq);
    }
  }

  /** Sequences admitted and not yet ended. */
  get active() {
    return this.#active.size;
  }

  /** Generations waiting for a slot. */
  get waiting() {
    return this.#waiting.length;
  }

  /**
   * A new generation: `ids` and the options JSON go to `admit` at the next step boundary.
   * Throws `busy` while a one-at-a-time call (a prefill window) has the shim.
   * @param {Uint32Array} ids
   * @param {string} json
   * @returns {Sequence}
   */
  add(ids, json) {
    // The batch is the generation in progress for the shim's queue while any sequence runs:
    // calls of the one-at-a-time kind (prefill windows) are refused meanwhile.
    this.#run ??= this.#calls.begin(false, () => {});
    const seq = new Sequence(ids, json);
    this.#waiting.push(seq);
    return seq;
  }

  /**
   * The next token of `seq`, null once it ended; throws what ended it when that was a failure,
   * or the signal's reason.
   * @param {Sequence} seq
   * @param {AbortSignal} [signal]
   * @returns {Promise<Token | null>}
   */
  async next(seq, signal) {
    for (;;) {
      signal?.throwIfAborted();
      const t = seq.take();
      if (t !== undefined) return t;
      if (seq.failure !== undefined) throw seq.failure.error;
      if (seq.ended) return null;
      if (!this.#stepping) {
        await this.#step();
        continue;
      }
      if (requestScopedIo) await sleep(POLL_MS);
      else await seq.wait();
    }
  }

  /** One step: the boundary, the step, every token handed over. */
  async #step() {
    this.#stepping = true;
    const run = /** @type {import('./queue.js').Run} */ (this.#run);
    try {
      await this.#calls.call(run, async (host) => this.#boundary(host));
      if (this.#active.size > 0) {
        /** @type {any[]} */
        let events;
        try {
          events = await this.#calls.call(run, (host) => host.step());
        } catch (err) {
          // The pass failed as a whole (a disposed host, an abort of the shim): every active
          // sequence ends with it; waiting ones get their turn.
          for (const s of this.#active.values()) s.fail(err);
          this.#active.clear();
          events = [];
        }
        for (const e of events) {
          const s = this.#active.get(e.sequence);
          if (s === undefined) continue;
          if (e.error !== undefined) s.fail(e.error);
          else if (e.token !== null) s.push(e.token);
          if (e.done) {
            s.end();
            this.#active.delete(e.sequence);
          }
        }
        if (requestScopedIo) await this.#drain(run);
      }
    } catch (err) {
      // The shim is gone (disposed): everything ends with it.
      for (const s of [...this.#active.values(), ...this.#waiting.splice(0)]) s.fail(err);
      this.#active.clear();
    } finally {
      this.#stepping = false;
      for (const s of this.#active.values()) s.notify();
      for (const s of this.#waiting) s.notify();
      if (this.#active.size === 0 && this.#waiting.length === 0) await this.#idle(run);
    }
  }

  /**
   * Between steps: cancels the sequences whose consumers left, then admits waiting ones while
   * slots are free (a refused admission fails that generation alone).
   * @param {any} host
   */
  #boundary(host) {
    for (const [id, s] of this.#active) {
      if (s.closed) {
        host.cancel(id);
        this.#active.delete(id);
      }
    }
    while (this.#waiting.length > 0 && this.#active.size < this.#max) {
      const s = /** @type {Sequence} */ (this.#waiting.shift());
      if (s.closed) continue;
      try {
        this.#active.set(host.admit(s.ids, s.json), s);
      } catch (err) {
        s.fail(err);
      }
    }
  }

  /** @param {import('./queue.js').Run} run */
  async #drain(run) {
    if (this.#calls.current(run)) {
      await this.#calls.run((host) => host.drainReads()).catch(() => {});
    }
  }

  /**
   * Nothing runs or waits: the reads in flight end here, and the shim's calls are free again.
   * @param {import('./queue.js').Run} run
   */
  async #idle(run) {
    if (this.#run !== run) return;
    // Released first, so a generation arriving meanwhile begins a new hold; the drain queues
    // ahead of its calls.
    this.#run = undefined;
    this.#calls.end(run);
    await this.#calls.run((host) => host.drainReads()).catch(() => {});
  }

  /**
   * A generation's consumer left (or its signal aborted): it is canceled at the next boundary.
   * When it never reached the host, the batch may be idle now.
   * @param {Sequence} seq
   */
  close(seq) {
    seq.close();
    const i = this.#waiting.indexOf(seq);
    if (i >= 0) this.#waiting.splice(i, 1);
    if (!this.#stepping && this.#run !== undefined && this.#active.size === 0 && this.#waiting.length === 0) {
      void this.#idle(this.#run);
    }
  }
}

/** One generation's side: the tokens handed to it, read one at a time. */
export class Sequence {
  /** @type {Token[]} */
  #tokens = [];
  ended = false;
  /** @type {{ error: unknown } | undefined} */
  failure;
  /** Its consumer left: the batch cancels it at the next boundary. */
  closed = false;
  /** @type {(() => void) | undefined} */
  #wake;

  /** @param {Uint32Array} ids @param {string} json */
  constructor(ids, json) {
    this.ids = ids;
    this.json = json;
  }

  /** @param {Token} token */
  push(token) {
    if (!this.closed) this.#tokens.push(token);
    this.notify();
  }

  take() {
    return this.#tokens.shift();
  }

  end() {
    this.ended = true;
    this.notify();
  }

  /** @param {unknown} error */
  fail(error) {
    this.failure ??= { error };
    this.ended = true;
    this.notify();
  }

  close() {
    this.closed = true;
    this.notify();
  }

  /** Wakes its waiter (a token, its end, a step ended, or it was closed). */
  notify() {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** Until the next `notify`. */
  wait() {
    return new Promise((resolve) => {
      this.#wake = () => resolve(undefined);
    });
  }
}
