// What every entry point exports; the entries add how the wasm gets loaded.
export { BufferKnotSource } from './buffer.js';
export { HttpKnotSource } from './http.js';
export { HostShim, DRAFT_MODE_UNSUPPORTED } from './shim.js';
export { coltraneFromResponseFormat, createMoaAgents, deficitWeightedMerge } from './helpers.js';
