// A stdio MCP server as people configure one (an `mcpServers` entry with a command), from each
// runtime the package supports (Node, Bun, Deno: this file is in each runtime's subset): started
// through the official SDK's stdio transport, its tools listed and called, a crash mid-call an
// error with the next request's call served by a new process, and every process ended at close. The server
// itself (test/mcp-stdio-server.js, the official SDK) runs under Node in every case.
import assert from 'node:assert/strict';
import { test } from './harness.js';
import { fileURLToPath } from 'node:url';
import { McpConnection, canSpawn, parseMcpServers } from '../src/openai/mcp.js';
import { closeStdioServers, stdioRunning } from '../src/openai/stdio.js';

const SERVER = fileURLToPath(new URL('./mcp-stdio-server.js', import.meta.url));
const NODE = process.env.KNOT_NODE ?? 'node';

test('an mcpServers stdio server: listed, called, started again after a crash, ended at close', async () => {
  assert.equal(canSpawn(), true, 'this runtime can start processes');
  const [server] = parseMcpServers({ mcpServers: { local: { command: NODE, args: [SERVER] } } }, 'test', { stdio: true });
  const call = { signal: new AbortController().signal, timeoutMs: 30000 };
  // One connection per request, as the loop makes them; the process is shared between them.
  const connect = () => new McpConnection(server, { maxResultBytes: 64 * 1024 });
  const c = connect();
  const next = connect();
  try {
    const tools = await c.listTools(call);
    assert.deepEqual(tools.map((t) => t.name).sort(), ['ahead', 'crash', 'pid']);
    const first = await c.callTool('pid', {}, call);
    assert.equal(first.outcome, 'ok');
    assert.equal(stdioRunning(), 1);
    const crash = await c.callTool('crash', {}, call);
    assert.equal(crash.outcome, 'error');
    const again = await next.callTool('pid', {}, call);
    assert.equal(again.outcome, 'ok');
    assert.notEqual(again.text, first.text, 'a new process');
  } finally {
    await c.close();
    await next.close();
    await closeStdioServers();
  }
  assert.equal(stdioRunning(), 0);
});
