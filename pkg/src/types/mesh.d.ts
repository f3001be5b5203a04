// Stateless mesh grids (docs/mesh.md): index and UV buffers that WebGL2 / WebGPU extrude from
// depth and alpha textures alone. Pure JavaScript; no wasm needed.

/** The most vertices one plane of a grid may have (2048 × 2048). */
export declare const MAX_MESH_GRID_VERTICES: number;

/** A grid of `width` × `height` vertices, one per texel, front plane and (solid) back plane. */
export interface StatelessMeshGrid {
  width: number;
  height: number;
  solid: boolean;
  vertexCount: number;
  triangleCount: number;
  /** Two floats per vertex: the texel centre ((x + 0.5) / width, (y + 0.5) / height). */
  uvs: Float32Array;
  /** One float per vertex: 0 on the front plane, 1 on the back plane (vertex N + i is i's back). */
  sides: Float32Array;
  /** Counter-clockwise front triangles, then (solid) the back plane's, facing away. */
  indices: Uint32Array;
  front: { first: number; count: number };
  back: { first: number; count: number };
}

/** Refuses (code `invalid_argument`) sizes below 2, non-integers, or more than MAX_MESH_GRID_VERTICES. */
export declare function buildStatelessMeshGrid(options: {
  width: number;
  height: number;
  solid?: boolean;
}): StatelessMeshGrid;

/**
 * Side walls of a solid grid where its alpha mask ends: six indices (two outward-facing
 * triangles joining front and back) per grid edge between an inside cell (all four corners'
 * alpha ≥ threshold) and an outside cell or the border.
 */
export declare function buildAlphaBoundaryWallIndices(
  alpha: ArrayLike<number>,
  width: number,
  height: number,
  threshold: number,
): Uint32Array;
