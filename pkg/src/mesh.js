// Stateless mesh grids: the index and UV buffers of a grid that WebGL2 or WebGPU extrudes from
// textures alone. Nothing per image lives in the buffers — the vertex shader displaces each
// vertex by a depth texture sampled at its UV, the fragment shader discards where an alpha
// texture is below a threshold — so one grid serves every image of its size, and only the
// textures change. `solid: true` adds a back plane (a flat copy of the grid facing away), and
// `buildAlphaBoundaryWallIndices` the side walls joining front and back where the alpha mask
// ends. docs/mesh.md has the shaders' side of the contract.
//
// Conventions (what a shader and the tests rely on):
// - A grid of `width` × `height` vertices, one per texel of a `width` × `height` texture,
//   row-major from the top-left: vertex `i = y * width + x` has UV ((x + 0.5) / width,
//   (y + 0.5) / height) — texel centres, v growing downwards as image rows do. A solid grid
//   repeats the vertices for the back plane: vertex `N + i` (N = width · height) is `i`'s back.
// - Placing a vertex at x = 2u − 1, y = 1 − 2v (z from depth; the back plane behind the front),
//   the front's triangles wind counter-clockwise seen from +z (WebGL's default front face), the
//   back's clockwise from +z (counter-clockwise from behind), and each wall's outward from the
//   shape.
// - Indices are Uint32 (WebGL2 draws them with UNSIGNED_INT; WebGPU with "uint32").
import { coded } from './errors.js';

/** The most vertices one plane of a grid may have (2048 × 2048): a solid grid's buffers then take ~270 MB. */
export const MAX_MESH_GRID_VERTICES = 1 << 22;

/**
 * The grid's size, checked: whole numbers from 2 up, at most MAX_MESH_GRID_VERTICES in all.
 * @param {unknown} width
 * @param {unknown} height
 */
function gridSize(width, height) {
  for (const [name, v] of [['width', width], ['height', height]]) {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 2) {
      throw coded('invalid_argument', `mesh grid ${name} must be a whole number of vertices of at least 2, got ${String(v)}`, RangeError);
    }
  }
  const w = /** @type {number} */ (width);
  const h = /** @type {number} */ (height);
  if (w * h > MAX_MESH_GRID_VERTICES) {
    throw coded('invalid_argument', `mesh grid ${w}×${h} has more than ${MAX_MESH_GRID_VERTICES} vertices`, RangeError);
  }
  return { w, h };
}

/**
 * A grid of `width` × `height` vertices (one per texel) for extrusion in a shader.
 * @param {{ width: number, height: number, solid?: boolean }} options
 * @returns {{
 *   width: number, height: number, solid: boolean,
 *   vertexCount: number, triangleCount: number,
 *   uvs: Float32Array, sides: Float32Array, indices: Uint32Array,
 *   front: { first: number, count: number }, back: { first: number, count: number },
 * }} `uvs`: two floats per vertex; `sides`: one per vertex, 0 front and 1 back (a solid grid's
 *   back plane); `front` / `back`: each plane's run of `indices` (first index, index count;
 *   `back.count` is 0 unless solid).
 */
export function buildStatelessMeshGrid(options) {
  if (options === null || typeof options !== 'object') {
    throw coded('invalid_argument', 'buildStatelessMeshGrid takes { width, height, solid }');
  }
  const { w, h } = gridSize(options.width, options.height);
  if (options.solid !== undefined && typeof options.solid !== 'boolean') {
    throw coded('invalid_argument', `mesh grid solid must be true or false, got ${String(options.solid)}`);
  }
  const solid = options.solid === true;
  const planes = solid ? 2 : 1;
  const n = w * h;
  const uvs = new Float32Array(2 * n * planes);
  const sides = new Float32Array(n * planes);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = y * w + x;
      uvs[2 * i] = (x + 0.5) / w;
      uvs[2 * i + 1] = (y + 0.5) / h;
    }
  }
  if (solid) {
    uvs.copyWithin(2 * n, 0, 2 * n);
    sides.fill(1, n);
  }
  const perPlane = 6 * (w - 1) * (h - 1);
  const indices = new Uint32Array(perPlane * planes);
  let at = 0;
  for (let plane = 0; plane < planes; plane++) {
    const base = plane * n;
    for (let y = 0; y + 1 < h; y++) {
      for (let x = 0; x + 1 < w; x++) {
        // a top-left, b bottom-left, c top-right, d bottom-right.
        const a = base + y * w + x;
        const b = a + w;
        const c = a + 1;
        const d = b + 1;
        if (plane === 0) {
          indices.set([a, b, c, c, b, d], at);
        } else {
          indices.set([a, c, b, c, d, b], at);
        }
        at += 6;
      }
    }
  }
  return {
    width: w,
    height: h,
    solid,
    vertexCount: n * planes,
    triangleCount: indices.length / 3,
    uvs,
    sides,
    indices,
    front: { first: 0, count: perPlane },
    back: { first: perPlane, count: solid ? perPlane : 0 },
  };
}

/**
 * The side walls of a solid grid (`buildStatelessMeshGrid({ width, height, solid: true })`)
 * along the edge of its alpha mask: two triangles joining front and back along every grid edge
 * that has an inside cell on one side and an outside cell (or the grid's border) on the other.
 * A cell — the square between four neighbouring vertices — is inside when all four corners'
 * alpha is at least `threshold`: then no fragment of it is discarded (alpha interpolates between
 * its corners), so the walls close the surface that is drawn.
 * @param {ArrayLike<number>} alpha one value per vertex (`width` × `height`, row-major)
 * @param {number} width
 * @param {number} height
 * @param {number} threshold
 * @returns {Uint32Array} six indices per wall edge into the solid grid's vertices
 */
export function buildAlphaBoundaryWallIndices(alpha, width, height, threshold) {
  const { w, h } = gridSize(width, height);
  if (alpha === null || typeof alpha !== 'object' || typeof alpha.length !== 'number') {
    throw coded('invalid_argument', 'alpha must be an array or typed array of one value per vertex');
  }
  if (alpha.length !== w * h) {
    throw coded('invalid_argument', `alpha holds ${alpha.length} values, the ${w}×${h} grid has ${w * h} vertices`, RangeError);
  }
  if (typeof threshold !== 'number' || Number.isNaN(threshold)) {
    throw coded('invalid_argument', `alpha threshold must be a number, got ${String(threshold)}`);
  }
  const n = w * h;
  const cw = w - 1;
  const ch = h - 1;
  const on = new Uint8Array(cw * ch);
  for (let y = 0; y < ch; y++) {
    for (let x = 0; x < cw; x++) {
      const i = y * w + x;
      // NaN alpha counts as below the threshold (a comparison with NaN is false).
      on[y * cw + x] = Number(alpha[i] >= threshold && alpha[i + 1] >= threshold
        && alpha[i + w] >= threshold && alpha[i + w + 1] >= threshold);
    }
  }
  const inside = (/** @type {number} */ x, /** @type {number} */ y) => x >= 0 && y >= 0 && x < cw && y < ch && on[y * cw + x] === 1;
  /** @type {number[]} */
  const out = [];
  // Edge p → q runs counter-clockwise around the inside (seen from +z): the two triangles then
  // face outward.
  const wall = (/** @type {number} */ p, /** @type {number} */ q) => out.push(p, p + n, q, q, p + n, q + n);
  const at = (/** @type {number} */ x, /** @type {number} */ y) => y * w + x;
  for (let y = 0; y < ch; y++) {
    for (let x = 0; x < cw; x++) {
      if (!inside(x, y)) continue;
      if (!inside(x, y - 1)) wall(at(x + 1, y), at(x, y)); // top edge, right to left
      if (!inside(x, y + 1)) wall(at(x, y + 1), at(x + 1, y + 1)); // bottom edge, left to right
      if (!inside(x - 1, y)) wall(at(x, y), at(x, y + 1)); // left edge, downwards
      if (!inside(x + 1, y)) wall(at(x + 1, y + 1), at(x + 1, y)); // right edge, upwards
    }
  }
  return Uint32Array.from(out);
}
