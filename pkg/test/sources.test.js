import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from './harness.js';
import { startRangeServer } from './range-server.js';
import { BufferKnotSource, HttpKnotSource } from '../src/sources.js';
import { FileKnotSource } from '../src/file.js';

/** Deterministic bytes whose value tells their offset apart from neighbours'. */
function patternBytes(n) {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (i * 31 + (i >> 8)) & 0xff;
  return out;
}

const DATA = patternBytes(70_000);

/** Checks the behaviour every source shares. */
async function checkCommonRanges(source) {
  assert.deepEqual(await source.rangeGet(0, 0), DATA.subarray(0, 1));
  assert.deepEqual(await source.rangeGet(10, 19), DATA.subarray(10, 20));
  assert.deepEqual(await source.rangeGet(65_000, DATA.length - 1), DATA.subarray(65_000));
  assert.deepEqual(await source.rangeGet(0, DATA.length - 1), DATA);
  await assert.rejects(source.rangeGet(5, 4), /end \(inclusive\) must be an integer >= start/);
  await assert.rejects(source.rangeGet(-1, 4), /start must be an integer >= 0/);
  await assert.rejects(source.rangeGet(1.5, 4), /start must be an integer >= 0/);
  await assert.rejects(source.rangeGet(0, DATA.length), /outside the source of 70000 bytes/);
}

describe('BufferKnotSource', () => {
  test('reads inclusive ranges and rejects bad ones', async () => {
    const source = new BufferKnotSource(DATA);
    assert.equal(source.size, DATA.length);
    await checkCommonRanges(source);
  });

  test('accepts an ArrayBuffer and rejects other types', async () => {
    const source = new BufferKnotSource(DATA.slice().buffer);
    assert.deepEqual(await source.rangeGet(3, 5), DATA.subarray(3, 6));
    assert.throws(() => new BufferKnotSource([1, 2, 3]), /expected a Uint8Array or ArrayBuffer/);
  });
});

describe('FileKnotSource', () => {
  let dir;
  let path;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'knot-wasm-'));
    path = join(dir, 'data.bin');
    await writeFile(path, DATA);
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('reads inclusive ranges with positional reads', async () => {
    const source = await FileKnotSource.open(path);
    try {
      assert.equal(source.size, DATA.length);
      await checkCommonRanges(source);
      // Positional reads do not depend on order.
      const [a, b] = await Promise.all([source.rangeGet(100, 199), source.rangeGet(0, 99)]);
      assert.deepEqual(a, DATA.subarray(100, 200));
      assert.deepEqual(b, DATA.subarray(0, 100));
    } finally {
      await source.close();
    }
  });

  test('a file truncated after open gives a clear error', async () => {
    const shrinking = join(dir, 'shrinking.bin');
    await writeFile(shrinking, DATA);
    const source = await FileKnotSource.open(shrinking);
    try {
      await writeFile(shrinking, DATA.subarray(0, 1000));
      await assert.rejects(source.rangeGet(900, 1999), /ended at byte 1000 while reading 900-1999/);
    } finally {
      await source.close();
    }
  });

  test('close is idempotent and reads after close fail', async () => {
    const source = await FileKnotSource.open(path);
    await source.close();
    await source.close();
    await assert.rejects(source.rangeGet(0, 0), /is closed/);
  });

  test('a missing file or a directory is rejected', async () => {
    await assert.rejects(FileKnotSource.open(join(dir, 'missing.bin')), /ENOENT|No such file/i);
    await assert.rejects(FileKnotSource.open(dir), /not a regular file|EISDIR/);
  });
});

describe('HttpKnotSource', () => {
  test('correct 206 server: ranges, Range header, size from HEAD', async () => {
    const server = await startRangeServer(DATA);
    try {
      const source = await HttpKnotSource.open(server.url);
      assert.equal(source.size, DATA.length);
      assert.deepEqual(server.requests[0], { method: 'HEAD', range: undefined });
      await checkCommonRanges(source);
      assert.equal(server.requests[1].range, 'bytes=0-0');
      assert.equal(server.requests[2].range, 'bytes=10-19');
      // The four good reads of checkCommonRanges plus HEAD; bad ranges never reach the server.
      assert.equal(server.requestCount, 5);
    } finally {
      await server.close();
    }
  });

  test('size is learned from Content-Range when HEAD is refused', async () => {
    const server = await startRangeServer(DATA, { head: false });
    try {
      const source = await HttpKnotSource.open(server.url);
      assert.equal(source.size, DATA.length);
      assert.deepEqual(server.requests.map((r) => r.range), [undefined, 'bytes=0-0']);

      const lazy = new HttpKnotSource(server.url);
      assert.equal(lazy.size, undefined);
      assert.deepEqual(await lazy.rangeGet(7, 8), DATA.subarray(7, 9));
      assert.equal(lazy.size, DATA.length);
    } finally {
      await server.close();
    }
  });

  test('a server answering 200 is accepted only for whole-file reads', async () => {
    const server = await startRangeServer(DATA, { mode: 'full' });
    try {
      const source = new HttpKnotSource(server.url, { retryDelayMs: 0 });
      await assert.rejects(source.rangeGet(10, 19), /answered 200 with the whole file \(it does not support Range requests\)/);
      // Content-Length of the 200 tells the whole file was asked for.
      assert.deepEqual(await source.rangeGet(0, DATA.length - 1), DATA);
      assert.equal(source.size, DATA.length);
      await assert.rejects(source.rangeGet(0, 99), /does not support Range requests/);
      const withSize = new HttpKnotSource(server.url, { size: DATA.length });
      assert.deepEqual(await withSize.rangeGet(0, DATA.length - 1), DATA);
    } finally {
      await server.close();
    }
  });

  test('a wrong Content-Range is rejected, naming both ranges', async () => {
    const server = await startRangeServer(DATA, { mode: 'wrong-range' });
    try {
      const source = new HttpKnotSource(server.url, { retryDelayMs: 0 });
      await assert.rejects(
        source.rangeGet(10, 19),
        (err) => err instanceof Error && err.message.includes('asked for bytes 10-19') &&
          err.message.includes('"bytes 11-20/70000"'),
      );
      // Not a transient failure: asked once, not retried.
      assert.equal(server.requestCount, 1);
    } finally {
      await server.close();
    }
  });

  test('a short body is rejected', async () => {
    const server = await startRangeServer(DATA, { mode: 'short-body' });
    try {
      const source = new HttpKnotSource(server.url, { retryDelayMs: 0 });
      await assert.rejects(source.rangeGet(10, 19), /\(10 bytes\), the body had 9 bytes/);
    } finally {
      await server.close();
    }
  });

  test('transient 503s are retried with backoff and then succeed', async () => {
    const server = await startRangeServer(DATA, { mode: 'transient', failFirst: 2 });
    try {
      const source = new HttpKnotSource(server.url, { retries: 3, retryDelayMs: 5 });
      assert.deepEqual(await source.rangeGet(100, 163), DATA.subarray(100, 164));
      assert.equal(server.requestCount, 3);
    } finally {
      await server.close();
    }
  });

  test('retries are bounded and the final error says so', async () => {
    const server = await startRangeServer(DATA, { mode: 'transient', failFirst: 100 });
    try {
      const source = new HttpKnotSource(server.url, { retries: 2, retryDelayMs: 1 });
      await assert.rejects(source.rangeGet(0, 9), /HTTP 503 Service Unavailable for bytes 0-9 .*gave up after 3 attempts/);
      assert.equal(server.requestCount, 3);
    } finally {
      await server.close();
    }
  });

  test('network errors are retried; other 4xx are not', async () => {
    let calls = 0;
    const flaky = async (url, init) => {
      calls++;
      if (calls === 1) throw new TypeError('fetch failed');
      return new Response(DATA.slice(0, 4), {
        status: 206,
        headers: { 'Content-Range': `bytes 0-3/${DATA.length}` },
      });
    };
    const source = new HttpKnotSource('http://example.invalid/m.knot', { fetch: flaky, retryDelayMs: 0 });
    assert.deepEqual(await source.rangeGet(0, 3), DATA.subarray(0, 4));
    assert.equal(calls, 2);

    let notFoundCalls = 0;
    const notFound = async () => {
      notFoundCalls++;
      return new Response('no', { status: 404, statusText: 'Not Found' });
    };
    const missing = new HttpKnotSource('http://example.invalid/m.knot', { fetch: notFound, retryDelayMs: 0 });
    await assert.rejects(missing.rangeGet(0, 3), /HTTP 404 Not Found for bytes 0-3 of http:\/\/example.invalid\/m.knot/);
    assert.equal(notFoundCalls, 1);
  });

  test('a body longer than asked is cut off at the asked length, not read to its end', async () => {
    const server = await startRangeServer(DATA, { mode: 'oversized-body' });
    try {
      const source = new HttpKnotSource(server.url, { size: DATA.length, retries: 0 });
      await assert.rejects(source.rangeGet(10, 19), /asked for bytes 10-19 .* \(10 bytes\), the body had more than 10 bytes/);
      // A Content-Length that disagrees is refused before the body is read.
      const announced = async () => new Response(new Uint8Array(1000), {
        status: 206, headers: { 'Content-Range': `bytes 0-9/${DATA.length}`, 'Content-Length': '1000' },
      });
      const liar = new HttpKnotSource('http://example.invalid/m.knot', { fetch: announced, retries: 0 });
      await assert.rejects(liar.rangeGet(0, 9), /\(10 bytes\), the body had 1000 bytes \(Content-Length\)/);
    } finally {
      await server.close();
    }
  });

  test('refusals are marked permanent for the host; transient failures are not', async () => {
    const status = (code) => async () => new Response('x', { status: code });
    const permanent = async (code) => {
      const source = new HttpKnotSource('http://example.invalid/m.knot', { fetch: status(code), retries: 1, retryDelayMs: 0 });
      return source.rangeGet(0, 3).then(() => undefined, (err) => err.permanent === true);
    };
    assert.equal(await permanent(404), true);
    assert.equal(await permanent(403), true);
    assert.equal(await permanent(416), true);
    assert.equal(await permanent(503), false);
    assert.equal(await permanent(429), false);
    assert.equal(await permanent(408), false);
    const server = await startRangeServer(DATA, { mode: 'wrong-range' });
    try {
      const source = new HttpKnotSource(server.url, { retryDelayMs: 0 });
      await assert.rejects(source.rangeGet(10, 19), (err) => err.permanent === true);
    } finally {
      await server.close();
    }
  });

  test('headers are sent and a changing size is caught', async () => {
    let seen;
    let total = 100;
    const fake = async (url, init) => {
      seen = init.headers;
      return new Response(new Uint8Array(2), {
        status: 206,
        headers: { 'Content-Range': `bytes 0-1/${total}` },
      });
    };
    const source = new HttpKnotSource('http://example.invalid/m.knot', {
      fetch: fake,
      headers: { Authorization: 'Bearer t' },
    });
    await source.rangeGet(0, 1);
    assert.deepEqual(seen, { Authorization: 'Bearer t', Range: 'bytes=0-1' });
    total = 200;
    await assert.rejects(source.rangeGet(0, 1), /changed size from 100 to 200 bytes/);
  });

  test('the ETag is the validator; a file replaced between reads is caught, not mixed', async () => {
    const server = await startRangeServer(DATA, { etag: '"a1"' });
    try {
      const source = await HttpKnotSource.open(server.url);
      assert.equal(source.validator, 'etag "a1"');
      assert.deepEqual(await source.rangeGet(0, 3), DATA.subarray(0, 4));
      server.etag = '"b2"';
      const err = await source.rangeGet(4, 7).catch((e) => e);
      assert.match(err.message, /changed while being read \(etag "a1", now etag "b2"\)/);
      assert.equal(err.permanent, true);
      // A server that tags HEAD with Last-Modified only and GET with an ETag is not a change.
      let n = 0;
      const mixed = new HttpKnotSource('http://example.invalid/m.knot', {
        size: 100,
        fetch: async () => new Response(new Uint8Array(2), {
          status: 206,
          headers: n++ === 0
            ? { 'Content-Range': 'bytes 0-1/100', 'Last-Modified': 'Tue, 01 Dec 2026 10:00:00 GMT' }
            : { 'Content-Range': 'bytes 0-1/100', ETag: '"x"' },
        }),
      });
      await mixed.rangeGet(0, 1);
      assert.equal(mixed.validator, 'last-modified Tue, 01 Dec 2026 10:00:00 GMT');
      await mixed.rangeGet(0, 1);
      assert.equal(mixed.validator, 'etag "x"');
      const untagged = await startRangeServer(DATA);
      try {
        assert.equal((await HttpKnotSource.open(untagged.url)).validator, undefined);
      } finally {
        await untagged.close();
      }
    } finally {
      await server.close();
    }
  });

  test('bad options are rejected', () => {
    assert.throws(() => new HttpKnotSource('http://x/', { retries: -1 }), /retries must be an integer >= 0/);
    assert.throws(() => new HttpKnotSource('http://x/', { size: 1.5 }), /size must be an integer >= 0/);
  });
});
