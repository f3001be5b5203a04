// Checks shared by every KnotByteSource: `end` is INCLUSIVE, as in the seed's R2 example
// (`length: end - start + 1`).
import { coded } from './errors.js';

/**
 * @param {unknown} start
 * @param {unknown} end
 * @param {number | undefined} size
 * @returns {number} the length of the range in bytes
 */
export function checkRange(start, end, size) {
  if (!Number.isSafeInteger(start) || /** @type {number} */ (start) < 0) {
    throw coded('invalid_argument', `rangeGet: start must be an integer >= 0, got ${String(start)}`, RangeError);
  }
  if (!Number.isSafeInteger(end) || /** @type {number} */ (end) < /** @type {number} */ (start)) {
    throw coded('invalid_argument', `rangeGet: end (inclusive) must be an integer >= start (${start}), got ${String(end)}`, RangeError);
  }
  const s = /** @type {number} */ (start);
  const e = /** @type {number} */ (end);
  if (size !== undefined && e >= size) {
    throw coded('invalid_argument', `rangeGet: range ${s}-${e} lies outside the source of ${size} bytes`, RangeError);
  }
  return e - s + 1;
}

/**
 * `rangeGetInto`'s target: a Uint8Array of exactly the range's length.
 * @param {unknown} target
 * @param {number} length
 */
export function checkTarget(target, length) {
  if (!(target instanceof Uint8Array)) {
    throw coded('invalid_argument', `rangeGetInto: target must be a Uint8Array, got ${Object.prototype.toString.call(target)}`);
  }
  if (target.byteLength !== length) {
    throw coded('invalid_argument', `rangeGetInto: target holds ${target.byteLength} bytes, the range ${length}`, RangeError);
  }
}
