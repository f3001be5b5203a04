// Many generations at once on one HostShim (a host opened with `maxSequences`). Each generation
// is a sequence in the wasm host (`admit`); one pump runs `step()` while any is active — each
// step one forward pass for all of them — and hands every sequence its token. Admissions and
// cancellations happen between steps (the host is busy during one), so a generation that ends
// (its consumer leaves, its signal aborts) frees its slot at the next step and never disturbs
// the others; past `maxSequences`, generations wait in order for a slot. Nothing here knows
// about tokens or text: the events are the wasm host's.

/**
 * What a sequence's consumer receives: a token event, or the end.
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
  #pumping = false;

  /**
   * @param {import('./queue.js').CallQueue} calls the shim's queue of wasm calls
   * @param {number} max the host's maxSequences
   */
  constructor(calls, max) {
    this.#calls = calls;
    this.#max = max;
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
   * @param {Uint32Array} ids
   * @param {string} json
   * @returns {Sequence}
   */
  add(ids, json) {
    const seq = new Sequence(ids, json);
    this.#waiting.push(seq);
    void this.#pump();
    return seq;
  }

  /** Steps while any sequence is active; one pump at a time. */
  async #pump() {
    if (this.#pumping) return;
    this.#pumping = true;
    let run;
    try {
      // The pump is the generation in progress for the shim's queue: other generations of
      // the one-at-a-time kind (prefill windows) wait for it or are refused.
      run = this.#calls.begin(false, () => {});
    } catch (err) {
      this.#pumping = false;
      for (const s of this.#waiting.splice(0)) s.fail(err);
      return;
    }
    try {
      for (;;) {
        try {
          await this.#calls.call(run, async (host) => this.#boundary(host));
        } catch (err) {
          this.#failAll(err);
          break;
        }
        if (this.#active.size === 0) break;
        /** @type {any[]} */
        let events;
        try {
          events = await this.#calls.call(run, (host) => host.step());
        } catch (err) {
          // The pass failed as a whole (an abort, a disposed host): every active sequence
          // ends with it; waiting ones get their turn.
          for (const s of this.#active.values()) s.fail(err);
          this.#active.clear();
          continue;
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
      }
    } finally {
      // Reads in flight end with the pump (in workerd a read begun by one request can never
      // complete inside the next).
      if (this.#calls.current(run)) {
        await this.#calls.run((host) => host.drainReads()).catch(() => {});
      }
      this.#calls.end(run);
      this.#pumping = false;
      if (this.#waiting.length > 0) void this.#pump();
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

  /** @param {unknown} err */
  #failAll(err) {
    for (const s of this.#active.values()) s.fail(err);
    for (const s of this.#waiting.splice(0)) s.fail(err);
    this.#active.clear();
  }
}

/** One generation's side: the tokens the pump hands it, read one at a time. */
export class Sequence {
  /** @type {Token[]} */
  #tokens = [];
  #ended = false;
  /** @type {{ error: unknown } | undefined} */
  #failure;
  /** @type {(() => void) | undefined} */
  #wake;
  /** Its consumer left (or its signal aborted): the pump cancels it at the next boundary. */
  closed = false;

  /** @param {Uint32Array} ids @param {string} json */
  constructor(ids, json) {
    this.ids = ids;
    this.json = json;
  }

  /** @param {Token} token */
  push(token) {
    if (this.closed) return;
    this.#tokens.push(token);
    this.#notify();
  }

  end() {
    this.#ended = true;
    this.#notify();
  }

  /** @param {unknown} error */
  fail(error) {
    if (this.#failure === undefined) this.#failure = { error };
    this.#ended = true;
    this.#notify();
  }

  /** Stops it: nothing more is delivered, and the pump cancels it. */
  close() {
    this.closed = true;
    this.#notify();
  }

  #notify() {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /**
   * The next token, null once it ended; throws what ended it when that was a failure.
   * @param {AbortSignal} [signal]
   * @returns {Promise<Token | null>}
   */
  async next(signal) {
    for (;;) {
      signal?.throwIfAborted();
      const t = this.#tokens.shift();
      if (t !== undefined) return t;
      if (this.#failure !== undefined) throw this.#failure.error;
      if (this.#ended || this.closed) return null;
      // An abort closes the sequence (the shim's listener), which wakes this.
      await new Promise((resolve) => {
        this.#wake = () => resolve(undefined);
      });
    }
  }
}
