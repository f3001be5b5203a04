// The carrier pipelines through the wasm package, exactly as the seed's examples use them.
import assert from 'node:assert/strict';
import { describe, test } from './harness.js';
import { CarrierMediumPipeline, ImageCarrierPipeline } from '../src/node.js';

describe('CarrierMediumPipeline', () => {
  test("the seed's example: evolution at b = 3, resolution at b = 54", () => {
    const analysis = new CarrierMediumPipeline({ sourceBandwidth: 54, observerBandwidths: [3, 54] }).analyze({
      cells: [{ id: 'patch-0', unitValue: 2 / 54 }, { id: 'patch-1', unitValue: 53 / 54 }],
    });
    assert.deepEqual(analysis.cells[0].readings.map((r) => r.reading), ['evolution', 'resolution']);
    assert.deepEqual(analysis.cells[1].readings.map((r) => r.reading), ['evolution', 'resolution']);
    const [a, b] = [analysis.cells[0].readings[0], analysis.cells[1].readings[0]];
    assert.equal(a.fiberSize, 18);
    assert.equal(a.copyIndex, 2);
    assert.equal(b.copyIndex, 17);
    assert.equal(a.copyIndexRepresentable, false);
    assert.equal(analysis.cells[1].sourcePosition, 53);
  });

  test('0 and 18/54 are resolutions at b = 3; b = 5 fibers are unequal and partition 0..53', () => {
    const p = new CarrierMediumPipeline({ sourceBandwidth: 54, observerBandwidths: [3, 5] });
    const a = p.analyze({ cells: [{ id: 'zero', unitValue: 0 }, { id: 'third', unitValue: 18 / 54 }] });
    assert.deepEqual(a.cells.map((c) => c.readings[0].reading), ['resolution', 'resolution']);
    const cells = Array.from({ length: 54 }, (_, k) => ({ id: `k${k}`, unitValue: k / 54 }));
    const fibers = new Map();
    for (const c of p.analyze({ cells }).cells) {
      const r = c.readings[1];
      fibers.set(r.observerPosition, [r.fiberStart, r.fiberSize]);
      assert.equal(r.fiberStart + r.copyIndex, c.sourcePosition);
    }
    const sizes = [...fibers.values()].map(([, size]) => size);
    assert.equal(sizes.reduce((x, y) => x + y, 0), 54);
    assert.ok(new Set(sizes).size > 1, `unequal fibers: ${sizes}`);
  });

  test('fiberStates lists the source values compatible with an observation', () => {
    const p = new CarrierMediumPipeline({ sourceBandwidth: 54, observerBandwidths: [3] });
    const reading = p.analyze({ cells: [{ id: 'x', unitValue: 2 / 54 }] }).cells[0].readings[0];
    const states = p.fiberStates(reading);
    assert.equal(states.positions.length, 18);
    assert.equal(states.positions[2], 2);
    assert.deepEqual(states.interval, [0, 18 / 54]);
  });

  test('bad input is a clear Error naming the field or the cell', () => {
    assert.throws(() => new CarrierMediumPipeline({ sourceBandwidth: 0, observerBandwidths: [3] }), /sourceBandwidth/);
    assert.throws(() => new CarrierMediumPipeline({ sourceBandwidth: 54, observerBandwidths: [] }), /observerBandwidths/);
    assert.throws(() => new CarrierMediumPipeline({ sourceBandwidth: 54, observerBandwidths: [3, 2.5] }), /observerBandwidths\[1\]/);
    assert.throws(() => new CarrierMediumPipeline({ sourceBandwidth: '54', observerBandwidths: [3] }), /sourceBandwidth/);
    const p = new CarrierMediumPipeline({ sourceBandwidth: 54, observerBandwidths: [3] });
    assert.throws(() => p.analyze({ cells: [{ id: 'nan-cell', unitValue: NaN }] }), /nan-cell/);
    assert.throws(() => p.analyze({ cells: [{ id: 'big', unitValue: 1.5 }] }), /big/);
    assert.throws(() => p.analyze({ cells: [{ id: 'inf', unitValue: Infinity }] }), /inf/);
    assert.throws(() => p.analyze({ cells: [{ id: 7, unitValue: 0.5 }] }), /cells\[0\]\.id must be a string/);
    assert.throws(() => p.analyze({}), /cells/);
    // The instance survives every error.
    assert.equal(p.analyze({ cells: [{ id: 'ok', unitValue: 0.5 }] }).cells[0].sourcePosition, 27);
  });
});

describe('ImageCarrierPipeline', () => {
  test("the seed's 2x1 single-channel example with patchSize 1", () => {
    const imageAnalysis = new ImageCarrierPipeline({ carrierBandwidth: 54, observerBandwidths: [3, 54], patchSize: 1 })
      .analyze({ width: 2, height: 1, channels: 1, sampleRange: 'unit', data: new Float32Array([2 / 54, 53 / 54]) });
    assert.deepEqual(imageAnalysis.patches[0].readings.map((r) => r.reading), ['evolution', 'resolution']);
    assert.deepEqual(imageAnalysis.patches[1].readings.map((r) => r.reading), ['evolution', 'resolution']);
    assert.equal(imageAnalysis.patches[1].x, 1);
  });

  test('byte and [lo, hi] sample ranges, partial edge patches, columnar equals objects', () => {
    const width = 5;
    const height = 3;
    const channels = 4;
    const data = new Uint8ClampedArray(width * height * channels).map((_, i) => (i * 37) % 256);
    const p = new ImageCarrierPipeline({ carrierBandwidth: 54, observerBandwidths: [3, 7], patchSize: 2 });
    const image = { width, height, channels, sampleRange: 'byte', data };
    const objects = p.analyze(image);
    const cols = p.analyzeColumnar(image);
    assert.equal(objects.patches.length, 3 * 2 * channels);
    assert.ok(objects.patches.some((q) => q.partial) && objects.patches.some((q) => !q.partial));
    assert.equal(cols.cellCount, objects.patches.length);
    objects.patches.forEach((q, i) => {
      assert.equal(cols.sourcePositions[i], q.sourcePosition);
      q.readings.forEach((r, o) => {
        const j = o * cols.cellCount + i;
        assert.equal(cols.copyIndices[j], r.copyIndex);
        assert.equal(cols.observerPositions[j], r.observerPosition);
        assert.equal(cols.readings[j], r.reading === 'resolution' ? 1 : 0);
      });
    });
    const ranged = p.analyze({ ...image, sampleRange: [0, 255], data: new Float32Array(data) });
    assert.deepEqual(ranged.patches.map((q) => q.sourcePosition), objects.patches.map((q) => q.sourcePosition));
  });

  test('a 3840x2160 RGBA frame goes through the columnar API without per-cell objects', () => {
    const [width, height, channels] = [3840, 2160, 4];
    const data = new Uint8Array(width * height * channels);
    for (let i = 0; i < data.length; i++) data[i] = (i * 2654435761) >>> 24;
    const p = new ImageCarrierPipeline({ carrierBandwidth: 54, observerBandwidths: [3, 54], patchSize: 8 });
    const cols = p.analyzeColumnar({ width, height, channels, sampleRange: 'byte', data });
    assert.equal(cols.cellCount, (3840 / 8) * (2160 / 8) * 4);
    assert.equal(cols.readings.length, 2 * cols.cellCount);
    // Observer 54 = the source bandwidth: every reading is a resolution.
    assert.ok(cols.readings.subarray(cols.cellCount).every((r) => r === 1));
  });

  test('bad images are clear Errors', () => {
    const p = new ImageCarrierPipeline({ carrierBandwidth: 54, observerBandwidths: [3], patchSize: 1 });
    const ok = { width: 2, height: 1, channels: 1, sampleRange: 'unit', data: new Float32Array([0.1, 0.2]) };
    assert.throws(() => p.analyze({ ...ok, data: new Float32Array(3) }), /length|3/);
    assert.throws(() => p.analyze({ ...ok, data: [0.1, 0.2] }), /Float32Array, Uint8Array or Uint8ClampedArray/);
    assert.throws(() => p.analyze({ ...ok, sampleRange: 'percent' }), /percent/);
    assert.throws(() => p.analyze({ ...ok, sampleRange: [1, 0] }), /range|1/i);
    assert.throws(() => p.analyze({ ...ok, data: new Float32Array([0.1, 2]) }), /channel|patch|pixel/);
    assert.throws(() => p.analyze({ ...ok, width: 0 }), /width/);
    assert.throws(() => new ImageCarrierPipeline({ carrierBandwidth: 54, observerBandwidths: [3], patchSize: 0 }), /patchSize/);
    assert.equal(p.analyze(ok).patches.length, 2);
  });
});
