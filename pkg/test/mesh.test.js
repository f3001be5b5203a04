// Stateless mesh grids (src/mesh.js): counts, UVs, winding and side walls on small grids, a
// solid shape closed edge for edge, and bad arguments refused by name.
import assert from 'node:assert/strict';
import { describe, test } from './harness.js';
import { MAX_MESH_GRID_VERTICES, buildAlphaBoundaryWallIndices, buildStatelessMeshGrid } from '../src/mesh.js';

/** Vertex i placed as a shader would: x = 2u − 1, y = 1 − 2v; front at z 1, back at z 0. */
function position(grid, i) {
  return [2 * grid.uvs[2 * i] - 1, 1 - 2 * grid.uvs[2 * i + 1], grid.sides[i] === 1 ? 0 : 1];
}

const sub = (a, b) => a.map((v, k) => v - b[k]);
const cross = (a, b) => [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
const dot = (a, b) => a[0] * b[0] + a[1] * b[1] + a[2] * b[2];

/** Triangle t's normal (counter-clockwise = toward the viewer) and centre. */
function triangle(grid, indices, t) {
  const [a, b, c] = [0, 1, 2].map((k) => position(grid, indices[3 * t + k]));
  return { normal: cross(sub(b, a), sub(c, a)), centre: [0, 1, 2].map((k) => (a[k] + b[k] + c[k]) / 3) };
}

const triangles = (indices) => Array.from({ length: indices.length / 3 }, (_, t) => t);

/** Every directed edge of `indices`' triangles, as "from>to". */
function directedEdges(indices) {
  const edges = [];
  for (let t = 0; t < indices.length; t += 3) {
    for (let k = 0; k < 3; k++) edges.push(`${indices[t + k]}>${indices[t + (k + 1) % 3]}`);
  }
  return edges;
}

describe('mesh grids', () => {
  test('a 2×2 grid: four vertices at texel centres, two triangles facing the viewer', () => {
    const g = buildStatelessMeshGrid({ width: 2, height: 2 });
    assert.equal(g.vertexCount, 4);
    assert.equal(g.triangleCount, 2);
    assert.deepEqual(Array.from(g.uvs), [0.25, 0.25, 0.75, 0.25, 0.25, 0.75, 0.75, 0.75]);
    assert.deepEqual(Array.from(g.indices), [0, 2, 1, 1, 2, 3]);
    assert.deepEqual(Array.from(g.sides), [0, 0, 0, 0]);
    assert.deepEqual([g.front, g.back], [{ first: 0, count: 6 }, { first: 6, count: 0 }]);
    for (const t of triangles(g.indices)) assert.ok(triangle(g, g.indices, t).normal[2] > 0);
  });

  test('a 5×4 grid: counts, every cell covered once, every triangle counter-clockwise', () => {
    const g = buildStatelessMeshGrid({ width: 5, height: 4 });
    assert.equal(g.vertexCount, 20);
    assert.equal(g.triangleCount, 2 * 4 * 3);
    assert.ok(g.indices.every((i) => i < g.vertexCount));
    let area = 0;
    for (const t of triangles(g.indices)) {
      const { normal } = triangle(g, g.indices, t);
      assert.ok(normal[2] > 0, `triangle ${t}`);
      area += normal[2] / 2;
    }
    // The texel-centre grid spans (1 − 1/w) × (1 − 1/h) of the [-1, 1]² square.
    assert.ok(Math.abs(area - 4 * (4 / 5) * (3 / 4)) < 1e-5, String(area));
    // Each interior edge is shared by two triangles, in opposite directions.
    const edges = directedEdges(g.indices);
    assert.equal(new Set(edges).size, edges.length);
  });

  test('solid: a back plane of the same vertices facing away', () => {
    const g = buildStatelessMeshGrid({ width: 4, height: 3, solid: true });
    const n = 12;
    assert.equal(g.vertexCount, 2 * n);
    assert.equal(g.triangleCount, 2 * 2 * 3 * 2);
    assert.deepEqual(Array.from(g.uvs.subarray(2 * n)), Array.from(g.uvs.subarray(0, 2 * n)));
    assert.deepEqual(Array.from(g.sides), [...Array(n).fill(0), ...Array(n).fill(1)]);
    assert.deepEqual([g.front, g.back], [{ first: 0, count: 36 }, { first: 36, count: 36 }]);
    const back = g.indices.subarray(g.back.first);
    assert.ok(back.every((i) => i >= n));
    for (const t of triangles(back)) assert.ok(triangle(g, back, t).normal[2] < 0, `back triangle ${t}`);
  });

  test('walls: the border of an opaque grid, each facing outward', () => {
    const [w, h] = [4, 3];
    const g = buildStatelessMeshGrid({ width: w, height: h, solid: true });
    const walls = buildAlphaBoundaryWallIndices(new Float32Array(w * h).fill(1), w, h, 0.5);
    // 3 + 3 horizontal and 2 + 2 vertical border edges, two triangles each.
    assert.equal(walls.length, 6 * (2 * (w - 1) + 2 * (h - 1)));
    for (const t of triangles(walls)) {
      const { normal, centre } = triangle(g, walls, t);
      // Outward: away from the grid's centre, and flat in z.
      assert.ok(dot(normal, [centre[0], centre[1], 0]) > 0, `wall triangle ${t}`);
      assert.ok(Math.abs(normal[2]) < 1e-9);
    }
  });

  test('walls around a hole and an edge: a known mask, and the solid closed edge for edge', () => {
    const [w, h] = [5, 5];
    // The centre vertex transparent: its four cells are outside, the other twelve inside.
    const alpha = new Uint8Array(w * h).fill(255);
    alpha[2 * w + 2] = 0;
    const walls = buildAlphaBoundaryWallIndices(alpha, w, h, 128);
    // 16 border edges outside, 8 around the hole.
    assert.equal(walls.length / 6, 16 + 8);
    const g = buildStatelessMeshGrid({ width: w, height: h, solid: true });
    // The drawn shape: front and back triangles of the inside cells, and the walls.
    const inside = (x, y) => !(x >= 1 && x <= 2 && y >= 1 && y <= 2);
    const shape = [];
    for (const plane of [g.front, g.back]) {
      for (let c = 0; c < 16; c++) {
        if (inside(c % 4, Math.floor(c / 4))) shape.push(...g.indices.subarray(plane.first + 6 * c, plane.first + 6 * c + 6));
      }
    }
    shape.push(...walls);
    // Closed and consistently wound: each directed edge once, and its reverse once.
    const edges = directedEdges(shape);
    const seen = new Set(edges);
    assert.equal(seen.size, edges.length, 'no directed edge twice');
    for (const e of edges) {
      const [a, b] = e.split('>');
      assert.ok(seen.has(`${b}>${a}`), `edge ${e} has no twin`);
    }
    // Walls around the hole face into it: toward the centre vertex's place.
    for (const t of triangles(walls)) {
      const { normal, centre } = triangle(g, walls, t);
      const nearHole = Math.hypot(centre[0], centre[1]) < 0.5;
      const out = nearHole ? [-centre[0], -centre[1], 0] : [centre[0], centre[1], 0];
      assert.ok(dot(normal, out) > 0, `wall triangle ${t}`);
    }
  });

  test('walls: the threshold is inclusive, NaN is outside, an empty mask has none', () => {
    const [w, h] = [3, 3];
    assert.equal(buildAlphaBoundaryWallIndices(new Float32Array(9).fill(0.5), w, h, 0.5).length, 6 * 8);
    assert.equal(buildAlphaBoundaryWallIndices(new Float32Array(9).fill(0.49), w, h, 0.5).length, 0);
    const nan = new Float32Array(9).fill(1);
    nan[0] = NaN;
    // The top-left cell goes: 8 border edges less its 2, plus its 2 inner sides.
    assert.equal(buildAlphaBoundaryWallIndices(nan, w, h, 0.5).length, 6 * 8);
    assert.equal(buildAlphaBoundaryWallIndices([1, 1, 1, 1], 2, 2, 1).length, 6 * 4);
  });

  test('bad arguments are refused by name', () => {
    const bad = (fn, pattern) => assert.throws(fn, (e) => e.code === 'invalid_argument' && pattern.test(e.message));
    bad(() => buildStatelessMeshGrid(null), /width, height/);
    bad(() => buildStatelessMeshGrid({ width: 1, height: 4 }), /width/);
    bad(() => buildStatelessMeshGrid({ width: 4, height: 2.5 }), /height/);
    bad(() => buildStatelessMeshGrid({ width: '4', height: 4 }), /width/);
    bad(() => buildStatelessMeshGrid({ width: 4, height: NaN }), /height/);
    bad(() => buildStatelessMeshGrid({ width: 4, height: 4, solid: 'yes' }), /solid/);
    bad(() => buildStatelessMeshGrid({ width: 1 << 12, height: 1 << 11 }), new RegExp(String(MAX_MESH_GRID_VERTICES)));
    bad(() => buildAlphaBoundaryWallIndices(new Float32Array(5), 2, 2, 0.5), /4 vertices/);
    bad(() => buildAlphaBoundaryWallIndices(null, 2, 2, 0.5), /alpha/);
    bad(() => buildAlphaBoundaryWallIndices(new Float32Array(4), 2, 2, NaN), /threshold/);
    bad(() => buildAlphaBoundaryWallIndices(new Float32Array(4), 2, 0, 0.5), /height/);
  });
});
