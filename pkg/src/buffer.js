import { checkRange, checkTarget } from './range.js';
import { coded } from './errors.js';

/** A KnotByteSource over bytes already in memory (tests, small models, data fetched whole). */
export class BufferKnotSource {
  /** @type {Uint8Array} */
  #bytes;

  /** @param {Uint8Array | ArrayBuffer} bytes */
  constructor(bytes) {
    if (bytes instanceof ArrayBuffer) bytes = new Uint8Array(bytes);
    if (!(bytes instanceof Uint8Array)) {
      throw coded('invalid_argument', 'BufferKnotSource: expected a Uint8Array or ArrayBuffer');
    }
    this.#bytes = bytes;
  }

  /** @returns {number} */
  get size() {
    return this.#bytes.byteLength;
  }

  /**
   * A view, not a copy: the host copies the range into wasm memory right away.
   * @param {number} start
   * @param {number} end inclusive
   * @returns {Promise<Uint8Array>}
   */
  async rangeGet(start, end) {
    checkRange(start, end, this.#bytes.byteLength);
    return this.#bytes.subarray(start, end + 1);
  }

  /**
   * Copies the range into `target` (the host passes a view of wasm memory).
   * @param {number} start
   * @param {number} end inclusive
   * @param {Uint8Array} target exactly end - start + 1 bytes
   * @returns {Promise<number>} the bytes written
   */
  async rangeGetInto(start, end, target) {
    const length = checkRange(start, end, this.#bytes.byteLength);
    checkTarget(target, length);
    target.set(this.#bytes.subarray(start, end + 1));
    return length;
  }
}
