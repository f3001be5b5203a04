// knot-serve's listener: a Fetch API handler (server.js's `fetch`) on the runtime's own server
// (Bun.serve, Deno.serve) or on node:http through a small adapter.
import { toApiError } from './openai/index.js';

/**
 * Serves `handler` on host:port with the runtime's server. Resolves once listening, with the URL
 * and a `close()` that stops taking connections and resolves when the open ones ended.
 * @param {(request: Request, peer: { client?: string }) => Promise<Response>} handler told each
 *   request and the address of the client that sent it
 * @param {{ port: number, host: string }} at
 * @returns {Promise<{ url: string, close(): Promise<void> }>}
 */
export async function listen(handler, { port, host }) {
  const g = /** @type {any} */ (globalThis);
  if (g.Bun !== undefined) {
    const server = g.Bun.serve({
      port, hostname: host, idleTimeout: 0,
      fetch: (request, bun) => handler(request, { client: bun.requestIP(request)?.address }),
    });
    return { url: `http://${host}:${server.port}`, close: async () => server.stop() };
  }
  if (g.Deno !== undefined) {
    let resolveListening;
    const listening = new Promise((resolve) => { resolveListening = resolve; });
    const server = g.Deno.serve({ port, hostname: host, onListen: (addr) => resolveListening(addr) },
      (request, info) => handler(request, { client: info.remoteAddr?.hostname }));
    const addr = await listening;
    return { url: `http://${host}:${addr.port}`, close: () => server.shutdown() };
  }
  return listenNode(handler, { port, host });
}

/** node:http in front of a Fetch API handler: the request's body streams in, the response's out. */
async function listenNode(handler, { port, host }) {
  const http = await import('node:http');
  const server = http.createServer(async (req, res) => {
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort(new DOMException('The client went away', 'AbortError'));
    });
    try {
      const headers = new Headers();
      for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
      const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
      const request = new Request(`http://${req.headers.host ?? `${host}:${port}`}${req.url}`, {
        method: req.method,
        headers,
        body: hasBody ? bodyOf(req) : null,
        signal: gone.signal,
        // @ts-ignore Node's fetch needs it for a streamed body.
        duplex: 'half',
      });
      const response = await handler(request, { client: req.socket.remoteAddress });
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (response.body !== null) {
        for await (const chunk of /** @type {any} */ (response.body)) {
          if (!res.write(chunk)) await new Promise((resolve) => res.once('drain', resolve));
        }
      }
      res.end();
    } catch (e) {
      if (!res.headersSent) {
        const body = JSON.stringify(toApiError(e).toJSON());
        res.writeHead(500, { 'content-type': 'application/json' }).end(body);
      } else {
        res.destroy();
      }
    }
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(undefined));
  });
  const address = /** @type {import('node:net').AddressInfo} */ (server.address());
  return {
    url: `http://${host}:${address.port}`,
    close: () => new Promise((resolve) => {
      server.close(() => resolve(undefined));
      server.closeIdleConnections();
    }),
  };
}

/**
 * A request's body as a web stream. Canceling it (a body over the cap) drains the rest unread
 * rather than destroying the socket, so the client still gets the answer (413).
 * @param {import('node:http').IncomingMessage} req
 */
function bodyOf(req) {
  let open = true;
  const settle = (f) => {
    if (!open) return;
    open = false;
    f();
  };
  return new ReadableStream({
    start(c) {
      req.on('data', (d) => {
        if (open) c.enqueue(new Uint8Array(d.buffer, d.byteOffset, d.byteLength));
      });
      req.on('end', () => settle(() => c.close()));
      req.on('error', (e) => settle(() => c.error(e)));
    },
    cancel() {
      open = false;
      req.resume();
    },
  });
}
