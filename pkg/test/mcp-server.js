// A real MCP server for the agentic loop's tests, made with the official TypeScript SDK and served
// over Streamable HTTP on 127.0.0.1. Endpoints:
//
//   /mcp        stateful: the `initialize` handshake, a session id, answers as server-sent events
//   /stateless  no session (a fresh server per request), answers as JSON
//   /faulty     stateful, the tools that go wrong
//   /paged      stateless, tools/list two tools a page (cursor paging)
//   /auth       as /stateless, behind `authorization: Bearer s3cret`
//   /corpus/S   stateless, the tools of server S of the corpus of real tool schemas
//               (tests/fixtures/mcp-tools/S.json), listed verbatim
//
// Tools: calculator and lookup (a key-value table) on /mcp, /stateless and /auth; wait (hangs
// until the client gives up), fail (throws) and big_report (returns 5 MB) on /faulty; on
// /corpus/S, each tool validates its arguments under its own inputSchema with Ajv (formats
// asserted) and answers `valid` or the errors. Run alone (`node test/mcp-server.js [port]`) it
// prints its URL and serves until killed.
import { randomUUID } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { pathToFileURL } from 'node:url';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
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

const CORPUS_DIR = new URL('../../tests/fixtures/mcp-tools/', import.meta.url);
/** @type {{ server: string, tools: { name: string, description?: string, inputSchema: any }[] }[] | undefined} */
let corpusFiles;

/**
 * The corpus of real tool schemas: public MCP servers' tools/list answers
 * (tests/fixtures/mcp-tools), servers in name order, as the Rust tests read it.
 */
export function toolCorpus() {
  corpusFiles ??= readdirSync(CORPUS_DIR).filter((f) => f.endsWith('.json')).sort()
    .map((f) => JSON.parse(readFileSync(new URL(f, CORPUS_DIR), 'utf8')));
  return corpusFiles;
}

let ajvs;
/** Each corpus tool's validator, compiled once. */
const corpusValidators = new Map();

/**
 * Ajv for the draft a schema declares (2020-12, else draft-07, Ajv's default), in strict mode
 * (union types, as in `"type": ["boolean", "string"]`, allowed), formats asserted (ajv-formats).
 * Notion's `format: "json"` has no standard meaning: accepted, as an unknown format is an
 * annotation.
 */
function validatorOf(server, tool) {
  const key = `${server}/${tool.name}`;
  let v = corpusValidators.get(key);
  if (v === undefined) {
    const options = { allErrors: true, allowUnionTypes: true };
    ajvs ??= [new Ajv2020(options), new Ajv(options)].map((a) => addFormats(a).addFormat('json', true));
    const schema = tool.inputSchema;
    v = ajvs[String(schema.$schema ?? '').includes('2020-12') ? 0 : 1].compile(schema);
    corpusValidators.set(key, v);
  }
  return v;
}

/**
 * A low-level server listing one corpus server's tools with their exact inputSchema. A call is
 * validated under its tool's schema and logged ({ name, server, args, valid, errors }); the
 * result is `valid`, or the errors (a tool error).
 */
function corpusServer(log, { server: name, tools }) {
  const server = new Server({ name: `corpus-${name}`, version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    const { name: tool, arguments: args = {} } = request.params;
    const t = tools.find((x) => x.name === tool);
    if (t === undefined) {
      log.push({ name: tool, server: name, args, valid: false, errors: ['no such tool'] });
      return { ...text(`no tool '${tool}'`), isError: true };
    }
    const validate = validatorOf(name, t);
    const valid = validate(args);
    const errors = valid ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message} (${e.schemaPath})`);
    log.push({ name: tool, server: name, args, valid, errors });
    return valid ? text('valid') : { ...text(`invalid: ${errors.join('; ')}`), isError: true };
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
      } else if (path.startsWith('/corpus/')) {
        const entry = toolCorpus().find((c) => c.server === path.slice('/corpus/'.length));
        if (entry === undefined) res.writeHead(404).end('no such corpus server');
        else await stateless(req, res, body, (l) => corpusServer(l, entry));
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
  console.log(`mcp test server on ${server.url} (/mcp, /stateless, /faulty, /paged, /auth, /corpus/SERVER)`);
}
