// Kept apart from sources.js because node:fs exists only in Node, Bun and Deno.
import { open } from 'node:fs/promises';
import { checkRange, checkTarget } from './range.js';

/** A KnotByteSource over a local file, read with positional reads (Node, Bun, Deno). */
export class FileKnotSource {
  /** @type {import('node:fs/promises').FileHandle | null} */
  #handle;
  #size;
  #path;

  /**
   * @param {import('node:fs/promises').FileHandle} handle
   * @param {number} size
   * @param {string} path
   */
  constructor(handle, size, path) {
    this.#handle = handle;
    this.#size = size;
    this.#path = path;
  }

  /**
   * @param {string | URL} path
   * @returns {Promise<FileKnotSource>}
   */
  static async open(path) {
    const handle = await open(path, 'r');
    try {
      const stat = await handle.stat();
      if (!stat.isFile()) throw new Error(`FileKnotSource: ${String(path)} is not a regular file`);
      return new FileKnotSource(handle, stat.size, String(path));
    } catch (err) {
      await handle.close();
      throw err;
    }
  }

  /** @returns {number} */
  get size() {
    return this.#size;
  }

  /**
   * @param {number} start
   * @param {number} end inclusive
   * @returns {Promise<Uint8Array>}
   */
  async rangeGet(start, end) {
    const out = new Uint8Array(checkRange(start, end, this.#size));
    await this.#readInto(start, end, out);
    return out;
  }

  /**
   * Reads the range straight into `target` (the host passes a view of wasm memory, so the
   * bytes go from the OS into the layer's buffer with no copy in between).
   * @param {number} start
   * @param {number} end inclusive
   * @param {Uint8Array} target exactly end - start + 1 bytes
   * @returns {Promise<number>} the bytes written
   */
  async rangeGetInto(start, end, target) {
    const length = checkRange(start, end, this.#size);
    checkTarget(target, length);
    await this.#readInto(start, end, target);
    return length;
  }

  /**
   * @param {number} start
   * @param {number} end inclusive
   * @param {Uint8Array} out
   */
  async #readInto(start, end, out) {
    const handle = this.#handle;
    if (handle === null) throw new Error(`FileKnotSource: ${this.#path} is closed`);
    const length = out.byteLength;
    let filled = 0;
    // read() may return fewer bytes than asked; a zero-byte read means the file shrank.
    while (filled < length) {
      const { bytesRead } = await handle.read(out, filled, length - filled, start + filled);
      if (bytesRead === 0) {
        throw new Error(
          `FileKnotSource: ${this.#path} ended at byte ${start + filled} while reading ${start}-${end} (was the file truncated?)`,
        );
      }
      filled += bytesRead;
    }
  }

  /** Closes the file; idempotent. @returns {Promise<void>} */
  async close() {
    const handle = this.#handle;
    this.#handle = null;
    if (handle !== null) await handle.close();
  }

  async [Symbol.asyncDispose]() {
    await this.close();
  }
}
