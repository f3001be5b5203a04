import { checkRange } from './range.js';
import { coded } from './errors.js';

const DEFAULT_CACHE_NAME = 'knot-spans';
const SPAN_PARAM = 'knot-span';
const VERSION_PARAM = 'knot-version';

/**
 * @typedef {{ kind: 'quota' | 'cache-error', message: string, error: unknown }} CacheNotice
 *  quota:       the cache refused a span for lack of room; spans are read uncached from now on.
 *  cache-error: the cache failed otherwise (storage disabled, private mode, corruption); the same.
 */

/** @param {unknown} err */
const isQuotaError = (err) =>
  typeof err === 'object' && err !== null &&
  (/** @type {any} */ (err).name === 'QuotaExceededError' || /** @type {any} */ (err).code === 22);

/** @param {unknown} err */
const describe = (err) => (err instanceof Error ? `${err.name}: ${err.message}` : String(err));

/**
 * A KnotByteSource that keeps every span it reads in a Cache (the Cache API of browsers, Deno and
 * service workers), so a later visit reads the model from the cache instead of the network.
 *
 * Spans are keyed by the file's URL, the span, and the file's version (size and ETag, or
 * Last-Modified), so a replaced file is never served from the old one's spans; opening prunes
 * spans of other versions of the same URL. A cache that fails (quota, storage disabled) never
 * fails a read: the span comes from the source, `onNotice` is told once, and later spans are
 * read uncached.
 */
export class CachedKnotSource {
  #inner;
  /** @type {Cache | undefined} */
  #cache;
  #base;
  #version;
  /** @type {((notice: CacheNotice) => void) | undefined} */
  #onNotice;
  /** @type {CacheNotice | undefined} */
  #notice;
  /** @type {Set<Promise<void>>} */
  #pending = new Set();
  #stats = { hits: 0, misses: 0, bytesFromCache: 0, bytesFromSource: 0, stored: 0 };

  /**
   * Opens the cache and wraps `inner`.
   * @param {import('./index.d.ts').KnotByteSource & { url?: string, validator?: string,
   *   probeSize?: () => Promise<number> }} inner e.g. an HttpKnotSource
   * @param {{ cacheName?: string, caches?: CacheStorage, url?: string | URL, version?: string,
   *   onNotice?: (notice: CacheNotice) => void }} [options]
   *   url: what the spans are keyed under (default: inner.url); version: what names this version
   *   of the file (default: its size and inner.validator).
   * @returns {Promise<CachedKnotSource>}
   */
  static async open(inner, options = {}) {
    if (typeof inner?.rangeGet !== 'function') {
      throw coded('invalid_argument', 'CachedKnotSource: inner must be a KnotByteSource (it has no rangeGet)');
    }
    const storage = options.caches ?? globalThis.caches;
    if (storage === undefined || typeof storage.open !== 'function') {
      throw coded('invalid_argument', 'CachedKnotSource: no Cache API here (globalThis.caches); pass options.caches or read uncached');
    }
    if (options.onNotice !== undefined && typeof options.onNotice !== 'function') {
      throw coded('invalid_argument', 'CachedKnotSource: onNotice must be a function');
    }
    const url = options.url ?? inner.url;
    if (url === undefined) throw coded('invalid_argument', 'CachedKnotSource: give options.url (the source has none)');
    const base = new URL(String(url));
    if (base.protocol !== 'http:' && base.protocol !== 'https:') {
      throw coded('invalid_argument', `CachedKnotSource: the Cache API keys on http(s) URLs, got ${base.href}`);
    }
    let version = options.version;
    if (version === undefined) {
      if (inner.size === undefined && typeof inner.probeSize === 'function') await inner.probeSize();
      if (inner.size === undefined || inner.size === null) {
        throw coded('invalid_argument', 'CachedKnotSource: the source does not know its size; give options.version');
      }
      version = `${inner.size} ${inner.validator ?? ''}`.trim();
    }
    if (typeof version !== 'string' || version === '') {
      throw coded('invalid_argument', 'CachedKnotSource: version must be a non-empty string');
    }
    const name = options.cacheName ?? DEFAULT_CACHE_NAME;
    const source = new CachedKnotSource(inner, base, version, options.onNotice);
    try {
      source.#cache = await storage.open(name);
    } catch (err) {
      source.#fail(err);
      return source;
    }
    await source.#pruneOtherVersions();
    return source;
  }

  /**
   * Deletes the whole cache (e.g. a "clear cache" button).
   * @param {{ cacheName?: string, caches?: CacheStorage }} [options]
   * @returns {Promise<boolean>} whether there was one
   */
  static async clear(options = {}) {
    const storage = options.caches ?? globalThis.caches;
    if (storage === undefined) return false;
    return storage.delete(options.cacheName ?? DEFAULT_CACHE_NAME);
  }

  /**
   * @param {import('./index.d.ts').KnotByteSource} inner
   * @param {URL} base
   * @param {string} version
   * @param {((notice: CacheNotice) => void) | undefined} onNotice
   */
  constructor(inner, base, version, onNotice) {
    this.#inner = inner;
    this.#base = base;
    this.#version = version;
    this.#onNotice = onNotice;
  }

  get size() {
    return this.#inner.size;
  }

  get url() {
    return this.#base.href;
  }

  /** True while spans are read from and stored in the cache; false once it failed. */
  get caching() {
    return this.#cache !== undefined;
  }

  /** Why caching stopped, if it did. @returns {CacheNotice | undefined} */
  get notice() {
    return this.#notice;
  }

  /**
   * Counters since open: spans served from the cache (`hits`) and from the source (`misses`),
   * their bytes, and spans stored.
   */
  stats() {
    return { ...this.#stats, caching: this.caching };
  }

  /**
   * @param {number} start
   * @param {number} end inclusive
   * @returns {Promise<Uint8Array>}
   */
  async rangeGet(start, end) {
    const length = checkRange(start, end, this.#inner.size ?? undefined);
    const key = this.#key(start, end);
    const cached = await this.#lookup(key, length);
    if (cached !== undefined) {
      this.#stats.hits += 1;
      this.#stats.bytesFromCache += length;
      return cached;
    }
    const bytes = await this.#inner.rangeGet(start, end);
    this.#stats.misses += 1;
    this.#stats.bytesFromSource += bytes.byteLength;
    if (this.#cache !== undefined && bytes.byteLength === length) this.#store(key, bytes);
    return bytes;
  }

  /** Resolves once every span read so far is stored (or failed to be). @returns {Promise<void>} */
  async flush() {
    while (this.#pending.size > 0) await Promise.all([...this.#pending]);
  }

  /**
   * @param {Request} key
   * @param {number} length
   * @returns {Promise<Uint8Array | undefined>}
   */
  async #lookup(key, length) {
    const cache = this.#cache;
    if (cache === undefined) return undefined;
    try {
      const hit = await cache.match(key);
      if (hit === undefined) return undefined;
      const bytes = new Uint8Array(await hit.arrayBuffer());
      if (bytes.byteLength === length) return bytes;
      // A torn or foreign entry: forget it and read the span afresh.
      await cache.delete(key);
      return undefined;
    } catch (err) {
      this.#fail(err);
      return undefined;
    }
  }

  /**
   * Stores in the background: the read does not wait for the disk.
   * @param {Request} key
   * @param {Uint8Array} bytes
   */
  #store(key, bytes) {
    const cache = /** @type {Cache} */ (this.#cache);
    // The Response copies the bytes now, so the caller may reuse or transfer them.
    const response = new Response(bytes, {
      headers: { 'Content-Type': 'application/octet-stream', 'Content-Length': String(bytes.byteLength) },
    });
    const put = cache.put(key, response).then(
      () => {
        this.#stats.stored += 1;
      },
      (err) => this.#fail(err),
    );
    const tracked = put.finally(() => this.#pending.delete(tracked));
    this.#pending.add(tracked);
  }

  /** @param {unknown} err */
  #fail(err) {
    if (this.#notice !== undefined) return;
    this.#cache = undefined;
    const quota = isQuotaError(err);
    this.#notice = {
      kind: quota ? 'quota' : 'cache-error',
      message: quota
        ? `the browser's storage quota is full; the model is read from ${this.#base.href} uncached from now on`
        : `the span cache failed (${describe(err)}); the model is read from ${this.#base.href} uncached from now on`,
      error: err,
    };
    try {
      this.#onNotice?.(this.#notice);
    } catch {
      // A throwing listener must not fail the read it interrupted.
    }
  }

  /** Spans cached for an earlier version of this URL can never be used again. */
  async #pruneOtherVersions() {
    const cache = this.#cache;
    if (cache === undefined || typeof cache.keys !== 'function') return;
    try {
      for (const request of await cache.keys()) {
        const u = new URL(request.url);
        const version = u.searchParams.get(VERSION_PARAM);
        u.searchParams.delete(SPAN_PARAM);
        u.searchParams.delete(VERSION_PARAM);
        if (version !== null && version !== this.#version && u.href === this.#base.href) await cache.delete(request);
      }
    } catch {
      // Pruning only saves space; a cache that cannot list its keys still serves spans.
    }
  }

  /**
   * @param {number} start
   * @param {number} end
   */
  #key(start, end) {
    const u = new URL(this.#base.href);
    u.searchParams.set(SPAN_PARAM, `${start}-${end}`);
    u.searchParams.set(VERSION_PARAM, this.#version);
    return new Request(u.href);
  }
}
