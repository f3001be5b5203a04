// Pure helpers, usable without a model: MOA's agents and fold (crates/moa), COLTRANE's
// response_format mapping (crates/coltrane) and the stations a model needs for a memory budget
// (crates/host/src/station/plan.rs), the same Rust code the decode loop runs, reached through
// the package's wasm. Node, Bun, Deno and Workers initialize the wasm on import; in
// browsers `await loadWasm()` first.
import { optionsJson, toJson } from './convert.js';
import { coded } from './errors.js';

/** @type {any} the initialized wasm-bindgen namespace */
let bindings;

/**
 * Called by each entry point once its wasm is initialized.
 * @param {object} ns
 */
export function setHelperBindings(ns) {
  bindings = ns;
}

/**
 * The entry point's initialized wasm-bindgen namespace (the stations' hop assessments build its
 * synchronous classes too).
 * @returns {any}
 */
export function initializedWasm() {
  if (bindings === undefined) {
    throw coded('internal', 'knot-wasm: the wasm is not initialized yet; await loadWasm() first', Error);
  }
  return bindings;
}

/**
 * The agents' temperatures: agent i of k runs at max(minTemperature, baseTemperature +
 * temperatureSpread · (i/(k−1) − ½)). Defaults k 3, base 0.7, spread 0.4, min 0.01.
 * @param {{ k?: number, baseTemperature?: number, temperatureSpread?: number, minTemperature?: number }} [options]
 * @returns {number[]}
 */
export function createMoaAgents(options = {}) {
  return Array.from(initializedWasm().moaAgents(optionsJson(options, 'createMoaAgents: options')));
}

/**
 * Folds distributions into one: deficit-weighted (the one farthest from the mean weighs most;
 * `useKl` measures that distance by KL instead of L2) or uniform. Distributions holding NaN or
 * ±Infinity are raced out (weight 0); the rest are scaled to sum 1 first.
 * @param {number[][]} dists
 * @param {{ strategy?: 'deficit' | 'uniform', useKl?: boolean }} [options]
 * @returns {{ merged: number[], weights: number[], deficit: number }}
 */
export function deficitWeightedMerge(dists, options = {}) {
  optionsJson(options, 'deficitWeightedMerge: options');
  return initializedWasm().moaMerge(optionsJson({ ...options, dists }));
}

/**
 * The `coltrane` generation option for an OpenAI `response_format`: `{ type: 'json_object' }`
 * gives `{ preset: 'json' }`, `{ type: 'json_schema', json_schema: { schema } }` gives
 * `{ preset: 'json', schema }`, `{ type: 'text' }` gives null. The schema is checked when
 * generation starts.
 * @param {object} responseFormat
 * @returns {{ preset: 'json', schema?: object } | null}
 */
export function coltraneFromResponseFormat(responseFormat) {
  return initializedWasm().coltraneFromResponseFormat(toJson(responseFormat));
}

/**
 * Why COLTRANE cannot enforce a JSON Schema — the keyword and its path, as the 422 would say —
 * or null when it can.
 * @param {object} schema
 * @returns {string | null}
 */
export function schemaProblem(schema) {
  return initializedWasm().schemaProblem(JSON.stringify(schema)) ?? null;
}

/**
 * The fewest layer and head stations a model needs so that every isolate (each station and the
 * coordinator) fits `memoryBudget` bytes, read from the knot file's index alone (two small
 * reads of `source`). Defaults are the stations' own: `maxContext` 2048, `kvCache` 'f32',
 * `maxBatch` 64, `maxConversations` 4, `maxReadBytes` 4 MiB. Rejects with code `over_budget`
 * when no split fits (the message says which part is over).
 * @param {import('./types/sources.js').KnotByteSource} source
 * @param {{ memoryBudget: number, maxContext?: number, kvCache?: 'f32' | 'f16', maxBatch?: number,
 *   maxConversations?: number, maxReadBytes?: number }} options
 * @returns {Promise<import('./types/helpers.js').StationLayout>}
 */
export async function planStations(source, options) {
  return initializedWasm().planStations(source, optionsJson(options, 'planStations: options'));
}
