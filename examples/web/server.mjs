// A small static server for the demo page: the page itself, the wasm package (pkg/src and
// pkg/dist), the repository's models/ answering Range requests with 206, and wllama's files for
// the side-by-side bench. Every response carries the COOP/COEP headers a threaded build needs.
// `node server.mjs` serves on 127.0.0.1:${PORT:-8080}; tests import startServer and read its log.
import { createReadStream, existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createServer } from 'node:http';
import { dirname, extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
export const REPO = join(HERE, '..', '..');

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
  '.knot': 'application/octet-stream',
  '.gguf': 'application/octet-stream',
};

/**
 * URL prefix → directory. Only these are served; nothing outside them can be reached.
 * @param {string} modelsDir
 */
const mounts = (modelsDir) => [
  ['/pkg/src/', join(REPO, 'pkg', 'src')],
  ['/pkg/dist/', join(REPO, 'pkg', 'dist')],
  ['/models/', modelsDir],
  ['/wllama/', join(HERE, 'node_modules', '@wllama', 'wllama', 'esm')],
  ['/', HERE],
];

/** Files of the page's own directory that are not the page. */
const PRIVATE = /^\/(node_modules|test|bench|scripts|test-results|package(-lock)?\.json|server\.mjs)(\/|$)/;

/**
 * @param {string} pathname
 * @param {[string, string][]} served the mounts
 * @returns {string | undefined}
 */
function resolvePath(pathname, served) {
  if (pathname === '/') pathname = '/index.html';
  for (const [prefix, dir] of served) {
    if (!pathname.startsWith(prefix)) continue;
    if (prefix === '/' && PRIVATE.test(pathname)) return undefined;
    const file = normalize(join(dir, pathname.slice(prefix.length)));
    // normalize() resolves `..`: a path that climbs out of its mount is refused.
    return file === dir || file.startsWith(dir + sep) ? file : undefined;
  }
  return undefined;
}

/**
 * @typedef {{ method: string, path: string, range: string | undefined, status: number,
 *   bytes: number }} LogEntry
 */

/**
 * Starts the server.
 * @param {{ port?: number, host?: string, modelsDir?: string, quiet?: boolean }} [options]
 * @returns {Promise<{ url: string, log: LogEntry[], close: () => Promise<void> }>}
 */
export async function startServer(options = {}) {
  const modelsDir = options.modelsDir ?? join(REPO, 'models');
  const served = mounts(modelsDir);
  /** @type {LogEntry[]} */
  const log = [];
  const server = createServer(async (req, res) => {
    const entry = { method: req.method ?? '', path: '', range: req.headers.range, status: 0, bytes: 0 };
    res.on('finish', () => {
      entry.status = res.statusCode;
      log.push(entry);
      if (!options.quiet) {
        console.log(`${entry.status} ${entry.method} ${entry.path}${entry.range ? ` ${entry.range}` : ''} ${entry.bytes} B`);
      }
    });
    const headers = {
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
      'Cross-Origin-Resource-Policy': 'same-origin',
      'X-Content-Type-Options': 'nosniff',
    };
    const fail = (status, message) => {
      res.writeHead(status, { ...headers, 'Content-Type': 'text/plain; charset=utf-8' }).end(`${message}\n`);
    };
    let pathname;
    try {
      pathname = decodeURIComponent(new URL(req.url ?? '/', 'http://localhost').pathname);
    } catch {
      return fail(400, 'bad URL');
    }
    entry.path = pathname;
    if (req.method !== 'GET' && req.method !== 'HEAD') return fail(405, 'only GET and HEAD');
    const file = resolvePath(pathname, served);
    const info = file === undefined ? undefined : await stat(file).catch(() => undefined);
    if (file === undefined || info === undefined || !info.isFile()) return fail(404, `no ${pathname}`);

    const size = info.size;
    const isModel = pathname.startsWith('/models/');
    Object.assign(headers, {
      'Content-Type': TYPES[extname(file)] ?? 'application/octet-stream',
      'Accept-Ranges': 'bytes',
      ETag: `"${size.toString(16)}-${Math.floor(info.mtimeMs).toString(16)}"`,
      'Last-Modified': info.mtime.toUTCString(),
      // The models must reach the page through its own span cache (the Cache API), never the
      // browser's HTTP cache, so that what the page claims to cache is what it caches.
      'Cache-Control': isModel ? 'no-store' : 'no-cache',
    });
    let start = 0;
    let end = size - 1;
    let status = 200;
    const range = req.headers.range;
    if (range !== undefined) {
      const m = /^bytes=(\d*)-(\d*)$/.exec(range.trim());
      if (m === null || (m[1] === '' && m[2] === '')) {
        res.writeHead(416, { ...headers, 'Content-Range': `bytes */${size}` }).end();
        return;
      }
      if (m[1] === '') {
        start = Math.max(0, size - Number(m[2]));
      } else {
        start = Number(m[1]);
        if (m[2] !== '') end = Math.min(Number(m[2]), size - 1);
      }
      if (start >= size || start > end) {
        res.writeHead(416, { ...headers, 'Content-Range': `bytes */${size}` }).end();
        return;
      }
      status = 206;
      headers['Content-Range'] = `bytes ${start}-${end}/${size}`;
    }
    const length = size === 0 ? 0 : end - start + 1;
    res.writeHead(status, { ...headers, 'Content-Length': length });
    if (req.method === 'HEAD' || length === 0) return res.end();
    entry.bytes = length;
    const stream = createReadStream(file, { start, end });
    stream.on('error', () => res.destroy());
    stream.pipe(res);
  });
  const port = options.port ?? 0;
  const host = options.host ?? '127.0.0.1';
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(undefined));
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('server: no TCP address');
  return {
    url: `http://${host}:${address.port}`,
    log,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const model = join(REPO, 'models', 'SmolLM2-135M-Instruct.Q4_1.knot');
  if (!existsSync(model)) {
    console.error(`${model} is missing: run scripts/prepare-model.sh (npm start does)`);
  }
  if (!existsSync(join(REPO, 'pkg', 'dist', 'wasm', 'host_bg.wasm'))) {
    console.error('pkg/dist/wasm is missing: run scripts/build-wasm.sh (npm start does)');
  }
  const { url } = await startServer({ port: Number(process.env.PORT ?? 8080) });
  console.log(`knot demo page on ${url}/  (models from ${join(REPO, 'models')})`);
}
