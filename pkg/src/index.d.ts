// Public TypeScript surface of knot-wasm: one declaration file per area under types/. Every entry
// point exports the same names; FileKnotSource only the Node/Bun/Deno entry, the stations only
// the Workers and Node/Bun/Deno entries.
export * from './types/sources.js';
export * from './types/options.js';
export * from './types/reports.js';
export * from './types/host.js';
export * from './types/helpers.js';
export * from './types/carrier.js';
export * from './types/mesh.js';
export * from './types/mesh-carrier.js';
export * from './types/errors.js';
export * from './types/convert.js';
export type { Backend } from './types/openai.js';

// Workers and Node/Bun/Deno entries: the stations of a model split across Durable Objects (or
// processes), and the coordinator that drives them (see examples/worker, stations mode).
export {
  WasmLayerStation,
  WasmHeadStation,
  WasmCoordinator,
} from '../dist/wasm/host.js';
/** Bytes of this isolate's wasm memory, its high-water mark (Workers and Node/Bun/Deno entries). */
export declare function wasmMemoryBytes(): number;
