// Carrier pipelines through the wasm package in Node: cells per second for the medium pipeline,
// and a 3840x2160 RGBA frame through the columnar API at patch 8 and patch 1.
//   node bench/carrier.mjs
import { CarrierMediumPipeline, ImageCarrierPipeline } from '../src/node.js';

const median = (xs) => xs.slice().sort((a, b) => a - b)[xs.length >> 1];
const time = (fn, runs = 3) => median(Array.from({ length: runs }, () => {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}));

const cells = Array.from({ length: 100_000 }, (_, i) => ({ id: `c${i}`, unitValue: (i % 1000) / 999 }));
const medium = new CarrierMediumPipeline({ sourceBandwidth: 54, observerBandwidths: [3, 7, 54] });
const mediumMs = time(() => medium.analyze({ cells }));
console.log(`medium analyze: 100000 cells x 3 observers in ${mediumMs.toFixed(1)} ms = ${(1e5 / mediumMs / 1e3).toFixed(2)} M cells/s (objects in and out)`);

const [width, height, channels] = [3840, 2160, 4];
const data = new Uint8Array(width * height * channels);
for (let i = 0; i < data.length; i++) data[i] = (i * 2654435761) >>> 24;
for (const patchSize of [8, 1]) {
  const p = new ImageCarrierPipeline({ carrierBandwidth: 54, observerBandwidths: [3, 54], patchSize });
  let n = 0;
  const ms = time(() => { n = p.analyzeColumnar({ width, height, channels, sampleRange: 'byte', data }).cellCount; }, patchSize === 1 ? 1 : 3);
  console.log(`4K RGBA frame, patch ${patchSize}: ${n} cells in ${ms.toFixed(0)} ms = ${(n / ms / 1e3).toFixed(1)} M cells/s (columnar)`);
  p.free();
}
