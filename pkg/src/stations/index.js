// knot-wasm/stations: a model split across stations. `Coordinator` is the backend the server and
// the OpenAI module run on (as HostShim is); the chain's protocol (chain.js: routes, the head
// shards' answer bundle, traffic) and the hop assessments (assess.js) are both ends' — what a
// station that forwards along a route uses too. How a call reaches a station is the caller's: a
// Worker's Durable Objects (examples/worker), processes, or anything else answering the stations'
// requests. The wasm classes the stations run (WasmLayerStation, WasmHeadStation) come from the
// package entry, which must be imported first: it loads the wasm.
export { Coordinator } from './coordinator.js';
export {
  StationError, addTraffic, bundleAnswers, chainTimeout, chainTraffic, gatherHeads, hopTraffic,
  noTraffic, parseRoute, unbundleAnswers,
} from './chain.js';
export {
  HOP_ASSESSMENT_DEFAULTS, assessHop, assessmentsHeader, assessmentsOf, hiddenStatesOf,
  hopAssessmentSettings, nextAssessHeader, parseAssessHeader,
} from './assess.js';
