// mesh_carrier_assessment/v1 (src/mesh-carrier.js, schema/mesh_carrier_assessment.v1.json):
// golden blobs read back byte for byte and valid under the schema; the goldens' carrier and
// deblur parts recomputed from their image through the wasm carrier pipeline; merging and
// attaching a fold leave the spectral part as it was; a live health report from the package
// encodes; malformed blobs refused naming the field — by the package and by the schema alike.
//
// KNOT_WRITE_GOLDENS=1 writes the goldens instead of comparing (then review the diff).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020 from 'ajv/dist/2020.js';
import { describe, test } from './harness.js';
import { FileKnotSource, HostShim, ImageCarrierPipeline } from '../src/node.js';
import { TINY } from './support.js';
import {
  MESH_CARRIER_ASSESSMENT_V1, MeshCarrierAssessmentError, attachDeblurEnsembleToMeshCarrierAssessmentJson,
  carrierReadingOf, encodeMeshCarrierAssessmentV1Json, foldDeblurEnsemble, mergeDeblurFoldIntoMeshCarrierJson,
  parseMeshCarrierAssessmentV1Json,
} from '../src/mesh-carrier.js';

const here = dirname(fileURLToPath(import.meta.url));
const fixtures = join(here, '..', '..', 'tests', 'fixtures', 'mesh-carrier');
const schema = JSON.parse(readFileSync(join(here, '..', 'schema', 'mesh_carrier_assessment.v1.json'), 'utf8'));
const validate = new Ajv2020({ strict: true, allErrors: true }).compile(schema);
const writing = process.env.KNOT_WRITE_GOLDENS === '1';

// A real step report of the health monitor: SmolLM2 at step 63 of "The list of colours: red,
// blue, red, blue, red," (knot generate --health on --json), its window just full.
const SPECTRAL = JSON.parse(readFileSync(join(fixtures, 'spectral-step.json'), 'utf8'));

/** The goldens' image: 24 × 16, one channel, f32 in [0, 1]; a ramp with a bright square. */
function image() {
  const data = new Float32Array(24 * 16);
  for (let y = 0; y < 16; y++) {
    for (let x = 0; x < 24; x++) data[y * 24 + x] = x >= 8 && x < 16 && y >= 4 && y < 12 ? 0.95 : ((x * 7 + y * 13) % 54) / 54;
  }
  return { width: 24, height: 16, channels: 1, sampleRange: /** @type {const} */ ('unit'), data };
}

/** The image blurred by a (2r+1)² box, edges clamped: what a deblur candidate might be. */
function blurred(img, r) {
  const out = new Float32Array(img.data.length);
  for (let y = 0; y < img.height; y++) {
    for (let x = 0; x < img.width; x++) {
      let sum = 0;
      let n = 0;
      for (let dy = -r; dy <= r; dy++) {
        for (let dx = -r; dx <= r; dx++) {
          const xx = Math.min(img.width - 1, Math.max(0, x + dx));
          const yy = Math.min(img.height - 1, Math.max(0, y + dy));
          sum += img.data[yy * img.width + xx];
          n++;
        }
      }
      out[y * img.width + x] = sum / n;
    }
  }
  return { ...img, data: out };
}

const OPTIONS = { carrierBandwidth: 54, observerBandwidths: [3, 7, 54], patchSize: 4 };
const HOP = { index: 1, station: 'layers-15-29', to: ['rows-0-24575', 'rows-24576-49151'], position: 17, rows: 1, bytes: 2340 };

/** The goldens' parts, computed: the carrier reading of the image and the fold of three candidates. */
function computed() {
  const p = new ImageCarrierPipeline(OPTIONS);
  try {
    const img = image();
    const columns = p.analyzeColumnar(img);
    // The ensemble: the image itself (every patch inside its fiber) and two blurs of it.
    const members = [img, blurred(img, 1), blurred(img, 3)].map((m) => Uint32Array.from(p.analyzeColumnar(m).sourcePositions));
    return { columns, members, carrier: carrierReadingOf(columns, { sampleRange: [0, 1] }) };
  } finally {
    p.free();
  }
}

/** The golden `name`'s text, or (writing) `text` written as it. */
function golden(name, text) {
  const path = join(fixtures, name);
  if (writing && text !== undefined) writeFileSync(path, `${text}\n`);
  return readFileSync(path, 'utf8').trimEnd();
}

describe('mesh_carrier_assessment/v1', () => {
  const { columns, members, carrier } = computed();
  const spectral = { step: 63, report: SPECTRAL };
  const plain = encodeMeshCarrierAssessmentV1Json({ hop: HOP, spectral, carrier });
  const withFold = attachDeblurEnsembleToMeshCarrierAssessmentJson(plain, columns, { observerBandwidth: 7, members });
  const bare = encodeMeshCarrierAssessmentV1Json({ hop: { ...HOP, index: 0, station: 'layers-0-14', to: [], position: null, rows: 3 } });
  const goldens = { 'hop.json': plain, 'hop-deblur.json': withFold, 'hop-bare.json': bare };

  test('the goldens are what the package writes from their image and ensemble, byte for byte', () => {
    for (const [name, text] of Object.entries(goldens)) assert.equal(golden(name, text), text, name);
  });

  test('each golden reads back and writes out byte for byte, and the schema accepts it', () => {
    for (const name of Object.keys(goldens)) {
      const text = golden(name);
      const blob = parseMeshCarrierAssessmentV1Json(text);
      assert.equal(blob.schema, MESH_CARRIER_ASSESSMENT_V1);
      assert.equal(encodeMeshCarrierAssessmentV1Json(blob), text, name);
      assert.ok(validate(JSON.parse(text)), `${name}: ${JSON.stringify(validate.errors)}`);
    }
  });

  test('the carrier part counts the readings the pipeline gave', () => {
    const n = columns.cellCount;
    assert.equal(carrier.cells, 24);
    carrier.observers.forEach((o, k) => {
      const readings = columns.readings.subarray(k * n, (k + 1) * n);
      assert.equal(o.resolutions, readings.reduce((a, r) => a + r, 0));
      assert.equal(o.resolutions + o.evolutions, n);
      const copies = columns.copyIndices.subarray(k * n, (k + 1) * n).reduce((a, c) => a + c, 0);
      assert.equal(o.meanCopyIndex, copies / n);
    });
    // S = 54: observer 3 has fibers of 18 (copy indices up to 17, not representable in 3
    // symbols); 7 has fibers of 7 and 8 (these cells meet only 7s); 54 holds every cell exactly.
    assert.deepEqual(carrier.observers.map((o) => o.fiberSizes), [[18], [7], [1]]);
    carrier.observers.forEach((o, k) => {
      const b = o.observerBandwidth;
      const size = (j) => Math.ceil(((j + 1) * 54) / b) - Math.ceil((j * 54) / b);
      const sizes = Array.from(columns.observerPositions.subarray(k * n, (k + 1) * n), size);
      assert.deepEqual(o.fiberSizes, [...new Set(sizes)].sort((x, y) => x - y), `observer ${b}`);
      assert.equal(o.representable, sizes.filter((z) => z <= b).length, `observer ${b}`);
    });
    assert.equal(carrier.observers[0].representable, 0);
    assert.equal(carrier.observers[2].resolutions, n);
  });

  test('the fold: each verdict follows its patch, and the image itself is never contradicted', () => {
    const fold = parseMeshCarrierAssessmentV1Json(withFold).deblur;
    assert.equal(fold.members, 3);
    assert.equal(fold.patches.length, 24);
    const exact = members[0];
    for (const p of fold.patches) {
      // The image's own position lies in its fiber, so it is among the states.
      assert.ok(p.states.includes(exact[p.cell]), `cell ${p.cell}`);
      const inside = members.map((m) => m[p.cell]).filter((s) => s >= p.fiberStart && s < p.fiberStart + p.fiberSize);
      assert.equal(p.outside, 3 - inside.length);
      assert.deepEqual(p.states, [...new Set(inside)].sort((a, b) => a - b));
    }
    // The three verdicts all occur here (the blurs leave the square's edges, agree in flat parts).
    assert.ok(fold.verdicts.resolved > 0 && fold.verdicts.ambiguous > 0 && fold.verdicts.contradicted > 0, JSON.stringify(fold.verdicts));
    // One member: every patch resolved (nothing to disagree with, nothing outside).
    const alone = foldDeblurEnsemble(columns, { observerBandwidth: 7, members: [members[0]] });
    assert.deepEqual(alone.verdicts, { resolved: 24, ambiguous: 0, contradicted: 0 });
    // At the full bandwidth each fiber is one position: the blurs that moved are contradicted.
    const sharp = foldDeblurEnsemble(columns, { observerBandwidth: 54, members });
    assert.equal(sharp.verdicts.ambiguous, 0);
  });

  test('merging and attaching carry the spectral and carrier parts byte for byte', () => {
    const cut = (text) => text.slice(text.indexOf('"spectral"'), text.indexOf('"deblur"'));
    assert.equal(cut(withFold), cut(plain));
    const fold = JSON.parse(withFold).deblur;
    assert.equal(mergeDeblurFoldIntoMeshCarrierJson(plain, fold), withFold);
    // A fold replaces the one a blob had.
    const other = foldDeblurEnsemble(columns, { observerBandwidth: 3, members });
    const replaced = mergeDeblurFoldIntoMeshCarrierJson(withFold, other);
    assert.equal(cut(replaced), cut(plain));
    assert.equal(JSON.parse(replaced).deblur.observerBandwidth, 3);
    // Attaching needs the reading the blob describes, an observer it has, and a carrier part.
    assert.throws(() => attachDeblurEnsembleToMeshCarrierAssessmentJson(bare, columns, { observerBandwidth: 7, members }), fieldIs('$.carrier'));
    assert.throws(() => attachDeblurEnsembleToMeshCarrierAssessmentJson(plain, columns, { observerBandwidth: 5, members }), fieldIs('$.carrier.observers'));
    const wrong = { ...columns, cellCount: 12 };
    assert.throws(() => attachDeblurEnsembleToMeshCarrierAssessmentJson(plain, wrong, { observerBandwidth: 7, members }), fieldIs('$.carrier'));
    assert.throws(() => foldDeblurEnsemble(columns, { observerBandwidth: 7, members: [] }), fieldIs('members'));
    assert.throws(() => foldDeblurEnsemble(columns, { observerBandwidth: 7, members: [members[0].subarray(1)] }), fieldIs('members[0]'));
    assert.throws(() => foldDeblurEnsemble(columns, { observerBandwidth: 7, members: [members[0].map(() => 54)] }), fieldIs('members[0][0]'));
  });

  test('a live health report from the package encodes (the tiny model, health on)', async () => {
    const file = await FileKnotSource.open(TINY);
    const shim = await HostShim.open(file, {});
    try {
      const out = await shim.generateText(new Uint32Array([1, 2, 3]), { maxTokens: 70, health: true });
      const step = out.steps.length - 1;
      const report = out.steps[step].health;
      assert.ok(report.alpha !== undefined, 'the window filled');
      const blob = parseMeshCarrierAssessmentV1Json(encodeMeshCarrierAssessmentV1Json({ hop: HOP, spectral: { step, report } }));
      assert.deepEqual(blob.spectral.report, report);
      assert.ok(validate(blob), JSON.stringify(validate.errors));
    } finally {
      shim.dispose();
      await file.close();
    }
  });

  // Each malformed blob: a change to the deblur golden, and the field the refusal must name.
  const MALFORMED = [
    ['not JSON', () => '{"schema":', '$'],
    ['another schema', (b) => ({ ...b, schema: 'mesh_carrier_assessment/v2' }), '$.schema'],
    ['an unknown top-level field', (b) => ({ ...b, extra: 1 }), '$.extra'],
    ['no hop', ({ hop: _hop, ...b }) => b, '$.hop'],
    ['a negative hop index', (b) => ({ ...b, hop: { ...b.hop, index: -1 } }), '$.hop.index'],
    ['an empty station', (b) => ({ ...b, hop: { ...b.hop, station: '' } }), '$.hop.station'],
    ['a route that is not a list', (b) => ({ ...b, hop: { ...b.hop, to: 'rows-0-1' } }), '$.hop.to'],
    ['zero rows', (b) => ({ ...b, hop: { ...b.hop, rows: 0 } }), '$.hop.rows'],
    ['a health state unknown', (b) => set(b, ['spectral', 'report', 'state'], 'collapsed'), '$.spectral.report.state'],
    ['a colour unknown', (b) => set(b, ['spectral', 'report', 'colour'], 'grey'), '$.spectral.report.colour'],
    ['a non-number entropy', (b) => set(b, ['spectral', 'report', 'entropy'], '0.2'), '$.spectral.report.entropy'],
    ['a face missing', (b) => set(b, ['spectral', 'report', 'faces'], { waste: 0, opportunity: 0, diversity: 0 }), '$.spectral.report.faces.score'],
    ['a valve that is not a boolean', (b) => set(b, ['spectral', 'report', 'actions', 'valve'], 1), '$.spectral.report.actions.valve'],
    ['a sample range upside down', (b) => set(b, ['carrier', 'sampleRange'], [1, 0]), '$.carrier.sampleRange'],
    ['cells that are not the grid\'s', (b) => set(b, ['carrier', 'cells'], 25), '$.carrier.cells'],
    ['readings that do not add up', (b) => set(b, ['carrier', 'observers', 0, 'resolutions'], b.carrier.observers[0].resolutions + 1), '$.carrier.observers[0].evolutions'],
    ['fiber sizes out of order', (b) => set(b, ['carrier', 'observers', 1, 'fiberSizes'], [8, 7]), '$.carrier.observers[1].fiberSizes[1]'],
    ['a zero observer bandwidth', (b) => set(b, ['carrier', 'observers', 0, 'observerBandwidth'], 0), '$.carrier.observers[0].observerBandwidth'],
    ['a fold of another carrier', (b) => set(b, ['carrier', 'carrierBandwidth'], 60), '$.deblur.carrierBandwidth'],
    ['a fiber that is not one', (b) => set(b, ['deblur', 'patches', 0, 'fiberSize'], 2), '$.deblur.patches[0].fiberStart'],
    ['a state outside its fiber', (b) => set(b, ['deblur', 'patches', 0, 'states'], [40]), '$.deblur.patches[0].states[0]'],
    ['a verdict its states deny', (b) => set(b, ['deblur', 'patches', 0, 'verdict'], b.deblur.patches[0].verdict === 'resolved' ? 'ambiguous' : 'resolved'), '$.deblur.patches[0].verdict'],
    ['verdict counts that do not add up', (b) => set(b, ['deblur', 'verdicts', 'resolved'], b.deblur.verdicts.resolved + 1), '$.deblur.verdicts.resolved'],
    ['patches out of order', (b) => set(b, ['deblur', 'patches', 1, 'cell'], 0), '$.deblur.patches[1].cell'],
    ['too many members', (b) => set(b, ['deblur', 'members'], 65), '$.deblur.members'],
  ];

  for (const [what, change, field] of MALFORMED) {
    test(`refuses ${what}, naming ${field}`, () => {
      const original = JSON.parse(golden('hop-deblur.json'));
      const changed = change(structuredClone(original));
      const text = typeof changed === 'string' ? changed : JSON.stringify(changed);
      assert.throws(() => parseMeshCarrierAssessmentV1Json(text), fieldIs(field));
      // A changed fold cannot be merged in either.
      if (typeof changed !== 'string' && JSON.stringify(changed.deblur) !== JSON.stringify(original.deblur)) {
        assert.throws(() => mergeDeblurFoldIntoMeshCarrierJson(plain, changed.deblur), fieldIs(field));
      }
    });
  }

  test('the schema refuses the malformed blobs JSON Schema can see', () => {
    // What the schema cannot express (sums, fibers, verdict rules) only the package checks.
    const structural = MALFORMED.filter(([, , field]) => field !== '$'
      && !/cells|evolutions|fiberSizes\[|fiberStart|deblur\.carrierBandwidth|states\[|verdict$|verdicts\.|patches\[1\]|sampleRange$/.test(field));
    assert.ok(structural.length >= 12);
    for (const [what, change] of structural) {
      const changed = change(JSON.parse(golden('hop-deblur.json')));
      assert.equal(validate(changed), false, what);
    }
  });
});

/** A copy of `blob` with the value at `path` replaced. */
function set(blob, path, value) {
  const copy = structuredClone(blob);
  let at = copy;
  for (const k of path.slice(0, -1)) at = at[k];
  at[path.at(-1)] = value;
  return copy;
}

const fieldIs = (field) => (e) => {
  assert.ok(e instanceof MeshCarrierAssessmentError, String(e));
  assert.equal(e.field, field, e.message);
  assert.equal(e.code, 'invalid_argument');
  return true;
};
