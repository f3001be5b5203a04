// The Worker's pure parts, without workerd: the station chain's route and answer bundle. (The
// OpenAI module's — queue, stop sequences, request checking — are tested in the package.)
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { StationError, bundleAnswers, chainTimeout, parseRoute, unbundleAnswers } from '../src/chain.js';
import { BACKEND_METHODS } from 'knot-wasm/openai';
import { SplitModel } from '../src/split.js';


describe('the station chain', () => {
  const ns = { idFromName: () => ({}) };
  const env = { LAYERS_1: ns, HEADS_0: ns, HEADS_1: ns, MODEL_KEY: 'x.knot' };
  const hop = (binding, name, query) => ({ binding, name, query });
  const route = {
    next: [hop('LAYERS_1', 'layers-15-30', 'layers=15-30')],
    heads: [hop('HEADS_0', 'rows-0-24576', 'rows=0-24576'), hop('HEADS_1', 'rows-24576-49152', 'rows=24576-49152')],
    top: 4,
    timeoutMs: 1000,
  };

  test('a route is read back as sent, and no header means no route', () => {
    assert.deepEqual(parseRoute(JSON.stringify(route), env), route);
    assert.deepEqual(parseRoute(JSON.stringify({ ...route, heads: null }), env).heads, null);
    assert.equal(parseRoute(null, env), null);
    assert.equal(parseRoute('', env), null);
    // One timeout for the next station, two for the head shards (a retry), one for the called one.
    assert.equal(chainTimeout(route), 4000);
    assert.equal(chainTimeout({ ...route, next: [], heads: null }), 1000);
  });

  test('a bad route is refused with a 400 naming what is wrong', () => {
    const bad = [
      ['{', /not JSON/],
      ['3', /must be an object/],
      [JSON.stringify({ ...route, next: 'x' }), /next must be a list/],
      [JSON.stringify({ ...route, next: [hop('LAYERS_1', 'a', 'layers=1')] }), /layers=A-B/],
      [JSON.stringify({ ...route, next: [hop('MODEL_KEY', 'a', 'layers=1-2')] }), /MODEL_KEY is not a Durable Object binding/],
      [JSON.stringify({ ...route, heads: [hop('NOPE', 'a', 'rows=1-2')] }), /NOPE is not a Durable Object binding/],
      [JSON.stringify({ ...route, next: Array(65).fill(route.next[0]) }), /at most 64/],
      [JSON.stringify({ ...route, top: -1 }), /top must be a whole number/],
      [JSON.stringify({ ...route, timeoutMs: 0 }), /timeoutMs must be > 0/],
    ];
    for (const [header, why] of bad) {
      assert.throws(() => parseRoute(header, env), (e) => e.status === 400 && why.test(e.message), header);
    }
  });

  test('head answers survive the bundle, errors as StationErrors; a malformed bundle is a StationError', () => {
    const answers = [new Uint8Array([1, 2, 3]), new Error('head 1: did not answer'), new Uint8Array(0)];
    const back = unbundleAnswers(bundleAnswers(answers), 3);
    assert.deepEqual([...back[0]], [1, 2, 3]);
    assert.ok(back[1] instanceof StationError);
    assert.equal(back[1].message, 'head 1: did not answer');
    assert.equal(back[1].code, 'station_failed');
    assert.equal(back[2].byteLength, 0);
    const good = bundleAnswers(answers);
    const broken = [
      [new Uint8Array(4), /does not start with KNHB/],
      [good, /holds 3 answers for 2/, 2],
      [good.subarray(0, good.byteLength - 1), /ends inside|malformed/],
      [Uint8Array.from([...good, 0]), /1 bytes after/],
      [(() => { const b = good.slice(); b[8] = 7; return b; })(), /answer 0 is malformed \(kind 7/],
    ];
    for (const [bytes, why, count = 3] of broken) {
      assert.throws(() => unbundleAnswers(bytes, count), (e) => e instanceof StationError && why.test(e.message));
    }
  });
});

test('the split model is a Backend of the OpenAI module, as HostShim is', () => {
  for (const m of BACKEND_METHODS) assert.equal(typeof SplitModel.prototype[m], 'function', m);
});
