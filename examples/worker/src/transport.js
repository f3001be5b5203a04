// The Worker's transport to its stations: each station a Durable Object (stations.js) reached
// through a namespace binding, one request raced against a timeout, counted into the isolate's
// current meter as production counts a subrequest, with the simulated profile's hop latency
// (simulate.js; none deployed). The package's Coordinator (knot-wasm/stations) calls through it,
// and so does a layer station forwarding along a route.
import { StationError, chainTraffic, hopTraffic } from 'knot-wasm/stations';
import { currentMeter } from './meter.js';
import { hop } from './simulate.js';

/**
 * The stations from `KNOT_STATIONS`: `{ "layers": [binding, ...], "heads": [binding, ...] }`,
 * one entry per station, each the name of the Durable Object namespace binding that serves it
 * (in production all layer stations can share one namespace; locally each runs in an isolate
 * of its own, so each has its own binding). A station's address is its binding.
 * @param {Record<string, any>} env
 * @returns {{ layers: string[], heads: string[] }}
 */
export function stationTable(env) {
  let table;
  try {
    table = JSON.parse(env.KNOT_STATIONS);
  } catch (e) {
    throw new Error(`KNOT_STATIONS must be JSON {"layers": [...], "heads": [...]}: ${e.message}`);
  }
  for (const kind of ['layers', 'heads']) {
    const list = table?.[kind];
    if (!Array.isArray(list) || list.length === 0 || list.some((b) => !isBinding(env, b))) {
      throw new Error(`KNOT_STATIONS.${kind} must list Durable Object bindings, got ${JSON.stringify(list)}`);
    }
  }
  return table;
}

/** Whether `address` is a Durable Object namespace binding of `env`. */
export const isBinding = (env, address) => typeof env[address]?.idFromName === 'function';

/**
 * One request to a station, raced against `timeoutMs`: `{ bytes, traffic, assessments }` (the
 * traffic this call made, and what the stations behind it reported; the hop assessments they
 * attached, the header's text or null), or null when it did not answer in time. With `pipe`, a
 * chain answer is not read: `{ stream, traffic, assessments }`, its size from the chain's report.
 * A station's error answer throws it. Counts the call into `meter` (default: the current one).
 * @param {Record<string, any>} env
 * @param {import('knot-wasm/stations').Hop} station
 * @param {string} path
 * @param {Uint8Array} body
 * @param {{ params?: string, headers?: Record<string, string>, timeoutMs: number, pipe?: boolean,
 *   meter?: import('./meter.js').Meter | null }} options
 */
export async function callStation(env, station, path, body, { params = '', headers, timeoutMs, pipe = false, meter = currentMeter() }) {
  meter?.doCall();
  await hop();
  const ns = env[station.address];
  let timer;
  const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve(null), timeoutMs); });
  try {
    const answer = ns.get(ns.idFromName(station.name))
      .fetch(`https://station/${path}?${station.query}${params}`, { method: 'POST', body, headers })
      .then(async (res) => {
        if (!res.ok) {
          const text = await res.text();
          let message = text;
          try { message = JSON.parse(text).error.message; } catch { /* not JSON */ }
          throw new StationError(`${station.name}: ${message}`);
        }
        const behind = chainTraffic(res.headers);
        // Hop assessments the stations behind attached, as the header's text.
        const assessments = res.headers.get('x-knot-assessments');
        if (pipe && behind !== null) return { stream: res.body, traffic: hopTraffic(behind, body.byteLength, behind.answer), assessments };
        const bytes = new Uint8Array(await res.arrayBuffer());
        return { bytes, traffic: hopTraffic(behind, body.byteLength, bytes.byteLength), assessments };
      });
    return await Promise.race([answer, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * `env`'s stations as the Coordinator's transport (`call`).
 * @param {Record<string, any>} env
 */
export const transport = (env) => (station, path, body, options) => callStation(env, station, path, body, options);
