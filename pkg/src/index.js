// What every entry point exports; the entries add how the wasm gets loaded.
export { BufferKnotSource } from './buffer.js';
export { CachedKnotSource } from './cache.js';
export { HttpKnotSource } from './http.js';
export { HostShim } from './shim.js';
export { QueueFull, QueueTimeout, Scheduler } from './scheduler.js';
export { coltraneFromResponseFormat, createMoaAgents, deficitWeightedMerge, planStations, schemaProblem } from './helpers.js';
export { ERROR_STATUS, errorStatus } from './errors.js';
export { convertGguf } from './convert-gguf.js';
export { MAX_MESH_GRID_VERTICES, buildAlphaBoundaryWallIndices, buildStatelessMeshGrid } from './mesh.js';
export {
  MAX_DEBLUR_MEMBERS, MAX_DEBLUR_PATCHES, MESH_CARRIER_ASSESSMENT_V1, MeshCarrierAssessmentError,
  attachDeblurEnsembleToMeshCarrierAssessmentJson, carrierReadingOf, encodeMeshCarrierAssessmentV1Json,
  foldDeblurEnsemble, mergeDeblurFoldIntoMeshCarrierJson, parseMeshCarrierAssessmentV1Json,
} from './mesh-carrier.js';
