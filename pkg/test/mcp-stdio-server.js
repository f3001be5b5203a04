// An MCP server on stdio, made with the official TypeScript SDK, for the stdio tests: `pid`
// answers its process id (so a restart shows), `crash` exits the process mid-call, `ahead`
// takes a string whose pattern no automaton enforces (a lookahead).
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

const server = new McpServer({ name: 'knot-test-stdio', version: '1.0.0' });
server.registerTool('pid', { description: 'The process id of this server.', inputSchema: {} },
  async () => ({ content: [{ type: 'text', text: String(process.pid) }] }));
server.registerTool('crash', { description: 'Ends this server in the middle of the call.', inputSchema: {} },
  async () => {
    process.stderr.write('crashing on purpose\n');
    process.exit(3);
  });
server.registerTool('ahead', { description: 'Takes a word.', inputSchema: { word: z.string().regex(/^(?=a)\w+$/) } },
  async ({ word }) => ({ content: [{ type: 'text', text: word }] }));
await server.connect(new StdioServerTransport());
