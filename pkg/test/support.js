// Shared by the tests that run the real wasm package: model paths, the knot layout read in JS,
// a counting / latency / fault-injecting source wrapper, and the native CLI.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const TINY = `${ROOT}tests/fixtures/tiny/llama-f32.knot`;
export const TINY_CASES = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny/llama-f32.json`, 'utf8')).cases;
export const SMOL = process.env.KNOT_SMOLLM2 ?? `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot`;
export const SMOL_CASES = JSON.parse(readFileSync(`${ROOT}tests/fixtures/smollm2.json`, 'utf8')).cases;

/**
 * Whether the SmolLM2 knot is there. With KNOT_REQUIRE_MODELS set a missing model is a failure
 * (the test command prepares it), otherwise its tests are skipped.
 */
export function haveSmol() {
  if (existsSync(SMOL)) return true;
  if (process.env.KNOT_REQUIRE_MODELS) {
    throw new Error(`${SMOL} is missing and KNOT_REQUIRE_MODELS is set (run scripts/prepare-model.sh)`);
  }
  return false;
}

/** The native CLI, when a release build exists (KNOT_BIN overrides). */
export const KNOT_BIN = process.env.KNOT_BIN ?? `${ROOT}target/release/knot`;
export const haveNative = () => existsSync(KNOT_BIN);

/**
 * Runs `knot generate --json` on `ids`.
 * @param {string} file
 * @param {number[]} ids
 * @param {number} n
 * @param {string[]} [sampling] extra flags; greedy by default
 * @returns {number[]}
 */
export function nativeGenerate(file, ids, n, sampling = ['--temperature', '0']) {
  return nativeGenerateJson(file, ids, n, sampling).ids;
}

/**
 * `knot generate --json` on `ids`: the whole object (ids, steps, constraint, health, …).
 * @param {string} file
 * @param {number[]} ids
 * @param {number} n
 * @param {string[]} [flags] greedy by default
 * @returns {any}
 */
export function nativeGenerateJson(file, ids, n, flags = ['--temperature', '0']) {
  const out = execFileSync(KNOT_BIN, ['generate', file, '--tokens', ids.join(','), '-n', String(n), ...flags, '--json'], {
    encoding: 'utf8', maxBuffer: 1 << 26,
  });
  return JSON.parse(out);
}

/**
 * The layout of a knot file, parsed here from its header (docs/knot-format.md) so that the tests
 * check the host against the format rather than against itself. Ranges are absolute [start, end).
 * @param {string} path
 */
export function knotLayout(path) {
  const bytes = readFileSync(path);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (new TextDecoder().decode(bytes.subarray(0, 4)) !== 'KNOT') throw new Error(`${path}: not a knot file`);
  const metaLen = view.getUint32(6, true);
  const meta = JSON.parse(new TextDecoder().decode(bytes.subarray(10, 10 + metaLen)));
  const payload = ((10 + metaLen + 3) & ~3) + 1;
  /** @param {{ offset: number, size: number }} s */
  const abs = (s) => [payload + s.offset, payload + s.offset + s.size];
  return {
    bytes,
    meta,
    payload,
    tokenizer: abs(meta.tokenizer.blob),
    resident: abs(meta.resident),
    layers: meta.layers.map(abs),
    /** The layer a read of [start, end) fetches, or -1. */
    layerOf(start, end) {
      return this.layers.findIndex(([s, e]) => s === start && e === end);
    },
  };
}

/** @param {number} ms */
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Wraps a KnotByteSource: records every read ([start, end) absolute, exclusive end), optionally
 * delays each by `latencyMs`, and lets `fault(read)` replace a read's outcome:
 *   'reject' | 'throw' | 'short' | 'long' | 'arraybuffer' | 'array' | 'string' | undefined.
 * @param {{ rangeGet(start: number, end: number): Promise<Uint8Array>, size?: number }} inner
 * @param {{ latencyMs?: number, fault?: (read: { index: number, start: number, end: number }) => string | undefined }} [options]
 */
export function countingSource(inner, options = {}) {
  /** @type {{ index: number, start: number, end: number, at: number }[]} */
  const reads = [];
  const source = {
    reads,
    size: inner.size,
    get bytes() {
      return reads.reduce((sum, r) => sum + (r.end - r.start), 0);
    },
    latencyMs: options.latencyMs ?? 0,
    fault: options.fault,
    /** @param {number} start @param {number} end inclusive */
    rangeGet(start, end) {
      const read = { index: reads.length, start, end: end + 1, at: performance.now() };
      reads.push(read);
      source.inFlight++;
      source.maxInFlight = Math.max(source.maxInFlight, source.inFlight);
      const fault = source.fault?.(read);
      if (fault === 'throw') throw new Error(`injected synchronous failure at read ${read.index}`);
      const go = async () => {
        if (source.latencyMs > 0) await sleep(source.latencyMs);
        if (fault === 'reject') throw new Error(`injected rejection at read ${read.index}`);
        const got = await inner.rangeGet(start, end);
        switch (fault) {
          case 'short': return got.subarray(0, got.byteLength - 1);
          case 'long': {
            const longer = new Uint8Array(got.byteLength + 1);
            longer.set(got);
            return longer;
          }
          case 'arraybuffer': return got.slice().buffer;
          case 'array': return Array.from(got.subarray(0, 4));
          case 'string': return 'not bytes';
          default: return got;
        }
      };
      return go().finally(() => {
        source.inFlight--;
      });
    },
    /** Reads issued and not yet resolved, and the most there ever were at once. */
    inFlight: 0,
    maxInFlight: 0,
  };
  return source;
}

/** @param {number[]} xs */
export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
