// Generations per isolate: `slots` at a time (1, or the model's maxSequences when it runs several
// together), the others waiting in order (a bounded line; past it, 429 with Retry-After).
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
   * @param {{ max: number, timeoutMs: number, stallMs: number, pollMs?: number, slots?: number,
   *   onStall: (lease: Lease) => Promise<void> }} options
   */
  constructor(options) {
    this.max = options.max;
    /** Generations that hold the model at once. */
    this.slots = options.slots ?? 1;
    /** @type {Set<Lease>} */
    this.holders = new Set();
    /** The most that held the model at once. */
    this.peakHolders = 0;
    this.timeoutMs = options.timeoutMs;
    this.stallMs = options.stallMs;
    this.pollMs = options.pollMs ?? 10;
    this.onStall = options.onStall;
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
    return Math.max(1, Math.ceil(this.meanHoldS * (Math.floor(this.waiting.length / this.slots) + 1)));
  }

  /** Whether every slot is taken. */
  get busy() {
    return this.holders.size >= this.slots;
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
        if (this.holders.delete(lease)) {
          const held = (Date.now() - lease.since) / 1000;
          this.served++;
          this.meanHoldS += (held - this.meanHoldS) / Math.min(this.served, 20);
        }
      },
    };
    this.holders.add(lease);
    this.peakHolders = Math.max(this.peakHolders, this.holders.size);
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
    if (!this.busy && this.waiting.length === 0) return this.#take();
    if (this.waiting.length >= this.max) throw new QueueFull(this.retryAfter());
    const ticket = {};
    this.waiting.push(ticket);
    const deadline = Date.now() + this.timeoutMs;
    try {
      for (;;) {
        signal?.throwIfAborted();
        if (!this.busy && this.waiting[0] === ticket) {
          this.waiting.shift();
          return this.#take();
        }
        const now = Date.now();
        const stalled = [...this.holders].find((h) => now - h.lastProgress > this.stallMs);
        if (this.busy && stalled !== undefined) {
          // A holder has been silent too long: its request is gone, or stuck for good.
          this.reclaimed++;
          await this.onStall(stalled);
          if (this.holders.delete(stalled)) stalled.released = true;
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
