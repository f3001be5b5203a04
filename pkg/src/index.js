// What every entry point exports; the entries add how the wasm gets loaded.
export { BufferKnotSource } from './buffer.js';
export { CachedKnotSource } from './cache.js';
export { HttpKnotSource } from './http.js';
export { HostShim } from './shim.js';
export { coltraneFromResponseFormat, createMoaAgents, deficitWeightedMerge } from './helpers.js';
