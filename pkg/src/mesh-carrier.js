// mesh_carrier_assessment/v1: the JSON a station attaches to each hop of a model split across
// stations (docs/mesh-carrier.md; the schema is schema/mesh_carrier_assessment.v1.json). One
// blob says, for one hop: which hop it was, how the generation was doing at that step (the
// decode-health monitor's report, docs/health.md — the "spectral" part), what the carrier medium
// reads of what crossed the hop (docs/carrier.md), and optionally a deblur fold: for each patch,
// the high-band states an ensemble proposed that are compatible with the patch's low-band
// reading, and a three-way verdict.
//
// The blob is written in one canonical form (keys in the schema's order, nothing else), so a
// coordinator can fold deblur diagnostics onto a serialized assessment (merge / attach below)
// and the spectral part comes out byte for byte as it went in: it is carried, never recomputed.
// Every reader checks the whole blob; a malformed one is refused with the JSON path of the
// first field that is wrong (`err.field`).
import { coded } from './errors.js';

export const MESH_CARRIER_ASSESSMENT_V1 = 'mesh_carrier_assessment/v1';

/** The most patches a deblur fold lists (a 2048 × 2048 image at patch size 8). */
export const MAX_DEBLUR_PATCHES = 1 << 16;

/** The most members a deblur ensemble may have. */
export const MAX_DEBLUR_MEMBERS = 64;

const HEALTH_STATES = ['normal', 'pre-collapse', 'boundary-collapse'];
const COLOURS = ['violet', 'blue', 'white', 'pink', 'brown'];
const VERDICTS = ['resolved', 'ambiguous', 'contradicted'];
const U32_MAX = 2 ** 32 - 1;

/** A blob or a part of one that is not what mesh_carrier_assessment/v1 says; `field` is its JSON path. */
export class MeshCarrierAssessmentError extends TypeError {
  /**
   * @param {string} field
   * @param {string} message
   */
  constructor(field, message) {
    super(`mesh_carrier_assessment/v1: ${field} ${message}`);
    this.name = 'MeshCarrierAssessmentError';
    this.code = 'invalid_argument';
    this.field = field;
  }
}

// --- field checks: each returns the value (copied into canonical order) or throws naming the path.

const fail = (field, message) => { throw new MeshCarrierAssessmentError(field, message); };
const show = (v) => (typeof v === 'string' ? JSON.stringify(v) : String(v));

function object(v, field) {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) fail(field, `must be an object, got ${Array.isArray(v) ? 'an array' : show(v)}`);
  return v;
}

/** `v` must have exactly the keys `required` (plus any of `optional`). */
function keys(v, field, required, optional = []) {
  object(v, field);
  for (const k of required) if (!Object.hasOwn(v, k)) fail(`${field}.${k}`, 'is missing');
  for (const k of Object.keys(v)) if (!required.includes(k) && !optional.includes(k)) fail(`${field}.${k}`, 'is not a field of this object');
  return v;
}

function uint(v, field, min = 0, max = U32_MAX) {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    fail(field, `must be a whole number in ${min}..${max}, got ${show(v)}`);
  }
  return v;
}

function finite(v, field) {
  if (typeof v !== 'number' || !Number.isFinite(v)) fail(field, `must be a finite number, got ${show(v)}`);
  return v;
}

function oneOf(v, field, allowed) {
  if (!allowed.includes(v)) fail(field, `must be one of ${allowed.join(', ')}, got ${show(v)}`);
  return v;
}

function text(v, field) {
  if (typeof v !== 'string' || v.length === 0) fail(field, `must be a non-empty string, got ${show(v)}`);
  return v;
}

function list(v, field, max = Infinity) {
  if (!Array.isArray(v)) fail(field, `must be an array, got ${show(v)}`);
  if (v.length > max) fail(field, `has ${v.length} entries, more than ${max}`);
  return v;
}

// --- the parts -----------------------------------------------------------------------------------

function hopPart(v, f) {
  keys(v, f, ['index', 'station', 'to', 'position', 'rows', 'bytes']);
  return {
    index: uint(v.index, `${f}.index`),
    station: text(v.station, `${f}.station`),
    to: list(v.to, `${f}.to`).map((s, i) => text(s, `${f}.to[${i}]`)),
    position: v.position === null ? null : uint(v.position, `${f}.position`),
    rows: uint(v.rows, `${f}.rows`, 1),
    bytes: uint(v.bytes, `${f}.bytes`, 0, Number.MAX_SAFE_INTEGER),
  };
}

function facesPart(v, f) {
  keys(v, f, ['waste', 'opportunity', 'diversity', 'score']);
  return {
    waste: finite(v.waste, `${f}.waste`),
    opportunity: finite(v.opportunity, `${f}.opportunity`),
    diversity: finite(v.diversity, `${f}.diversity`),
    score: finite(v.score, `${f}.score`),
  };
}

/** The decode-health monitor's step report (HealthStepReport in types/reports.d.ts). */
function healthReport(v, f) {
  keys(v, f, ['surprisal', 'entropy', 'margin', 'entropySlope', 'repetition', 'repetitionTrend', 'state', 'faces', 'actions'],
    ['alpha', 'colour', 'loopPeriod', 'us']);
  const out = {
    surprisal: finite(v.surprisal, `${f}.surprisal`),
    entropy: finite(v.entropy, `${f}.entropy`),
    margin: finite(v.margin, `${f}.margin`),
  };
  if (v.alpha !== undefined) {
    keys(v.alpha, `${f}.alpha`, ['surprisal', 'entropy', 'margin']);
    out.alpha = {
      surprisal: finite(v.alpha.surprisal, `${f}.alpha.surprisal`),
      entropy: finite(v.alpha.entropy, `${f}.alpha.entropy`),
      margin: finite(v.alpha.margin, `${f}.alpha.margin`),
    };
  }
  if (v.colour !== undefined) out.colour = oneOf(v.colour, `${f}.colour`, COLOURS);
  out.entropySlope = finite(v.entropySlope, `${f}.entropySlope`);
  out.repetition = finite(v.repetition, `${f}.repetition`);
  out.repetitionTrend = finite(v.repetitionTrend, `${f}.repetitionTrend`);
  if (v.loopPeriod !== undefined) out.loopPeriod = uint(v.loopPeriod, `${f}.loopPeriod`, 1);
  out.state = oneOf(v.state, `${f}.state`, HEALTH_STATES);
  out.faces = facesPart(v.faces, `${f}.faces`);
  keys(v.actions, `${f}.actions`, ['eddyBans', 'valve']);
  if (typeof v.actions.valve !== 'boolean') fail(`${f}.actions.valve`, `must be true or false, got ${show(v.actions.valve)}`);
  out.actions = { eddyBans: uint(v.actions.eddyBans, `${f}.actions.eddyBans`), valve: v.actions.valve };
  // The monitor's own time this step, µs (absent where no clock was given).
  if (v.us !== undefined) {
    out.us = finite(v.us, `${f}.us`);
    if (out.us < 0) fail(`${f}.us`, `must be >= 0, got ${out.us}`);
  }
  return out;
}

function spectralPart(v, f) {
  keys(v, f, ['step', 'report']);
  return { step: uint(v.step, `${f}.step`), report: healthReport(v.report, `${f}.report`) };
}

function carrierPart(v, f) {
  keys(v, f, ['carrierBandwidth', 'patchSize', 'sampleRange', 'width', 'height', 'channels', 'cells', 'observers']);
  const range = list(v.sampleRange, `${f}.sampleRange`);
  if (range.length !== 2) fail(`${f}.sampleRange`, `must be [lo, hi], got ${range.length} numbers`);
  const lo = finite(range[0], `${f}.sampleRange[0]`);
  const hi = finite(range[1], `${f}.sampleRange[1]`);
  if (!(lo < hi)) fail(`${f}.sampleRange`, `must have lo < hi, got [${lo}, ${hi}]`);
  const out = {
    carrierBandwidth: uint(v.carrierBandwidth, `${f}.carrierBandwidth`, 1),
    patchSize: uint(v.patchSize, `${f}.patchSize`, 1),
    sampleRange: [lo, hi],
    width: uint(v.width, `${f}.width`, 1),
    height: uint(v.height, `${f}.height`, 1),
    channels: uint(v.channels, `${f}.channels`, 1),
    cells: uint(v.cells, `${f}.cells`),
    observers: [],
  };
  const patches = Math.ceil(out.width / out.patchSize) * Math.ceil(out.height / out.patchSize);
  if (out.cells !== patches * out.channels) {
    fail(`${f}.cells`, `must be ${patches * out.channels} for a ${out.width}×${out.height}×${out.channels} image at patch ${out.patchSize}, got ${out.cells}`);
  }
  out.observers = list(v.observers, `${f}.observers`, 256).map((o, i) => observerPart(o, `${f}.observers[${i}]`, out.cells));
  if (out.observers.length === 0) fail(`${f}.observers`, 'must list at least one observer');
  return out;
}

function observerPart(v, f, cells) {
  keys(v, f, ['observerBandwidth', 'resolutions', 'evolutions', 'meanCopyIndex', 'fiberSizes', 'representable']);
  const out = {
    observerBandwidth: uint(v.observerBandwidth, `${f}.observerBandwidth`, 1),
    resolutions: uint(v.resolutions, `${f}.resolutions`),
    evolutions: uint(v.evolutions, `${f}.evolutions`),
    meanCopyIndex: finite(v.meanCopyIndex, `${f}.meanCopyIndex`),
    fiberSizes: list(v.fiberSizes, `${f}.fiberSizes`, 64).map((s, i) => uint(s, `${f}.fiberSizes[${i}]`, 1)),
    representable: uint(v.representable, `${f}.representable`),
  };
  if (out.resolutions + out.evolutions !== cells) {
    fail(`${f}.evolutions`, `resolutions + evolutions must be the ${cells} cells, got ${out.resolutions} + ${out.evolutions}`);
  }
  if (out.representable > cells) fail(`${f}.representable`, `must be at most the ${cells} cells, got ${out.representable}`);
  if (out.meanCopyIndex < 0) fail(`${f}.meanCopyIndex`, `must be >= 0, got ${out.meanCopyIndex}`);
  increasing(out.fiberSizes, `${f}.fiberSizes`);
  return out;
}

function increasing(values, f) {
  for (let i = 1; i < values.length; i++) {
    if (values[i] <= values[i - 1]) fail(`${f}[${i}]`, `must be larger than the one before (sorted, distinct), got ${values[i]} after ${values[i - 1]}`);
  }
}

/** The verdict of a patch: any proposal outside the fiber contradicts the reading; else one state resolves it. */
const verdictOf = (outside, states) => (outside > 0 ? 'contradicted' : states === 1 ? 'resolved' : 'ambiguous');

function deblurPart(v, f) {
  keys(v, f, ['carrierBandwidth', 'observerBandwidth', 'members', 'verdicts', 'patches']);
  const out = {
    carrierBandwidth: uint(v.carrierBandwidth, `${f}.carrierBandwidth`, 1),
    observerBandwidth: uint(v.observerBandwidth, `${f}.observerBandwidth`, 1),
    members: uint(v.members, `${f}.members`, 1, MAX_DEBLUR_MEMBERS),
    verdicts: null,
    patches: [],
  };
  keys(v.verdicts, `${f}.verdicts`, VERDICTS);
  const verdicts = Object.fromEntries(VERDICTS.map((k) => [k, uint(v.verdicts[k], `${f}.verdicts.${k}`)]));
  const counted = { resolved: 0, ambiguous: 0, contradicted: 0 };
  let lastCell = -1;
  out.patches = list(v.patches, `${f}.patches`, MAX_DEBLUR_PATCHES).map((p, i) => {
    const pf = `${f}.patches[${i}]`;
    keys(p, pf, ['cell', 'fiberStart', 'fiberSize', 'states', 'outside', 'verdict']);
    const patch = {
      cell: uint(p.cell, `${pf}.cell`),
      fiberStart: uint(p.fiberStart, `${pf}.fiberStart`, 0, out.carrierBandwidth - 1),
      fiberSize: uint(p.fiberSize, `${pf}.fiberSize`, 1, out.carrierBandwidth),
      states: list(p.states, `${pf}.states`, out.members).map((s, k) => uint(s, `${pf}.states[${k}]`)),
      outside: uint(p.outside, `${pf}.outside`, 0, out.members),
      verdict: oneOf(p.verdict, `${pf}.verdict`, VERDICTS),
    };
    if (patch.cell <= lastCell) fail(`${pf}.cell`, `must be larger than the patch before's (${lastCell})`);
    lastCell = patch.cell;
    if (patch.fiberStart + patch.fiberSize > out.carrierBandwidth) {
      fail(`${pf}.fiberSize`, `runs past the carrier's ${out.carrierBandwidth} positions`);
    }
    const fiber = fiberOf(observerOf(patch.fiberStart, out.observerBandwidth, out.carrierBandwidth), out.observerBandwidth, out.carrierBandwidth);
    if (fiber.start !== patch.fiberStart || fiber.size !== patch.fiberSize) {
      fail(`${pf}.fiberStart`, `is not a fiber of observer bandwidth ${out.observerBandwidth} on ${out.carrierBandwidth} positions`);
    }
    increasing(patch.states, `${pf}.states`);
    patch.states.forEach((s, k) => {
      if (s < patch.fiberStart || s >= patch.fiberStart + patch.fiberSize) fail(`${pf}.states[${k}]`, `must lie in the fiber ${patch.fiberStart}..${patch.fiberStart + patch.fiberSize - 1}, got ${s}`);
    });
    if (patch.states.length + patch.outside === 0) fail(`${pf}.states`, 'is empty while no proposal fell outside the fiber');
    const want = verdictOf(patch.outside, patch.states.length);
    if (patch.verdict !== want) fail(`${pf}.verdict`, `must be ${want} for ${patch.states.length} states and ${patch.outside} outside, got ${patch.verdict}`);
    counted[patch.verdict]++;
    return patch;
  });
  for (const k of VERDICTS) {
    if (verdicts[k] !== counted[k]) fail(`${f}.verdicts.${k}`, `must count the ${counted[k]} patches with that verdict, got ${verdicts[k]}`);
  }
  out.verdicts = verdicts;
  return out;
}

/** The whole blob, checked, in canonical order. */
function assessment(v) {
  keys(v, '$', ['schema', 'hop', 'spectral', 'carrier', 'deblur']);
  if (v.schema !== MESH_CARRIER_ASSESSMENT_V1) fail('$.schema', `must be "${MESH_CARRIER_ASSESSMENT_V1}", got ${show(v.schema)}`);
  const out = {
    schema: MESH_CARRIER_ASSESSMENT_V1,
    hop: hopPart(v.hop, '$.hop'),
    spectral: v.spectral === null ? null : spectralPart(v.spectral, '$.spectral'),
    carrier: v.carrier === null ? null : carrierPart(v.carrier, '$.carrier'),
    deblur: v.deblur === null ? null : deblurPart(v.deblur, '$.deblur'),
  };
  if (out.deblur !== null && out.carrier !== null) {
    if (out.deblur.carrierBandwidth !== out.carrier.carrierBandwidth) {
      fail('$.deblur.carrierBandwidth', `must be the carrier reading's ${out.carrier.carrierBandwidth}, got ${out.deblur.carrierBandwidth}`);
    }
    const last = out.deblur.patches.at(-1);
    if (last !== undefined && last.cell >= out.carrier.cells) fail(`$.deblur.patches[${out.deblur.patches.length - 1}].cell`, `must be below the carrier reading's ${out.carrier.cells} cells, got ${last.cell}`);
  }
  return out;
}

// --- fibers (docs/carrier.md §1), exact for any u32 operands ---------------------------------------

/** ⌊a·b / c⌋ for whole a, b ≥ 0 and c ≥ 1 below 2^32, exact: in doubles while every product is (< 2^53), else BigInt. */
function floorMulDiv(a, b, c) {
  const p = a * b;
  if (p > 2 ** 50) return Number((BigInt(a) * BigInt(b)) / BigInt(c));
  // The rounded quotient is at most one off; q·c and (q + 1)·c stay below 2^53.
  let q = Math.floor(p / c);
  if (q * c > p) q--;
  else if ((q + 1) * c <= p) q++;
  return q;
}

/** ⌈a·b / c⌉, exact as floorMulDiv. */
function ceilMulDiv(a, b, c) {
  if (a * b > 2 ** 50) return Number((BigInt(a) * BigInt(b) + BigInt(c) - 1n) / BigInt(c));
  const q = floorMulDiv(a, b, c);
  return q * c === a * b ? q : q + 1;
}

/** The observer position of source position k: ⌊k·b / S⌋. */
const observerOf = (k, b, s) => floorMulDiv(k, b, s);

/** The fiber of observer position j: source positions ⌈j·S/b⌉ .. ⌈(j+1)·S/b⌉ − 1. */
function fiberOf(j, b, s) {
  const start = ceilMulDiv(j, s, b);
  return { start, size: ceilMulDiv(j + 1, s, b) - start };
}

// --- building the parts ------------------------------------------------------------------------------

/**
 * The carrier part from an ImageCarrierPipeline's columnar result: per observer, how many cells
 * it holds exactly (resolutions) and how many it must evolve for, the mean copy index it loses,
 * the fiber sizes it met, and how many cells' copy index it could itself represent.
 * @param {import('./types/carrier.js').ImageCarrierColumns} columns
 * @param {{ sampleRange: [number, number] }} options the range the image was read in
 */
export function carrierReadingOf(columns, { sampleRange }) {
  const grid = /** @type {any} */ (columns.grid);
  const n = columns.cellCount;
  const s = columns.carrierBandwidth;
  const observers = Array.from(columns.observerBandwidths, (b, o) => {
    let resolutions = 0;
    let copies = 0;
    let representable = 0;
    const sizes = new Set();
    for (let i = 0; i < n; i++) {
      const size = fiberOf(columns.observerPositions[o * n + i], b, s).size;
      sizes.add(size);
      resolutions += columns.readings[o * n + i];
      copies += columns.copyIndices[o * n + i];
      if (size <= b) representable++;
    }
    return {
      observerBandwidth: b,
      resolutions,
      evolutions: n - resolutions,
      meanCopyIndex: n === 0 ? 0 : copies / n,
      fiberSizes: [...sizes].sort((x, y) => x - y),
      representable,
    };
  });
  // Checked once, where it is written into a blob.
  return {
    carrierBandwidth: s,
    patchSize: grid.patchSize,
    sampleRange,
    width: grid.width,
    height: grid.height,
    channels: grid.channels,
    cells: n,
    observers,
  };
}

/**
 * The deblur fold of an ensemble over an image's low-band reading: for each cell, the fiber its
 * reading at `observerBandwidth` allows (the high-band states compatible with it), the distinct
 * states the ensemble's members proposed inside it, how many proposals fell outside, and the
 * verdict — `resolved` (every member inside, all on one state), `ambiguous` (every member
 * inside, on different states), `contradicted` (some member outside: it disagrees with what
 * was read).
 * @param {import('./types/carrier.js').ImageCarrierColumns} columns the transmitted image's reading
 * @param {{ observerBandwidth: number, members: ArrayLike<number>[] }} ensemble each member a
 *   proposed source position per cell (e.g. another analysis' `sourcePositions`)
 */
export function foldDeblurEnsemble(columns, { observerBandwidth, members }) {
  const n = columns.cellCount;
  const s = columns.carrierBandwidth;
  const o = Array.prototype.indexOf.call(columns.observerBandwidths, observerBandwidth);
  if (o < 0) throw new MeshCarrierAssessmentError('observerBandwidth', `${show(observerBandwidth)} is not one of the reading's observers (${Array.from(columns.observerBandwidths).join(', ')})`);
  list(members, 'members', MAX_DEBLUR_MEMBERS);
  if (members.length === 0) fail('members', 'must hold at least one member');
  if (n > MAX_DEBLUR_PATCHES) fail('cells', `a fold lists at most ${MAX_DEBLUR_PATCHES} patches, the reading has ${n}`);
  members.forEach((m, k) => {
    if (m?.length !== n) fail(`members[${k}]`, `must propose one source position for each of the ${n} cells, got ${m?.length ?? show(m)}`);
  });
  const verdicts = { resolved: 0, ambiguous: 0, contradicted: 0 };
  const patches = [];
  for (let i = 0; i < n; i++) {
    const fiber = fiberOf(columns.observerPositions[o * n + i], observerBandwidth, s);
    const states = new Set();
    let outside = 0;
    for (let k = 0; k < members.length; k++) {
      const p = members[k][i];
      if (!Number.isInteger(p) || p < 0 || p >= s) fail(`members[${k}][${i}]`, `must be a source position in 0..${s - 1}, got ${show(p)}`);
      if (p >= fiber.start && p < fiber.start + fiber.size) states.add(p);
      else outside++;
    }
    const verdict = verdictOf(outside, states.size);
    verdicts[verdict]++;
    patches.push({ cell: i, fiberStart: fiber.start, fiberSize: fiber.size, states: [...states].sort((x, y) => x - y), outside, verdict });
  }
  // Checked once, where it is written into a blob.
  return { carrierBandwidth: s, observerBandwidth, members: members.length, verdicts, patches };
}

// --- the blob ------------------------------------------------------------------------------------

/**
 * A mesh_carrier_assessment/v1 blob: `hop` (required), `spectral` ({ step, report } from the
 * health monitor, or null), `carrier` (carrierReadingOf's, or null where nothing readable
 * crossed), `deblur` (foldDeblurEnsemble's, or null). Checked; canonical JSON.
 * @param {{ hop: object, spectral?: object | null, carrier?: object | null, deblur?: object | null }} parts
 * @returns {string}
 */
export function encodeMeshCarrierAssessmentV1Json(parts) {
  object(parts, 'parts');
  const { hop, spectral = null, carrier = null, deblur = null } = parts;
  return JSON.stringify(assessment({ schema: MESH_CARRIER_ASSESSMENT_V1, hop, spectral, carrier, deblur }));
}

/**
 * A blob read back and checked whole. Throws MeshCarrierAssessmentError naming the field.
 * @param {string} json
 */
export function parseMeshCarrierAssessmentV1Json(json) {
  if (typeof json !== 'string') fail('$', `must be a JSON string, got ${typeof json}`);
  let value;
  try {
    value = JSON.parse(json);
  } catch (e) {
    fail('$', `is not JSON: ${/** @type {Error} */ (e).message}`);
  }
  return assessment(value);
}

/**
 * `json` with its deblur part set to `fold` (replacing one it had). The spectral and carrier
 * parts are carried as they are — not recomputed — and come out byte for byte.
 * @param {string} json a mesh_carrier_assessment/v1 blob
 * @param {object} fold foldDeblurEnsemble's result (or a deblur part read from another blob)
 */
export function mergeDeblurFoldIntoMeshCarrierJson(json, fold) {
  const blob = parseMeshCarrierAssessmentV1Json(json);
  return JSON.stringify(assessment({ ...blob, deblur: object(fold, '$.deblur') }));
}

/**
 * Folds an ensemble over the low-band reading of the image the hop carried and attaches the
 * fold to `json` (mergeDeblurFoldIntoMeshCarrierJson). `columns` must be the reading the blob
 * describes: its carrier bandwidth and cell count are checked against the blob's carrier part.
 * @param {string} json
 * @param {import('./types/carrier.js').ImageCarrierColumns} columns
 * @param {{ observerBandwidth: number, members: ArrayLike<number>[] }} ensemble
 */
export function attachDeblurEnsembleToMeshCarrierAssessmentJson(json, columns, ensemble) {
  const blob = parseMeshCarrierAssessmentV1Json(json);
  if (blob.carrier === null) fail('$.carrier', 'is null: the hop carried nothing to fold an ensemble over');
  if (columns?.carrierBandwidth !== blob.carrier.carrierBandwidth || columns?.cellCount !== blob.carrier.cells) {
    fail('$.carrier', `describes ${blob.carrier.cells} cells on ${blob.carrier.carrierBandwidth} positions; the reading given has ${columns?.cellCount} on ${columns?.carrierBandwidth}`);
  }
  if (!blob.carrier.observers.some((o) => o.observerBandwidth === ensemble?.observerBandwidth)) {
    fail('$.carrier.observers', `has no observer of bandwidth ${show(ensemble?.observerBandwidth)}`);
  }
  return JSON.stringify(assessment({ ...blob, deblur: foldDeblurEnsemble(columns, ensemble) }));
}
