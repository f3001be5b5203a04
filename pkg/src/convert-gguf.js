// GGUF → knot in any runtime, through the wasm's WasmGgufConverter (crates/host/src/wasm/gguf.rs,
// the plan of crates/convert): read the GGUF's header, metadata and tensor table as the converter
// asks, then write the knot header and the pieces in order. A tensor is read, transformed only
// when its dtype changes, and written before the next is read: memory holds the header and one
// tensor, never the file.
import { coded } from './errors.js';
import { resolveWasm } from './resolver.js';

/**
 * @typedef {{ rangeGet(start: number, end: number): Promise<Uint8Array>, readonly size?: number | null }} GgufSource
 * @typedef {{ write(bytes: Uint8Array): unknown, close(): unknown }} KnotSink
 */

/**
 * Bytes [start, end) of the source (rangeGet takes an inclusive end), checked for length.
 * A failing read without a code of its own becomes `read_failed`.
 * @param {GgufSource} source
 * @param {number} start
 * @param {number} end exclusive
 */
async function read(source, start, end) {
  if (end <= start) return new Uint8Array(0);
  let bytes;
  try {
    bytes = await source.rangeGet(start, end - 1);
  } catch (err) {
    if (err && typeof err === 'object' && 'code' in err) throw err;
    throw Object.assign(new Error(`convertGguf: reading bytes ${start}-${end - 1} failed: ${err?.message ?? err}`,
      { cause: err }), { code: 'read_failed' });
  }
  if (!(bytes instanceof Uint8Array) || bytes.byteLength !== end - start) {
    throw coded('read_failed',
      `convertGguf: rangeGet(${start}, ${end - 1}) gave ${bytes?.byteLength ?? typeof bytes} bytes, expected ${end - start}`);
  }
  return bytes;
}

/**
 * Converts a GGUF model into a knot file: reads `source`, writes the knot bytes to `sink` in
 * order and closes it. The bytes equal `knot convert`'s for the same options.
 * @param {GgufSource} source the GGUF (its `size` must be known)
 * @param {KnotSink} sink `write` may return a promise (awaited before the next write)
 * @param {{ onProgress?: (done: number, total: number) => void, dtype?: string, name?: string,
 *   fallbackName?: string, wasm?: object }} [options] progress counts tensor bytes written;
 *   `dtype` as `knot convert --dtype` (keep, f32, f16, q8_0, q4_0, q4_k); `name` replaces the
 *   model's name; `fallbackName` names a model whose GGUF has none
 * @returns {Promise<import('./types/convert.js').ConvertSummary>}
 */
export async function convertGguf(source, sink, options = {}) {
  if (typeof source?.rangeGet !== 'function') throw coded('invalid_argument', 'convertGguf: source must have rangeGet(start, end)');
  if (typeof sink?.write !== 'function' || typeof sink?.close !== 'function') {
    throw coded('invalid_argument', 'convertGguf: sink must have write(bytes) and close()');
  }
  const size = source.size;
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
    throw coded('invalid_argument', 'convertGguf: source.size must be known (a non-negative integer)');
  }
  const { onProgress, dtype, name, fallbackName, wasm } = options;
  if (onProgress !== undefined && typeof onProgress !== 'function') {
    throw coded('invalid_argument', 'convertGguf: onProgress must be a function');
  }
  const ns = await resolveWasm(wasm);
  const converter = new ns.WasmGgufConverter(size, JSON.stringify({ dtype, name, fallbackName }));
  try {
    for (let want = converter.wanted(); want !== undefined; want = converter.wanted()) {
      const [start, end] = want;
      if (converter.feed(await read(source, start, end))) break;
    }
    const summary = converter.summary();
    const total = summary.tensorBytes;
    let done = 0;
    onProgress?.(0, total);
    await sink.write(converter.header());
    const pieces = converter.pieces();
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i];
      if (piece.kind === 'literal') {
        await sink.write(converter.literal(i));
        continue;
      }
      let bytes = await read(source, piece.start, piece.start + piece.len);
      if (piece.transform) bytes = converter.transform(i, bytes);
      await sink.write(bytes);
      done += piece.outLen;
      onProgress?.(done, total);
    }
    await sink.close();
    const { tensorBytes: _t, largestSourceTensor: _l, ...rest } = summary;
    return rest;
  } finally {
    converter.free();
  }
}
