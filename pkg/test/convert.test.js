// GGUF → knot in JS (convertGguf, convertGgufFile, the knot-convert bin) against the native
// CLI's output: the committed tiny .knot fixtures (made by `knot convert`) and SmolLM2's knot
// (scripts/prepare-model.sh converts with default options). Also: bad GGUFs fail with a code,
// and no read is longer than the GGUF's prefix or its largest tensor.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { after, describe, test, testIf } from './harness.js';
import { BufferKnotSource, FileKnotSource, convertGguf, convertGgufFile } from '../src/node.js';
import { ROOT, countingSource, knotLayout } from './support.js';
import { knotFor } from '../src/gguf-cache.js';

const TINY_DIR = `${ROOT}tests/fixtures/tiny/`;
const TINY = ['llama-f32', 'llama-f16', 'llama-tied-f32', 'qwen2-f32', 'qwen3-f32', 'gemma3-f32'];
const BIN = `${ROOT}pkg/bin/knot-convert.js`;
const SMOL_GGUF = `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.gguf`;
const SMOL_KNOT = `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot`;

function haveSmolGguf() {
  if (existsSync(SMOL_GGUF) && existsSync(SMOL_KNOT)) return true;
  if (process.env.KNOT_REQUIRE_MODELS) {
    throw new Error(`${SMOL_GGUF} or its knot is missing and KNOT_REQUIRE_MODELS is set (run scripts/prepare-model.sh)`);
  }
  return false;
}

const dir = mkdtempSync(join(tmpdir(), 'knot-convert-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Runs the bin under this runtime (node, bun or deno). */
function runBin(args) {
  const runtime = globalThis.Deno ? [process.execPath, 'run', '-A', BIN] : [process.execPath, BIN];
  return spawnSync(runtime[0], [...runtime.slice(1), ...args], { encoding: 'utf8' });
}

/** A sink that checks each chunk against `expected` as it comes. */
function comparingSink(expected) {
  const sink = {
    at: 0,
    closed: false,
    write(bytes) {
      assert.ok(sink.at + bytes.byteLength <= expected.byteLength, 'more bytes than the reference');
      assert.ok(Buffer.from(bytes).equals(expected.subarray(sink.at, sink.at + bytes.byteLength)),
        `bytes differ in ${sink.at}..${sink.at + bytes.byteLength}`);
      sink.at += bytes.byteLength;
      return Promise.resolve();
    },
    close() {
      sink.closed = true;
    },
  };
  return sink;
}

describe('convertGguf', () => {
  test('the tiny GGUFs convert to the committed knots (convertGgufFile)', async () => {
    for (const name of TINY) {
      const out = join(dir, `${name}.knot`);
      const summary = await convertGgufFile(`${TINY_DIR}${name}.gguf`, out);
      assert.ok(readFileSync(out).equals(readFileSync(`${TINY_DIR}${name}.knot`)), name);
      assert.equal(summary.fileLen, readFileSync(out).byteLength);
    }
    assert.deepEqual(readdirSync(dir).filter((f) => f.includes('partial')), []);
  });

  test('the bin writes the same bytes; requantized output differs and is summarized', () => {
    const out = join(dir, 'bin-llama.knot');
    const r = runBin([`${TINY_DIR}llama-f32.gguf`, out]);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(readFileSync(out).equals(readFileSync(`${TINY_DIR}llama-f32.knot`)));
    assert.match(r.stderr, /llama.*bytes in/);
    const q = runBin([`${TINY_DIR}llama-f32.gguf`, join(dir, 'q8.knot'), '--dtype', 'q8_0', '--name', 'tiny-q8']);
    assert.equal(q.status, 0, q.stderr);
    assert.match(q.stderr, /tiny-q8 .*[1-9]\d* converted/);
    const usage = runBin(['only-one-arg']);
    assert.equal(usage.status, 2);
  });

  test('a sink and a source of any kind: bytes in memory, progress to the total', async () => {
    const gguf = readFileSync(`${TINY_DIR}qwen2-f32.gguf`);
    const sink = comparingSink(readFileSync(`${TINY_DIR}qwen2-f32.knot`));
    const seen = [];
    await convertGguf(new BufferKnotSource(gguf), sink, {
      fallbackName: 'qwen2-f32',
      onProgress: (done, total) => seen.push([done, total]),
    });
    assert.ok(sink.closed);
    assert.equal(sink.at, readFileSync(`${TINY_DIR}qwen2-f32.knot`).byteLength);
    const [lastDone, total] = seen.at(-1);
    assert.equal(lastDone, total);
    assert.ok(seen.every(([d], i) => i === 0 || d >= seen[i - 1][0]));
  });

  test('bad GGUFs and options fail with codes, and leave no file behind', async () => {
    const good = readFileSync(`${TINY_DIR}llama-f32.gguf`);
    const noSink = { write() {}, close() {} };
    for (const bytes of [good.subarray(0, 100), good.subarray(0, good.byteLength - 4), Buffer.from('garbage, not GGUF'), new Uint8Array(0)]) {
      await assert.rejects(convertGguf(new BufferKnotSource(bytes), noSink), { code: 'invalid_model' });
    }
    await assert.rejects(convertGguf(new BufferKnotSource(good), noSink, { dtype: 'q3_k' }), { code: 'invalid_option' });
    await assert.rejects(convertGguf({ rangeGet: async () => new Uint8Array(0) }, noSink), { code: 'invalid_argument' });
    const failing = countingSource(new BufferKnotSource(good), { fault: (r) => (r.index === 0 ? 'reject' : undefined) });
    await assert.rejects(convertGguf(failing, noSink), { code: 'read_failed' });

    const bad = join(dir, 'bad.gguf');
    writeFileSync(bad, good.subarray(0, 3000));
    const out = join(dir, 'bad.knot');
    await assert.rejects(convertGgufFile(bad, out), { code: 'invalid_model' });
    const r = runBin([bad, out]);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /invalid_model/);
    assert.ok(!existsSync(out));
    assert.deepEqual(readdirSync(dir).filter((f) => f.includes('partial')), []);
  });

  testIf(haveSmolGguf(), 'SmolLM2: the knot of scripts/prepare-model.sh, reads bounded by the largest tensor', async () => {
    const expected = readFileSync(SMOL_KNOT);
    const file = await FileKnotSource.open(SMOL_GGUF);
    try {
      const source = countingSource(file);
      const sink = comparingSink(expected);
      await convertGguf(source, sink, { fallbackName: 'SmolLM2-135M-Instruct.Q4_1' });
      assert.equal(sink.at, expected.byteLength);
      // The prefix reads run on from byte 0, each doubling what is held, until the metadata
      // parses; then one read per tensor, of exactly its bytes (in the default dtype the knot's
      // tensors are the GGUF's).
      const sizes = new Set(knotLayout(SMOL_KNOT).meta.tensors.map((t) => t.size));
      let n = 0;
      while (n < source.reads.length && source.reads[n].start === (n === 0 ? 0 : source.reads[n - 1].end)) n++;
      const prefixEnd = source.reads[n - 1].end;
      assert.ok(prefixEnd < 16 << 20, `prefix of ${prefixEnd} bytes`);
      for (const r of source.reads.slice(n)) assert.ok(sizes.has(r.end - r.start), `read of ${r.end - r.start} bytes`);
      assert.equal(source.reads.length - n, sizes.size > 0 ? knotLayout(SMOL_KNOT).meta.tensors.length : 0);
      const longest = Math.max(...source.reads.map((r) => r.end - r.start));
      assert.ok(longest <= Math.max(...sizes, prefixEnd), `longest read ${longest}`);
      // The embedding (q8_0 here) is the largest tensor: under a third of the file.
      assert.ok(longest < file.size / 3);
    } finally {
      await file.close();
    }
    const out = join(dir, 'smol.knot');
    const r = runBin([SMOL_GGUF, out]);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(readFileSync(out).equals(expected));
    rmSync(out);
  });
});

describe("knot-serve's GGUF cache", () => {
  test('a .gguf is converted once into .knot-cache next to it and reused; a .knot is itself', async () => {
    const gguf = join(dir, 'cached.gguf');
    copyFileSync(`${TINY_DIR}llama-f32.gguf`, gguf);
    const told = [];
    const first = await knotFor(gguf, (line) => told.push(line));
    assert.equal(first.startsWith(join(dir, '.knot-cache', 'cached-')), true, first);
    assert.deepEqual(readFileSync(first), readFileSync(`${TINY_DIR}llama-f32.knot`));
    assert.equal(told.length, 2);
    const made = statSync(first).mtimeMs;
    assert.equal(await knotFor(gguf, (line) => told.push(line)), first);
    assert.equal(told.length, 2, 'not converted again');
    assert.equal(statSync(first).mtimeMs, made);
    assert.equal(await knotFor(`${TINY_DIR}llama-f32.knot`), `${TINY_DIR}llama-f32.knot`);
  });
});
