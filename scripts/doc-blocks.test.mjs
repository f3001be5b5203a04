// The doc-block runner's own tests (node --test scripts/doc-blocks.test.mjs): the extractor and
// its marks on a small Markdown sample, then the runner on sh, js, skipped, not-code, server and
// failing blocks. No model, a few seconds.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { extractBlocks, parseMark, serverPort, splitFirstCommand } from './doc-blocks.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const runner = path.join(here, 'doc-blocks.mjs');

const fence = '```';
const SAMPLE = `# Sample

Text.

${fence}sh
echo one
${fence}

<!-- doc-block: skip net — needs the network -->
${fence}bash
npm install from-the-registry
${fence}

${fence}text
an output sample
${fence}

<!-- doc-block: server -->
${fence}sh
node server.js --port 9123 \\
  --verbose   # a comment
curl 127.0.0.1:9123/
${fence}

- a list item

  ${fence}js
  console.log('indented');
  ${fence}

<!-- doc-block: with-server node server.js --port=9124 -->
${fence}js
const a = 1;
${fence}

${fence}
no language
${fence}

~~~~json
${fence}
{"a fence inside": true}
${fence}
~~~~
`;

test('extracts every block with its line, language, kind and mark', () => {
  const blocks = extractBlocks(SAMPLE, 'sample.md');
  assert.deepEqual(blocks.map((b) => [b.line, b.lang, b.kind, b.mark?.kind ?? null]), [
    [5, 'sh', 'sh', null],
    [10, 'bash', 'sh', 'skip'],
    [14, 'text', 'text', null],
    [19, 'sh', 'sh', 'server'],
    [27, 'js', 'js', null],
    [32, 'js', 'js', 'with-server'],
    [36, '', 'text', null],
    [40, 'json', 'text', null],
  ]);
  assert.equal(blocks[0].code, 'echo one');
  assert.deepEqual(blocks[1].mark, { kind: 'skip', name: 'net', reason: 'needs the network' });
  assert.equal(blocks[4].code, "console.log('indented');");
  assert.deepEqual(blocks[5].mark, { kind: 'with-server', command: 'node server.js --port=9124' });
  assert.equal(blocks[7].code, `${fence}\n{"a fence inside": true}\n${fence}`);
});

test('marks: skip needs a name and a reason; unknown marks and stray marks are errors', () => {
  assert.deepEqual(parseMark('skip long-run - takes minutes'), { kind: 'skip', name: 'long-run', reason: 'takes minutes' });
  assert.deepEqual(parseMark('skip bug: BUG: it crashes'), { kind: 'skip', name: 'bug', reason: 'BUG: it crashes' });
  assert.throws(() => parseMark('skip'), /needs a name and a reason/);
  assert.throws(() => parseMark('skip name-only'), /needs a name and a reason/);
  assert.throws(() => parseMark('serve'), /unknown doc-block mark/);
  assert.throws(() => extractBlocks('<!-- doc-block: server -->\n\n```sh\nx\n```\n', 'a.md'), /a\.md:1: .*right before/);
  assert.throws(() => extractBlocks('text\n<!-- doc-block: skip a — b -->\n', 'a.md'), /a\.md:2: .*right before/);
  assert.throws(() => extractBlocks('<!-- doc-block: server -->\n```js\nx\n```\n', 'a.md'), /server mark needs an sh/);
  assert.throws(() => extractBlocks('```sh\nnever closed\n', 'a.md'), /a\.md:1: the code block is never closed/);
  assert.throws(() => extractBlocks('<!-- doc-block: skip a — b --> x\n```sh\nx\n```\n', 'a.md'), /whole line/);
  // Marks quoted in prose are text.
  assert.equal(extractBlocks('Mark it `<!-- doc-block: skip NAME — reason -->`.\n```sh\nx\n```\n', 'a.md')[0].mark, null);
});

test('a server block: the first command with its continuation lines, and its port', () => {
  const { command, rest } = splitFirstCommand('# start it\nnode s.js --port 9000 \\\n  --x   # note\ncurl a\n\ncurl b');
  assert.equal(command, 'node s.js --port 9000 \\\n  --x   # note');
  assert.equal(rest, '\n\n\ncurl a\n\ncurl b'); // line numbers kept
  assert.equal(serverPort(command), 9000);
  assert.equal(serverPort('node s.js --port=81'), 81);
  assert.equal(serverPort('node s.js   # --port 9 in a comment'), 8080);
});

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function runDocs(markdown, ...args) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'doc-blocks-test-'));
  try {
    const file = path.join(dir, 'doc.md');
    writeFileSync(file, markdown);
    const r = spawnSync(process.execPath, [runner, ...args, file], {
      encoding: 'utf8',
      env: { ...process.env, DOC_BLOCKS_TREE_CHECK: '0' },
      timeout: 60_000,
    });
    return { status: r.status, out: `${r.stdout}${r.stderr}`, pid: r.pid };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// A tiny HTTP server as a documented command would start one (it logs a line, answers /health).
const serverCmd = (port, extra = '') =>
  `node -e "require('http').createServer((q, s) => s.end(q.url)).listen(${port}, '127.0.0.1', () => console.log('listening'))${extra}" -- --port ${port}`;

test('runs sh and js blocks from the repository root, lists skipped and not-code ones', async () => {
  const port = await freePort();
  const md = [
    '```sh', 'test "$PWD" = "$(git rev-parse --show-toplevel)"', 'echo sh-ok | tr a-z A-Z', '```',
    '<!-- doc-block: skip slow — takes hours -->', '```sh', 'exit 1', '```',
    '```text', 'not run', '```',
    '```js', "import os from 'node:os';", "const { HostShim } = await import('knot-wasm').catch(() => ({}));", 'console.log(os.EOL.length);', '```',
    '<!-- doc-block: server -->', '```sh', serverCmd(port), `curl -sf 127.0.0.1:${port}/x`, '```',
    `<!-- doc-block: with-server ${serverCmd(port)} -->`, '```js',
    `const r = await fetch('http://127.0.0.1:${port}/y'); if (await r.text() !== '/y') throw new Error('bad');`, '```',
    '',
  ].join('\n');
  const { status, out, pid } = runDocs(md);
  assert.equal(status, 0, out);
  assert.match(out, /doc\.md:1 +sh +ran +\d/);
  assert.match(out, /doc\.md:6 +sh +skipped +slow — takes hours/);
  assert.match(out, /doc\.md:9 +text +not code/);
  assert.match(out, /doc\.md:12 +js +ran/);
  assert.match(out, /doc\.md:18 +sh +ran \(server\)/);
  assert.match(out, /doc\.md:23 +js +ran \(with server\)/);
  assert.match(out, /6 blocks: 4 ran, 1 skipped \(slow\), 1 not code; 0 failed/);
  assert.ok(!existsSync(path.join(root, 'target', 'doc-blocks', `run-${pid}`)), 'the temporary project is removed');
});

test('a failing block is named with its line, the command and its output; the others still run', () => {
  const md = [
    '```sh', 'echo before', 'echo "some output" >&2', 'false || true', 'ls /no/such/dir', 'echo never', '```',
    '```js', 'const x = 1;', "throw new TypeError('from js');", '```',
    '```sh', 'echo after', '```',
    '',
  ].join('\n');
  const { status, out } = runDocs(md);
  assert.equal(status, 1, out);
  assert.match(out, /doc\.md:1 +sh +FAILED/);
  assert.match(out, /doc\.md:5: `ls \/no\/such\/dir` failed \(exit 2\)/);
  assert.match(out, /\| some output/);
  assert.doesNotMatch(out, /never/);
  assert.match(out, /TypeError: from js/);
  assert.match(out, /doc\.md:10\b/); // the js error's line, in the Markdown file
  assert.match(out, /doc\.md:12 +sh +ran/);
  assert.match(out, /FAILED .*doc\.md:1: /);
  assert.match(out, /FAILED .*doc\.md:8: /);
});

test('a server that exits early or prints an error fails its block; timeouts end the block', async () => {
  const port = await freePort();
  const early = runDocs(['<!-- doc-block: server -->', '```sh', `node -e "process.exit(3)" -- --port ${port}`, 'echo client', '```', ''].join('\n'));
  assert.equal(early.status, 1, early.out);
  assert.match(early.out, /exited before its port \d+ answered \(exit 3\)/);

  const noisy = runDocs(['<!-- doc-block: server -->', '```sh',
    serverCmd(port, ";console.error('Error: something broke')"), `curl -sf 127.0.0.1:${port}/`, '```', ''].join('\n'));
  assert.equal(noisy.status, 1, noisy.out);
  assert.match(noisy.out, /printed an error: Error: something broke/);

  const slow = runDocs(['```sh', 'sleep 30', '```', ''].join('\n'), '--timeout', '1');
  assert.equal(slow.status, 1, slow.out);
  assert.match(slow.out, /timed out after 1 s/);
});
