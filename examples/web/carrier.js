// The carrier panel: an image's patches through ImageCarrierPipeline (columnar API), one heatmap
// per observer bandwidth. After a run, window.carrierResult holds what the maps show (for tests).
import { ImageCarrierPipeline, loadWasm } from 'knot-wasm';

/** Larger images are scaled down first: the maps show patches, not pixels. */
const MAX_SIDE = 512;
const RESOLUTION = [15, 118, 110];
const LOW = [30, 27, 75];
const HIGH = [245, 158, 11];

const $ = (/** @type {string} */ id) => /** @type {any} */ (document.getElementById(id));

/**
 * The image's RGB bytes (alpha dropped), scaled to fit MAX_SIDE.
 * @param {File} file
 */
async function readRgb(file) {
  const bitmap = await createImageBitmap(file);
  const scale = Math.min(1, MAX_SIDE / Math.max(bitmap.width, bitmap.height));
  const width = Math.max(1, Math.round(bitmap.width * scale));
  const height = Math.max(1, Math.round(bitmap.height * scale));
  const canvas = new OffscreenCanvas(width, height);
  const context = /** @type {OffscreenCanvasRenderingContext2D} */ (canvas.getContext('2d'));
  context.drawImage(bitmap, 0, 0, width, height);
  bitmap.close();
  const rgba = context.getImageData(0, 0, width, height).data;
  const rgb = new Uint8Array(width * height * 3);
  for (let p = 0; p < width * height; p++) {
    rgb[3 * p] = rgba[4 * p];
    rgb[3 * p + 1] = rgba[4 * p + 1];
    rgb[3 * p + 2] = rgba[4 * p + 2];
  }
  return { width, height, channels: 3, sampleRange: /** @type {'byte'} */ ('byte'), data: rgb };
}

/** @param {string} text */
function parseBandwidths(text) {
  const list = text.split(',').map((s) => s.trim()).filter((s) => s !== '');
  const values = list.map(Number);
  if (values.length === 0 || values.some((v) => !Number.isInteger(v) || v < 1)) {
    throw new Error(`observer bandwidths must be whole numbers separated by commas, got "${text}"`);
  }
  return values;
}

/**
 * Draws observer `o`'s readings of `channel`: one pixel per patch.
 * @param {any} columns analyzeColumnar's result
 * @param {number} o
 * @param {number} channel
 */
function drawMap(columns, o, channel) {
  const { patchesX, patchesY, channels } = columns.grid;
  const n = columns.cellCount;
  const canvas = document.createElement('canvas');
  canvas.width = patchesX;
  canvas.height = patchesY;
  const context = /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d'));
  const image = context.createImageData(patchesX, patchesY);
  const readings = [];
  const copyIndices = [];
  let maxCopy = 0;
  for (let patch = 0; patch < patchesX * patchesY; patch++) {
    const at = o * n + patch * channels + channel;
    readings.push(columns.readings[at]);
    copyIndices.push(columns.copyIndices[at]);
    maxCopy = Math.max(maxCopy, columns.copyIndices[at]);
  }
  readings.forEach((reading, patch) => {
    const t = maxCopy === 0 ? 0 : copyIndices[patch] / maxCopy;
    const color = reading === 1 ? RESOLUTION : LOW.map((lo, k) => Math.round(lo + t * (HIGH[k] - lo)));
    image.data.set([...color, 255], 4 * patch);
  });
  context.putImageData(image, 0, 0);
  const resolved = readings.filter((r) => r === 1).length;
  const bandwidth = columns.observerBandwidths[o];
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', `observer bandwidth ${bandwidth}: ${resolved} of ${readings.length} patches resolved`);
  const figure = document.createElement('figure');
  const caption = document.createElement('figcaption');
  caption.textContent = `b = ${bandwidth}: ${resolved} of ${readings.length} resolved, copy index up to ${maxCopy}`;
  figure.append(canvas, caption);
  return { figure, readings, copyIndices };
}

export function setUpCarrier() {
  $('carrier-form').addEventListener('submit', async (/** @type {Event} */ e) => {
    e.preventDefault();
    const status = $('carrier-status');
    const maps = $('carrier-maps');
    const file = $('carrier-image').files?.[0];
    if (file === undefined) {
      status.textContent = 'Pick an image first.';
      return;
    }
    /** @type {any} */
    let pipeline;
    try {
      status.textContent = 'Analyzing…';
      await loadWasm();
      const image = await readRgb(file);
      const channel = Number($('carrier-channel').value);
      pipeline = new ImageCarrierPipeline({
        carrierBandwidth: Number($('carrier-bandwidth').value),
        observerBandwidths: parseBandwidths($('observer-bandwidths').value),
        patchSize: Number($('patch-size').value),
      });
      const t0 = performance.now();
      const columns = pipeline.analyzeColumnar(image);
      const ms = performance.now() - t0;
      const drawn = Array.from(columns.observerBandwidths, (_, o) => drawMap(columns, o, channel));
      maps.replaceChildren(...drawn.map((d) => d.figure));
      window.carrierResult = {
        width: image.width,
        height: image.height,
        grid: columns.grid,
        channel,
        observerBandwidths: Array.from(columns.observerBandwidths),
        readings: drawn.map((d) => d.readings),
        copyIndices: drawn.map((d) => d.copyIndices),
      };
      status.textContent = `${image.width}×${image.height} image, ${columns.cellCount} cells in ${ms.toFixed(1)} ms.`;
    } catch (err) {
      maps.replaceChildren();
      status.textContent = err instanceof Error ? err.message : String(err);
    } finally {
      pipeline?.free();
    }
  });
}
