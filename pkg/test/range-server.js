// An HTTP range server for tests: node:http on 127.0.0.1, an OS-chosen port, serving one byte array.
import { createServer } from 'node:http';

/**
 * @typedef {'range' | 'full' | 'wrong-range' | 'transient' | 'short-body' | 'oversized-body'} ServerMode
 *  range:       correct 206 with `Content-Range: bytes a-b/total`; HEAD gives Content-Length.
 *  full:        ignores Range, always 200 with the whole body.
 *  wrong-range: 206 whose Content-Range (and body) start one byte later than asked.
 *  transient:   the first `failFirst` requests get 503, then behaves as `range`.
 *  short-body:  206 with a correct Content-Range but one byte missing from the body.
 *  oversized-body: 206 with a correct Content-Range, no Content-Length, and 16 MiB of body
 *               streamed in 64 KiB chunks (a server that sends far more than asked).
 */

/**
 * @param {Uint8Array} bytes
 * @param {{ mode?: ServerMode, failFirst?: number, latencyMs?: number, head?: boolean, etag?: string }} [options]
 *   head: false makes HEAD answer 405, so clients must probe with a range.
 *   etag: sent as ETag with every 200 and 206 (the returned object's `etag` changes it later).
 */
export async function startRangeServer(bytes, options = {}) {
  const mode = options.mode ?? 'range';
  const failFirst = options.failFirst ?? 0;
  const latencyMs = options.latencyMs ?? 0;
  const allowHead = options.head ?? true;
  const total = bytes.byteLength;
  /** @type {{ method: string, range: string | undefined }[]} */
  const requests = [];
  const state = { etag: options.etag };
  /** @param {Record<string, string | number>} headers */
  const tagged = (headers) => (state.etag === undefined ? headers : { ...headers, ETag: state.etag });

  const server = createServer((req, res) => {
    const index = requests.length;
    requests.push({ method: req.method ?? '', range: req.headers.range });
    const reply = () => {
      if (mode === 'transient' && index < failFirst) {
        res.writeHead(503, { 'Content-Type': 'text/plain' }).end('try again');
        return;
      }
      if (req.method === 'HEAD') {
        if (!allowHead) {
          res.writeHead(405).end();
          return;
        }
        res.writeHead(200, tagged({ 'Content-Length': total, 'Accept-Ranges': mode === 'full' ? 'none' : 'bytes' })).end();
        return;
      }
      if (req.method !== 'GET') {
        res.writeHead(405).end();
        return;
      }
      const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
      if (mode === 'full' || m === null) {
        res.writeHead(200, { 'Content-Length': total }).end(bytes);
        return;
      }
      let start = Number(m[1]);
      let end = Math.min(Number(m[2]), total - 1);
      if (start >= total || start > end) {
        res.writeHead(416, { 'Content-Range': `bytes */${total}` }).end();
        return;
      }
      if (mode === 'wrong-range') {
        start = Math.min(start + 1, total - 1);
        end = Math.min(end + 1, total - 1);
      }
      if (mode === 'oversized-body') {
        res.writeHead(206, { 'Content-Range': `bytes ${start}-${end}/${total}` });
        const chunk = new Uint8Array(64 << 10);
        let left = 256;
        const pump = () => {
          while (left > 0 && !res.destroyed) {
            left--;
            if (!res.write(chunk)) {
              res.once('drain', pump);
              return;
            }
          }
          if (!res.destroyed) res.end();
        };
        res.on('close', () => {
          left = 0;
        });
        pump();
        return;
      }
      let body = bytes.subarray(start, end + 1);
      if (mode === 'short-body') body = body.subarray(0, body.byteLength - 1);
      res.writeHead(206, tagged({
        'Content-Range': `bytes ${start}-${end}/${total}`,
        'Content-Length': body.byteLength,
      }));
      res.end(body);
    };
    if (latencyMs > 0) setTimeout(reply, latencyMs);
    else reply();
  });

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(undefined));
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('range server: no TCP address');

  return {
    url: `http://127.0.0.1:${address.port}/model.knot`,
    /** Every request received so far, in order. */
    requests,
    /** The ETag sent from now on (undefined: none). */
    get etag() {
      return state.etag;
    },
    set etag(value) {
      state.etag = value;
    },
    /** @returns {number} */
    get requestCount() {
      return requests.length;
    },
    /** @returns {Promise<void>} */
    close() {
      server.closeAllConnections?.();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
