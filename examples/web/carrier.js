// The carrier panel: an image's patches through ImageCarrierPipeline (columnar API), one heatmap
// per observer bandwidth, the image as a relief (mesh-view.js) lifted where the lowest observer
// does not resolve the carrier, and the deblur fold of a few candidates over that observer's
// reading (deblur.js) in a mesh_carrier_assessment/v1 blob. After a run, window.carrierResult
// holds what the maps, the relief and the fold show (for tests).
import {
  ImageCarrierPipeline, MAX_DEBLUR_PATCHES, carrierReadingOf, encodeMeshCarrierAssessmentV1Json, foldDeblurEnsemble,
  loadWasm, mergeDeblurFoldIntoMeshCarrierJson,
} from 'knot-wasm';
import { candidatePositions } from './deblur.js';
import { ALPHA_THRESHOLD, drawRelief } from './mesh-view.js';

/** Larger images are scaled down first: the maps show patches, not pixels. */
const MAX_SIDE = 512;
const RESOLUTION = [15, 118, 110];
/** The deblur map's colours: resolved, ambiguous, contradicted. */
const VERDICT_COLOURS = { resolved: [15, 118, 110], ambiguous: [245, 158, 11], contradicted: [190, 18, 60] };
const LOW = [30, 27, 75];
const HIGH = [245, 158, 11];

const $ = (/** @type {string} */ id) => /** @type {any} */ (document.getElementById(id));

/**
 * The image scaled to fit MAX_SIDE: its RGB bytes for the pipeline and its RGBA bytes for the
 * relief.
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
  return { width, height, channels: 3, sampleRange: /** @type {'byte'} */ ('byte'), data: rgb, rgba: new Uint8Array(rgba.buffer.slice(0)) };
}

/**
 * Per patch: the relief's depth byte (0 where observer 0 resolves the carrier, else rising with
 * the copy index) and the mean alpha of the patch's pixels.
 * @param {any} columns analyzeColumnar's result
 * @param {number} channel
 * @param {{ width: number, height: number, rgba: Uint8Array }} image
 * @param {number} patchSize
 */
function reliefGrid(columns, channel, image, patchSize) {
  const { patchesX, patchesY, channels } = columns.grid;
  const depth = new Uint8Array(patchesX * patchesY);
  const alpha = new Uint8Array(patchesX * patchesY);
  let maxCopy = 0;
  for (let patch = 0; patch < depth.length; patch++) maxCopy = Math.max(maxCopy, columns.copyIndices[patch * channels + channel]);
  for (let py = 0; py < patchesY; py++) {
    for (let px = 0; px < patchesX; px++) {
      const patch = py * patchesX + px;
      const at = patch * channels + channel;
      depth[patch] = columns.readings[at] === 1 ? 0 : Math.round((255 * (1 + columns.copyIndices[at])) / (1 + maxCopy));
      let sum = 0;
      let count = 0;
      for (let y = py * patchSize; y < Math.min(image.height, (py + 1) * patchSize); y++) {
        for (let x = px * patchSize; x < Math.min(image.width, (px + 1) * patchSize); x++) {
          sum += image.rgba[4 * (y * image.width + x) + 3];
          count++;
        }
      }
      alpha[patch] = Math.round(sum / count);
    }
  }
  return { patchesX, patchesY, depth, alpha };
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

/**
 * The image's assessment blob with the deblur fold of the candidates over observer 0's reading
 * (none past MAX_DEBLUR_PATCHES cells), and the fold's map of `channel`.
 * @param {any} pipeline
 * @param {any} pixels the image as analysed
 * @param {any} columns
 * @param {number} channel
 */
function drawDeblur(pipeline, pixels, columns, channel) {
  const carrier = carrierReadingOf(columns, { sampleRange: [0, 255] });
  const hop = { index: 0, station: 'page', to: [], position: null, rows: pixels.height, bytes: pixels.data.byteLength };
  let json = encodeMeshCarrierAssessmentV1Json({ hop, carrier });
  const figure = document.createElement('figure');
  const caption = document.createElement('figcaption');
  if (columns.cellCount > MAX_DEBLUR_PATCHES) {
    caption.textContent = `deblur fold: ${columns.cellCount} cells, more than ${MAX_DEBLUR_PATCHES} (raise the patch size)`;
    figure.append(caption);
    return { figure, json };
  }
  const observerBandwidth = columns.observerBandwidths[0];
  const fold = foldDeblurEnsemble(columns, { observerBandwidth, members: candidatePositions(pipeline, pixels) });
  json = mergeDeblurFoldIntoMeshCarrierJson(json, fold);
  const { patchesX, patchesY, channels } = columns.grid;
  const canvas = document.createElement('canvas');
  [canvas.width, canvas.height] = [patchesX, patchesY];
  const context = /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d'));
  const map = context.createImageData(patchesX, patchesY);
  for (let patch = 0; patch < patchesX * patchesY; patch++) {
    map.data.set([.../** @type {any} */ (VERDICT_COLOURS)[fold.patches[patch * channels + channel].verdict], 255], 4 * patch);
  }
  context.putImageData(map, 0, 0);
  const v = fold.verdicts;
  const text = `deblur fold at b = ${observerBandwidth}, ${fold.members} candidates, ${fold.patches.length} cells (the map: this channel): ${v.resolved} resolved, ${v.ambiguous} ambiguous, ${v.contradicted} contradicted`;
  canvas.setAttribute('role', 'img');
  canvas.setAttribute('aria-label', text);
  caption.textContent = text;
  figure.append(canvas, caption);
  return { figure, json };
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
      const { rgba: _, ...pixels } = image;
      const columns = pipeline.analyzeColumnar(pixels);
      const ms = performance.now() - t0;
      const drawn = Array.from(columns.observerBandwidths, (_, o) => drawMap(columns, o, channel));
      maps.replaceChildren(...drawn.map((d) => d.figure));
      const deblur = drawDeblur(pipeline, pixels, columns, channel);
      $('carrier-deblur').replaceChildren(deblur.figure);
      $('carrier-assessment').textContent = deblur.json;
      const grid = reliefGrid(columns, channel, image, Number($('patch-size').value));
      let relief = null;
      if (grid.patchesX >= 2 && grid.patchesY >= 2) {
        const canvas = document.createElement('canvas');
        [canvas.width, canvas.height] = [480, 320];
        relief = drawRelief(canvas, image, grid);
        canvas.setAttribute('role', 'img');
        canvas.setAttribute('aria-label', `the image as a relief: ${relief.triangleCount} triangles`);
        $('carrier-relief').replaceChildren(canvas);
      } else {
        $('carrier-relief').replaceChildren('The relief needs at least 2 × 2 patches.');
      }
      window.carrierResult = {
        relief: relief && { ...relief, depth: Array.from(grid.depth), alpha: Array.from(grid.alpha), alphaThreshold: ALPHA_THRESHOLD },
        width: image.width,
        height: image.height,
        grid: columns.grid,
        channel,
        observerBandwidths: Array.from(columns.observerBandwidths),
        readings: drawn.map((d) => d.readings),
        copyIndices: drawn.map((d) => d.copyIndices),
        assessment: deblur.json,
      };
      status.textContent = `${image.width}×${image.height} image, ${columns.cellCount} cells in ${ms.toFixed(1)} ms.`;
    } catch (err) {
      maps.replaceChildren();
      $('carrier-relief').replaceChildren();
      $('carrier-deblur').replaceChildren();
      $('carrier-assessment').textContent = '';
      status.textContent = err instanceof Error ? err.message : String(err);
    } finally {
      pipeline?.free();
    }
  });
}
