// rangeGetInto: sources that write a range straight into wasm memory. The two built-in sources
// fill the target they are given (and refuse a bad one); the host uses the method when a source
// has it, checks what it answers, retries what may pass, and never lets a read it gave up on
// write into memory that is in use.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from './harness.js';
import { BufferKnotSource, FileKnotSource, HostShim } from '../src/node.js';
import { TINY, knotLayout } from './support.js';

const layout = knotLayout(TINY);
const LAYERS = layout.layers.length;
const PROMPT = [1, 7, 42, 99];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function greedy(source, options, n = 8) {
  const shim = await HostShim.open(source, options);
  try {
    return Array.from(await shim.generate(PROMPT, n, { temperature: 0 }));
  } finally {
    shim.dispose();
  }
}

/** Only rangeGet: the host copies each answer in. */
const plain = (inner) => ({ size: inner.size, rangeGet: (s, e) => inner.rangeGet(s, e) });

/** rangeGetInto through `into(start, end, target, call)`, counted. */
function intoSource(into) {
  const inner = new BufferKnotSource(layout.bytes);
  const source = {
    size: inner.size,
    calls: 0,
    plainCalls: 0,
    rangeGet(s, e) {
      source.plainCalls++;
      return inner.rangeGet(s, e);
    },
    rangeGetInto(s, e, target) {
      return into(s, e, target, source.calls++, inner);
    },
  };
  return source;
}

const isLayer = (s, e) => layout.layers.some(([a, b]) => a === s && b === e + 1);

describe('the built-in sources fill a target', () => {
  let dir;
  let path;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'knot-into-'));
    path = join(dir, 'model.knot');
    await writeFile(path, layout.bytes);
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  for (const [name, open] of [
    ['BufferKnotSource', async () => new BufferKnotSource(layout.bytes)],
    ['FileKnotSource', () => FileKnotSource.open(path)],
  ]) {
    test(`${name}: writes the range into the view it is given and nothing around it`, async () => {
      const source = await open();
      try {
        // A view into a larger buffer, as the host's view of wasm memory is.
        const memory = new Uint8Array(300).fill(7);
        const target = memory.subarray(100, 200);
        assert.equal(await source.rangeGetInto(40, 139, target), 100);
        assert.deepEqual(target, new Uint8Array(layout.bytes.subarray(40, 140)));
        assert.ok(memory.subarray(0, 100).every((b) => b === 7));
        assert.ok(memory.subarray(200).every((b) => b === 7));
        await assert.rejects(source.rangeGetInto(0, 9, new Uint8Array(5)), /target holds 5 bytes, the range 10/);
        await assert.rejects(source.rangeGetInto(0, 9, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), /target must be a Uint8Array/);
        await assert.rejects(source.rangeGetInto(9, 0, new Uint8Array(1)), /end \(inclusive\) must be an integer >= start/);
        const size = layout.bytes.byteLength;
        await assert.rejects(source.rangeGetInto(size - 1, size, new Uint8Array(2)), /outside the source/);
      } finally {
        await source.close?.();
      }
    });
  }

  test('the host streams from FileKnotSource through rangeGetInto: the same tokens as copying reads', async () => {
    const want = await greedy(plain(new BufferKnotSource(layout.bytes)), { lruCapacity: LAYERS });
    const file = await FileKnotSource.open(path);
    let into = 0;
    const counted = {
      size: file.size,
      rangeGet: (s, e) => file.rangeGet(s, e),
      rangeGetInto: (s, e, t) => {
        into++;
        return file.rangeGetInto(s, e, t);
      },
    };
    try {
      assert.deepEqual(await greedy(counted, { lruCapacity: 1 }), want);
      // Two layers, one cached: every token reads both again, each through rangeGetInto.
      assert.ok(into >= 2 * 8, `${into} rangeGetInto calls`);
    } finally {
      await file.close();
    }
  });
});

describe('the host and a source with rangeGetInto', () => {
  test('layers come through rangeGetInto, the header and resident tensors through rangeGet', async () => {
    const want = await greedy(plain(new BufferKnotSource(layout.bytes)), { lruCapacity: LAYERS });
    const layers = [];
    const source = intoSource((s, e, target, _i, inner) => {
      layers.push([s, e]);
      return inner.rangeGetInto(s, e, target);
    });
    assert.deepEqual(await greedy(source, { lruCapacity: 1 }), want);
    assert.ok(layers.length >= 2 * 8);
    assert.ok(layers.every(([s, e]) => isLayer(s, e)), 'only layer spans go through rangeGetInto');
    assert.ok(source.plainCalls >= 2, 'the header and the resident span are plain reads');
  });

  test('a wrong byte count is a length error, retried; the tokens are unchanged', async () => {
    const want = await greedy(plain(new BufferKnotSource(layout.bytes)), { lruCapacity: LAYERS });
    const source = intoSource(async (s, e, target, i, inner) => {
      const n = await inner.rangeGetInto(s, e, target);
      return i === 1 ? n - 3 : n;
    });
    assert.deepEqual(await greedy(source, { lruCapacity: 1, readRetries: 2, readBackoffMs: 1 }), want);
    const once = intoSource(async (s, e, target, _i, inner) => (await inner.rangeGetInto(s, e, target)) + 1);
    await assert.rejects(greedy(once, { lruCapacity: 1, readRetries: 0 }), /the source returned \d+ bytes, expected \d+/);
  });

  test('an answer that is not a byte count fails for good, naming the contract', async () => {
    const source = intoSource(async (s, e, target, _i, inner) => {
      await inner.rangeGetInto(s, e, target);
      return target;
    });
    await assert.rejects(greedy(source, { lruCapacity: 1, readRetries: 3, readBackoffMs: 1 }),
      /rangeGetInto must resolve to the number of bytes written/);
  });

  test('a rejection is retried like rangeGet’s; a throw names rangeGetInto', async () => {
    const want = await greedy(plain(new BufferKnotSource(layout.bytes)), { lruCapacity: LAYERS });
    const flaky = intoSource((s, e, target, i, inner) => {
      if (i === 0) return Promise.reject(new Error('disk hiccup'));
      return inner.rangeGetInto(s, e, target);
    });
    assert.deepEqual(await greedy(flaky, { lruCapacity: 1, readBackoffMs: 1 }), want);
    const throwing = intoSource(() => {
      throw Object.assign(new Error('no such file'), { permanent: true });
    });
    await assert.rejects(greedy(throwing, { lruCapacity: 1 }), /rangeGetInto threw: no such file/);
  });

  test('rangeGetInto that is not a function is refused at open', async () => {
    const inner = new BufferKnotSource(layout.bytes);
    const source = { size: inner.size, rangeGet: (s, e) => inner.rangeGet(s, e), rangeGetInto: 'yes' };
    await assert.rejects(HostShim.open(source), /source\.rangeGetInto must be a function/);
  });

  test('a read given up on (timeout) that writes later lands in memory nobody uses', async () => {
    const want = await greedy(plain(new BufferKnotSource(layout.bytes)), { lruCapacity: LAYERS }, 12);
    let late;
    const source = intoSource((s, e, target, i, inner) => {
      if (i !== 0) return inner.rangeGetInto(s, e, target);
      // The first layer read answers long after its timeout, scribbling over its target first.
      late = sleep(150).then(() => {
        target.fill(0xff);
        return target.byteLength;
      });
      return late;
    });
    const shim = await HostShim.open(source, { lruCapacity: LAYERS, readTimeoutMs: 30, readBackoffMs: 1 });
    try {
      const first = Array.from(await shim.generate(PROMPT, 12, { temperature: 0 }));
      assert.deepEqual(first, want);
      await late;
      await sleep(10);
      // Every layer is cached: had the late write gone into a buffer in use, this would differ.
      assert.deepEqual(Array.from(await shim.generate(PROMPT, 12, { temperature: 0 })), want);
      assert.equal(shim.stats().readTimeouts, 1);
    } finally {
      shim.dispose();
    }
  });
});
