// One generation at a time per isolate, the others waiting in order (a bounded line; past it,
// 429 with Retry-After).
//
// Written for workerd's rule that a request's I/O and promises belong to it: a waiting request
// never awaits a promise another request resolves (workerd cancels such a request as hung, or
// drops its continuation), it polls the shared state on timers of its own. And a holder whose
// request died without releasing (its pending work canceled) is detected by its silence and
// taken back, so the line never stalls for good.

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class QueueFull extends Error {
  /** @param {number} retryAfter seconds */
  constructor(retryAfter) {
    super('The server is busy: too many requests are waiting for the model');
    this.retryAfter = retryAfter;
  }
}

export class QueueTimeout extends Error {
  /** @param {number} retryAfter seconds */
  constructor(retryAfter) {
    super('The server is busy: this request waited too long for the model');
    this.retryAfter = retryAfter;
  }
}

/**
 * @typedef {{ id: number, since: number, lastProgress: number, released: boolean,
 *   progress: () => void, release: () => void }} Lease
 */

export class GenerationQueue {
  /**
   * @param {{ max: number, timeoutMs: number, stallMs: number, pollMs?: number,
   *   onStall: (lease: Lease) => Promise<void> }} options
   */
  constructor(options) {
    this.max = options.max;
    this.timeoutMs = options.timeoutMs;
    this.stallMs = options.stallMs;
    this.pollMs = options.pollMs ?? 10;
    this.onStall = options.onStall;
    /** @type {Lease | null} */
    this.holder = null;
    /** @type {object[]} tickets, first in line first */
    this.waiting = [];
    this.next = 1;
    /** Mean seconds a generation held the model, for Retry-After. */
    this.meanHoldS = 1;
    this.served = 0;
    this.reclaimed = 0;
  }

  /** Seconds until a newcomer would likely get the model. */
  retryAfter() {
    return Math.max(1, Math.ceil(this.meanHoldS * (this.waiting.length + 1)));
  }

  /** @returns {Lease} */
  #take() {
    const now = Date.now();
    /** @type {Lease} */
    const lease = {
      id: this.next++,
      since: now,
      lastProgress: now,
      released: false,
      progress: () => {
        lease.lastProgress = Date.now();
      },
      release: () => {
        if (lease.released) return;
        lease.released = true;
        if (this.holder === lease) {
          this.holder = null;
          const held = (Date.now() - lease.since) / 1000;
          this.served++;
          this.meanHoldS += (held - this.meanHoldS) / Math.min(this.served, 20);
        }
      },
    };
    this.holder = lease;
    return lease;
  }

  /**
   * Waits for the model. Rejects with QueueFull past the line's bound, QueueTimeout after
   * `timeoutMs`, or the signal's reason when the caller goes away while waiting.
   * @param {AbortSignal} [signal]
   * @returns {Promise<Lease>}
   */
  async acquire(signal) {
    signal?.throwIfAborted();
    if (this.holder === null && this.waiting.length === 0) return this.#take();
    if (this.waiting.length >= this.max) throw new QueueFull(this.retryAfter());
    const ticket = {};
    this.waiting.push(ticket);
    const deadline = Date.now() + this.timeoutMs;
    try {
      for (;;) {
        signal?.throwIfAborted();
        if (this.holder === null && this.waiting[0] === ticket) {
          this.waiting.shift();
          return this.#take();
        }
        const holder = this.holder;
        if (holder !== null && Date.now() - holder.lastProgress > this.stallMs) {
          // The holder has been silent too long: its request is gone, or stuck for good.
          this.reclaimed++;
          await this.onStall(holder);
          if (this.holder === holder) {
            holder.released = true;
            this.holder = null;
          }
          continue;
        }
        if (Date.now() > deadline) throw new QueueTimeout(this.retryAfter());
        await sleep(this.pollMs);
      }
    } finally {
      const i = this.waiting.indexOf(ticket);
      if (i >= 0) this.waiting.splice(i, 1);
    }
  }
}
