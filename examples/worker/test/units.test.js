// The split model's parts that need no workerd: the station chain's route and answer bundle and
// the hop assessments (the package's, knot-wasm/stations, as the Worker's stations use them), and
// the stations' options from the environment. (The OpenAI module's — stop sequences, request
// checking — and the line are tested in the package.)
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import {
  Coordinator, HOP_ASSESSMENT_DEFAULTS, StationError, assessHop, assessmentsHeader, assessmentsOf, bundleAnswers,
  chainTimeout, hiddenStatesOf, hopAssessmentSettings, parseAssessHeader, parseRoute, unbundleAnswers,
} from 'knot-wasm/stations';
import { BACKEND_METHODS } from 'knot-wasm/openai';
import { LayerStation, stationOptions } from '../src/stations.js';
import { isBinding } from '../src/transport.js';
import { REPO } from './support.js';


describe('the station chain', () => {
  const ns = { idFromName: () => ({}) };
  const env = { LAYERS_1: ns, HEADS_0: ns, HEADS_1: ns, MODEL_KEY: 'x.knot' };
  const reachable = (address) => isBinding(env, address);
  const hop = (address, name, query) => ({ address, name, query });
  const route = {
    next: [hop('LAYERS_1', 'layers-15-30', 'layers=15-30')],
    heads: [hop('HEADS_0', 'rows-0-24576', 'rows=0-24576'), hop('HEADS_1', 'rows-24576-49152', 'rows=24576-49152')],
    top: 4,
    pick: 64,
    step: 9,
    timeoutMs: 1000,
  };

  test('a route is read back as sent, and no header means no route', () => {
    assert.deepEqual(parseRoute(JSON.stringify(route), reachable), route);
    assert.deepEqual(parseRoute(JSON.stringify({ ...route, heads: null }), reachable).heads, null);
    assert.equal(parseRoute(null, reachable), null);
    assert.equal(parseRoute('', reachable), null);
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
      [JSON.stringify({ ...route, next: [hop('MODEL_KEY', 'a', 'layers=1-2')] }), /MODEL_KEY is not a station this one can reach/],
      [JSON.stringify({ ...route, heads: [hop('NOPE', 'a', 'rows=1-2')] }), /NOPE is not a station this one can reach/],
      [JSON.stringify({ ...route, next: Array(65).fill(route.next[0]) }), /at most 64/],
      [JSON.stringify({ ...route, top: -1 }), /top must be a whole number/],
      [JSON.stringify({ ...route, pick: 2000 }), /pick must be a whole number up to 1024/],
      [JSON.stringify({ ...route, step: -1 }), /step must be a whole number/],
      [JSON.stringify({ ...route, timeoutMs: 0 }), /timeoutMs must be > 0/],
    ];
    for (const [header, why] of bad) {
      assert.throws(() => parseRoute(header, reachable), (e) => e.status === 400 && why.test(e.message), header);
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
  for (const m of BACKEND_METHODS) assert.equal(typeof Coordinator.prototype[m], 'function', m);
});

test('the stations\' options: the vars set, as numbers; the rest the package\'s one set of defaults; a bad value refused naming the option', async () => {
  assert.deepEqual(stationOptions({}), {});
  const MiB = 2 ** 20;
  assert.deepEqual(stationOptions({
    KNOT_MAX_CONTEXT: '512', KNOT_STATION_MAX_BATCH: '32', KNOT_KV_CACHE: 'f32', KNOT_STATION_CONVERSATIONS: '8',
    KNOT_MAX_READ_MB: '2', KNOT_EMBEDDING_BUDGET_MB: '0', KNOT_LOGIT_ROWS: '4', KNOT_MAX_SEQUENCES: 'auto', KNOT_KEPT_CONVERSATIONS: '',
  }), { maxContext: 512, maxBatch: 32, kvCache: 'f32', maxConversations: 8, maxReadBytes: 2 * MiB, embeddingBudget: 0, logitRows: 4, maxSequences: 'auto' });
  // Not a number: it goes as it is, and the station's open refuses it by name.
  assert.deepEqual(stationOptions({ KNOT_STATION_MAX_BATCH: 'many' }), { maxBatch: 'many' });
  const bytes = readFileSync(join(REPO, 'tests/fixtures/tiny/llama-f16.knot'));
  const bucket = {
    async get(_key, { range }) {
      const part = bytes.subarray(range.offset, range.offset + range.length);
      return { arrayBuffer: async () => part.buffer.slice(part.byteOffset, part.byteOffset + part.byteLength) };
    },
  };
  for (const [vars, why] of [
    [{ KNOT_STATION_MAX_BATCH: 'many' }, /maxBatch must be an integer >= 1, got "many"/],
    [{ KNOT_KV_CACHE: 'q8' }, /kvCache must be 'f32' or 'f16', got "q8"/],
    [{ KNOT_STATION_CONVERSATIONS: '2', KNOT_MAX_SEQUENCES: '3' }, /maxSequences must be 'auto' or an integer in \[1, 2\]/],
  ]) {
    const station = new LayerStation({}, { MODELS: bucket, MODEL_KEY: `bad-${JSON.stringify(vars)}.knot`, ...vars });
    const res = await station.fetch(new Request('https://station/stats?layers=0-1'));
    assert.equal(res.status, 400);
    const { error } = await res.json();
    assert.equal(error.code, 'invalid_option');
    assert.match(error.message, why);
  }
});

describe('hop assessments (knot-wasm/stations)', () => {
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
    const named = (value) => hopAssessmentSettings(value, 'KNOT_HOP_ASSESSMENT');
    for (const off of [undefined, '', 'off', '0']) assert.equal(named(off), null);
    assert.equal(named('on'), HOP_ASSESSMENT_DEFAULTS);
    assert.deepEqual(named('{"patchSize":4}'), { ...HOP_ASSESSMENT_DEFAULTS, patchSize: 4 });
    assert.throws(() => named('{'), /KNOT_HOP_ASSESSMENT must be on, off or JSON/);
    assert.throws(() => named('{"patchSize":0}'), /KNOT_HOP_ASSESSMENT: .*patchSize/);
    for (const header of ['{', '{"hop":-1,"settings":{}}', '{"hop":64,"settings":{}}', '{"hop":0}']) {
      assert.throws(() => parseAssessHeader(header), (e) => e.status === 400 && /x-knot-assess/.test(e.message), header);
    }
    assert.equal(parseAssessHeader(null), null);
  });
});
