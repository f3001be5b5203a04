// Uploads a model (a .knot file) to an R2 bucket through R2's S3-compatible API, for
// `knot-cloudflare deploy MODEL.knot` (issue 45). wrangler's `r2 object put` stops at 300 MiB and
// most models are larger: past that size the file goes through a multipart upload that resumes
// where it stopped (the upload id kept in a state file), and a model already in the bucket, same
// size and SHA-256, is not sent again. Requests are signed with AWS SigV4 (aws4fetch); the file is
// never held in memory whole (one part per request in flight).
import { AwsV4Signer } from 'aws4fetch';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const MiB = 2 ** 20;
/**
 * Files up to this size go in one PutObject. It is the limit of wrangler's `r2 object put` (and
 * of a Worker's request body on the paid plans), the reason this module exists; R2's own PutObject
 * takes up to 5 GiB, but past a few hundred MiB a failed single request costs too much to redo.
 */
export const SINGLE_PUT_BYTES = 300 * MiB;
/** Parts of a multipart upload: 3 in flight hold 192 MiB; a 10 GB model is 150 parts. */
export const PART_BYTES = 64 * MiB;
/** R2 (as S3): every part but the last at least 5 MiB. */
export const MIN_PART_BYTES = 5 * MiB;
/** R2 (as S3): at most 10,000 parts; a larger file gets larger parts. */
const MAX_PARTS = 10_000;
const IN_FLIGHT = 3;
/** Tries per request: network errors, 5xx and 429 are tried again, after 1 s then 2 s. */
const ATTEMPTS = 3;
const RETRY_MS = 1000;

/** Where the state of unfinished uploads is kept unless `stateDir` says otherwise. */
export function defaultStateDir() {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'knot-cloudflare', 'uploads');
}

/**
 * An upload that failed. `code`: 'auth' (credentials refused), 'not_found' (no such bucket, or
 * upload), 'network' (no answer, or 5xx, after the retries), 'bad_answer' (an answer this module
 * cannot use) or 'changed' (the file changed while it was uploaded). The message names the step,
 * the HTTP status and the S3 error code; never the secret key.
 */
export class UploadError extends Error {
  /**
   * @param {'auth' | 'not_found' | 'network' | 'bad_answer' | 'changed'} code
   * @param {string} message
   * @param {{ step?: string, status?: number, s3Code?: string, cause?: unknown }} [details]
   */
  constructor(code, message, details = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = 'UploadError';
    this.code = code;
    this.step = details.step;
    this.status = details.status;
    this.s3Code = details.s3Code;
  }
}

/**
 * @typedef {{ phase: 'hash' | 'upload', bytes: number, total: number, part: number,
 *   parts: number }} Progress `hash`: the file's SHA-256 being computed (`bytes` read so far,
 *   `part` 0); `upload`: `bytes` in the bucket so far (parts already there on a resume
 *   included), `part` the part just finished (1 for a single put, counting as it streams)
 */

/**
 * Uploads `file` to `bucket`/`key` unless it is already there (same size and SHA-256).
 * An interrupted multipart upload (an error, or `signal` aborting it: the abort's reason is
 * thrown as is) is resumed by the next call for the same file, bucket and key.
 * @param {{
 *   file: string, bucket: string, key: string, accountId?: string,
 *   credentials: { accessKeyId: string, secretAccessKey: string },
 *   endpoint?: string, partBytes?: number, singlePutBytes?: number, stateDir?: string,
 *   onProgress?: (progress: Progress) => void, signal?: AbortSignal, retryMs?: number,
 * }} options `endpoint` defaults to `https://<accountId>.r2.cloudflarestorage.com`;
 *   `partBytes` (default 64 MiB, at least 5 MiB); `singlePutBytes` (default SINGLE_PUT_BYTES):
 *   files up to it in one PutObject; `stateDir` (default defaultStateDir()): the state files of
 *   unfinished uploads; `retryMs`: the first retry's delay (doubling)
 * @returns {Promise<{ action: 'skipped' | 'uploaded' | 'resumed', bytes: number, sha256: string,
 *   parts: number }>} `parts`: 0 when skipped, 1 for a single put
 * @throws {UploadError} when R2 refuses or does not answer, or the file changes meanwhile
 */
export async function uploadModel(options) {
  const { bucket, key, credentials, signal, onProgress = () => {} } = options;
  if (!options.file || !bucket || !key) throw new TypeError('uploadModel: file, bucket and key are required');
  if (!credentials?.accessKeyId || !credentials?.secretAccessKey) {
    throw new TypeError('uploadModel: credentials.accessKeyId and credentials.secretAccessKey are required');
  }
  if (!options.endpoint && !options.accountId) throw new TypeError('uploadModel: accountId (or endpoint) is required');
  const endpoint = (options.endpoint ?? `https://${options.accountId}.r2.cloudflarestorage.com`).replace(/\/+$/, '');
  const singlePutBytes = options.singlePutBytes ?? SINGLE_PUT_BYTES;
  const stateDir = options.stateDir ?? defaultStateDir();
  const path = resolve(options.file);
  const s3 = client({ endpoint, bucket, key, credentials, signal, retryMs: options.retryMs ?? RETRY_MS });

  const info = await stat(path);
  const size = info.size;
  let partBytes = options.partBytes ?? PART_BYTES;
  if (!(partBytes >= MIN_PART_BYTES)) throw new RangeError(`uploadModel: partBytes must be at least ${MIN_PART_BYTES} (5 MiB)`);
  if (Math.ceil(size / partBytes) > MAX_PARTS) partBytes = Math.ceil(size / MAX_PARTS / MiB) * MiB;
  const sha256 = await hashFile(path, size, signal, onProgress);
  /** What makes an unfinished upload this file's: a change in any of these starts it over. */
  const identity = { path, size, mtimeMs: info.mtimeMs, sha256, partBytes };
  const name = createHash('sha256').update(JSON.stringify([endpoint, bucket, key, path])).digest('hex').slice(0, 16);
  const statePath = join(stateDir, `upload-${name}.json`);
  const state = await readState(statePath);
  /** Forgets a state (and aborts its upload when the server still knows it). */
  const drop = async () => {
    if (state) await s3.abort(state.uploadId).catch((e) => { if (signal?.aborted) throw e; });
    await unlink(statePath).catch(() => {});
  };

  if (await s3.matches(size, sha256)) {
    await drop();
    return { action: 'skipped', bytes: size, sha256, parts: 0 };
  }
  if (size <= singlePutBytes) {
    await drop();
    await s3.put(path, size, sha256, (bytes) => onProgress({ phase: 'upload', bytes, total: size, part: 1, parts: 1 }));
    return { action: 'uploaded', bytes: size, sha256, parts: 1 };
  }

  const parts = Math.ceil(size / partBytes);
  const sizeOf = (n) => Math.min(partBytes, size - (n - 1) * partBytes);
  /** @type {Map<number, { etag: string, size: number }>} the parts in the bucket */
  let done = new Map();
  let uploadId = null;
  let action = 'uploaded';
  if (state && sameIdentity(state.file, identity)) {
    try {
      done = await s3.listParts(state.uploadId);
      uploadId = state.uploadId;
      action = 'resumed';
    } catch (e) {
      // The server no longer knows it (completed, aborted or expired): start over.
      if (!(e instanceof UploadError && e.code === 'not_found')) throw e;
      await unlink(statePath).catch(() => {});
    }
  } else if (state) {
    await drop();
  }
  if (!uploadId) {
    uploadId = await s3.create(sha256);
    await writeState(stateDir, statePath, { version: 1, endpoint, bucket, key, uploadId, file: identity, started: new Date().toISOString() });
  }
  // A part of the wrong size (or past the end) is sent again: uploading a part number again
  // replaces it, and only the parts listed at completion make the object.
  for (const [n, part] of done) if (n > parts || part.size !== sizeOf(n)) done.delete(n);

  const fh = await open(path, 'r');
  try {
    const todo = [];
    for (let n = 1; n <= parts; n++) if (!done.has(n)) todo.push(n);
    let bytes = 0;
    for (const part of done.values()) bytes += part.size;
    onProgress({ phase: 'upload', bytes, total: size, part: 0, parts });
    let next = 0;
    let failed = null;
    const worker = async () => {
      while (!failed && next < todo.length) {
        const n = todo[next++];
        try {
          signal?.throwIfAborted();
          const body = await readPart(fh, path, (n - 1) * partBytes, sizeOf(n));
          const etag = await s3.uploadPart(uploadId, n, body);
          done.set(n, { etag, size: body.length });
          bytes += body.length;
          onProgress({ phase: 'upload', bytes, total: size, part: n, parts });
        } catch (e) {
          failed ??= e;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(IN_FLIGHT, todo.length) }, worker));
    if (failed) throw failed;
  } finally {
    await fh.close();
  }
  const now = await stat(path);
  if (now.size !== size || now.mtimeMs !== info.mtimeMs) {
    throw new UploadError('changed', `UploadPart: ${path} changed while it was uploaded (upload it again)`, { step: 'UploadPart' });
  }
  try {
    await s3.complete(uploadId, [...done].sort(([a], [b]) => a - b).map(([n, part]) => ({ n, etag: part.etag })));
  } catch (e) {
    // A completion that succeeded but whose answer was lost leaves the upload unknown to its
    // retry: the object tells.
    if (!(e instanceof UploadError && e.code === 'not_found' && (await s3.matches(size, sha256)))) throw e;
  }
  await unlink(statePath).catch(() => {});
  return { action, bytes: size, sha256, parts };
}

/** The file's SHA-256, streamed. */
async function hashFile(path, size, signal, onProgress) {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 4 * MiB, signal })) {
    hash.update(chunk);
    bytes += chunk.length;
    onProgress({ phase: 'hash', bytes, total: size, part: 0, parts: 0 });
  }
  return hash.digest('hex');
}

/** `length` bytes of the file at `offset`; a file that got shorter is an error ('changed'). */
async function readPart(fh, path, offset, length) {
  const bytes = new Uint8Array(length);
  for (let got = 0; got < length;) {
    const { bytesRead } = await fh.read(bytes, got, length - got, offset + got);
    if (bytesRead === 0) {
      throw new UploadError('changed', `UploadPart: ${path} ended at ${offset + got} bytes while it was uploaded`, { step: 'UploadPart' });
    }
    got += bytesRead;
  }
  return bytes;
}

function sameIdentity(a, b) {
  return !!a && a.path === b.path && a.size === b.size && a.mtimeMs === b.mtimeMs && a.sha256 === b.sha256 && a.partBytes === b.partBytes;
}

/** The state file, or null when missing or unreadable (a broken state is started over). */
async function readState(statePath) {
  try {
    const state = JSON.parse(await readFile(statePath, 'utf8'));
    return typeof state?.uploadId === 'string' && state.file ? state : null;
  } catch {
    return null;
  }
}

/** Written whole or not at all (a rename), so that an interruption leaves no half state. */
async function writeState(stateDir, statePath, state) {
  await mkdir(stateDir, { recursive: true });
  await writeFile(`${statePath}.tmp`, `${JSON.stringify(state, null, 2)}\n`);
  await rename(`${statePath}.tmp`, statePath);
}

const AUTH_CODES = new Set(['SignatureDoesNotMatch', 'InvalidAccessKeyId', 'AccessDenied', 'InvalidToken', 'ExpiredToken', 'Unauthorized']);
const NOT_FOUND_CODES = new Set(['NoSuchBucket', 'NoSuchUpload', 'NoSuchKey']);
/** The bytes sent were not those hashed: the file changed since. */
const CHANGED_CODES = new Set(['XAmzContentSHA256Mismatch', 'BadDigest']);

/** The text of `<tag>` in `xml` (the first, or each with `all`), its entities decoded. */
function tagText(xml, tag) {
  const match = new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`).exec(xml);
  return match ? unescapeXml(match[1]) : undefined;
}
function tagTexts(xml, tag) {
  return [...xml.matchAll(new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, 'g'))].map((m) => m[1]);
}
function unescapeXml(text) {
  return text.replace(/&(quot|apos|lt|gt|amp|#x[0-9a-fA-F]+|#\d+);/g, (_, e) =>
    ({ quot: '"', apos: "'", lt: '<', gt: '>', amp: '&' })[e]
      ?? String.fromCodePoint(e[1] === 'x' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10)));
}
function escapeXml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]);
}

/**
 * The S3 requests this upload makes, on one object, each signed (region `auto`, service `s3`)
 * and tried up to ATTEMPTS times.
 */
function client({ endpoint, bucket, key, credentials, signal, retryMs }) {
  // Encoded as SigV4's canonical path is (RFC 3986: !'()* too), so that what is signed is sent.
  const encode = (part) => encodeURIComponent(part).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  const object = `${endpoint}/${encode(bucket)}/${key.split('/').map(encode).join('/')}`;
  const { accessKeyId, secretAccessKey } = credentials;
  /** A message never holds the secret, even if an answer echoed it. */
  const clean = (text) => text.split(secretAccessKey).join('***');

  /**
   * @param {string} step the S3 operation, named in errors
   * @param {{ method: string, query?: string, headers?: Record<string, string>,
   *   body?: () => any, ok?: number[] }} request `body` makes a fresh body per attempt;
   *   `ok`: the statuses that are answers (default 200)
   * @returns {Promise<{ status: number, headers: Headers, text: string }>}
   */
  async function request(step, { method, query = '', headers = {}, body, ok = [200] }) {
    for (let attempt = 1; ; attempt++) {
      let status;
      let text = '';
      let answer;
      try {
        const signed = await new AwsV4Signer({
          method,
          url: object + query,
          // Without a payload hash of its own, a request says UNSIGNED-PAYLOAD (which R2 takes).
          headers: { 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD', ...headers },
          accessKeyId,
          secretAccessKey,
          service: 's3',
          region: 'auto',
        }).sign();
        answer = await fetch(signed.url, { method, headers: signed.headers, body: body?.(), signal, duplex: 'half' });
        status = answer.status;
        text = method === 'HEAD' ? '' : await answer.text();
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        // The body's own error (the file got shorter), as fetch's cause.
        if (e instanceof UploadError) throw e;
        if (e?.cause instanceof UploadError) throw e.cause;
        if (attempt < ATTEMPTS) {
          await sleep(retryMs * 2 ** (attempt - 1), undefined, { signal });
          continue;
        }
        const why = e?.cause?.code ?? e?.cause?.message ?? e?.message ?? String(e);
        throw new UploadError('network', clean(`${step}: no answer from ${endpoint} after ${ATTEMPTS} tries (${why})`), { step, cause: e });
      }
      // A 200 can carry an error (CompleteMultipartUpload's, once its answer has begun).
      if (ok.includes(status) && !(status === 200 && /<Error>/.test(text))) return { status, headers: answer.headers, text };
      const s3Code = tagText(text, 'Code');
      const s3Message = tagText(text, 'Message');
      if ((status >= 500 || status === 429 || s3Code === 'InternalError' || s3Code === 'SlowDown') && attempt < ATTEMPTS) {
        await sleep(retryMs * 2 ** (attempt - 1), undefined, { signal });
        continue;
      }
      const code = status === 401 || status === 403 || AUTH_CODES.has(s3Code) ? 'auth'
        : status === 404 || NOT_FOUND_CODES.has(s3Code) ? 'not_found'
        : CHANGED_CODES.has(s3Code) ? 'changed'
        : status >= 500 || status === 429 || s3Code === 'InternalError' ? 'network'
        : 'bad_answer';
      const what = [`HTTP ${status}`, s3Code, s3Message].filter(Boolean).join(' ');
      throw new UploadError(code, clean(`${step} ${bucket}/${key}: ${what}`), { step, status, s3Code });
    }
  }

  /** An answer without what it must hold. */
  const bad = (step, status, what) =>
    new UploadError('bad_answer', `${step} ${bucket}/${key}: HTTP ${status} without ${what}`, { step, status });

  return {
    /** Whether the object is there with this size and SHA-256 (our metadata). */
    async matches(size, sha256) {
      const { status, headers } = await request('HeadObject', { method: 'HEAD', ok: [200, 404, 401, 403] });
      if (status === 401 || status === 403) {
        // A HEAD's answer has no body: a GET of the first byte tells why (the S3 error code).
        await request('HeadObject', { method: 'GET', headers: { range: 'bytes=0-0' }, ok: [] });
      }
      return status === 200 && Number(headers.get('content-length')) === size && headers.get('x-amz-meta-sha256') === sha256;
    },

    /** One PutObject, streamed from the file, its payload hash the file's (R2 checks it). */
    async put(path, size, sha256, progress) {
      await request('PutObject', {
        method: 'PUT',
        headers: { 'content-length': String(size), 'x-amz-content-sha256': sha256, 'x-amz-meta-sha256': sha256 },
        body: () => (async function* () {
          let bytes = 0;
          for await (const chunk of createReadStream(path, { highWaterMark: MiB, end: Math.max(0, size - 1), signal })) {
            bytes += chunk.length;
            progress(bytes);
            yield chunk;
          }
          if (bytes !== size) {
            const message = `PutObject: ${path} ended at ${bytes} of ${size} bytes while it was uploaded`;
            throw new UploadError('changed', message, { step: 'PutObject' });
          }
        })(),
      });
    },

    async create(sha256) {
      const { status, text } = await request('CreateMultipartUpload', {
        method: 'POST',
        query: '?uploads',
        headers: { 'x-amz-meta-sha256': sha256 },
      });
      const uploadId = tagText(text, 'UploadId');
      if (!uploadId) throw bad('CreateMultipartUpload', status, 'an UploadId');
      return uploadId;
    },

    /** The part's ETag. Its payload hash is signed: R2 refuses a part whose bytes differ. */
    async uploadPart(uploadId, n, bytes) {
      const step = `UploadPart ${n}`;
      const { status, headers } = await request(step, {
        method: 'PUT',
        query: `?partNumber=${n}&uploadId=${encodeURIComponent(uploadId)}`,
        headers: { 'content-length': String(bytes.length), 'x-amz-content-sha256': createHash('sha256').update(bytes).digest('hex') },
        body: () => bytes,
      });
      const etag = headers.get('etag');
      if (!etag) throw bad(step, status, 'an ETag');
      return etag;
    },

    /** The parts already uploaded, following the listing's truncation. */
    async listParts(uploadId) {
      const parts = new Map();
      for (let marker = '0'; ;) {
        const { status, text } = await request('ListParts', {
          method: 'GET',
          query: `?part-number-marker=${encodeURIComponent(marker)}&uploadId=${encodeURIComponent(uploadId)}`,
        });
        if (!/<ListPartsResult[\s>]/.test(text)) throw bad('ListParts', status, 'a ListPartsResult');
        for (const part of tagTexts(text, 'Part')) {
          const n = Number(tagText(part, 'PartNumber'));
          const etag = tagText(part, 'ETag');
          const size = Number(tagText(part, 'Size'));
          if (!Number.isInteger(n) || n < 1 || !etag || !Number.isFinite(size)) throw bad('ListParts', status, 'well-formed parts');
          parts.set(n, { etag, size });
        }
        if (tagText(text, 'IsTruncated') !== 'true') return parts;
        const next = tagText(text, 'NextPartNumberMarker');
        if (!next || Number(next) <= Number(marker)) throw bad('ListParts', status, 'a NextPartNumberMarker past the last one');
        marker = next;
      }
    },

    async complete(uploadId, parts) {
      const list = parts.map(({ n, etag }) => `<Part><PartNumber>${n}</PartNumber><ETag>${escapeXml(etag)}</ETag></Part>`);
      const xml = `<CompleteMultipartUpload>${list.join('')}</CompleteMultipartUpload>`;
      await request('CompleteMultipartUpload', {
        method: 'POST',
        query: `?uploadId=${encodeURIComponent(uploadId)}`,
        headers: { 'content-type': 'application/xml', 'x-amz-content-sha256': createHash('sha256').update(xml).digest('hex') },
        body: () => xml,
      });
    },

    /** Aborts an upload; one the server no longer knows is already gone. */
    async abort(uploadId) {
      await request('AbortMultipartUpload', { method: 'DELETE', query: `?uploadId=${encodeURIComponent(uploadId)}`, ok: [200, 204, 404] });
    },
  };
}
