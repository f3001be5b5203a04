#!/usr/bin/env node
// Collects the tools that public MCP servers list, as they list them (tools/list over stdio,
// through the official SDK's client), into tests/fixtures/mcp-tools/<server>.json: the corpus of
// real tool schemas COLTRANE is tested on (tests/mcp_tool_schemas.rs). Each server is installed
// from npm at a pinned version into a temporary directory (install scripts off: nothing is
// downloaded beyond the packages) and started with placeholder credentials, which listing
// tools does not use. Run by hand when the corpus is refreshed, not by the suite:
//
//   node scripts/collect-tool-schemas.mjs [NAME ...]
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(ROOT, 'tests/fixtures/mcp-tools');
const KEY = 'placeholder-not-a-real-key';

/** name, npm package, version, the bin to run, its arguments, its environment. */
const SERVERS = [
  ['filesystem', '@modelcontextprotocol/server-filesystem', '2026.8.31', 'mcp-server-filesystem', ['/tmp'], {}],
  ['memory', '@modelcontextprotocol/server-memory', '2026.8.31', 'mcp-server-memory', [], {}],
  ['everything', '@modelcontextprotocol/server-everything', '2026.8.31', 'mcp-server-everything', [], {}],
  ['sequential-thinking', '@modelcontextprotocol/server-sequential-thinking', '2026.8.31', 'mcp-server-sequential-thinking', [], {}],
  ['github', '@modelcontextprotocol/server-github', '2025.4.8', 'mcp-server-github', [], { GITHUB_PERSONAL_ACCESS_TOKEN: KEY }],
  ['gitlab', '@modelcontextprotocol/server-gitlab', '2025.4.25', 'mcp-server-gitlab', [], { GITLAB_PERSONAL_ACCESS_TOKEN: KEY }],
  ['slack', '@modelcontextprotocol/server-slack', '2025.4.25', 'mcp-server-slack', [], { SLACK_BOT_TOKEN: KEY, SLACK_TEAM_ID: 'T000' }],
  ['brave-search', '@modelcontextprotocol/server-brave-search', '0.6.2', 'mcp-server-brave-search', [], { BRAVE_API_KEY: KEY }],
  ['google-maps', '@modelcontextprotocol/server-google-maps', '0.6.2', 'mcp-server-google-maps', [], { GOOGLE_MAPS_API_KEY: KEY }],
  ['playwright', '@playwright/mcp', '0.0.86', 'playwright-mcp', [], {}],
  ['notion', '@notionhq/notion-mcp-server', '2.5.2', 'notion-mcp-server', [], { NOTION_TOKEN: KEY }],
  ['firecrawl', 'firecrawl-mcp', '3.26.0', 'firecrawl-mcp', [], { FIRECRAWL_API_KEY: KEY }],
  ['tavily', 'tavily-mcp', '0.2.22', 'tavily-mcp', [], { TAVILY_API_KEY: KEY }],
  ['mongodb', 'mongodb-mcp-server', '3.0.4', 'mongodb-mcp-server', [], { MDB_MCP_CONNECTION_STRING: 'mongodb://127.0.0.1:1' }],
  ['sentry', '@sentry/mcp-server', '0.39.0', 'sentry-mcp', [`--access-token=${KEY}`], {}],
  ['context7', '@upstash/context7-mcp', '4.1.1', 'context7-mcp', [], {}],
  ['exa', 'exa-mcp-server', '3.4.1', 'exa-mcp-server', [], { EXA_API_KEY: KEY }],
];

const only = process.argv.slice(2);
const chosen = SERVERS.filter(([name]) => only.length === 0 || only.includes(name));
const dir = mkdtempSync(join(tmpdir(), 'knot-mcp-corpus-'));
console.log(`installing ${chosen.length} servers into ${dir}`);
execFileSync('npm', ['install', '--ignore-scripts', '--no-audit', '--no-fund', '--prefix', dir,
  ...chosen.map(([, pkg, version]) => `${pkg}@${version}`)], { stdio: 'inherit' });
const sdk = (p) => import(pathToFileURL(join(ROOT, 'pkg/node_modules/@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StdioClientTransport, getDefaultEnvironment } = await sdk('client/stdio.js');

for (const [name, pkg, version, bin, args, env] of chosen) {
  const transport = new StdioClientTransport({
    command: join(dir, 'node_modules/.bin', bin), args, env: { ...getDefaultEnvironment(), ...env }, stderr: 'ignore',
  });
  const client = new Client({ name: 'knot-corpus', version: '1' });
  try {
    await client.connect(transport, { timeout: 60_000 });
    const tools = [];
    let cursor;
    do {
      const r = await client.listTools(cursor === undefined ? {} : { cursor }, { timeout: 60_000 });
      tools.push(...r.tools.map((t) => ({ name: t.name, description: t.description ?? '', inputSchema: t.inputSchema })));
      cursor = r.nextCursor;
    } while (cursor !== undefined);
    writeFileSync(join(OUT, `${name}.json`), `${JSON.stringify({ server: name, package: pkg, version, source: `npm:${pkg}@${version}, tools/list over stdio`, tools }, null, 1)}\n`);
    console.log(`${name}: ${tools.length} tools`);
  } catch (e) {
    console.log(`${name}: failed (${e.message})`);
  } finally {
    await client.close().catch(() => {});
  }
}
rmSync(dir, { recursive: true, force: true });
