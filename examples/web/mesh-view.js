// The carrier panel's relief: the analysed image extruded as a solid mesh in WebGL2. The grid
// (one vertex per patch) comes from the package's buildStatelessMeshGrid and its side walls from
// buildAlphaBoundaryWallIndices; everything per image is in three textures — colour, depth (the
// carrier reading) and alpha — so the vertex shader lifts each vertex by its depth and the
// fragment shader drops what the alpha mask leaves out. One still frame, drawn once per run.
import { buildAlphaBoundaryWallIndices, buildStatelessMeshGrid } from 'knot-wasm';

/** Alpha below this (of 255) is left out, and walls close the shape where it ends. */
export const ALPHA_THRESHOLD = 128;
/** Front relief at depth 1 and the back plane's place, in units of the image's half-width. */
const RELIEF = 0.35;
const BACK = -0.12;

const VERTEX = `#version 300 es
in vec2 uv;
in float side;
uniform sampler2D depth;
uniform mat4 mvp;
uniform vec2 extent;
out vec2 vUv;
out float vSide;
void main() {
  float z = side > 0.5 ? ${BACK.toFixed(3)} : texture(depth, uv).r * ${RELIEF.toFixed(3)};
  vUv = uv;
  vSide = side;
  gl_Position = mvp * vec4((uv.x * 2.0 - 1.0) * extent.x, (1.0 - uv.y * 2.0) * extent.y, z, 1.0);
}`;

const FRAGMENT = `#version 300 es
precision mediump float;
uniform sampler2D image;
uniform sampler2D alpha;
in vec2 vUv;
in float vSide;
out vec4 color;
void main() {
  if (texture(alpha, vUv).r < ${(ALPHA_THRESHOLD / 255).toFixed(4)}) discard;
  // Walls shade from the front's colour to half of it at the back.
  color = vec4(texture(image, vUv).rgb * (1.0 - 0.5 * vSide), 1.0);
}`;

/** Column-major 4×4 matrices, only what one fixed view needs. */
const mul = (/** @type {number[]} */ a, /** @type {number[]} */ b) => Array.from({ length: 16 }, (_, i) => {
  const [c, r] = [Math.floor(i / 4), i % 4];
  return a[r] * b[4 * c] + a[4 + r] * b[4 * c + 1] + a[8 + r] * b[4 * c + 2] + a[12 + r] * b[4 * c + 3];
});
const rotateX = (/** @type {number} */ t) => [1, 0, 0, 0, 0, Math.cos(t), Math.sin(t), 0, 0, -Math.sin(t), Math.cos(t), 0, 0, 0, 0, 1];
const rotateY = (/** @type {number} */ t) => [Math.cos(t), 0, -Math.sin(t), 0, 0, 1, 0, 0, Math.sin(t), 0, Math.cos(t), 0, 0, 0, 0, 1];
const translate = (/** @type {number} */ z) => [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, z, 1];
function perspective(/** @type {number} */ fovy, /** @type {number} */ aspect, /** @type {number} */ near, /** @type {number} */ far) {
  const f = 1 / Math.tan(fovy / 2);
  return [f / aspect, 0, 0, 0, 0, f, 0, 0, 0, 0, (far + near) / (near - far), -1, 0, 0, (2 * far * near) / (near - far), 0];
}

/**
 * @param {WebGL2RenderingContext} gl
 * @param {number} type
 * @param {string} source
 */
function shader(gl, type, source) {
  const s = /** @type {WebGLShader} */ (gl.createShader(type));
  gl.shaderSource(s, source);
  gl.compileShader(s);
  if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(`shader: ${gl.getShaderInfoLog(s)}`);
  return s;
}

/**
 * A texture of one (R8) or four (RGBA8) bytes per texel, filtered linearly.
 * @param {WebGL2RenderingContext} gl
 * @param {number} unit
 * @param {number} width
 * @param {number} height
 * @param {Uint8Array} data
 * @param {boolean} rgba
 */
function texture(gl, unit, width, height, data, rgba) {
  const t = gl.createTexture();
  gl.activeTexture(gl.TEXTURE0 + unit);
  gl.bindTexture(gl.TEXTURE_2D, t);
  gl.pixelStorei(gl.UNPACK_ALIGNMENT, 1);
  gl.texImage2D(gl.TEXTURE_2D, 0, rgba ? gl.RGBA8 : gl.R8, width, height, 0, rgba ? gl.RGBA : gl.RED, gl.UNSIGNED_BYTE, data);
  for (const p of [gl.TEXTURE_MIN_FILTER, gl.TEXTURE_MAG_FILTER]) gl.texParameteri(gl.TEXTURE_2D, p, gl.LINEAR);
  for (const p of [gl.TEXTURE_WRAP_S, gl.TEXTURE_WRAP_T]) gl.texParameteri(gl.TEXTURE_2D, p, gl.CLAMP_TO_EDGE);
  return t;
}

/**
 * Draws the image as a solid relief on `canvas` (which keeps the frame: tests read it back).
 * @param {HTMLCanvasElement} canvas
 * @param {{ width: number, height: number, rgba: Uint8Array }} image
 * @param {{ patchesX: number, patchesY: number, depth: Uint8Array, alpha: Uint8Array }} grid
 *   one depth and one alpha byte per patch (row-major)
 * @returns {{ vertexCount: number, triangleCount: number, wallTriangleCount: number }}
 */
export function drawRelief(canvas, image, grid) {
  const gl = canvas.getContext('webgl2', { preserveDrawingBuffer: true, antialias: false });
  if (gl === null) throw new Error('WebGL2 is not available in this browser: the relief is not drawn.');
  const mesh = buildStatelessMeshGrid({ width: grid.patchesX, height: grid.patchesY, solid: true });
  const walls = buildAlphaBoundaryWallIndices(grid.alpha, grid.patchesX, grid.patchesY, ALPHA_THRESHOLD);
  const indices = new Uint32Array(mesh.indices.length + walls.length);
  indices.set(mesh.indices);
  indices.set(walls, mesh.indices.length);

  const program = /** @type {WebGLProgram} */ (gl.createProgram());
  gl.attachShader(program, shader(gl, gl.VERTEX_SHADER, VERTEX));
  gl.attachShader(program, shader(gl, gl.FRAGMENT_SHADER, FRAGMENT));
  gl.linkProgram(program);
  if (!gl.getProgramParameter(program, gl.LINK_STATUS)) throw new Error(`program: ${gl.getProgramInfoLog(program)}`);
  gl.useProgram(program);

  gl.bindVertexArray(gl.createVertexArray());
  for (const [name, data, size] of /** @type {const} */ ([['uv', mesh.uvs, 2], ['side', mesh.sides, 1]])) {
    gl.bindBuffer(gl.ARRAY_BUFFER, gl.createBuffer());
    gl.bufferData(gl.ARRAY_BUFFER, data, gl.STATIC_DRAW);
    const at = gl.getAttribLocation(program, name);
    gl.enableVertexAttribArray(at);
    gl.vertexAttribPointer(at, size, gl.FLOAT, false, 0, 0);
  }
  gl.bindBuffer(gl.ELEMENT_ARRAY_BUFFER, gl.createBuffer());
  gl.bufferData(gl.ELEMENT_ARRAY_BUFFER, indices, gl.STATIC_DRAW);

  texture(gl, 0, image.width, image.height, image.rgba, true);
  texture(gl, 1, grid.patchesX, grid.patchesY, grid.depth, false);
  texture(gl, 2, grid.patchesX, grid.patchesY, grid.alpha, false);
  gl.uniform1i(gl.getUniformLocation(program, 'image'), 0);
  gl.uniform1i(gl.getUniformLocation(program, 'depth'), 1);
  gl.uniform1i(gl.getUniformLocation(program, 'alpha'), 2);
  const side = Math.max(image.width, image.height);
  gl.uniform2f(gl.getUniformLocation(program, 'extent'), image.width / side, image.height / side);
  // A fixed three-quarter view from above and the right.
  const view = mul(translate(-3.2), mul(rotateX(0.5), rotateY(-0.45)));
  const mvp = mul(perspective(0.6, canvas.width / canvas.height, 0.1, 10), view);
  gl.uniformMatrix4fv(gl.getUniformLocation(program, 'mvp'), false, mvp);

  gl.viewport(0, 0, canvas.width, canvas.height);
  gl.clearColor(0.06, 0.07, 0.1, 1);
  gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
  gl.enable(gl.DEPTH_TEST);
  // Culling shows the windings are right: a plane wound the wrong way would vanish.
  gl.enable(gl.CULL_FACE);
  gl.drawElements(gl.TRIANGLES, indices.length, gl.UNSIGNED_INT, 0);
  const error = gl.getError();
  if (error !== gl.NO_ERROR) throw new Error(`WebGL error 0x${error.toString(16)} drawing the relief`);
  return { vertexCount: mesh.vertexCount, triangleCount: indices.length / 3, wallTriangleCount: walls.length / 3 };
}
