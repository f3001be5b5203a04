// Production's costs, simulated (src/simulate.js, scripts/profiles.mjs), and the per-request
// meter (src/meter.js): the simulated bucket over a real local R2 bucket (Miniflare's, from Node)
// with small real delays — latency draws through p50 and p99, the cap on requests waiting for
// headers, bodies at the stream bandwidth, the subrequest limit per invocation — then the Worker
// and a split model in workerd under a profile.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Miniflare } from 'miniflare';
import { startMeter } from '../src/meter.js';
import { R2KnotSource } from '../src/r2.js';
import { SimulatedBucket, checkProfile, hop, latencySampler, profileOf, simulate } from '../src/simulate.js';
import { FREE_PLAN_SUBREQUESTS, PROFILES, profilesFromArgs, resolveProfile } from '../scripts/profiles.mjs';
import { startStations, uploadFile } from '../scripts/local.mjs';
import { MODEL, native, post, startLocal, stats } from './support.js';

/** A profile with only the given costs. */
const only = (fields) => checkProfile({ ...PROFILES.local, name: 'test', ...fields });
const MB = 1e6;

let mf;
/** A real R2 bucket (Miniflare's local R2, reached from Node). */
let real;
const BLOB = new Uint8Array(3 * MB).map((_, i) => (i * 7) & 0xff);

before(async () => {
  mf = new Miniflare({
    modules: true,
    script: 'export default { fetch() { return new Response("") } }',
    r2Buckets: ['B'],
    r2Persist: false,
    cf: false,
    host: '127.0.0.1',
    port: 0,
  });
  await mf.ready;
  real = await mf.getR2Bucket('B');
  await real.put('blob', new Uint8Array(BLOB));
});
after(() => mf?.dispose());

describe('the simulated bucket', () => {
  test('latency draws: seeded, log-normal through the profile\'s p50 and p99', () => {
    const draws = (name, n) => {
      const draw = latencySampler(PROFILES.prod, name);
      return Array.from({ length: n }, draw);
    };
    const xs = draws('worker', 40_000).sort((a, b) => a - b);
    const q = (p) => xs[Math.floor(p * xs.length)];
    assert.ok(Math.abs(q(0.5) - 200) < 10, `p50 ${q(0.5)}`);
    assert.ok(Math.abs(q(0.99) - 700) < 50, `p99 ${q(0.99)}`);
    // The same profile and name draw the same sequence; another name another one.
    assert.deepEqual(draws('worker', 5), draws('worker', 5));
    assert.notDeepEqual(draws('worker', 5), draws('layers-0', 5));
    const far = latencySampler(PROFILES['prod-far'], 'worker');
    const ys = Array.from({ length: 40_000 }, far).sort((a, b) => a - b);
    assert.ok(Math.abs(ys[20_000] - 450) < 20, `prod-far p50 ${ys[20_000]}`);
    assert.equal(latencySampler(PROFILES.local, 'worker')(), 0);
  });

  test('the 7th request waiting for its headers waits for one of the first 6', async () => {
    const ttfb = 150;
    const timed = async (profile) => {
      const bucket = new SimulatedBucket(real, only({ ttfbP50Ms: ttfb, ttfbP99Ms: ttfb, ...profile }));
      const t0 = Date.now();
      const at = await Promise.all(Array.from({ length: 7 }, () => bucket.get('blob', { range: { offset: 0, length: 16 } })
        .then(() => Date.now() - t0)));
      return { at, bucket };
    };
    const capped = await timed({ maxWaiting: 6 });
    const first = capped.at.slice(0, 6);
    // Headers no sooner than the drawn latency; the 7th only after one of the first 6 had its own.
    for (const t of first) assert.ok(t >= ttfb - 2, `${t}`);
    assert.ok(capped.at[6] >= Math.min(...first) + ttfb - 2, JSON.stringify(capped.at));
    assert.equal(capped.bucket.waited, 1);
    assert.equal(capped.bucket.inFlight, 0);
    // Without the cap, the 7th goes out with the others.
    const free = await timed({ maxWaiting: null });
    assert.ok(free.at[6] < Math.min(...first) + ttfb - 2, JSON.stringify(free.at));
    assert.equal(free.bucket.waited, 0);
  });

  test('bodies arrive at the stream bandwidth, in proportion to their bytes', async () => {
    const bucket = new SimulatedBucket(real, only({ streamMBps: 10 })); // 10 bytes per µs: 1 MB in 100 ms
    // Timed from the request (no latency to first byte here): the body's share alone.
    const body = async (length, read) => {
      const t0 = Date.now();
      const object = await bucket.get('blob', { range: { offset: 0, length } });
      const bytes = await read(object);
      return { ms: Date.now() - t0, bytes };
    };
    const buffer = (o) => o.arrayBuffer().then((b) => new Uint8Array(b));
    const one = await body(1 * MB, buffer);
    const three = await body(3 * MB, buffer);
    assert.deepEqual(three.bytes, BLOB);
    // Never faster than the bandwidth (the simulator schedules each byte); no tight upper bound,
    // since a loaded machine delays timers (the suite's lanes added 200 ms to 3 MB): only one that
    // catches a wrong unit or a body delayed twice (3× the schedule).
    assert.ok(one.ms >= 100 - 2, `1 MB: ${one.ms} ms`);
    assert.ok(three.ms >= 300 - 2 && three.ms < 3 * 300, `3 MB: ${three.ms} ms`);
    // The stream too, chunk by chunk; and the real object's metadata stays visible.
    const streamed = await body(2 * MB, async (o) => {
      assert.equal(o.size, 3 * MB);
      assert.equal(o.range.length, 2 * MB);
      return new Uint8Array(await new Response(o.body).arrayBuffer());
    });
    assert.deepEqual(streamed.bytes, BLOB.subarray(0, 2 * MB));
    assert.ok(streamed.ms >= 200 - 2, `2 MB streamed: ${streamed.ms} ms`);
    // A missing key is null, as the real binding answers.
    assert.equal(await bucket.get('missing'), null);
  });

  test('past the subrequest limit, "Too many subrequests."; each invocation starts at zero', async () => {
    const env = simulate({ KNOT_SIMULATE: JSON.stringify(only({ subrequests: 3 })), MODELS: real });
    assert.ok(env.MODELS instanceof SimulatedBucket);
    const source = new R2KnotSource(env.MODELS, 'blob');
    const first = startMeter('generation');
    await source.rangeGet(0, 99);
    await source.rangeGet(100, 199);
    first.doCall();
    await hop(); // the 3rd subrequest: a Durable Object call
    first.doCall();
    assert.throws(() => hop(), /^Error: Too many subrequests\.$/);
    await assert.rejects(source.rangeGet(200, 299), /^Error: Too many subrequests\.$/);
    assert.deepEqual([first.r2Reads, first.doCalls, first.subrequests, first.r2Bytes], [3, 2, 5, 200]);
    // The next invocation's meter: the limit applies anew.
    const second = startMeter('generation');
    for (let i = 0; i < 3; i++) await source.rangeGet(0, 9);
    await assert.rejects(source.rangeGet(0, 9), /Too many subrequests\./);
    assert.deepEqual([second.r2Reads, second.subrequests, second.r2Bytes], [4, 4, 30]);
  });

  test('bad profiles are refused with the field and what it must be', () => {
    assert.throws(() => checkProfile({ name: 'x', ttfbp50: 1 }), /unknown field 'ttfbp50'/);
    assert.throws(() => checkProfile({ name: 'x', ttfbP50Ms: 200, ttfbP99Ms: 100 }), /ttfbP99Ms must be a number >= ttfbP50Ms/);
    assert.throws(() => checkProfile({ name: 'x', maxWaiting: 0 }), /maxWaiting must be null or a whole number >= 1 .*, got 0/);
    assert.throws(() => checkProfile({ name: '' }), /name must be a non-empty string/);
    assert.throws(() => checkProfile([]), /must be an object/);
    assert.throws(() => profileOf({ KNOT_SIMULATE: '{nope' }), /KNOT_SIMULATE must be a profile as JSON/);
    assert.throws(() => resolveProfile('prod-near'), /unknown profile 'prod-near' \(profiles: local, prod, prod-far\)/);
    assert.throws(() => profilesFromArgs(['--subrequests', 'many'], { fallback: 'prod' }), /--subrequests must be 'free' or a whole number/);
    assert.throws(() => profilesFromArgs(['--profile'], { fallback: 'prod' }), /--profile needs a value/);
    // Deployed: no var, no profile, env untouched.
    const env = { MODELS: real };
    assert.equal(profileOf(env), null);
    assert.equal(simulate(env), env);
    // `local` adds nothing: the real binding stays.
    const local = { KNOT_SIMULATE: JSON.stringify(PROFILES.local), MODELS: real };
    assert.equal(simulate(local).MODELS, real);
    // The free plan as a variant; `local` keeps no limit.
    const [l, p] = profilesFromArgs(['--profiles', 'local,prod', '--subrequests', 'free'], { list: true, fallback: 'local' });
    assert.deepEqual([l.subrequests, p.subrequests, p.name], [null, FREE_PLAN_SUBREQUESTS, 'prod']);
  });
});

describe('the meter', () => {
  test('counts reads, bytes, calls and tokens; per token once there are tokens', async () => {
    const source = new R2KnotSource(real, 'blob');
    const m = startMeter('generation');
    assert.equal(m.report().r2_reads_per_token, null);
    await source.rangeGet(0, 1023);
    await source.rangeGet(1024, 1024 + 511);
    m.doCall();
    m.tokens = 2;
    assert.deepEqual(m.report(), {
      r2_reads: 2, r2_bytes: 1536, do_calls: 1, subrequests: 3, tokens: 2,
      r2_reads_per_token: 1, do_calls_per_token: 0.5, subrequests_per_token: 1.5,
    });
    // A read that fails is still a subrequest; its bytes never came.
    await assert.rejects(new R2KnotSource(real, 'missing').rangeGet(0, 9), /not found/);
    assert.deepEqual([m.r2Reads, m.r2Bytes], [3, 1536]);
  });
});

describe('uploading a file in parts', () => {
  test('parts of a fixed size and a shorter last one give the file back byte for byte', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'knot-upload-'));
    const file = join(dir, 'f.bin');
    const data = new Uint8Array(12 * 2 ** 20 + 12345).map((_, i) => (i * 31 + (i >> 13)) & 0xff);
    writeFileSync(file, data);
    await uploadFile(real, 'parts', file, { partBytes: 5 * 2 ** 20, singleMax: 0 });
    // R2's etag of an object uploaded in parts ends in its part count: 5 + 5 + 2 MiB and a bit.
    assert.match((await real.head('parts')).etag, /-3$/);
    const back = new Uint8Array(await (await real.get('parts')).arrayBuffer());
    const sha = (b) => createHash('sha256').update(b).digest('hex');
    assert.equal(back.byteLength, data.byteLength);
    assert.equal(sha(back), sha(data));
    // Under the single-put size, one put: the same bytes.
    await uploadFile(real, 'whole', file);
    assert.doesNotMatch((await real.head('whole')).etag, /-\d+$/);
    assert.equal(sha(new Uint8Array(await (await real.get('whole')).arrayBuffer())), sha(data));
  });
});

describe('in workerd, under a profile', () => {
  const chat = (url, n) => post(url, '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Name a colour.' }], temperature: 0, max_tokens: n });

  test('the Worker: profile in /health, what each request spends in /stats, the limit per request', async () => {
    // Production's shape with small latencies (cheap to run) and a limit one token fits in.
    const local = await startLocal({ quiet: true, profile: resolveProfile('prod', { ttfbP50Ms: 2, ttfbP99Ms: 10, streamMBps: 2000, subrequests: 45 }) });
    try {
      const health = await (await fetch(`${local.url}/health`)).json();
      assert.equal(health.profile, 'prod');
      const s0 = await stats(local.url);
      assert.equal(typeof s0.open_ms, 'number');
      const opened = s0.open_spent;
      assert.ok(opened.r2_reads > 0 && opened.subrequests === opened.r2_reads && opened.do_calls === 0, JSON.stringify(opened));
      assert.equal(s0.last_request, null);
      const one = await chat(local.url, 1);
      assert.equal(one.status, 200, one.text);
      assert.equal(one.json.choices[0].message.content, (await native([{ role: 'user', content: 'Name a colour.' }], 1)).text);
      const s1 = await stats(local.url);
      assert.equal(s1.last_request.tokens, 1);
      assert.ok(s1.last_request.r2_reads > 0 && s1.last_request.r2_reads <= 45, JSON.stringify(s1.last_request));
      assert.equal(s1.last_request.subrequests, s1.last_request.r2_reads);
      assert.ok(s1.last_request.r2_bytes > 1e6);
      assert.equal(s1.recent.at(-1).r2_reads, s1.last_request.r2_reads);
      // More tokens than the limit allows: production's error, as OpenAI's JSON.
      const many = await chat(local.url, 16);
      assert.equal(many.status, 502, many.text);
      assert.equal(many.json.error.code, 'read_failed');
      assert.match(many.json.error.message, /Too many subrequests\./);
      assert.ok((await stats(local.url)).last_request.subrequests > 45);
      // The next request is an invocation of its own: served again.
      const again = await chat(local.url, 1);
      assert.equal(again.status, 200, again.text);
      assert.equal(again.json.choices[0].message.content, one.json.choices[0].message.content);
    } finally {
      await local.dispose();
    }
  });

  test('a bad KNOT_SIMULATE: a clear OpenAI error on every route, and the Worker keeps answering', async () => {
    const local = await startLocal({ quiet: true, vars: { KNOT_SIMULATE: '{"name":"prod","ttfbP50Ms":-1}' } });
    try {
      for (let i = 0; i < 2; i++) {
        const r = await fetch(`${local.url}/health`);
        assert.equal(r.status, 500);
        assert.match((await r.json()).error.message, /simulation profile 'prod': ttfbP50Ms must be a number >= 0/);
      }
    } finally {
      await local.dispose();
    }
  });

  test('a split model under prod: equal to one process, each round pays the hop, every isolate meters its requests and stays under 128 MiB', async () => {
    const profile = resolveProfile('prod');
    const hopMs = profile.doCallMs;
    const local = await startStations({ layers: 2, heads: 2, quiet: true, profile });
    try {
      assert.equal((await (await fetch(`${local.url}/health`)).json()).profile, 'prod');
      assert.equal((await chat(local.url, 2)).status, 200);
      const before = (await (await fetch(`${local.url}/stations`)).json()).hops;
      const r = await chat(local.url, 4);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].message.content, (await native([{ role: 'user', content: 'Name a colour.' }], 4)).text);
      const s = await (await fetch(`${local.url}/stations`)).json();
      // Every sequential round pays the hop, the stations' forwards along the chain too.
      const rounds = s.hops.rounds - before.rounds;
      assert.ok((s.hops.ms - before.ms) / rounds >= hopMs, `${(s.hops.ms - before.ms) / rounds} ms per round`);
      // The coordinator's own calls in that request (bookkeeping ones included); the stations
      // made the rest of the messages.
      const coordinator = (await stats(local.url)).last_request;
      assert.equal(coordinator.do_calls, s.hops.calls - before.calls);
      assert.ok(coordinator.do_calls < s.hops.messages - before.messages);
      assert.equal(coordinator.subrequests, coordinator.r2_reads + coordinator.do_calls);
      for (const st of s.stations) {
        assert.equal(st.profile, 'prod');
        assert.ok(st.wasmMemoryBytes < 128 * 2 ** 20, `${st.station}: ${st.wasmMemoryBytes} bytes`);
        // The part was read by the request that opened it; later requests read nothing.
        assert.ok(st.open_spent.r2_reads > 0, `${st.station}: ${JSON.stringify(st.open_spent)}`);
        assert.equal(st.last_request.r2_reads, 0, st.station);
      }
    } finally {
      await local.dispose();
    }
  });
});
