// MCP servers for the agentic loop: their configuration (checked, and held to an allow-list),
// connections over Streamable HTTP through the official TypeScript SDK's client, the tools they
// list (paged, namespaced `server__tool`, optionally cached for a short time) and tool calls
// under a timeout, a cancellation signal and a cap on the bytes of a result.
//
// The SDK is loaded only when a request runs the loop with MCP servers, so the package keeps no
// runtime dependency: `@modelcontextprotocol/sdk` and `@cfworker/json-schema` are optional peer
// dependencies. Results' structured content is checked against a tool's output schema with
// @cfworker/json-schema, which compiles nothing (Workers forbid code generation; Ajv needs it).
import { ApiError, badRequest } from './errors.js';
import { stdioClient } from './stdio.js';

/**
 * A server over Streamable HTTP (`url`, `headers`) or a command speaking MCP on its stdio
 * (`command`, `args`, `env`, `cwd`; started once, shared by requests: `stdio.js`).
 * @typedef {{ name: string, url?: string, headers?: Record<string, string>, command?: string,
 *   args?: string[], env?: Record<string, string>, cwd?: string }} McpServer
 */
/**
 * A server's tool as the model sees it: `parameters` is the schema its calls are generated under,
 * `schema` the server's own, which C1 checks them against.
 * @typedef {{ name: string, server: string, tool: string, description: string, parameters: object, schema: object }} McpTool
 */

/** Server names: they prefix tool names, so letters, digits, `-` and single `_`. */
const SERVER_NAME = /^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$/;
const MAX_SERVERS = 16;
const MAX_TOOLS_PER_SERVER = 128;
const MAX_PAGES = 32;

/** Whether this runtime can start processes (Node, Bun, Deno; not a Worker, not a page). */
export function canSpawn() {
  return globalThis.navigator?.userAgent !== 'Cloudflare-Workers' && typeof globalThis.process?.versions?.node === 'string'
    && typeof globalThis.window === 'undefined';
}

/**
 * MCP servers as configured (`KNOT_MCP_SERVERS`, `--mcp FILE.json`) or sent with a request
 * (its text, or the value): a list of `{ name, url, headers? }` / `{ name, command, args?, env?,
 * cwd? }`, or the file people already have — `{ "mcpServers": { NAME: { command, args, env, cwd }
 * | { url, headers } } }` as Claude Desktop and Cursor write it (`servers` as VS Code does; a
 * `type` of `stdio`, `http` or `streamable-http`; `disabled: true` entries left out).
 * Stdio servers only where `stdio` (the owner's configuration, in a runtime that can start
 * processes): a request never names a command.
 * @param {unknown} value
 * @param {string} where what to name in errors: a setting, or the request's field
 * @param {{ stdio?: boolean }} [options]
 * @returns {McpServer[]}
 */
export function parseMcpServers(value, where, options = {}) {
  let list = value;
  if (typeof value === 'string') {
    try {
      list = JSON.parse(value);
    } catch (e) {
      throw new McpConfigError(`${where} is not valid JSON: ${e.message}`, where);
    }
  }
  const named = list !== null && typeof list === 'object' && !Array.isArray(list);
  const table = named ? (list.mcpServers ?? list.servers) : undefined;
  if (named) {
    if (table === null || typeof table !== 'object' || Array.isArray(table)) {
      throw new McpConfigError(`${where} must be a list of servers or { "mcpServers": { NAME: { … } } }`, where);
    }
    list = Object.entries(table).filter(([, s]) => s?.disabled !== true).map(([name, s]) => (
      s !== null && typeof s === 'object' && !Array.isArray(s) ? { name, ...s } : s));
  }
  if (!Array.isArray(list) || list.length > MAX_SERVERS) {
    throw new McpConfigError(`${where} must be a list of at most ${MAX_SERVERS} servers`, where);
  }
  const names = new Set();
  return list.map((s, i) => {
    const at = named ? `${where}.mcpServers.${s?.name ?? i}` : `${where}[${i}]`;
    if (typeof s !== 'object' || s === null || Array.isArray(s)) throw new McpConfigError(`${at} must be { name, url, headers? } or { name, command, args? }`, at);
    if (typeof s.name !== 'string' || s.name.length > 32 || !SERVER_NAME.test(s.name)) {
      throw new McpConfigError(`${at}.name must be 1 to 32 letters, digits, '-' or single '_'`, `${at}.name`);
    }
    if (names.has(s.name)) throw new McpConfigError(`${at}.name '${s.name}' is given twice`, `${at}.name`);
    names.add(s.name);
    const stdio = s.command !== undefined || s.type === 'stdio';
    const fields = stdio ? ['name', 'type', 'disabled', 'command', 'args', 'env', 'cwd'] : ['name', 'type', 'disabled', 'url', 'headers'];
    const extra = Object.keys(s).find((k) => !fields.includes(k));
    if (extra !== undefined) throw new McpConfigError(`${at} has an unknown field '${extra}'`, at);
    const strings = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && Object.values(v).every((x) => typeof x === 'string');
    if (stdio) {
      if (!options.stdio) {
        const why = canSpawn() ? 'only the server\'s own configuration may start one'
          : 'this runtime cannot start processes (a Worker, a page): give MCP servers by url (Streamable HTTP)';
        throw new McpConfigError(`${at} starts a command (a stdio server): ${why}`, at);
      }
      if (typeof s.command !== 'string' || s.command === '') throw new McpConfigError(`${at}.command must be a program to run`, `${at}.command`);
      if (s.args !== undefined && !(Array.isArray(s.args) && s.args.every((a) => typeof a === 'string'))) {
        throw new McpConfigError(`${at}.args must be a list of strings`, `${at}.args`);
      }
      if (s.env !== undefined && !strings(s.env)) throw new McpConfigError(`${at}.env must be an object of strings`, `${at}.env`);
      if (s.cwd !== undefined && typeof s.cwd !== 'string') throw new McpConfigError(`${at}.cwd must be a directory`, `${at}.cwd`);
      return { name: s.name, command: s.command, args: [...(s.args ?? [])], env: { ...(s.env ?? {}) }, ...(s.cwd === undefined ? {} : { cwd: s.cwd }) };
    }
    if (s.type !== undefined && s.type !== 'http' && s.type !== 'streamable-http') {
      throw new McpConfigError(`${at}.type '${s.type}' is not served: MCP servers over Streamable HTTP (http) or stdio`, `${at}.type`);
    }
    let url;
    try {
      url = new URL(s.url);
    } catch {
      throw new McpConfigError(`${at}.url must be an http(s) URL`, `${at}.url`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new McpConfigError(`${at}.url must be an http(s) URL`, `${at}.url`);
    const headers = s.headers ?? {};
    if (!strings(headers)) throw new McpConfigError(`${at}.headers must be an object of strings`, `${at}.headers`);
    return { name: s.name, url: url.href, headers: { ...headers } };
  });
}

/** A configuration error: a 400 when it came with a request, a startup failure otherwise. */
export class McpConfigError extends Error {
  /** @param {string} message @param {string} field */
  constructor(message, field) {
    super(message);
    this.name = 'McpConfigError';
    this.field = field;
  }
}

/**
 * The allow-list (`KNOT_AGENTIC_ALLOW`): URL prefixes, comma-separated, or `*`.
 * @param {string | undefined} value
 * @returns {string[] | null} null when unset
 */
export function parseAllowList(value) {
  if (value === undefined || value.trim() === '') return null;
  return value.split(',').map((p) => p.trim()).filter((p) => p !== '');
}

/**
 * Whether the allow-list lets the server be called: `*`, or a prefix of its URL that ends at a
 * path boundary (`https://a.example/mcp` allows `/mcp` and `/mcp/x`, not `/mcpx`).
 * @param {string} url @param {string[]} allow
 */
export function allowed(url, allow) {
  return allow.some((p) => p === '*' || url === p || (url.startsWith(p) && (p.endsWith('/') || url[p.length] === '/' || url[p.length] === '?')));
}

/** Tool names as OpenAI allows them; an MCP tool's name may hold more. */
function toolPart(name) {
  return name.replace(/[^a-zA-Z0-9_-]/g, '_');
}

/**
 * A server's tools under their model-facing names, `server__tool`: unique within the request
 * (the server prefix makes them unique across servers; within one, names that differ only in
 * characters OpenAI forbids get a numeric suffix) and at most 64 characters.
 * @param {string} server
 * @param {{ name: string, description?: string, inputSchema?: object }[]} tools
 * @returns {McpTool[]}
 */
export function namespaced(server, tools) {
  const seen = new Set();
  return tools.map((t) => {
    const room = 64 - server.length - 2;
    let part = toolPart(t.name).slice(0, room);
    for (let n = 2; seen.has(part); n++) part = `${toolPart(t.name).slice(0, room - String(n).length - 1)}_${n}`;
    seen.add(part);
    const schema = t.inputSchema ?? { type: 'object', properties: {} };
    return { name: `${server}__${part}`, server, tool: t.name, description: t.description ?? '', parameters: closed(schema), schema };
  });
}

/**
 * The schema calls are generated under: objects that list their properties and say nothing of
 * others get `additionalProperties: false`. Every value it allows, the server's schema allows
 * too; a small model just cannot pad its arguments with keys no tool reads (they often do,
 * unmasked). Only where a narrower schema means fewer values: not under `not` or `if` (a
 * narrower condition widens what is left), nor `oneOf` (narrower branches may leave a value
 * matching two of the server's); definitions only where no such keyword could reach them.
 * @param {any} schema
 */
export function closed(schema) {
  const negates = /"(not|if|oneOf)":/.test(JSON.stringify(schema ?? null));
  const close = (s) => {
    if (Array.isArray(s)) return s.map(close);
    if (typeof s !== 'object' || s === null) return s;
    const out = {};
    for (const [k, v] of Object.entries(s)) {
      out[k] = k === 'properties' || (!negates && (k === '$defs' || k === 'definitions'))
        ? Object.fromEntries(Object.entries(v ?? {}).map(([name, x]) => [name, close(x)]))
        : ['items', 'anyOf', 'allOf', 'prefixItems', 'additionalProperties'].includes(k) ? close(v) : v;
    }
    if (out.properties !== undefined && out.additionalProperties === undefined && out.patternProperties === undefined) {
      out.additionalProperties = false;
    }
    return out;
  };
  return close(schema);
}

/** Which server a model-facing name belongs to, by its prefix (null: not a server's tool). */
export function serverOf(name, servers) {
  const i = name.indexOf('__');
  if (i <= 0) return null;
  return servers.find((s) => s.name === name.slice(0, i)) ?? null;
}

/** The SDK, loaded once, on first use. */
let sdk = null;
async function loadSdk() {
  sdk ??= Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    import('@modelcontextprotocol/sdk/validation/cfworker'),
  ]).then(([client, transport, validator]) => ({
    Client: client.Client,
    Transport: transport.StreamableHTTPClientTransport,
    Validator: validator.CfWorkerJsonSchemaValidator,
  }), (e) => {
    sdk = null;
    throw new ApiError(501, `MCP servers need the packages @modelcontextprotocol/sdk and @cfworker/json-schema (${e.message})`,
      { code: 'mcp_unavailable' });
  });
  return sdk;
}

/** A result past the byte cap. */
class Oversized extends Error {
  constructor(limit) {
    super(`the result is larger than ${limit} bytes`);
    this.name = 'Oversized';
  }
}

/**
 * Takes a server's secrets out of a message meant for the model or the client: the values of its
 * headers, and its URL (which may carry a key).
 * @param {string} text @param {McpServer} server
 */
export function scrub(text, server) {
  let out = server.url === undefined ? text : text.split(server.url).join(`<${server.name}>`);
  for (const v of [...Object.values(server.headers ?? {}), ...Object.values(server.env ?? {})]) {
    if (v.length >= 4) out = out.split(v).join('<redacted>');
  }
  return out;
}

/**
 * One request's connection to one MCP server (connected on first use; a stateful server's
 * session is ended by `close`).
 */
export class McpConnection {
  /**
   * @param {McpServer} server
   * @param {{ maxResultBytes: number, fetch?: typeof fetch }} options
   */
  constructor(server, options) {
    this.server = server;
    this.maxResultBytes = options.maxResultBytes;
    this.baseFetch = options.fetch ?? ((input, init) => fetch(input, init));
    /** @type {any} */
    this.client = null;
    /** @type {any} */
    this.transport = null;
    /** The call reading now, told when its answer passes the cap. */
    this.current = null;
    /** The client is a stdio server's, shared: `close` leaves it running. */
    this.shared = false;
  }

  /** The response's body, cut (and the current call failed) past the cap. */
  #capped = async (input, init) => {
    const res = await this.baseFetch(input, init);
    if (res.body === null) return res;
    const limit = this.maxResultBytes;
    const current = this.current;
    /** Fails the call reading this answer, and says why. */
    const over = () => {
      const e = new Oversized(limit);
      current?.abort(e);
      return e;
    };
    if (Number(res.headers.get('content-length') ?? NaN) > limit) {
      await res.body.cancel().catch(() => {});
      throw over();
    }
    let size = 0;
    const body = res.body.pipeThrough(new TransformStream({
      transform(chunk, controller) {
        size += chunk.byteLength;
        if (size > limit) controller.error(over());
        else controller.enqueue(chunk);
      },
    }));
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };

  /** @param {AbortSignal} signal */
  async #connect(signal, timeoutMs) {
    if (this.client !== null) return this.client;
    if (this.server.command !== undefined) {
      // Shared by every request, started once: this connection only borrows it.
      this.client = await stdioClient(this.server, { signal, timeout: timeoutMs }, await loadSdk());
      this.shared = true;
      return this.client;
    }
    const { Client, Transport, Validator } = await loadSdk();
    const client = new Client({ name: 'knot-wasm', version: '0.1.0' }, { jsonSchemaValidator: new Validator() });
    const transport = new Transport(new URL(this.server.url), {
      requestInit: { headers: this.server.headers },
      fetch: this.#capped,
      // A request-scoped client does not resume broken streams: the call's timeout decides.
      reconnectionOptions: { maxReconnectionDelay: 1000, initialReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1, maxRetries: 0 },
    });
    await client.connect(transport, { signal, timeout: timeoutMs });
    this.client = client;
    this.transport = transport;
    return client;
  }

  /**
   * Every tool the server lists, following its cursors.
   * @param {{ signal: AbortSignal, timeoutMs: number }} o
   */
  async listTools(o) {
    const client = await this.#connect(o.signal, o.timeoutMs);
    const tools = [];
    let cursor;
    for (let page = 0; page < MAX_PAGES; page++) {
      const r = await client.listTools(cursor === undefined ? {} : { cursor }, { signal: o.signal, timeout: o.timeoutMs });
      tools.push(...r.tools);
      if (tools.length > MAX_TOOLS_PER_SERVER) throw new Error(`the server lists more than ${MAX_TOOLS_PER_SERVER} tools`);
      cursor = r.nextCursor;
      if (cursor === undefined) break;
    }
    return tools;
  }

  /**
   * Calls a tool. Never throws for what the tool did: the outcome says it (`ok`, `error`,
   * `timeout`, `oversized`) with the text the model reads. Throws only when `signal` aborts.
   * @param {string} tool the server's own name for it
   * @param {object} args
   * @param {{ signal: AbortSignal, timeoutMs: number }} o
   * @returns {Promise<{ outcome: 'ok' | 'error' | 'timeout' | 'oversized', text: string, bytes: number }>}
   */
  async callTool(tool, args, o) {
    const call = new AbortController();
    const onAbort = () => call.abort(o.signal.reason);
    o.signal.addEventListener('abort', onAbort);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      call.abort(new Error('timeout'));
    }, o.timeoutMs);
    try {
      const client = await this.#connect(call.signal, o.timeoutMs);
      this.current = call;
      // The SDK's own timeout is the backstop; ours also covers connecting.
      const r = await client.callTool({ name: tool, arguments: args }, undefined, { signal: call.signal, timeout: o.timeoutMs + 1000 });
      const text = resultText(r);
      const bytes = new TextEncoder().encode(text).byteLength;
      // Over stdio the answer is whole when it arrives: the cap is applied to it then.
      if (bytes > this.maxResultBytes) throw new Oversized(this.maxResultBytes);
      return { outcome: r.isError === true ? 'error' : 'ok', text, bytes };
    } catch (e) {
      if (o.signal.aborted) throw o.signal.reason;
      if (call.signal.reason instanceof Oversized || e instanceof Oversized) {
        return { outcome: 'oversized', text: `The result is larger than ${this.maxResultBytes} bytes.`, bytes: 0 };
      }
      if (timedOut || e?.code === -32001) return { outcome: 'timeout', text: `The tool did not answer within ${o.timeoutMs} ms.`, bytes: 0 };
      return { outcome: 'error', text: scrub(String(e?.message ?? e), this.server), bytes: 0 };
    } finally {
      clearTimeout(timer);
      this.current = null;
      o.signal.removeEventListener('abort', onAbort);
    }
  }

  /** Ends a stateful server's session (best effort) and the connection. */
  async close() {
    if (this.client === null) return;
    const { client, transport } = this;
    this.client = null;
    if (this.shared) return;
    if (transport.sessionId !== undefined) await transport.terminateSession().catch(() => {});
    await client.close().catch(() => {});
  }
}

/**
 * What the model reads of a result: its text parts, other parts named, structured content as
 * JSON when no text carries it.
 */
function resultText(r) {
  const parts = (Array.isArray(r.content) ? r.content : []).map((c) => {
    if (c.type === 'text') return c.text;
    if (c.type === 'resource' && typeof c.resource?.text === 'string') return c.resource.text;
    if (c.type === 'resource_link') return `[resource ${c.uri}]`;
    return `[${c.type}${c.mimeType ? ` ${c.mimeType}` : ''}]`;
  });
  if (parts.length === 0 && r.structuredContent !== undefined) return JSON.stringify(r.structuredContent);
  if (parts.length === 0 && r.toolResult !== undefined) return JSON.stringify(r.toolResult);
  return parts.join('\n');
}

/**
 * Tools listed by servers, kept for `ttlMs` across requests (keyed by the server's URL and
 * headers: two configurations never share a listing).
 */
export class ToolsCache {
  /** @param {number} ttlMs 0: no caching */
  constructor(ttlMs) {
    this.ttlMs = ttlMs;
    /** @type {Map<string, { at: number, tools: object[] }>} */
    this.entries = new Map();
  }

  static key(server) {
    return server.command === undefined
      ? JSON.stringify([server.url, Object.entries(server.headers ?? {}).sort()])
      : JSON.stringify([server.command, server.args, Object.entries(server.env ?? {}).sort(), server.cwd ?? null]);
  }

  /** @param {McpServer} server */
  get(server) {
    if (this.ttlMs <= 0) return undefined;
    const key = ToolsCache.key(server);
    const e = this.entries.get(key);
    if (e === undefined) return undefined;
    if (Date.now() - e.at > this.ttlMs) {
      this.entries.delete(key);
      return undefined;
    }
    return e.tools;
  }

  /** @param {McpServer} server @param {object[]} tools */
  set(server, tools) {
    if (this.ttlMs <= 0) return;
    if (this.entries.size >= 64) this.entries.delete(this.entries.keys().next().value);
    this.entries.set(ToolsCache.key(server), { at: Date.now(), tools });
  }
}

/** A configuration error sent with a request, as the 400 naming its field. */
export function requestConfigError(e) {
  return e instanceof McpConfigError ? badRequest(e.message, e.field, 'invalid_value') : e;
}
