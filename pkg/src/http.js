import { checkRange } from './range.js';
import { coded } from './errors.js';

/** Statuses worth retrying: the server or a proxy may answer properly a moment later. */
const TRANSIENT_STATUS = new Set([408, 429, 500, 502, 503, 504]);
const MAX_BACKOFF_MS = 5000;

/** An Error that a further attempt may cure. */
class TransientError extends Error {}

/**
 * An Error no further attempt can cure (the server refuses, or misbehaves the same way each time):
 * `permanent = true` tells the host's read path not to retry it.
 * @param {string} message
 */
function permanentError(message) {
  return Object.assign(new Error(message), { permanent: true });
}

/**
 * Parses `bytes a-b/total` (total may be `*`).
 * @param {string | null} header
 * @returns {{ start: number, end: number, total: number | undefined } | null}
 */
function parseContentRange(header) {
  if (header === null) return null;
  const m = /^\s*bytes\s+(\d+)-(\d+)\/(\d+|\*)\s*$/i.exec(header);
  if (m === null) return null;
  const start = Number(m[1]);
  const end = Number(m[2]);
  const total = m[3] === '*' ? undefined : Number(m[3]);
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || end < start) return null;
  if (total !== undefined && (!Number.isSafeInteger(total) || end >= total)) return null;
  return { start, end, total };
}

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A KnotByteSource over HTTP(S) range requests (`Range: bytes=a-b`), e.g. a CDN or an object store.
 * A range is accepted only from a 206 whose Content-Range matches it exactly; a 200 (server ignored
 * Range) only when the request covers the whole file.
 */
export class HttpKnotSource {
  #url;
  #fetch;
  #headers;
  #retries;
  #retryDelayMs;
  /** @type {number | undefined} */
  #size;
  /** @type {string | undefined} */
  #etag;
  /** @type {string | undefined} */
  #lastModified;

  /**
   * @param {string | URL} url
   * @param {{ fetch?: typeof fetch, headers?: Record<string, string>, retries?: number,
   *           retryDelayMs?: number, size?: number }} [options]
   */
  constructor(url, options = {}) {
    this.#url = String(url);
    const fetchFn = options.fetch ?? globalThis.fetch;
    if (typeof fetchFn !== 'function') {
      throw coded('invalid_argument', 'HttpKnotSource: no fetch available; pass options.fetch');
    }
    // Unbound global fetch throws "Illegal invocation" in browsers.
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.#headers = { ...(options.headers ?? {}) };
    const retries = options.retries ?? 3;
    if (!Number.isInteger(retries) || retries < 0) {
      throw coded('invalid_argument', `HttpKnotSource: retries must be an integer >= 0, got ${String(retries)}`, RangeError);
    }
    this.#retries = retries;
    const delay = options.retryDelayMs ?? 200;
    if (!Number.isFinite(delay) || delay < 0) {
      throw coded('invalid_argument', `HttpKnotSource: retryDelayMs must be >= 0, got ${String(delay)}`, RangeError);
    }
    this.#retryDelayMs = delay;
    if (options.size !== undefined) {
      if (!Number.isSafeInteger(options.size) || options.size < 0) {
        throw coded('invalid_argument', `HttpKnotSource: size must be an integer >= 0, got ${String(options.size)}`, RangeError);
      }
      this.#size = options.size;
    }
  }

  /**
   * Creates the source and learns the file size (HEAD, else a `bytes=0-0` probe).
   * @param {string | URL} url
   * @param {ConstructorParameters<typeof HttpKnotSource>[1]} [options]
   */
  static async open(url, options) {
    const source = new HttpKnotSource(url, options);
    await source.probeSize();
    return source;
  }

  get url() {
    return this.#url;
  }

  /**
   * What names this version of the file, once a response told it: its ETag, else its
   * Last-Modified date (undefined when the server sends neither). A cache of the file's spans
   * keys on it, so a replaced file is never served from spans of the old one.
   */
  get validator() {
    if (this.#etag !== undefined) return `etag ${this.#etag}`;
    return this.#lastModified === undefined ? undefined : `last-modified ${this.#lastModified}`;
  }

  /** The file size in bytes, once known (from `size`, a probe, or any Content-Range). */
  get size() {
    return this.#size;
  }

  /** Learns the file size if not yet known. @returns {Promise<number>} */
  async probeSize() {
    if (this.#size !== undefined) return this.#size;
    const head = await this.#withRetries('HEAD', async () => {
      const res = await this.#request('HEAD', undefined);
      if (TRANSIENT_STATUS.has(res.status)) throw new TransientError(this.#statusText(res, `HEAD ${this.#url}`));
      return res;
    });
    if (head.ok) this.#learnValidator(head);
    const length = head.headers.get('content-length');
    const ranges = head.headers.get('accept-ranges');
    // Content-Length of a HEAD is the file size only for an identity-encoded 200.
    if (head.ok && head.status === 200 && length !== null && /^\d+$/.test(length) &&
        head.headers.get('content-encoding') === null && ranges !== 'none') {
      this.#size = Number(length);
      return this.#size;
    }
    await this.rangeGet(0, 0);
    if (this.#size === undefined) {
      throw new Error(`HttpKnotSource: ${this.#url} did not tell its size (no Content-Length, Content-Range total '*')`);
    }
    return this.#size;
  }

  /**
   * @param {number} start
   * @param {number} end inclusive
   * @returns {Promise<Uint8Array>}
   */
  async rangeGet(start, end) {
    const length = checkRange(start, end, this.#size);
    const what = `bytes ${start}-${end} of ${this.#url}`;
    return this.#withRetries(what, async () => {
      const res = await this.#request('GET', `bytes=${start}-${end}`);
      if (res.status === 206) {
        const got = parseContentRange(res.headers.get('content-range'));
        if (got === null || got.start !== start || got.end !== end) {
          await res.body?.cancel();
          throw permanentError(
            `HttpKnotSource: asked for ${what}, the server answered Content-Range ${JSON.stringify(res.headers.get('content-range'))}`,
          );
        }
        if (got.total !== undefined) this.#learnSize(got.total);
        this.#learnValidator(res);
        return this.#readBody(res, length, what);
      }
      if (res.status === 200) {
        // The server ignored Range and sent the whole file: fine only if that is what we asked for.
        const lengthHeader = res.headers.get('content-length');
        const total = this.#size ?? (lengthHeader !== null && /^\d+$/.test(lengthHeader) &&
          res.headers.get('content-encoding') === null ? Number(lengthHeader) : undefined);
        if (start !== 0 || total === undefined || end !== total - 1) {
          await res.body?.cancel();
          throw permanentError(
            `HttpKnotSource: asked for ${what}, the server answered 200 with the whole file (it does not support Range requests)`,
          );
        }
        this.#learnValidator(res);
        const body = await this.#readBody(res, length, what);
        this.#learnSize(total);
        return body;
      }
      await res.body?.cancel();
      if (TRANSIENT_STATUS.has(res.status)) throw new TransientError(this.#statusText(res, what));
      if (res.status === 416) {
        throw permanentError(`HttpKnotSource: ${what} is not satisfiable (416); the file is shorter than expected`);
      }
      // Other 4xx (not found, forbidden, ...) stay so: retrying is pointless. 5xx may pass.
      const message = `HttpKnotSource: ${this.#statusText(res, what)}`;
      throw res.status >= 400 && res.status < 500 ? permanentError(message) : new Error(message);
    });
  }

  /** @param {number} total */
  #learnSize(total) {
    if (this.#size !== undefined && this.#size !== total) {
      throw permanentError(`HttpKnotSource: ${this.#url} changed size from ${this.#size} to ${total} bytes`);
    }
    this.#size = total;
  }

  /**
   * Takes the response's ETag and Last-Modified; another value of either later means the file
   * was replaced between reads, and mixing spans of two files would be garbage. Each is compared
   * only with its own earlier value: a server may send one on HEAD and the other on GET.
   * @param {Response} res
   */
  #learnValidator(res) {
    const etag = res.headers.get('etag') ?? undefined;
    const modified = res.headers.get('last-modified') ?? undefined;
    const changed = (before, now, name) => {
      if (before !== undefined && now !== undefined && before !== now) {
        throw permanentError(`HttpKnotSource: ${this.#url} changed while being read (${name} ${before}, now ${name} ${now})`);
      }
    };
    changed(this.#etag, etag, 'etag');
    changed(this.#lastModified, modified, 'last-modified');
    this.#etag ??= etag;
    this.#lastModified ??= modified;
  }

  /**
   * @param {Response} res
   * @param {string} what
   */
  #statusText(res, what) {
    return `HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''} for ${what}`;
  }

  /**
   * @param {string} method
   * @param {string | undefined} range
   * @returns {Promise<Response>}
   */
  async #request(method, range) {
    /** @type {Record<string, string>} */
    const headers = { ...this.#headers };
    if (range !== undefined) headers.Range = range;
    try {
      return await this.#fetch(this.#url, { method, headers });
    } catch (err) {
      // fetch rejects only on network failure (or abort).
      throw new TransientError(`network error for ${this.#url}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }

  /**
   * Reads a body of exactly `length` bytes, never more: a Content-Length that says otherwise is
   * refused before reading, and a body that runs past `length` is cut off there, so a server
   * sending too much (or without end) costs at most `length` bytes.
   * @param {Response} res
   * @param {number} length
   * @param {string} what
   */
  async #readBody(res, length, what) {
    const tooLong = () => new Error(`HttpKnotSource: asked for ${what} (${length} bytes), the body had more than ${length} bytes`);
    const declared = res.headers.get('content-length');
    if (declared !== null && /^\d+$/.test(declared) && res.headers.get('content-encoding') === null &&
      Number(declared) !== length) {
      await res.body?.cancel();
      throw new Error(`HttpKnotSource: asked for ${what} (${length} bytes), the body had ${declared} bytes (Content-Length)`);
    }
    const out = new Uint8Array(length);
    let got = 0;
    // Every range holds at least one byte (end is inclusive).
    if (res.body === null) return this.#shortBody(what, length, 0);
    const reader = res.body.getReader();
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (err) {
        throw new TransientError(`connection lost while reading ${what}`, { cause: err });
      }
      if (chunk.done) break;
      const piece = /** @type {Uint8Array} */ (chunk.value);
      if (got + piece.byteLength > length) {
        await reader.cancel().catch(() => {});
        throw tooLong();
      }
      out.set(piece, got);
      got += piece.byteLength;
    }
    return got === length ? out : this.#shortBody(what, length, got);
  }

  /**
   * @param {string} what
   * @param {number} length
   * @param {number} got
   * @returns {never}
   */
  #shortBody(what, length, got) {
    throw new Error(`HttpKnotSource: asked for ${what} (${length} bytes), the body had ${got} bytes`);
  }

  /**
   * Runs `attempt` until it succeeds, fails for good, or the retries are spent.
   * @template T
   * @param {string} what
   * @param {() => Promise<T>} attempt
   * @returns {Promise<T>}
   */
  async #withRetries(what, attempt) {
    for (let i = 0; ; i++) {
      try {
        return await attempt();
      } catch (err) {
        if (!(err instanceof TransientError)) throw err;
        if (i >= this.#retries) {
          throw new Error(`HttpKnotSource: ${err.message} (gave up after ${i + 1} attempts)`, { cause: err });
        }
        const backoff = Math.min(MAX_BACKOFF_MS, this.#retryDelayMs * 2 ** i);
        // Jitter keeps many clients from retrying in lockstep.
        await sleep(backoff * (0.5 + Math.random() / 2));
      }
    }
  }
}
