// MCP servers that run as child processes speaking MCP on their stdin/stdout (most public
// servers: filesystem, git, memory, fetch, time): each started once, through the official SDK's
// stdio transport, and shared by every request (the SDK's client matches answers to requests);
// started again on the next use after it exits; ended with the server (`closeStdioServers`).
// Their stderr is the owner's to read (copied to this process's stderr, each line named by the
// server), never the model's or a client's.

/** @typedef {import('./mcp.js').McpServer} McpServer */

/**
 * The SDK's stdio transport. Its name is built at run time so that bundlers for Workers and pages
 * (which cannot start processes, and never get here) do not pull in `node:child_process`.
 */
const loadStdio = () => import(['@modelcontextprotocol/sdk', 'client', 'stdio.js'].join('/'));

/** Running servers by their configuration: { client, transport, ready }. */
const running = new Map();

const keyOf = (server) => JSON.stringify([server.command, server.args, server.env, server.cwd ?? null]);

/**
 * The connected client of a stdio server, started if it is not running.
 * @param {McpServer} server
 * @param {{ signal: AbortSignal, timeout: number }} o
 * @param {{ Client: any, Validator: any }} sdk
 */
export async function stdioClient(server, o, sdk) {
  const key = keyOf(server);
  let entry = running.get(key);
  if (entry === undefined) {
    entry = start(server, o, sdk, key);
    running.set(key, entry);
  }
  try {
    return (await entry.ready).client;
  } catch (e) {
    if (running.get(key) === entry) running.delete(key);
    throw e;
  }
}

function start(server, o, sdk, key) {
  const entry = { client: null, transport: null, ready: null };
  entry.ready = (async () => {
    const { StdioClientTransport } = await loadStdio();
    // The child gets the SDK's default environment (PATH, HOME, …) and the configured one.
    const transport = new StdioClientTransport({
      command: server.command,
      args: server.args,
      env: { ...(await defaultEnv()), ...server.env },
      ...(server.cwd === undefined ? {} : { cwd: server.cwd }),
      stderr: 'pipe',
    });
    const stderr = transport.stderr;
    let partial = '';
    stderr?.on('data', (chunk) => {
      const lines = (partial + chunk.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) if (line !== '') process.stderr.write(`[mcp ${server.name}] ${line}\n`);
    });
    const client = new sdk.Client({ name: 'knot-wasm', version: '0.1.0' }, { jsonSchemaValidator: new sdk.Validator() });
    // Gone (exited, killed, closed): the next use starts it again.
    client.onclose = () => {
      if (running.get(key) === entry) running.delete(key);
    };
    await client.connect(transport, { signal: o.signal, timeout: o.timeout });
    entry.client = client;
    entry.transport = transport;
    return entry;
  })();
  return entry;
}

async function defaultEnv() {
  const { getDefaultEnvironment } = await loadStdio();
  return getDefaultEnvironment();
}

/** Ends every stdio server this process started (their processes with them). */
export async function closeStdioServers() {
  const entries = [...running.values()];
  running.clear();
  await Promise.all(entries.map(async (e) => {
    try {
      await e.ready;
      await e.client?.close();
    } catch {
      // Never started, or already gone.
    }
  }));
}

/** How many stdio servers run now (for tests and /health-like reports). */
export const stdioRunning = () => running.size;
