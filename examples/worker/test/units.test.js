// The Worker's pure parts, without workerd: the station chain's route and answer bundle. (The
// OpenAI module's — queue, stop sequences, request checking — are tested in the package.)
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { StationError, bundleAnswers, chainTimeout, parseRoute, unbundleAnswers } from '../src/chain.js';
import { BACKEND_METHODS } from 'knot-wasm/openai';
import { SplitModel } from '../src/split.js';
import { HOP_ASSESSMENT_DEFAULTS, assessHop, assessmentsHeader, assessmentsOf, hiddenStatesOf, hopAssessmentSettings, parseAssessHeader } from '../src/assess.js';


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

describe('hop assessments (assess.js)', () => {
  /** A KNHS message (crates/host/src/station/wire.rs) of `rows` rows: f32 values, or f16 bit patterns. */
  function knhs(position, dim, values, f16 = false) {
    const e = f16 ? 2 : 4;
    const out = new Uint8Array(28 + values.length * e + 4);
    const view = new DataView(out.buffer);
    out.set([0x4b, 0x4e, 0x48, 0x53, 1, f16 ? 1 : 0], 0);
    view.setUint32(16, position, true);
    view.setUint32(20, values.length / dim, true);
    view.setUint32(24, dim, true);
    values.forEach((v, i) => (f16 ? view.setUint16(28 + 2 * i, v, true) : view.setFloat32(28 + 4 * i, v, true)));
    return out;
  }

  test('the hidden states of a message are read back: f32, f16 (normal, subnormal, largest) and a bundle', () => {
    const f32 = hiddenStatesOf(knhs(7, 3, [1.5, -2.25, 0, 4, 5, 6]));
    assert.deepEqual({ ...f32, values: [...f32.values] }, { position: 7, rows: 2, dim: 3, values: [1.5, -2.25, 0, 4, 5, 6] });
    const f16 = hiddenStatesOf(knhs(0, 4, [0x3e00, 0xc000, 0x0001, 0x7bff], true));
    assert.deepEqual([...f16.values], [1.5, -2, 2 ** -24, 65504]);
    // A KNHM bundle of two conversations: their rows stacked, no single position.
    const parts = [knhs(3, 2, [1, 2]), knhs(9, 2, [3, 4, 5, 6])];
    const bundle = new Uint8Array(12 + parts.reduce((n, p) => n + 5 + p.byteLength, 0) + 4);
    const view = new DataView(bundle.buffer);
    bundle.set([0x4b, 0x4e, 0x48, 0x4d, 1], 0);
    view.setUint32(8, 2, true);
    let at = 12;
    for (const p of parts) {
      view.setUint32(at + 1, p.byteLength, true);
      bundle.set(p, at + 5);
      at += 5 + p.byteLength;
    }
    const both = hiddenStatesOf(bundle);
    assert.deepEqual({ ...both, values: [...both.values] }, { position: null, rows: 3, dim: 2, values: [1, 2, 3, 4, 5, 6] });
    assert.equal(hiddenStatesOf(new Uint8Array(40)), null);
  });

  test('a hop\'s blob: the carrier reading of the row, none for a row with no range', () => {
    const values = Array.from({ length: 64 }, (_, i) => Math.sin(i) * 3);
    const assess = { hop: 1, spectral: null, settings: HOP_ASSESSMENT_DEFAULTS };
    const text = assessHop(assess, 'layers-15-29', ['rows-0-10'], knhs(12, 64, values));
    const blob = JSON.parse(text);
    assert.deepEqual(blob.hop, { index: 1, station: 'layers-15-29', to: ['rows-0-10'], position: 12, rows: 1, bytes: 28 + 256 + 4 });
    assert.equal(blob.carrier.cells, 8);
    assert.deepEqual(blob.carrier.sampleRange, [Math.fround(Math.min(...values)), Math.fround(Math.max(...values))]);
    // Read back through the header's path: one blob, whole; a station's own before those behind.
    assert.deepEqual(assessmentsOf(assessmentsHeader(text, null)), [blob]);
    const first = assessHop({ ...assess, hop: 0 }, 'layers-0-14', ['layers-15-29'], knhs(12, 64, values));
    assert.deepEqual(assessmentsOf(assessmentsHeader(first, assessmentsHeader(text, null))), [JSON.parse(first), blob]);
    assert.equal(JSON.parse(assessHop(assess, 'a', [], knhs(0, 4, [2, 2, 2, 2]))).carrier, null);
    assert.equal(JSON.parse(assessHop(assess, 'a', [], knhs(0, 2, [1, NaN]))).carrier, null);
  });

  test('KNOT_HOP_ASSESSMENT: off, on, or settings; bad values refused at open; a bad header is a 400', () => {
    for (const off of [undefined, '', 'off', '0']) assert.equal(hopAssessmentSettings({ KNOT_HOP_ASSESSMENT: off }), null);
    assert.equal(hopAssessmentSettings({ KNOT_HOP_ASSESSMENT: 'on' }), HOP_ASSESSMENT_DEFAULTS);
    assert.deepEqual(hopAssessmentSettings({ KNOT_HOP_ASSESSMENT: '{"patchSize":4}' }), { ...HOP_ASSESSMENT_DEFAULTS, patchSize: 4 });
    assert.throws(() => hopAssessmentSettings({ KNOT_HOP_ASSESSMENT: '{' }), /KNOT_HOP_ASSESSMENT must be on, off or JSON/);
    assert.throws(() => hopAssessmentSettings({ KNOT_HOP_ASSESSMENT: '{"patchSize":0}' }), /KNOT_HOP_ASSESSMENT: .*patchSize/);
    for (const header of ['{', '{"hop":-1,"settings":{}}', '{"hop":64,"settings":{}}', '{"hop":0}']) {
      assert.throws(() => parseAssessHeader(header), (e) => e.status === 400 && /x-knot-assess/.test(e.message), header);
    }
    assert.equal(parseAssessHeader(null), null);
  });
});
