// The station chain: how one step's hidden states travel, both ends of it. The coordinator sends
// them to the first layer station with a route — the layer stations after it and the head shards
// — and each station forwards its output to the next; the last layer station fans out to the
// head shards (asking once more those that did not answer in time) and answers with their
// answers, bundled, back up the chain. The arithmetic is the same as the coordinator carrying
// every hop itself; what changes is who spends the calls. Cloudflare counts subrequests per
// invocation, and every incoming request to a Durable Object is an invocation of its own: so the
// coordinator's request spends one call per step, whatever the number of stations, and each
// station spends one (the last layer station one per head shard) of the request it is serving.
// Without the chain a 2048-token request on 4 layer + 4 head stations would need ~17,400
// subrequests, past the paid plan's 10,000.
//
// A station on a route is `{ address, name, query }`: how the transport reaches it (in the
// Worker, a Durable Object binding), the name it goes by (its object's), and its part
// (`layers=A-B` or `rows=A-B`, which every request names so that a station answers only for the
// part it opened). The route rides in the header `x-knot-route` (JSON); the chain's own traffic
// comes back in `x-knot-chain` (messages, bytes, sequential rounds, and the size of the answer),
// which each station adds its calls to. Nothing here knows how a call is made: the transport
// (`call`) is the caller's.

/** A station that failed or did not answer: the split model's upstream failed (502). */
export class StationError extends Error {
  code = 'station_failed';
}

/**
 * @typedef {{ address: string, name: string, query: string }} Hop
 * @typedef {{ next: Hop[], heads: Hop[] | null, top: number, pick: number, step: number, timeoutMs: number }} Route
 * @typedef {{ messages: number, bytes: number, back: number, rounds: number, answer: number }} Traffic
 * @typedef {(station: Hop, path: string, body: Uint8Array,
 *   options: { params?: string, headers?: Record<string, string>, timeoutMs: number }) =>
 *   Promise<{ bytes: Uint8Array, traffic: Traffic, assessments?: string | null } | null>} Call
 */

/**
 * Traffic a call and the calls behind it made: messages, bytes both ways (`back` of them the
 * answers'), sequential rounds; `answer`: the bytes of the answer coming back up (counted once
 * per hop it crosses).
 * @returns {Traffic}
 */
export const noTraffic = () => ({ messages: 0, bytes: 0, back: 0, rounds: 0, answer: 0 });

const MAX_ROUTE = 64;
/** The most candidates a head shard answers a step with (host's MAX_CANDIDATES). */
const MAX_PICK = 1024;

/**
 * The route in `header`, checked: every hop must be `{ address, name, query }` with an address
 * the receiving station can reach (`reachable`: a station script binds every station the
 * coordinator does).
 * @param {string | null} header
 * @param {(address: string) => boolean} reachable
 * @returns {Route | null} null when there is none (the caller wants this station's output)
 */
export function parseRoute(header, reachable) {
  if (header === null || header === '') return null;
  const bad = (why) => Object.assign(new Error(`x-knot-route: ${why}`), { status: 400 });
  let r;
  try {
    r = JSON.parse(header);
  } catch (e) {
    throw bad(`not JSON (${e.message})`);
  }
  if (r === null || typeof r !== 'object') throw bad('must be an object');
  const hops = (list, what) => {
    if (!Array.isArray(list) || list.length > MAX_ROUTE) throw bad(`${what} must be a list of at most ${MAX_ROUTE} stations`);
    return list.map((h) => {
      if (h === null || typeof h !== 'object' || typeof h.address !== 'string' || typeof h.name !== 'string'
        || typeof h.query !== 'string' || !/^(layers|rows)=\d+-\d+$/.test(h.query)) {
        throw bad(`${what}: each station is { address, name, query: "layers=A-B" | "rows=A-B" }, got ${JSON.stringify(h)}`);
      }
      if (!reachable(h.address)) {
        throw bad(`${h.address} is not a station this one can reach (it must bind every station the coordinator does)`);
      }
      return { address: h.address, name: h.name, query: h.query };
    });
  };
  const next = hops(r.next ?? [], 'next');
  const heads = r.heads === null || r.heads === undefined ? null : hops(r.heads, 'heads');
  if (!Number.isSafeInteger(r.top) || r.top < 0) throw bad(`top must be a whole number, got ${JSON.stringify(r.top)}`);
  const pick = r.pick ?? 0;
  if (!Number.isSafeInteger(pick) || pick < 0 || pick > MAX_PICK) throw bad(`pick must be a whole number up to ${MAX_PICK}, got ${JSON.stringify(r.pick)}`);
  const step = r.step ?? 0;
  if (!Number.isSafeInteger(step) || step < 0) throw bad(`step must be a whole number, got ${JSON.stringify(r.step)}`);
  if (typeof r.timeoutMs !== 'number' || !(r.timeoutMs > 0)) throw bad(`timeoutMs must be > 0, got ${JSON.stringify(r.timeoutMs)}`);
  return { next, heads, top: r.top, pick, step, timeoutMs: r.timeoutMs };
}

/**
 * The traffic a chain answer reports (`x-knot-chain`; none when absent or malformed).
 * @param {{ get(name: string): string | null }} headers
 * @returns {Traffic | null}
 */
export function chainTraffic(headers) {
  try {
    const t = JSON.parse(headers.get('x-knot-chain') ?? 'null');
    if (t && [t.messages, t.bytes, t.back, t.rounds, t.answer].every(Number.isSafeInteger)) return t;
  } catch { /* not ours */ }
  return null;
}

/**
 * What one call to a station spent: the traffic behind it (`behind`, its `x-knot-chain`) and
 * its own message both ways.
 * @param {Traffic | null} behind
 * @param {number} sent bytes of the request
 * @param {number} answer bytes of the answer
 * @returns {Traffic}
 */
export function hopTraffic(behind, sent, answer) {
  return {
    messages: (behind?.messages ?? 0) + 1,
    bytes: (behind?.bytes ?? 0) + sent + answer,
    back: (behind?.back ?? 0) + answer,
    rounds: (behind?.rounds ?? 0) + 1,
    answer,
  };
}

/**
 * How long a call carrying `route` may take: one timeout for the station called and each one
 * after it, two for the head shards (a retry).
 * @param {Route} route the route the called station forwards along
 */
export function chainTimeout(route) {
  return route.timeoutMs * (1 + route.next.length + (route.heads === null ? 0 : 2));
}

/**
 * Adds `b` to `a` (sequential: rounds add up).
 * @param {Traffic} a @param {Traffic} b
 */
export function addTraffic(a, b) {
  a.messages += b.messages;
  a.bytes += b.bytes;
  a.back += b.back;
  a.rounds += b.rounds;
  return a;
}

/**
 * The head shards' answers to `message`, each its `/logits` answer or an Error; a shard that
 * did not answer in time is asked once more, and one still silent is an Error. One round (two
 * with a retry) of `traffic`.
 * @param {Call} call
 * @param {Hop[]} heads
 * @param {Uint8Array} message
 * @param {{ top: number, pick: number, step: number }} ask rows of its top ids each shard sends
 *   along; its largest `pick` logits (0: every one); the step they keep its hidden states as
 * @param {number} timeoutMs
 * @param {Traffic} traffic
 */
export async function gatherHeads(call, heads, message, ask, timeoutMs, traffic) {
  const params = `&top=${ask.top}&pick=${ask.pick}&step=${ask.step}`;
  /** @type {(Uint8Array | Error | null)[]} */
  const answers = new Array(heads.length).fill(null);
  // One round per fan-out: the shards answer in parallel and forward nothing.
  const round = async (slots) => {
    traffic.rounds += 1;
    await Promise.all(slots.map(async (i) => {
      try {
        const r = await call(heads[i], 'logits', message, { params, timeoutMs });
        if (r !== null) {
          answers[i] = r.bytes;
          traffic.messages += r.traffic.messages;
          traffic.bytes += r.traffic.bytes;
          traffic.back += r.traffic.back;
        }
      } catch (e) {
        answers[i] = e instanceof Error ? e : new Error(String(e));
      }
    }));
  };
  await round(heads.map((_, i) => i));
  const silent = answers.flatMap((a, i) => (a === null ? [i] : []));
  if (silent.length > 0) await round(silent);
  return answers.map((a, i) => a ?? new StationError(`${heads[i].name} did not answer within ${timeoutMs} ms`));
}

// The bundle of the head shards' answers: "KNHB", u32 count, then per answer a kind byte (0: the
// shard's bytes, 1: an error message, UTF-8), a u32 length and the bytes; little-endian.
const MAGIC = [0x4b, 0x4e, 0x48, 0x42];

/** @param {(Uint8Array | Error)[]} answers */
export function bundleAnswers(answers) {
  const enc = new TextEncoder();
  /** @type {[number, Uint8Array][]} */
  const parts = answers.map((a) => (a instanceof Uint8Array ? [0, a] : [1, enc.encode(a.message)]));
  const out = new Uint8Array(8 + parts.reduce((n, [, b]) => n + 5 + b.byteLength, 0));
  const view = new DataView(out.buffer);
  out.set(MAGIC, 0);
  view.setUint32(4, parts.length, true);
  let at = 8;
  for (const [kind, bytes] of parts) {
    out[at] = kind;
    view.setUint32(at + 1, bytes.byteLength, true);
    out.set(bytes, at + 5);
    at += 5 + bytes.byteLength;
  }
  return out;
}

/**
 * The answers of a bundle of `count` head shards: each a Uint8Array or a StationError. A
 * malformed bundle throws a StationError naming what is wrong.
 * @param {Uint8Array} bytes
 * @param {number} count
 */
export function unbundleAnswers(bytes, count) {
  const bad = (why) => new StationError(`the last layer station's answer bundle ${why}`);
  if (bytes.byteLength < 8 || MAGIC.some((m, i) => bytes[i] !== m)) throw bad('does not start with KNHB');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = view.getUint32(4, true);
  if (n !== count) throw bad(`holds ${n} answers for ${count} head shards`);
  const dec = new TextDecoder();
  const out = [];
  let at = 8;
  for (let i = 0; i < n; i++) {
    if (at + 5 > bytes.byteLength) throw bad(`ends inside answer ${i}`);
    const kind = bytes[at];
    const len = view.getUint32(at + 1, true);
    if (kind > 1 || at + 5 + len > bytes.byteLength) throw bad(`answer ${i} is malformed (kind ${kind}, ${len} bytes)`);
    const body = bytes.subarray(at + 5, at + 5 + len);
    out.push(kind === 0 ? body : new StationError(dec.decode(body)));
    at += 5 + len;
  }
  if (at !== bytes.byteLength) throw bad(`has ${bytes.byteLength - at} bytes after its answers`);
  return out;
}
