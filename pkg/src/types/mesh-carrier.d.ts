// mesh_carrier_assessment/v1 (docs/mesh-carrier.md; schema: knot-wasm/schema/mesh_carrier_assessment.v1.json):
// the JSON a station attaches to each hop. Pure JavaScript; carrierReadingOf and the deblur
// fold take an ImageCarrierPipeline's columnar result.
import type { ImageCarrierColumns } from './carrier.js';
import type { HealthStepReport } from './reports.js';

export declare const MESH_CARRIER_ASSESSMENT_V1: 'mesh_carrier_assessment/v1';
/** The most patches a deblur fold lists. */
export declare const MAX_DEBLUR_PATCHES: number;
/** The most members a deblur ensemble may have. */
export declare const MAX_DEBLUR_MEMBERS: number;

/** A malformed blob or part: `field` is the JSON path of the first field that is wrong. */
export declare class MeshCarrierAssessmentError extends TypeError {
  readonly code: 'invalid_argument';
  readonly field: string;
}

export interface MeshCarrierHop {
  /** The hop's place on the route: 0 for the first station. */
  index: number;
  /** The station that attached the blob. */
  station: string;
  /** Where its output went (the next layer station, the head shards, or nothing). */
  to: string[];
  /** Position of the first row carried; null for a bundle of several conversations. */
  position: number | null;
  rows: number;
  /** Bytes of the message that crossed. */
  bytes: number;
}

export interface MeshCarrierSpectral {
  /** The generation step the report is of. */
  step: number;
  report: HealthStepReport & { us?: number };
}

export interface MeshCarrierObserverReading {
  observerBandwidth: number;
  resolutions: number;
  evolutions: number;
  meanCopyIndex: number;
  /** The fiber sizes the cells met, ascending. */
  fiberSizes: number[];
  /** Cells whose copy index this observer could represent (fiberSize <= observerBandwidth). */
  representable: number;
}

export interface MeshCarrierReading {
  carrierBandwidth: number;
  patchSize: number;
  sampleRange: [number, number];
  width: number;
  height: number;
  channels: number;
  cells: number;
  observers: MeshCarrierObserverReading[];
}

export type DeblurVerdict = 'resolved' | 'ambiguous' | 'contradicted';

export interface DeblurPatch {
  cell: number;
  /** The fiber of the patch's low-band reading: every high-band state compatible with it. */
  fiberStart: number;
  fiberSize: number;
  /** The distinct states the members proposed inside the fiber, ascending. */
  states: number[];
  /** Proposals outside the fiber. */
  outside: number;
  verdict: DeblurVerdict;
}

export interface DeblurFold {
  carrierBandwidth: number;
  observerBandwidth: number;
  members: number;
  verdicts: Record<DeblurVerdict, number>;
  patches: DeblurPatch[];
}

export interface MeshCarrierAssessmentV1 {
  schema: 'mesh_carrier_assessment/v1';
  hop: MeshCarrierHop;
  spectral: MeshCarrierSpectral | null;
  carrier: MeshCarrierReading | null;
  deblur: DeblurFold | null;
}

export interface DeblurEnsemble {
  /** One of the reading's observers: the low band the image crossed at. */
  observerBandwidth: number;
  /** Per member, a proposed source position for every cell (e.g. another analysis' sourcePositions). */
  members: ArrayLike<number>[];
}

export declare function carrierReadingOf(columns: ImageCarrierColumns, options: { sampleRange: [number, number] }): MeshCarrierReading;
export declare function foldDeblurEnsemble(columns: ImageCarrierColumns, ensemble: DeblurEnsemble): DeblurFold;
export declare function encodeMeshCarrierAssessmentV1Json(parts: {
  hop: MeshCarrierHop;
  spectral?: MeshCarrierSpectral | null;
  carrier?: MeshCarrierReading | null;
  deblur?: DeblurFold | null;
}): string;
export declare function parseMeshCarrierAssessmentV1Json(json: string): MeshCarrierAssessmentV1;
/** The blob with its deblur part set to `fold`; spectral and carrier parts carried byte for byte. */
export declare function mergeDeblurFoldIntoMeshCarrierJson(json: string, fold: DeblurFold): string;
/** foldDeblurEnsemble over `columns` (the reading the blob describes), merged into the blob. */
export declare function attachDeblurEnsembleToMeshCarrierAssessmentJson(json: string, columns: ImageCarrierColumns, ensemble: DeblurEnsemble): string;
