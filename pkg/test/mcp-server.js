// A real MCP server for the agentic loop's tests, made with the official TypeScript SDK and served
// over Streamable HTTP on 127.0.0.1. Endpoints:
//
//   /mcp        stateful: the `initialize` handshake, a session id, answers as server-sent events
//   /stateless  no session (a fresh server per request), answers as JSON
//   /faulty     stateful, the tools that go wrong
//   /paged      stateless, tools/list two tools a page (cursor paging)
//   /auth       as /stateless, behind `authorization: Bearer s3cret`
//
// Tools: calculator and lookup (a key-value table) on /mcp, /stateless and /auth; wait (hangs
// until the client gives up), fail (throws) and big_report (returns 5 MB) on /faulty. Run alone (`node test/mcp-server.js [port]`) it prints its
// URL and serves until killed.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { pathToFileURL } from 'node:url';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

export const TABLE = Object.freeze({ paris: 'France', lima: 'Peru', kyoto: 'Japan', 'answer': '42' });
export const BIG_BYTES = 5 * 1024 * 1024;

const text = (t) => ({ content: [{ type: 'text', text: t }] });

/** Runs a calculator operation; the error a model can read for a bad one. */
function calculate({ op, a, b }) {
  if (op === 'divide' && b === 0) throw new Error('division by zero');
  const r = op === 'add' ? a + b : op === 'subtract' ? a - b : op === 'multiply' ? a * b : a / b;
  return String(Number.isInteger(r) ? r : Number(r.toPrecision(12)));
}

/** The tools that work, as the SDK's high-level server registers them. `log` records each call. */
function toolServer(log) {
  const server = new McpServer({ name: 'knot-test-tools', version: '1.0.0' });
  server.registerTool('calculator', {
    description: 'Arithmetic on two numbers: add, subtract, multiply or divide a by b.',
    inputSchema: { op: z.enum(['add', 'subtract', 'multiply', 'divide']), a: z.number(), b: z.number() },
  }, async (args) => {
    log.push({ name: 'calculator', args });
    return text(calculate(args));
  });
  server.registerTool('lookup', {
    description: 'The country a city is in.',
    inputSchema: { key: z.string() },
  }, async ({ key }) => {
    log.push({ name: 'lookup', args: { key } });
    const v = TABLE[key.toLowerCase()];
    return v === undefined ? { ...text(`no entry for '${key}'`), isError: true } : text(v);
  });
  return server;
}

/** The tools that go wrong. */
function faultyServer(log) {
  const server = new McpServer({ name: 'knot-test-faulty', version: '1.0.0' });
  server.registerTool('wait', {
    description: 'Waits for an event that never comes.',
    inputSchema: { seconds: z.number() },
  }, async (args, extra) => {
    const entry = { name: 'wait', args, cancelled: false };
    log.push(entry);
    await new Promise((resolve) => {
      extra.signal.addEventListener('abort', () => {
        entry.cancelled = true;
        resolve();
      });
    });
    return text('woke up');
  });
  server.registerTool('fail', {
    description: 'Always fails.',
    inputSchema: { reason: z.string() },
  }, async (args) => {
    log.push({ name: 'fail', args });
    throw new Error(`the tool failed on purpose (${args.reason})`);
  });
  server.registerTool('big_report', {
    description: 'A very long report.',
    inputSchema: { topic: z.string() },
  }, async (args) => {
    log.push({ name: 'big_report', args });
    return text('x'.repeat(BIG_BYTES));
  });
  return server;
}

/** A low-level server listing its tools two a page. */
function pagedServer(log) {
  const server = new Server({ name: 'knot-test-paged', version: '1.0.0' }, { capabilities: { tools: {} } });
  const tools = ['alpha', 'beta', 'gamma', 'delta', 'epsilon'].map((name) => ({
    name, description: `The ${name} tool`, inputSchema: { type: 'object', properties: {} },
  }));
  server.setRequestHandler(ListToolsRequestSchema, async (request) => {
    const at = Number(request.params?.cursor ?? 0);
    const next = at + 2 < tools.length ? String(at + 2) : undefined;
    return { tools: tools.slice(at, at + 2), ...(next ? { nextCursor: next } : {}) };
  });
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    log.push({ name: request.params.name, args: request.params.arguments });
    return text(`${request.params.name} done`);
  });
  return server;
}

/**
 * Starts the server on 127.0.0.1 (port 0: any free one).
 * @returns {Promise<{ url: string, log: object[], requests: { path: string, headers: object }[], close(): Promise<void> }>}
 */
export async function startMcpServer(port = 0) {
  /** @type {object[]} */
  const log = [];
  /** @type {{ path: string, headers: object }[]} */
  const requests = [];
  /** @type {Map<string, StreamableHTTPServerTransport>} */
  const sessions = new Map();

  const stateless = async (req, res, body, make) => {
    const server = make(log);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      transport.close();
      server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  };

  const http = createServer(async (req, res) => {
    const path = new URL(req.url, 'http://localhost').pathname;
    requests.push({ path, headers: { ...req.headers } });
    try {
      let raw = '';
      for await (const chunk of req) raw += chunk;
      const body = raw === '' ? undefined : JSON.parse(raw);
      if (path === '/mcp' || path === '/faulty') {
        const id = req.headers['mcp-session-id'];
        let transport = typeof id === 'string' ? sessions.get(id) : undefined;
        if (transport === undefined) {
          if (typeof id === 'string') {
            res.writeHead(404).end('unknown session');
            return;
          }
          transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (sid) => sessions.set(sid, transport),
          });
          transport.onclose = () => sessions.delete(transport.sessionId);
          await (path === '/mcp' ? toolServer : faultyServer)(log).connect(transport);
        }
        await transport.handleRequest(req, res, body);
      } else if (path === '/stateless') {
        await stateless(req, res, body, toolServer);
      } else if (path === '/paged') {
        await stateless(req, res, body, pagedServer);
      } else if (path === '/auth') {
        if (req.headers.authorization !== 'Bearer s3cret') {
          res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"unauthorized"}');
          return;
        }
        await stateless(req, res, body, toolServer);
      } else {
        res.writeHead(404).end('not found');
      }
    } catch (e) {
      if (!res.headersSent) res.writeHead(500).end(String(e?.message ?? e));
    }
  });
  await new Promise((resolve) => http.listen(port, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${/** @type {import('node:net').AddressInfo} */ (http.address()).port}`;
  return {
    url,
    log,
    requests,
    sessions,
    close: async () => {
      for (const t of sessions.values()) await t.close().catch(() => {});
      http.closeAllConnections();
      await new Promise((resolve) => http.close(() => resolve()));
    },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const server = await startMcpServer(Number(process.argv[2] ?? 0));
  console.log(`mcp test server on ${server.url} (/mcp, /stateless, /faulty, /paged, /auth)`);
}
