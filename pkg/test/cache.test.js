// CachedKnotSource over the real Cache API (Deno has one; Node and Bun do not, and list these
// tests as skipped; the browser page's test runs it in Chromium) in front of a real HTTP server.
import assert from 'node:assert/strict';
import { describe, test, testIf } from './harness.js';
import { BufferKnotSource, CachedKnotSource, HttpKnotSource } from '../src/node.js';
import { startRangeServer } from './range-server.js';

const haveCaches = typeof globalThis.caches?.open === 'function';
const DATA = Uint8Array.from({ length: 4096 }, (_, i) => (i * 31 + 7) & 0xff);
let cacheCount = 0;
/** A cache name of its own per test, deleted afterwards. */
const freshName = () => `knot-test-${Date.now()}-${cacheCount++}`;
const gets = (server) => server.requests.filter((r) => r.method === 'GET').length;

/**
 * The real CacheStorage, with `put` failing as a full disk makes it fail.
 * @param {string} name what the DOMException is called
 */
function failingPuts(name) {
  return {
    open: async (cacheName) => {
      const real = await globalThis.caches.open(cacheName);
      return {
        match: (req) => real.match(req),
        delete: (req) => real.delete(req),
        keys: () => real.keys(),
        put: async () => {
          throw new DOMException('the quota has been exceeded', name);
        },
      };
    },
    delete: (cacheName) => globalThis.caches.delete(cacheName),
  };
}

describe('CachedKnotSource', () => {
  testIf(haveCaches, 'a second open reads every span from the cache, none from the network', async () => {
    const server = await startRangeServer(DATA, { etag: '"v1"' });
    const cacheName = freshName();
    try {
      const first = await CachedKnotSource.open(await HttpKnotSource.open(server.url), { cacheName });
      assert.deepEqual(await first.rangeGet(0, 9), DATA.subarray(0, 10));
      assert.deepEqual(await first.rangeGet(100, 2047), DATA.subarray(100, 2048));
      await first.flush();
      assert.deepEqual(first.stats(), { hits: 0, misses: 2, bytesFromCache: 0, bytesFromSource: 1958, stored: 2, caching: true });
      const before = gets(server);
      const second = await CachedKnotSource.open(await HttpKnotSource.open(server.url), { cacheName });
      assert.deepEqual(await second.rangeGet(100, 2047), DATA.subarray(100, 2048));
      assert.deepEqual(await second.rangeGet(0, 9), DATA.subarray(0, 10));
      assert.equal(gets(server), before, 'no GET reached the server');
      assert.equal(second.stats().hits, 2);
      // A span not read before still comes from the network.
      assert.deepEqual(await second.rangeGet(10, 19), DATA.subarray(10, 20));
      assert.equal(gets(server), before + 1);
    } finally {
      await CachedKnotSource.clear({ cacheName });
      await server.close();
    }
  });

  testIf(haveCaches, 'a replaced file (new ETag) is read afresh and the old spans are pruned', async () => {
    const server = await startRangeServer(DATA, { etag: '"v1"' });
    const cacheName = freshName();
    try {
      const first = await CachedKnotSource.open(await HttpKnotSource.open(server.url), { cacheName });
      await first.rangeGet(0, 99);
      await first.flush();
      server.etag = '"v2"';
      const second = await CachedKnotSource.open(await HttpKnotSource.open(server.url), { cacheName });
      const before = gets(server);
      await second.rangeGet(0, 99);
      assert.equal(gets(server), before + 1, 'the v1 span was not served for v2');
      await second.flush();
      const keys = await (await caches.open(cacheName)).keys();
      assert.equal(keys.length, 1);
      assert.equal(new URL(keys[0].url).searchParams.get('knot-version'), '4096 etag "v2"');
    } finally {
      await CachedKnotSource.clear({ cacheName });
      await server.close();
    }
  });

  testIf(haveCaches, 'a torn entry (wrong length) is dropped and the span read from the source', async () => {
    const cacheName = freshName();
    try {
      const inner = new BufferKnotSource(DATA);
      const url = 'https://models.example/m.knot';
      const source = await CachedKnotSource.open(inner, { cacheName, url });
      await source.rangeGet(0, 15);
      await source.flush();
      const cache = await caches.open(cacheName);
      const [key] = await cache.keys();
      await cache.put(key, new Response(new Uint8Array(3)));
      const again = await CachedKnotSource.open(inner, { cacheName, url });
      assert.deepEqual(await again.rangeGet(0, 15), DATA.subarray(0, 16));
      assert.deepEqual([again.stats().hits, again.stats().misses], [0, 1]);
    } finally {
      await CachedKnotSource.clear({ cacheName });
    }
  });

  for (const [name, kind] of [['QuotaExceededError', 'quota'], ['InvalidStateError', 'cache-error']]) {
    testIf(haveCaches, `a cache whose puts fail (${name}): reads still succeed, one ${kind} notice, then uncached`, async () => {
      const cacheName = freshName();
      try {
        const notices = [];
        const source = await CachedKnotSource.open(new BufferKnotSource(DATA), {
          cacheName, url: 'https://models.example/m.knot', caches: failingPuts(name), onNotice: (n) => notices.push(n),
        });
        assert.deepEqual(await source.rangeGet(0, 9), DATA.subarray(0, 10));
        await source.flush();
        assert.equal(source.caching, false);
        assert.deepEqual(await source.rangeGet(10, 19), DATA.subarray(10, 20));
        await source.flush();
        assert.equal(notices.length, 1);
        assert.equal(notices[0].kind, kind);
        assert.match(notices[0].message, /uncached/);
        assert.equal(source.notice, notices[0]);
      } finally {
        await CachedKnotSource.clear({ cacheName });
      }
    });
  }
});

describe('CachedKnotSource: bad input', () => {
  test('clear errors for what cannot work', async () => {
    const fakeCaches = { open: async () => ({}), delete: async () => false };
    await assert.rejects(CachedKnotSource.open({}, { caches: fakeCaches }), /KnotByteSource/);
    await assert.rejects(CachedKnotSource.open(new BufferKnotSource(DATA), { caches: fakeCaches }), /options\.url/);
    await assert.rejects(
      CachedKnotSource.open(new BufferKnotSource(DATA), { caches: fakeCaches, url: 'file:///m.knot' }),
      /http\(s\) URLs/,
    );
    await assert.rejects(
      CachedKnotSource.open(new BufferKnotSource(DATA), { caches: fakeCaches, url: 'https://a.example/m', onNotice: 3 }),
      /onNotice/,
    );
    await assert.rejects(
      CachedKnotSource.open({ rangeGet: async () => new Uint8Array(1) }, { caches: fakeCaches, url: 'https://a.example/m' }),
      /does not know its size/,
    );
    if (!haveCaches) await assert.rejects(CachedKnotSource.open(new BufferKnotSource(DATA), { url: 'https://a.example/m' }), /no Cache API/);
  });

  test('a storage that cannot open a cache gives an uncached source and a notice', async () => {
    const notices = [];
    const source = await CachedKnotSource.open(new BufferKnotSource(DATA), {
      url: 'https://a.example/m',
      caches: { open: async () => { throw new DOMException('no storage in this context', 'SecurityError'); }, delete: async () => false },
      onNotice: (n) => notices.push(n),
    });
    assert.equal(source.caching, false);
    assert.deepEqual(await source.rangeGet(5, 6), DATA.subarray(5, 7));
    assert.deepEqual(notices.map((n) => n.kind), ['cache-error']);
    assert.match(notices[0].message, /SecurityError/);
  });
});
