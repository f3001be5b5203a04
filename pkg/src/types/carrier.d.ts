// Carrier medium (docs/carrier.md): quantization readings with fiber and copy-index witnesses.
// Not a learned model; it reconstructs no pixels. Node, Bun, Deno and Workers initialize the wasm
// on import; in browsers `await loadWasm()` before constructing a pipeline.

export type CarrierReadingKind = 'resolution' | 'evolution';

export interface CarrierReading {
  observerBandwidth: number;
  /** `resolution`: the observer holds the value exactly; `evolution`: its carrier must gain symbols. */
  reading: CarrierReadingKind;
  observerPosition: number;
  copyIndex: number;
  fiberStart: number;
  fiberSize: number;
  /** Whether the copy index fits the observer's bandwidth (fiberSize <= observerBandwidth). */
  copyIndexRepresentable: boolean;
}

export interface CarrierCell {
  id: string;
  /** In [0, 1]. */
  unitValue: number;
}

export interface CarrierCellAnalysis extends CarrierCell {
  sourcePosition: number;
  readings: CarrierReading[];
}

export interface CarrierMediumAnalysis {
  sourceBandwidth: number;
  observerBandwidths: number[];
  cells: CarrierCellAnalysis[];
}

export interface FiberStates {
  observerBandwidth: number;
  observerPosition: number;
  fiberStart: number;
  fiberSize: number;
  /** Source positions compatible with the observation (listed for fibers up to 2^20). */
  positions: number[];
  /** Their representative unit values k / S. */
  unitValues: number[];
  /** [lo, hi): every unit value compatible with the observation. */
  interval: [number, number];
}

export declare class CarrierMediumPipeline {
  constructor(options: { sourceBandwidth: number; observerBandwidths: number[] });
  analyze(input: { cells: CarrierCell[] }): CarrierMediumAnalysis;
  fiberStates(reading: CarrierReading): FiberStates;
  free(): void;
}

export type SampleRange = 'unit' | 'byte' | [number, number];

export interface CarrierImage {
  width: number;
  height: number;
  channels: number;
  sampleRange: SampleRange;
  /** Row-major, channels interleaved; length = width * height * channels. */
  data: Float32Array | Uint8Array | Uint8ClampedArray;
}

export interface CarrierPatch {
  id: string;
  patchIndex: number;
  x: number;
  y: number;
  width: number;
  height: number;
  channel: number;
  /** Cut by the right or bottom edge. */
  partial: boolean;
  unitValue: number;
  sourcePosition: number;
  readings: CarrierReading[];
}

export interface ImageCarrierAnalysis {
  carrierBandwidth: number;
  observerBandwidths: number[];
  patches: CarrierPatch[];
  [grid: string]: unknown;
}

/** Cell i = patch * channels + channel; per-observer columns are laid out [observer][cell]. */
export interface ImageCarrierColumns {
  cellCount: number;
  carrierBandwidth: number;
  observerBandwidths: Uint32Array;
  grid: unknown;
  sourcePositions: Uint32Array;
  observerPositions: Uint32Array;
  copyIndices: Uint32Array;
  /** 1 = resolution, 0 = evolution. */
  readings: Uint8Array;
}

export declare class ImageCarrierPipeline {
  constructor(options: { carrierBandwidth: number; observerBandwidths: number[]; patchSize: number });
  analyze(image: CarrierImage): ImageCarrierAnalysis;
  analyzeColumnar(image: CarrierImage): ImageCarrierColumns;
  free(): void;
}

// Workers entry only (`workerd` condition): the stations of a model split across Durable
// Objects, and the coordinator that drives them (see examples/worker, stations mode).
