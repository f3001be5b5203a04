// Hop assessments (KNOT_HOP_ASSESSMENT): each layer station attaches a mesh_carrier_assessment/v1
// blob (the package's mesh-carrier module, docs/mesh-carrier.md) to every token's hop — the
// health monitor's report of the step that picked the token being carried (handed down by the
// coordinator), and the carrier medium's reading of the hidden states the station sends on:
// how much of them an observer of a narrower wire (8 or 12 bits, say) holds exactly, and what
// it loses. The blobs ride back up the chain in `x-knot-assessments` (each station prepends its
// own), and the coordinator keeps the last step's in `stats().hopAssessments`. Both ends are
// here: the coordinator's header and reading, the station's blob.
//
//   x-knot-assess: { hop: N, spectral: { step, report } | null, settings }  coordinator → stations
//   x-knot-assessments: [blob, ...]                                          stations → coordinator
//
// Off unless the coordinator is given settings: "on" for the defaults below, or JSON
// { carrierBandwidth, observerBandwidths, patchSize }. The settings ride in the header, so the
// stations need no configuration of their own.
import { carrierReadingOf, encodeMeshCarrierAssessmentV1Json, parseMeshCarrierAssessmentV1Json } from '../mesh-carrier.js';
import { initializedWasm } from '../helpers.js';

/**
 * The defaults: the residual stream read on a 16-bit carrier (the precision activations are kept
 * at) by observers of an 8-bit and a 12-bit wire, one cell per 8 values of a row.
 */
export const HOP_ASSESSMENT_DEFAULTS = Object.freeze({ carrierBandwidth: 65536, observerBandwidths: [256, 4096], patchSize: 8 });

/** The most blobs a chain answer may carry back (one per layer station). */
const MAX_BLOBS = 64;

/**
 * A setting's text (`on`, `off`, or JSON settings) as the settings, or null when it is off. A
 * bad value throws naming the setting (`name`).
 * @param {string | undefined} value
 * @param {string} [name]
 */
export function hopAssessmentSettings(value, name = 'hopAssessment') {
  if (value === undefined || value === '' || value === 'off' || value === '0') return null;
  if (value === 'on' || value === '1') return HOP_ASSESSMENT_DEFAULTS;
  let s;
  try {
    s = JSON.parse(value);
  } catch (e) {
    throw new Error(`${name} must be on, off or JSON { carrierBandwidth, observerBandwidths, patchSize }: ${e.message}`);
  }
  const settings = { ...HOP_ASSESSMENT_DEFAULTS, ...s };
  // The pipeline checks the values themselves; this refuses them at open rather than per step.
  try {
    new (initializedWasm().ImageCarrierPipeline)(settings).free();
  } catch (e) {
    throw new Error(`${name}: ${e.message}`);
  }
  return settings;
}

/**
 * The x-knot-assess header, checked (a bad one is the caller's error: 400), or null when absent.
 * @param {string | null} header
 */
export function parseAssessHeader(header) {
  if (header === null || header === '') return null;
  const bad = (why) => Object.assign(new Error(`x-knot-assess: ${why}`), { status: 400 });
  let a;
  try {
    a = JSON.parse(header);
  } catch (e) {
    throw bad(`not JSON (${e.message})`);
  }
  if (a === null || typeof a !== 'object' || !Number.isSafeInteger(a.hop) || a.hop < 0 || a.hop >= MAX_BLOBS
    || a.settings === null || typeof a.settings !== 'object') {
    throw bad(`must be { hop: 0..${MAX_BLOBS - 1}, spectral, settings }, got ${header.slice(0, 200)}`);
  }
  const { carrierBandwidth, observerBandwidths, patchSize } = a.settings;
  return { hop: a.hop, spectral: a.spectral ?? null, settings: { carrierBandwidth, observerBandwidths, patchSize } };
}

/** The header the next station gets: the same, one hop on. */
export const nextAssessHeader = (assess) => JSON.stringify({ ...assess, hop: assess.hop + 1 });

/**
 * The blobs a chain answer carried back (`x-knot-assessments`), each checked; none when absent.
 * The coordinator reads them here; the stations on the way pass them on as they came.
 * @param {string | null} text the header
 */
export function assessmentsOf(text) {
  if (text === null) return [];
  const list = JSON.parse(text);
  if (!Array.isArray(list) || list.length > MAX_BLOBS) throw new Error(`x-knot-assessments must list at most ${MAX_BLOBS} blobs`);
  // Each is re-read whole: a station of another build answering wrongly fails here, by field.
  return list.map((b) => parseMeshCarrierAssessmentV1Json(JSON.stringify(b)));
}

// --- the hidden states of a step's output (crates/host/src/station/wire.rs, bundle.rs) ----------

const text4 = (b, at) => String.fromCharCode(b[at], b[at + 1], b[at + 2], b[at + 3]);

/** An IEEE half as a number. */
function half(h) {
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  const sign = h & 0x8000 ? -1 : 1;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m === 0 ? sign * Infinity : NaN;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** The rows of one KNHS message at `at`: { position, rows, dim, values }. */
function knhs(bytes, view, at) {
  const f16 = bytes[at + 5] === 1;
  const position = view.getUint32(at + 16, true);
  const rows = view.getUint32(at + 20, true);
  const dim = view.getUint32(at + 24, true);
  const values = new Float32Array(rows * dim);
  for (let i = 0; i < values.length; i++) {
    values[i] = f16 ? half(view.getUint16(at + 28 + 2 * i, true)) : view.getFloat32(at + 28 + 4 * i, true);
  }
  return { position, rows, dim, values };
}

/**
 * The hidden states of a layer station's output (a KNHS message, or a KNHM bundle of several
 * conversations' — then their rows stacked and no single position). The station produced it
 * itself, checksums and all; anything else is not read (null).
 * @param {Uint8Array} bytes
 */
export function hiddenStatesOf(bytes) {
  if (bytes.byteLength < 32) return null;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const magic = text4(bytes, 0);
  if (magic === 'KNHS') return knhs(bytes, view, 0);
  if (magic !== 'KNHM') return null;
  const parts = view.getUint32(8, true);
  const each = [];
  let at = 12;
  for (let p = 0; p < parts; p++) {
    const len = view.getUint32(at + 1, true);
    // A part whose pick takes the head shards' level sums starts with what it asks of them
    // (flag bit 2, crates/host/src/station/bundle.rs): the temperature, n watched ids, r ranges.
    let start = at + 5;
    if (bytes[at] & 4) {
      const n = view.getUint32(start + 4, true);
      start += 12 + 4 * n + 8 * view.getUint32(start + 8 + 4 * n, true);
    }
    each.push(knhs(bytes, view, start));
    at += 5 + len;
  }
  const dim = each[0].dim;
  const values = new Float32Array(each.reduce((n, e) => n + e.values.length, 0));
  let o = 0;
  for (const e of each) {
    values.set(e.values, o);
    o += e.values.length;
  }
  return { position: parts === 1 ? each[0].position : null, rows: values.length / dim, dim, values };
}

// --- the blob ------------------------------------------------------------------------------------

let pipeline = null;
let pipelineKey = '';

/**
 * The carrier reading of hidden states as an image (one row per position, one channel, its own
 * value range), or null when it has no range to read on (every value equal, or one not finite).
 */
function carrierOf(hidden, settings) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of hidden.values) {
    if (!Number.isFinite(v)) return null;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (!(lo < hi)) return null;
  const key = JSON.stringify(settings);
  if (pipeline === null || pipelineKey !== key) {
    pipeline?.free();
    pipeline = new (initializedWasm().ImageCarrierPipeline)(settings);
    pipelineKey = key;
  }
  const sampleRange = /** @type {[number, number]} */ ([lo, hi]);
  const columns = pipeline.analyzeColumnar({ width: hidden.dim, height: hidden.rows, channels: 1, sampleRange, data: hidden.values });
  return carrierReadingOf(columns, { sampleRange });
}

/**
 * This station's blob for the hop its output `out` takes (its JSON text).
 * @param {{ hop: number, spectral: object | null, settings: object }} assess the header's
 * @param {string} station this station's name
 * @param {string[]} to where `out` goes
 * @param {Uint8Array} out
 */
export function assessHop(assess, station, to, out) {
  const hidden = hiddenStatesOf(out);
  return encodeMeshCarrierAssessmentV1Json({
    hop: { index: assess.hop, station, to, position: hidden?.position ?? null, rows: hidden?.rows ?? 1, bytes: out.byteLength },
    spectral: assess.spectral,
    carrier: hidden === null ? null : carrierOf(hidden, assess.settings),
  });
}

/**
 * The x-knot-assessments header a station answers with: its own blob, then those of the stations
 * behind it (the header's text as it came, a JSON array of one or more).
 * @param {string} own
 * @param {string | null} behind
 */
export const assessmentsHeader = (own, behind) => (behind === null ? `[${own}]` : `[${own},${behind.slice(1)}`);
