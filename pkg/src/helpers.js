// Pure helpers, usable without a model: MOA's agents and fold (crates/moa) and COLTRANE's
// response_format mapping (crates/coltrane), the same Rust code the decode loop runs, reached
// through the package's wasm. Node, Bun, Deno and Workers initialize the wasm on import; in
// browsers `await loadWasm()` first.
import { optionsJson } from './shim.js';

/** @type {any} the initialized wasm-bindgen namespace */
let bindings;

/**
 * Called by each entry point once its wasm is initialized.
 * @param {object} ns
 */
export function setHelperBindings(ns) {
  bindings = ns;
}

function wasm() {
  if (bindings === undefined) {
    throw new Error('knot-wasm: the wasm is not initialized yet; await loadWasm() first');
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
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError('createMoaAgents: options must be an object');
  }
  return Array.from(wasm().moaAgents(optionsJson(options)));
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
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError('deficitWeightedMerge: options must be an object');
  }
  return wasm().moaMerge(optionsJson({ ...options, dists }));
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
  return wasm().coltraneFromResponseFormat(optionsJson(/** @type {any} */ (responseFormat)));
}
