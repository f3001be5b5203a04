// The carrier panel's deblur fold (docs/mesh-carrier.md): what a narrow observer read of each
// patch allows of the full carrier (the patch's fiber), against an ensemble of candidate
// reconstructions — here the image itself blurred at a few radii, the detail a restoration might
// fail to recover. Each patch gets a verdict: resolved (every candidate inside the fiber, on one
// state), ambiguous (inside, on several), contradicted (a candidate the reading rules out).
// Pure JavaScript, no DOM: the page test recomputes the same fold in Node.

/** The candidates' blur radii, in pixels. */
export const DEBLUR_RADII = Object.freeze([1, 2, 4]);

/**
 * `image` blurred by a (2r + 1)² box per channel (edges clamped), as f32 samples in the same
 * range: a summed-area table, so each radius costs one pass whatever its size.
 * @param {{ width: number, height: number, channels: number, sampleRange: any, data: ArrayLike<number> }} image
 * @param {number} r
 */
export function boxBlur(image, r) {
  const { width: w, height: h, channels: c, data } = image;
  const out = new Float32Array(w * h * c);
  const sat = new Float64Array((w + 1) * (h + 1));
  for (let ch = 0; ch < c; ch++) {
    for (let y = 0; y < h; y++) {
      let row = 0;
      for (let x = 0; x < w; x++) {
        row += data[(y * w + x) * c + ch];
        sat[(y + 1) * (w + 1) + x + 1] = sat[y * (w + 1) + x + 1] + row;
      }
    }
    for (let y = 0; y < h; y++) {
      const [y0, y1] = [Math.max(0, y - r), Math.min(h, y + r + 1)];
      for (let x = 0; x < w; x++) {
        const [x0, x1] = [Math.max(0, x - r), Math.min(w, x + r + 1)];
        const sum = sat[y1 * (w + 1) + x1] - sat[y0 * (w + 1) + x1] - sat[y1 * (w + 1) + x0] + sat[y0 * (w + 1) + x0];
        out[(y * w + x) * c + ch] = sum / ((y1 - y0) * (x1 - x0));
      }
    }
  }
  return { ...image, data: out };
}

/**
 * The candidates' proposed source positions per cell: each blur read by the same pipeline.
 * @param {{ analyzeColumnar(image: object): { sourcePositions: Uint32Array } }} pipeline
 * @param {Parameters<typeof boxBlur>[0]} image
 */
export function candidatePositions(pipeline, image) {
  return DEBLUR_RADII.map((r) => Uint32Array.from(pipeline.analyzeColumnar(boxBlur(image, r)).sourcePositions));
}
