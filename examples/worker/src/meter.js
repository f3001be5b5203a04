// What one request spends of what Cloudflare counts per invocation: R2 reads and their bytes,
// Durable Object calls, and their sum, the subrequests (production refuses the one past its
// limit: 50 on the free plan, 10,000 on paid). Deployed, /stats reports it so the margin to the
// limit is known; locally, simulate.js enforces the limit against it.
//
// One meter is current per isolate: the Worker starts one per request (the model's line makes it
// current again for each step that request runs) and one per model open, a station one per
// incoming request. Whoever spends (R2KnotSource, the stations' transport) counts into the
// current one, so nothing has to pass it along.

export class Meter {
  /** @param {string} kind what it meters ('generation', 'open', 'request') */
  constructor(kind) {
    this.kind = kind;
    this.r2Reads = 0;
    this.r2Bytes = 0;
    this.doCalls = 0;
    this.tokens = 0;
  }

  /** Subrequests: every R2 read and Durable Object call issued, refused ones included. */
  get subrequests() {
    return this.r2Reads + this.doCalls;
  }

  /** One R2 read issued (counted before it goes out, as production counts it). */
  r2Read() {
    this.r2Reads++;
  }

  /** @param {number} n bytes an R2 read brought */
  r2Received(n) {
    this.r2Bytes += n;
  }

  /** One Durable Object call issued. */
  doCall() {
    this.doCalls++;
  }

  /** The counts as /stats reports them, with per-token figures once tokens were generated. */
  report() {
    const per = (n) => (this.tokens > 0 ? +(n / this.tokens).toFixed(2) : null);
    return {
      r2_reads: this.r2Reads,
      r2_bytes: this.r2Bytes,
      do_calls: this.doCalls,
      subrequests: this.subrequests,
      tokens: this.tokens,
      r2_reads_per_token: per(this.r2Reads),
      do_calls_per_token: per(this.doCalls),
      subrequests_per_token: per(this.subrequests),
    };
  }
}

/** @type {Meter | null} */
let current = null;

/**
 * Starts a meter and makes it the isolate's current one.
 * @param {string} kind
 */
export function startMeter(kind) {
  current = new Meter(kind);
  return current;
}

/** Makes `meter` current again (an agentic request takes the model once per turn). */
export function resumeMeter(meter) {
  current = meter;
}

/** The isolate's current meter (null before any request started one). */
export const currentMeter = () => current;
