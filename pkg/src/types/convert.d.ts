import type { KnotByteSource } from './sources.js';

/** Where `convertGguf` writes the knot bytes, in order. */
export interface KnotSink {
  /** Called with each chunk in file order; a returned promise is awaited before the next write. */
  write(bytes: Uint8Array): unknown;
  /** Called once after the last write (not after a failure). */
  close(): unknown;
}

export interface ConvertOptions {
  /** Called with (tensor bytes written, tensor bytes in all) as tensors are written. */
  onProgress?: (done: number, total: number) => void;
  /** As `knot convert --dtype`: keep (the default), f32, f16, q8_0, q4_0, q4_k. */
  dtype?: 'keep' | 'f32' | 'f16' | 'q8_0' | 'q4_0' | 'q4_k';
  /** The model's name in the knot metadata (default: the GGUF's `general.name`). */
  name?: string;
  /** The name when the GGUF has none (`convertGgufFile` passes the input's file stem). */
  fallbackName?: string;
  /** An initialized wasm-bindgen namespace other than the package's own. */
  wasm?: object;
}

/** What a conversion wrote. */
export interface ConvertSummary {
  name: string;
  architecture: string;
  nLayers: number;
  nTensors: number;
  /** Tensors whose dtype changed. */
  convertedTensors: number;
  /** Bytes of the knot file. */
  fileLen: number;
}

/**
 * Converts a GGUF into a knot file, byte for byte what `knot convert` writes: reads the GGUF's
 * header and metadata, then each tensor once (at most one tensor is held at a time), writing
 * the knot bytes to `sink` in order, then closes it. The source's `size` must be known. Fails
 * with `invalid_model` for a GGUF that is not valid or not supported, `invalid_option` for a bad
 * `dtype`, `read_failed` when the source fails.
 */
export declare function convertGguf(
  source: KnotByteSource,
  sink: KnotSink,
  options?: ConvertOptions,
): Promise<ConvertSummary>;

/**
 * Node, Bun and Deno only: converts the GGUF file at `ggufPath` into `knotPath`, writing a
 * temporary file beside it and renaming it into place when complete.
 */
export declare function convertGgufFile(
  ggufPath: string,
  knotPath: string,
  options?: Omit<ConvertOptions, 'fallbackName'>,
): Promise<ConvertSummary>;
