// The byte sources a HostShim reads a knot file through (src/buffer.js, file.js, http.js,
// cache.js). FileKnotSource is exported by the Node/Bun/Deno entry only.

/**
 * Anything that can read byte ranges of a .knot file. `end` is INCLUSIVE. The host bounds every
 * read (`readTimeoutMs`) and retries failed ones (`readRetries`); to say that retrying cannot
 * help, throw or reject with an Error whose `permanent` property is `true`.
 */
export interface KnotByteSource {
  rangeGet(start: number, end: number): Promise<Uint8Array>;
  /**
   * Optional: writes bytes start..end (inclusive) into `target` (exactly that long) and resolves
   * to the number written. The host then reads layers straight into wasm memory (`target` is a
   * view of it) instead of copying each `rangeGet` array in. Nothing may be written into
   * `target` after the promise settles; if wasm memory grows while a read is in flight, `target`
   * detaches and the host reads the range again.
   */
  rangeGetInto?(start: number, end: number, target: Uint8Array): Promise<number>;
  /** File size in bytes, when known: a non-negative integer, or undefined / null. */
  readonly size?: number | null | undefined;
}

export declare class BufferKnotSource implements KnotByteSource {
  constructor(bytes: Uint8Array | ArrayBuffer);
  readonly size: number;
  /** A view into the buffer, not a copy. */
  rangeGet(start: number, end: number): Promise<Uint8Array>;
  /** Copies the range into `target`. */
  rangeGetInto(start: number, end: number, target: Uint8Array): Promise<number>;
}

/** Node, Bun and Deno only. */
export declare class FileKnotSource implements KnotByteSource, AsyncDisposable {
  static open(path: string | URL): Promise<FileKnotSource>;
  readonly size: number;
  rangeGet(start: number, end: number): Promise<Uint8Array>;
  /** Positional reads straight into `target`. */
  rangeGetInto(start: number, end: number, target: Uint8Array): Promise<number>;
  /** Idempotent. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface HttpKnotSourceOptions {
  /** Defaults to globalThis.fetch. */
  fetch?: typeof fetch;
  /** Sent with every request (e.g. Authorization). */
  headers?: Record<string, string>;
  /** Further attempts after a network error, 408, 429 or 5xx. Default 3. */
  retries?: number;
  /** First backoff delay, doubled per attempt (capped at 5 s). Default 200. */
  retryDelayMs?: number;
  /** The file size, if known in advance. */
  size?: number;
}

/**
 * Reads with `Range: bytes=a-b`; accepts a 206 whose Content-Range is exactly `a-b/total`, and a
 * 200 only when the request covers the whole file.
 */
export declare class HttpKnotSource implements KnotByteSource {
  constructor(url: string | URL, options?: HttpKnotSourceOptions);
  /** Constructs and learns the size (HEAD, else a `bytes=0-0` probe). */
  static open(url: string | URL, options?: HttpKnotSourceOptions): Promise<HttpKnotSource>;
  readonly url: string;
  readonly size: number | undefined;
  /**
   * What names this version of the file once a response told it (`etag "…"`, else
   * `last-modified …`); a read answered with another one rejects (the file was replaced).
   */
  readonly validator: string | undefined;
  probeSize(): Promise<number>;
  rangeGet(start: number, end: number): Promise<Uint8Array>;
}

/** Why a CachedKnotSource stopped caching (its reads go on, uncached). */
export interface CacheNotice {
  /** `quota`: the storage quota is full; `cache-error`: the cache failed otherwise. */
  kind: 'quota' | 'cache-error';
  message: string;
  error: unknown;
}

export interface CachedKnotSourceOptions {
  /** Default 'knot-spans'. */
  cacheName?: string;
  /** Default globalThis.caches. */
  caches?: CacheStorage;
  /** What the spans are keyed under (an http(s) URL). Default: the inner source's url. */
  url?: string | URL;
  /** What names this version of the file. Default: its size and the inner source's validator. */
  version?: string;
  /** Called once, when caching stops. */
  onNotice?: (notice: CacheNotice) => void;
}

/**
 * Keeps every span read in a Cache (the Cache API), so a later visit reads the model from the
 * cache; a cache that fails (quota) never fails a read, it stops caching and says so once.
 */
export declare class CachedKnotSource implements KnotByteSource {
  static open(inner: KnotByteSource & { url?: string; validator?: string }, options?: CachedKnotSourceOptions): Promise<CachedKnotSource>;
  /** Deletes the whole cache. Resolves whether there was one. */
  static clear(options?: { cacheName?: string; caches?: CacheStorage }): Promise<boolean>;
  readonly size: number | null | undefined;
  readonly url: string;
  /** False once the cache failed. */
  readonly caching: boolean;
  readonly notice: CacheNotice | undefined;
  stats(): { hits: number; misses: number; bytesFromCache: number; bytesFromSource: number; stored: number; caching: boolean };
  rangeGet(start: number, end: number): Promise<Uint8Array>;
  /** Resolves once every span read so far is stored (or failed to be). */
  flush(): Promise<void>;
}
