// A KnotByteSource that misbehaves on purpose, reproducibly: a seeded PRNG decides, read by read,
// whether to reject, throw, answer short or long, never settle, or answer right, and how long to
// wait first (random delays also make reads resolve out of order). Used by the soak tests.

/**
 * mulberry32: a small, fast 32-bit PRNG; the same seed gives the same faults.
 * @param {number} seed
 * @returns {() => number} uniform in [0, 1)
 */
export function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The faults, in the order the PRNG picks among them. */
export const FAULT_KINDS = /** @type {const} */ (['reject', 'throw', 'short', 'long', 'hang']);

/**
 * @param {{ rangeGet(start: number, end: number): Promise<Uint8Array>, size?: number }} inner
 * @param {{ seed?: number, faultRate?: number, kinds?: readonly string[], maxDelayMs?: number,
 *   delayRate?: number }} [options]
 *   faultRate: share of reads that fail (default 0.05); kinds: which faults (default all);
 *   maxDelayMs: a delayed read waits a random 0..maxDelayMs ms first (default 0: none);
 *   delayRate: share of reads delayed (default 1).
 */
export function faultySource(inner, options = {}) {
  const random = prng(options.seed ?? 1);
  const rate = options.faultRate ?? 0.05;
  const kinds = options.kinds ?? FAULT_KINDS;
  const maxDelayMs = options.maxDelayMs ?? 0;
  const delayRate = options.delayRate ?? 1;
  /** @type {Record<string, number>} */
  const injected = Object.fromEntries(kinds.map((k) => [k, 0]));
  const source = {
    size: inner.size,
    /** Reads asked for, and faults injected by kind. */
    reads: 0,
    injected,
    get faults() {
      return Object.values(injected).reduce((a, b) => a + b, 0);
    },
    /** Whether faults are injected at all (off for a warm-up or a reference run). */
    enabled: true,
    /** @param {number} start @param {number} end inclusive */
    rangeGet(start, end) {
      source.reads++;
      const fault = source.enabled && random() < rate ? kinds[Math.floor(random() * kinds.length)] : undefined;
      const delay = maxDelayMs > 0 && random() < delayRate ? random() * maxDelayMs : 0;
      if (fault !== undefined) injected[fault]++;
      if (fault === 'throw') throw new Error(`injected synchronous failure reading ${start}-${end}`);
      if (fault === 'hang') return new Promise(() => {});
      const answer = async () => {
        if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
        if (fault === 'reject') throw new Error(`injected rejection reading ${start}-${end}`);
        const bytes = await inner.rangeGet(start, end);
        if (fault === 'short') return bytes.subarray(0, bytes.byteLength - 1);
        if (fault === 'long') {
          const longer = new Uint8Array(bytes.byteLength + 1);
          longer.set(bytes);
          return longer;
        }
        return bytes;
      };
      return answer();
    },
  };
  return source;
}
