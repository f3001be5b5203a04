#!/usr/bin/env node
// Runs the fenced code blocks of Markdown files, in order, each from the repository root, so the
// docs cannot drift from the code (scripts/test.sh runs README.md and pkg/README.md this way).
//
//   node scripts/doc-blocks.mjs [--list] [--bail] [--verbose] [--timeout SECONDS] FILE.md...
//
// `sh`/`bash`/`shell` blocks run in bash under `set -euo pipefail`; `js`/`javascript`/`mjs`
// blocks run in Node as ES modules, from a temporary project under target/doc-blocks/ (git-ignored)
// whose node_modules has knot-wasm (a symlink to pkg/, as `npm install /path/to/knot/pkg` makes)
// and pkg's dev and peer dependencies (openai, …), so `import … from 'knot-wasm'` resolves as in a
// project of your own. Blocks in any other language (text, json, toml: outputs and samples) are
// listed as not code. One line per block (file:line, language, ran / skipped and why / not code,
// seconds), then a summary; a failing block is named with the command that failed and the tail
// of its output, and the exit status is 1. --list only lists the blocks; --bail stops at the
// first failure; --verbose prints every block's output.
//
// Marks: an HTML comment on the line right before a block's opening fence (GitHub does not show it):
//   <!-- doc-block: skip NAME — reason -->   not run; listed by NAME with the reason (network,
//                                              long runs, BUG: …)
//   <!-- doc-block: server -->               the block's first command starts a server that stays
//                                              in the foreground: it runs in the background, the
//                                              rest of the block runs once its port answers (the
//                                              command's --port N, default 8080; GET /health is
//                                              polled up to 60 s), then the server gets SIGTERM
//                                              (SIGKILL after 10 s). The block fails when the server
//                                              exits early, prints an error or does not stop.
//   <!-- doc-block: with-server COMMAND -->  the same server handling for a server COMMAND that is
//                                              not in the block (e.g. a js block that is a client)
//
// Each block may take --timeout seconds (default 120, or DOC_BLOCKS_TIMEOUT). A block that leaves
// the git work tree changed (git status, the diff of tracked files) fails; write temporaries under
// a git-ignored path and remove them (DOC_BLOCKS_TREE_CHECK=0 turns the check off).
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export class DocBlockError extends Error {}

const SH = new Set(['sh', 'bash', 'shell']);
const JS = new Set(['js', 'javascript', 'mjs']);

/** What a block's language means here: 'sh', 'js' or 'text' (not code). */
export function kindOf(lang) {
  if (SH.has(lang)) return 'sh';
  if (JS.has(lang)) return 'js';
  return 'text';
}

const MARK = /^\s*<!--\s*doc-block:\s*(.*?)\s*-->\s*$/;

/**
 * Parses the text of a mark (what follows `doc-block:`).
 * @returns {{ kind: 'skip', name: string, reason: string } | { kind: 'server' } | { kind: 'with-server', command: string }}
 */
export function parseMark(text) {
  let m;
  if ((m = /^skip\s+([A-Za-z0-9][\w./-]*)(?:\s+(?:—|–|--|-)|:)\s*(\S.*)$/.exec(text))) {
    return { kind: 'skip', name: m[1], reason: m[2].trim() };
  }
  if (/^skip\b/.test(text)) {
    throw new DocBlockError(`a skip mark needs a name and a reason: 'skip NAME — reason', got '${text}'`);
  }
  if (text === 'server') return { kind: 'server' };
  if ((m = /^with-server\s+(\S.*)$/.exec(text))) return { kind: 'with-server', command: m[1].trim() };
  throw new DocBlockError(`unknown doc-block mark '${text}' (skip NAME — reason | server | with-server COMMAND)`);
}

/**
 * The fenced code blocks of a Markdown text, with their marks.
 * @returns {{ file: string, line: number, lang: string, kind: 'sh'|'js'|'text', code: string,
 *   mark: null | ReturnType<typeof parseMark> }[]}  line: the opening fence's (1-based)
 */
export function extractBlocks(markdown, file = '<markdown>') {
  const lines = markdown.split(/\r?\n/);
  const blocks = [];
  const where = (i) => `${file}:${i + 1}`;
  let pendingMark = null; // { mark, index }
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const open = /^( {0,3})(`{3,}|~{3,})\s*(.*)$/.exec(line);
    if (open && !(open[2][0] === '`' && open[3].includes('`'))) {
      const [, indent, fence, info] = open;
      const lang = info.trim().split(/\s+/)[0].toLowerCase();
      const close = new RegExp(`^ {0,3}${fence[0] === '`' ? '`' : '~'}{${fence.length},}\\s*$`);
      const body = [];
      let j = i + 1;
      for (; j < lines.length && !close.test(lines[j]); j++) {
        // Content lines lose up to the fence's indentation.
        body.push(lines[j].replace(new RegExp(`^ {0,${indent.length}}`), ''));
      }
      if (j >= lines.length) throw new DocBlockError(`${where(i)}: the code block is never closed`);
      const mark = pendingMark && pendingMark.index === i - 1 ? pendingMark.mark : null;
      if (mark && mark.kind === 'server' && kindOf(lang) !== 'sh') {
        throw new DocBlockError(`${where(i)}: a server mark needs an sh/bash block, this one is '${lang || 'no language'}'`);
      }
      if (mark && mark.kind === 'with-server' && kindOf(lang) === 'text') {
        throw new DocBlockError(`${where(i)}: a with-server mark on a block that is not code ('${lang || 'no language'}')`);
      }
      blocks.push({ file, line: i + 1, lang, kind: kindOf(lang), code: body.join('\n'), mark });
      pendingMark = null;
      i = j;
      continue;
    }
    if (pendingMark) {
      throw new DocBlockError(`${where(pendingMark.index)}: a doc-block mark must be on the line right before a code block's fence`);
    }
    const m = MARK.exec(line);
    if (m) {
      try {
        pendingMark = { mark: parseMark(m[1]), index: i };
      } catch (e) {
        throw new DocBlockError(`${where(i)}: ${e.message}`);
      }
    } else if (/^\s*<!--\s*doc-block\b/.test(line)) {
      throw new DocBlockError(`${where(i)}: a doc-block mark must be a whole line: <!-- doc-block: … -->`);
    }
  }
  if (pendingMark) {
    throw new DocBlockError(`${where(pendingMark.index)}: a doc-block mark must be on the line right before a code block's fence`);
  }
  return blocks;
}

/**
 * Splits an sh block into its first command (with its continuation lines) and the rest, for
 * server blocks. Leading blank and comment lines belong to neither.
 */
export function splitFirstCommand(code) {
  const lines = code.split('\n');
  let i = 0;
  while (i < lines.length && /^\s*(#.*)?$/.test(lines[i])) i++;
  if (i === lines.length) throw new DocBlockError('a server block has no command');
  const first = [];
  for (; i < lines.length; i++) {
    first.push(lines[i]);
    if (!/\\$/.test(lines[i])) break;
  }
  // The rest keeps its line numbers: the lines before it are blank.
  const rest = lines.map((l, k) => (k <= i ? '' : l)).join('\n');
  return { command: first.join('\n'), rest, restOffset: i + 1 };
}

/** The port a server command listens on: its --port N (or --port=N), else 8080. */
export function serverPort(command) {
  const m = /--port(?:=|\s+)(\d+)/.exec(command.replace(/#.*$/gm, ''));
  return m ? Number(m[1]) : 8080;
}

// --- running ------------------------------------------------------------------------------------

const TAIL_LINES = 40;
const MAX_KEEP = 256 * 1024;

function tail(text, n = TAIL_LINES) {
  const lines = text.replace(/\s+$/, '').split('\n');
  return (lines.length > n ? [`… (${lines.length - n} lines before)`, ...lines.slice(-n)] : lines).join('\n');
}

/** Starts a command in a process group of its own; collects its output (stdout and stderr interleaved). */
function start(cmd, args, { verbose, label }) {
  const child = spawn(cmd, args, {
    cwd: ROOT,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
  });
  const run = { child, output: '', exited: null };
  const keep = (s) => {
    run.output += s;
    if (run.output.length > MAX_KEEP) run.output = run.output.slice(-MAX_KEEP);
    if (verbose && s) {
      const prefix = `  ${label}| `;
      process.stdout.write(`${midLine ? '' : prefix}${s.replace(/\n(?=.)/g, `\n${prefix}`)}`);
      midLine = !s.endsWith('\n');
    }
  };
  for (const stream of [child.stdout, child.stderr]) {
    stream.setEncoding('utf8');
    stream.on('data', keep);
  }
  run.done = new Promise((resolve) => {
    child.on('error', (e) => { run.output += `\n${e.message}\n`; run.exited = { code: 127, signal: null }; resolve(run.exited); });
    child.on('exit', (code, signal) => { run.exited = { code, signal }; resolve(run.exited); });
  });
  return run;
}

function killGroup(run, signal) {
  try {
    process.kill(-run.child.pid, signal);
  } catch {
    // The group is gone already.
  }
}

// --verbose: whether a block's output left the terminal in the middle of a line.
let midLine = false;
function say(line) {
  if (midLine) process.stdout.write('\n');
  midLine = false;
  console.log(line);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits for a run within ms; true when it exited. */
async function waitExit(run, ms) {
  if (run.exited) return true;
  let timer;
  const timedOut = new Promise((r) => { timer = setTimeout(() => r(false), ms); });
  const ok = await Promise.race([run.done.then(() => true), timedOut]);
  clearTimeout(timer);
  return ok;
}

function portTaken(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    socket.once('connect', () => { socket.destroy(); resolve(true); });
    socket.once('error', () => resolve(false));
  });
}

function describeExit({ code, signal }) {
  return signal ? `killed by ${signal}` : `exit ${code}`;
}

class Session {
  constructor({ verbose, timeoutS }) {
    this.verbose = verbose;
    this.timeoutS = timeoutS;
    this.dir = path.join(ROOT, 'target', 'doc-blocks', `run-${process.pid}`);
    this.made = false;
    this.live = new Set();
  }

  /** The temporary project: scripts, and node_modules for js blocks' bare imports. */
  ensureDir() {
    if (this.made) return;
    rmSync(this.dir, { recursive: true, force: true });
    const nm = path.join(this.dir, 'node_modules');
    mkdirSync(nm, { recursive: true });
    this.made = true;
    const pkgDir = path.join(ROOT, 'pkg');
    const pkgJson = path.join(pkgDir, 'package.json');
    if (!existsSync(pkgJson)) return;
    const pkg = JSON.parse(readFileSync(pkgJson, 'utf8'));
    symlinkSync(pkgDir, path.join(nm, pkg.name), 'dir');
    const deps = new Set([...Object.keys(pkg.devDependencies ?? {}), ...Object.keys(pkg.peerDependencies ?? {})]);
    for (const dep of deps) {
      const target = path.join(pkgDir, 'node_modules', dep);
      if (!existsSync(target)) continue;
      const link = path.join(nm, dep);
      mkdirSync(path.dirname(link), { recursive: true });
      symlinkSync(target, link, 'dir');
    }
  }

  cleanup() {
    for (const run of this.live) killGroup(run, 'SIGKILL');
    if (this.made) rmSync(this.dir, { recursive: true, force: true });
    this.made = false;
    // target/doc-blocks itself goes when no other run is using it.
    try {
      rmdirSync(path.dirname(this.dir));
    } catch {
      // Not empty, or gone.
    }
  }

  scriptPath(block, ext) {
    const name = `${path.relative(ROOT, path.resolve(block.file)).replace(/[\\/]/g, '_')}-${block.line}${ext}`;
    return path.join(this.dir, name.replace(/^\.+/, ''));
  }

  /** Runs a script to its end or the deadline; {ok, message, output}. */
  async runScript(cmd, args, deadline, label) {
    const run = start(cmd, args, { verbose: this.verbose, label });
    this.live.add(run);
    const exited = await waitExit(run, Math.max(0, deadline - Date.now()));
    let timedOut = false;
    if (!exited) {
      timedOut = true;
      killGroup(run, 'SIGTERM');
      if (!(await waitExit(run, 5000))) killGroup(run, 'SIGKILL');
      await waitExit(run, 5000);
    }
    // Whatever the block left running in its process group goes too.
    killGroup(run, 'SIGKILL');
    this.live.delete(run);
    return { run, timedOut };
  }

  writeSh(block, code, offset = 0) {
    this.ensureDir();
    const file = this.scriptPath(block, offset ? `-${offset}.sh` : '.sh');
    // Two header lines; the ERR trap names the failing command and its line in the block.
    const header = [
      'set -euo pipefail',
      "trap 'echo \"__doc_block_failed__ $((LINENO - 2)) $? $BASH_COMMAND\" >&2' ERR",
    ];
    writeFileSync(file, `${header.join('\n')}\n${code}\n`);
    return file;
  }

  writeJs(block) {
    this.ensureDir();
    const file = this.scriptPath(block, '.mjs');
    writeFileSync(file, `${block.code}\n`);
    return file;
  }

  /** A failed run's message: the command that failed (sh) or the error (js), mapped to the file's lines. */
  explain(block, kind, file, { run, timedOut }) {
    const where = (n) => `${display(block.file)}:${block.line + n}`;
    const why = timedOut ? `timed out after ${this.timeoutS} s` : describeExit(run.exited);
    let output = run.output;
    let failed = '';
    if (kind === 'sh') {
      const last = [...output.matchAll(/^__doc_block_failed__ (\d+) (\d+) (.*)$/gm)].at(-1);
      if (last && !timedOut) failed = `at ${where(Number(last[1]))}: \`${last[3]}\` failed (exit ${last[2]})`;
      output = output.replace(/^__doc_block_failed__ .*\n?/gm, '');
    } else {
      const url = pathToFileURL(file).href;
      const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      output = output.replace(new RegExp(`(?:${esc(url)}|${esc(file)}):(\\d+)(?::\\d+)?`, 'g'), (_, n) => where(Number(n)));
      const err = /^\w*(?:Error|Exception)\b.*$/m.exec(output);
      const at = new RegExp(`${esc(display(block.file))}:\\d+`).exec(output);
      if (err && !timedOut) failed = `${at ? `at ${at[0]}: ` : ''}${err[0]} (${why})`;
    }
    return { message: failed || why, output };
  }

  async runCode(block, kind, code, deadline, offset = 0) {
    const file = kind === 'sh' ? this.writeSh(block, code, offset) : this.writeJs(block);
    const result = await this.runScript(kind === 'sh' ? 'bash' : process.execPath, [file], deadline, `${block.line}`);
    if (!result.timedOut && result.run.exited.code === 0) return { ok: true, output: result.run.output };
    return { ok: false, ...this.explain(block, kind, file, result) };
  }

  async withServer(block, command, deadline, body) {
    const port = serverPort(command);
    if (await portTaken(port)) {
      return { ok: false, message: `port ${port} is in use before the server starts: stop what listens there`, output: '' };
    }
    this.ensureDir();
    const file = this.scriptPath(block, '-server.sh');
    writeFileSync(file, `set -euo pipefail\nexec ${command}\n`);
    const server = start('bash', [file], { verbose: this.verbose, label: `${block.line} server` });
    this.live.add(server);
    const serverFailure = (extra) => ({
      ok: false,
      message: `the server \`${command.replace(/\s*#.*$/gm, '').replace(/\\\n\s*/g, ' ')}\` ${extra}`,
      output: `--- the server's output:\n${server.output}`,
    });
    try {
      const waitStart = Date.now();
      const waitUntil = Math.min(deadline, waitStart + 60_000);
      let up = false;
      while (!up && !server.exited && Date.now() < waitUntil) {
        try {
          await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(2000) });
          up = true;
        } catch {
          await sleep(200);
        }
      }
      if (server.exited) return serverFailure(`exited before its port ${port} answered (${describeExit(server.exited)})`);
      if (!up) return serverFailure(`did not answer on port ${port} within ${Math.round((Date.now() - waitStart) / 1000)} s`);
      const result = await body();
      const earlyExit = server.exited;
      killGroup(server, 'SIGTERM');
      const stopped = await waitExit(server, 10_000);
      if (!stopped) {
        killGroup(server, 'SIGKILL');
        await waitExit(server, 5000);
      }
      if (!result.ok) {
        return { ...result, output: `${result.output}\n--- the server's output:\n${server.output}` };
      }
      if (earlyExit) return serverFailure(`exited while the block ran (${describeExit(earlyExit)})`);
      if (!stopped) return serverFailure('did not stop within 10 s of SIGTERM');
      const error = /^.*\b(error|exception|unhandled|panicked)\b.*$/im.exec(server.output);
      if (error) return serverFailure(`printed an error: ${error[0].trim()}`);
      return result;
    } finally {
      killGroup(server, 'SIGKILL');
      this.live.delete(server);
    }
  }

  /** Runs one block: {ok, message?, output}. */
  async run(block) {
    const deadline = Date.now() + this.timeoutS * 1000;
    const { mark } = block;
    if (mark?.kind === 'server') {
      const { command, rest, restOffset } = splitFirstCommand(block.code);
      return this.withServer(block, command, deadline, () => this.runCode(block, 'sh', rest, deadline, restOffset));
    }
    if (mark?.kind === 'with-server') {
      return this.withServer(block, mark.command, deadline, () => this.runCode(block, block.kind, block.code, deadline));
    }
    return this.runCode(block, block.kind, block.code, deadline);
  }
}

function display(file) {
  const rel = path.relative(ROOT, path.resolve(file));
  return rel.startsWith('..') ? file : rel;
}

function treeState() {
  const git = (args) => execFileSync('git', args, { cwd: ROOT, maxBuffer: 1 << 30 }).toString();
  const diff = git(['diff', 'HEAD', '--binary']);
  return `${git(['status', '--porcelain=v1', '--untracked-files=all'])}diff of tracked files: ${diff.length} characters, hash ${hash(diff)}`;
}

function hash(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return (h >>> 0).toString(16);
}

function assumptions(timeoutS) {
  const has = (p) => (existsSync(path.join(ROOT, p)) ? 'present' : 'MISSING');
  return [
    `doc-blocks: each block runs from ${ROOT} (sh: bash -euo pipefail; js: Node ${process.version}, an ES module), at most ${timeoutS} s each`,
    `  KNOT_BIN=${process.env.KNOT_BIN ?? '(unset: blocks that use it fall back to target/release/knot)'}`,
    `  pkg/dist/wasm: ${has('pkg/dist/wasm/host.js')} (scripts/build-wasm.sh); models/SmolLM2-135M-Instruct.Q4_1.knot: ${has('models/SmolLM2-135M-Instruct.Q4_1.knot')} (scripts/prepare-model.sh --all)`,
    "  js blocks import 'knot-wasm' (-> pkg/) and pkg's dev/peer dependencies from target/doc-blocks/run-PID/node_modules; servers listen on loopback",
  ].join('\n');
}

function usage() {
  return 'usage: node scripts/doc-blocks.mjs [--list] [--bail] [--verbose] [--timeout SECONDS] FILE.md...';
}

export async function main(argv) {
  const files = [];
  let list = false;
  let bail = false;
  let verbose = false;
  let timeoutS = Number(process.env.DOC_BLOCKS_TIMEOUT || 120);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--list') list = true;
    else if (a === '--bail') bail = true;
    else if (a === '--verbose') verbose = true;
    else if (a === '--timeout') timeoutS = Number(argv[++i]);
    else if (a === '-h' || a === '--help') { console.log(usage()); return 0; }
    else if (a.startsWith('-')) { console.error(`doc-blocks: unknown option ${a}\n${usage()}`); return 2; }
    else files.push(a);
  }
  if (files.length === 0 || !(timeoutS > 0)) { console.error(usage()); return 2; }

  let blocks = [];
  try {
    for (const f of files) blocks.push(...extractBlocks(readFileSync(f, 'utf8'), f));
  } catch (e) {
    console.error(`doc-blocks: ${e instanceof DocBlockError ? e.message : e.stack}`);
    return 2;
  }
  const width = Math.max(...blocks.map((b) => `${display(b.file)}:${b.line}`.length), 10);
  const label = (b) => `${`${display(b.file)}:${b.line}`.padEnd(width)}  ${(b.lang || '-').padEnd(5)}`;

  if (list) {
    for (const b of blocks) {
      const what = b.kind === 'text' ? 'not code'
        : b.mark?.kind === 'skip' ? `skip ${b.mark.name} — ${b.mark.reason}`
          : b.mark?.kind === 'server' ? 'runs (server)' : b.mark?.kind === 'with-server' ? `runs (with server: ${b.mark.command})` : 'runs';
      console.log(`${label(b)}  ${what}`);
    }
    return 0;
  }

  say(assumptions(timeoutS));
  const session = new Session({ verbose, timeoutS });
  const stop = (signal) => { session.cleanup(); process.exit(signal === 'SIGINT' ? 130 : 143); };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  process.once('exit', () => session.cleanup());
  // Output piped into a reader that went away (| head): keep running, and clean up as usual.
  process.stdout.on('error', (e) => { if (e.code !== 'EPIPE') throw e; });
  const checkTree = process.env.DOC_BLOCKS_TREE_CHECK !== '0';
  const started = Date.now();
  const failures = [];
  const skipped = [];
  let ran = 0;
  let text = 0;
  try {
    for (const b of blocks) {
      if (b.kind === 'text') {
        text++;
        say(`${label(b)}  not code`);
        continue;
      }
      if (b.mark?.kind === 'skip') {
        skipped.push(b.mark.name);
        say(`${label(b)}  skipped  ${b.mark.name} — ${b.mark.reason}`);
        continue;
      }
      const before = checkTree ? treeState() : '';
      const t0 = Date.now();
      let result;
      try {
        result = await session.run(b);
      } catch (e) {
        result = { ok: false, message: e instanceof DocBlockError ? e.message : e.stack, output: '' };
      }
      if (result.ok && checkTree) {
        const after = treeState();
        if (after !== before) {
          result = { ok: false, message: 'it changed the git work tree (git status / the diff of tracked files)', output: `before:\n${before}\nafter:\n${after}` };
        }
      }
      ran++;
      const secs = ((Date.now() - t0) / 1000).toFixed(1);
      const how = b.mark?.kind === 'server' ? ' (server)' : b.mark?.kind === 'with-server' ? ' (with server)' : '';
      if (result.ok) {
        say(`${label(b)}  ran${how}  ${secs} s`);
      } else {
        say(`${label(b)}  FAILED${how}  ${secs} s`);
        failures.push({ b, result });
        say(`  ${display(b.file)}:${b.line}: ${result.message}`);
        if (result.output.trim()) say(tail(result.output).replace(/^/gm, '  | '));
        if (bail) break;
      }
    }
  } finally {
    session.cleanup();
  }
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  say(`doc-blocks: ${blocks.length} blocks: ${ran} ran, ${skipped.length} skipped${skipped.length ? ` (${skipped.join(', ')})` : ''}, ${text} not code; ${failures.length} failed; ${secs} s`);
  if (failures.length) {
    for (const { b, result } of failures) say(`doc-blocks: FAILED ${display(b.file)}:${b.line}: ${result.message}`);
    return 1;
  }
  return 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  process.exitCode = await main(process.argv.slice(2));
}
