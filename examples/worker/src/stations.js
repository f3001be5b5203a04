// Stations: Durable Objects that each hold one part of a model split across isolates. A
// LayerStation runs a contiguous range of layers (and keeps their KV cache per conversation), a
// HeadStation computes the logits of one slice of the vocabulary and hands the coordinator the
// same slice's rows of the embedding table. Each opens its part of the knot file from R2 on first
// use (range reads of that part only, its pieces in parallel) and keeps it for its lifetime: no
// request after that reads R2. The coordinator that drives them is the package's
// (knot-wasm/stations, opened by model.js); so are the chain's protocol and the hop assessments
// a layer station forwards and attaches. What is the Worker's here: the Durable Objects, their
// options from the environment, and the transport (transport.js).
//
//   POST /step?layers=A-B           body: hidden states (a KNHM bundle, or one KNHS message) →
//                                   the next ones; with a route (header x-knot-route) it forwards
//                                   them along the route instead and answers what the chain
//                                   answers; with x-knot-assess too, each hop's assessment rides
//                                   back
//   POST /forget?layers=A-B&conversation=N
//   POST /keep?layers=A-B&conversation=N      body: the ids its KV holds (u32 little-endian)
//   POST /claim?layers=A-B&conversation=N&len=L&hash=H   → { hit }: holds the first L (hash H)
//   POST /logits?rows=A-B&top=C     body: hidden states → a rows message (KNRW, or a KNRM bundle
//                                   of one per part wanting logits): the slice's logits, and the
//                                   embedding rows of its C largest
//   POST /rows?rows=A-B             body: token ids (u32 little-endian, each in A..B) → a rows
//                                   message with their embedding rows
//   GET|POST /stats?layers=A-B | ?rows=A-B   { part, weightBytes, wasmMemoryBytes, requests, open_spent,
//                                        last_request }
//
// The part rides on every request, so a station opened for one part refuses requests for another
// (a coordinator configured differently, a stale binding) instead of answering wrongly.
// Failures answer as OpenAI-shaped JSON errors with a 4xx/5xx status; the station keeps serving.
import { WasmHeadStation, WasmLayerStation, errorStatus, wasmMemoryBytes } from 'knot-wasm';
import {
  StationError, addTraffic, assessHop, assessmentsHeader, bundleAnswers, chainTimeout, gatherHeads,
  nextAssessHeader, noTraffic, parseAssessHeader, parseRoute,
} from 'knot-wasm/stations';
import { R2KnotSource } from './r2.js';
import { callStation, isBinding } from './transport.js';
import { currentMeter, startMeter } from './meter.js';
import { profileOf, simulate } from './simulate.js';

const MiB = 2 ** 20;

/**
 * The stations' options (crates/host/src/station/options.rs) from the environment (wrangler.toml
 * [vars]): only the vars set, so that every default is the package's one set, shared by the
 * stations and their coordinator (which are given the same). A value that is not a number goes
 * as it is: the options' reader refuses it, naming the option.
 * @param {Record<string, any>} env
 */
export function stationOptions(env) {
  const value = (name, scale = 1) => {
    const v = env[name];
    if (v === undefined || v === '') return undefined;
    const n = Number(v);
    return Number.isFinite(n) ? n * scale : v;
  };
  const options = {
    maxContext: value('KNOT_MAX_CONTEXT'),
    maxBatch: value('KNOT_STATION_MAX_BATCH'),
    kvCache: env.KNOT_KV_CACHE || undefined,
    maxConversations: value('KNOT_STATION_CONVERSATIONS'),
    maxReadBytes: value('KNOT_MAX_READ_MB', MiB),
    readConcurrency: value('KNOT_READ_CONCURRENCY'),
    // The coordinator's: its embedding table, the rows riding with the logits, the logits the
    // head shards answer with, the sequences it runs together and the conversations it keeps
    // for prefix replay.
    embeddingBudget: value('KNOT_EMBEDDING_BUDGET_MB', MiB),
    rowCacheBytes: value('KNOT_ROW_CACHE_MB', MiB),
    logitRows: value('KNOT_LOGIT_ROWS'),
    candidates: value('KNOT_CANDIDATES'),
    maxSequences: env.KNOT_MAX_SEQUENCES === 'auto' ? 'auto' : value('KNOT_MAX_SEQUENCES'),
    keptConversations: value('KNOT_KEPT_CONVERSATIONS'),
  };
  return Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
}

function fail(status, message, code) {
  const type = status >= 500 ? 'server_error' : 'invalid_request_error';
  return Response.json({ error: { message, type, param: null, code } }, { status });
}

/** `A-B` as [A, B], or null. */
function part(text) {
  const m = /^(\d+)-(\d+)$/.exec(text ?? '');
  return m ? [Number(m[1]), Number(m[2])] : null;
}

// The parts opened in this isolate, by kind, model and part. workerd drops a Durable Object that
// sits idle and constructs it again in the same isolate; the wasm memory of the part it had
// opened is not given back (wasm memory never shrinks, and the old object is freed only when
// collected), so opening again would hold the part twice — past 128 MB for a large one — and
// read it from R2 again. A new instance takes the part this isolate already holds.
const opened = new Map();

/** What both kinds share: opening once per isolate (a failed open is retried by the next request), the part check, errors. */
class Station {
  constructor(state, env, kind, param, open) {
    this.env = env;
    this.kind = kind;
    this.param = param;
    this.openPart = open;
    /** @type {Promise<any> | null} */
    this.opening = null;
    this.part = null;
    this.requests = 0;
    // What the request that opened the part, and the last one, spent (meter.js).
    this.openMeter = null;
    this.lastMeter = null;
    // Test hook (never set in wrangler.toml): the Nth request to /step or /logits fails once.
    this.failAt = Number(env.KNOT_STATION_FAIL_AT || 0);
  }

  async station(url) {
    const want = part(url.searchParams.get(this.param));
    if (want === null) throw Object.assign(new Error(`?${this.param}=A-B is missing`), { status: 400 });
    if (this.part !== null && (this.part[0] !== want[0] || this.part[1] !== want[1])) {
      throw Object.assign(new Error(`this ${this.kind} holds ${this.param} ${this.part.join('-')}, not ${want.join('-')}`),
        { status: 409 });
    }
    if (this.opening === null) {
      const key = `${this.kind} ${this.env.MODEL_KEY} ${want.join('-')}`;
      let entry = opened.get(key);
      if (entry === undefined) {
        // The simulated bucket when a local run asked for production's costs (simulate.js).
        const source = new R2KnotSource(simulate(this.env).MODELS, this.env.MODEL_KEY);
        entry = { opening: this.openPart(source, want[0], want[1], JSON.stringify(stationOptions(this.env))), meter: currentMeter() };
        opened.set(key, entry);
        const failed = entry;
        failed.opening.catch(() => {
          if (opened.get(key) === failed) opened.delete(key);
        });
      }
      this.part = want;
      this.openMeter = entry.meter;
      const opening = entry.opening;
      this.opening = opening;
      opening.catch(() => {
        if (this.opening === opening) {
          this.opening = null;
          this.part = null;
        }
      });
    }
    return this.opening;
  }

  async fetch(request) {
    const url = new URL(request.url);
    // Each incoming request is an invocation of its own, with its own subrequests.
    const meter = startMeter('request');
    if (url.pathname !== '/stats') this.lastMeter = meter;
    try {
      const station = await this.station(url);
      if (url.pathname === '/stats') {
        return Response.json({
          kind: this.kind,
          part: this.part,
          weightBytes: station.weightBytes,
          wasmMemoryBytes: wasmMemoryBytes(),
          requests: this.requests,
          profile: profileOf(this.env)?.name ?? null,
          open_spent: this.openMeter?.report() ?? null,
          last_request: this.lastMeter?.report() ?? null,
        });
      }
      if (request.method !== 'POST') return fail(405, `${request.method} ${url.pathname}: use POST`, 'method_not_allowed');
      return await this.handle(url, request, station);
    } catch (e) {
      // The station's own request checks carry a status; the package's failures a code, whose
      // status is the package's table (a malformed message is the caller's: 400).
      const status = e.status ?? errorStatus(e);
      return fail(status, `${this.kind}: ${e.message}`, e.status ? 'invalid_value' : (e.code ?? 'station_failed'));
    }
  }

  /** Counts a compute request; the test hook fails the configured one. */
  count() {
    this.requests++;
    if (this.requests === this.failAt) throw new Error(`injected failure at request ${this.failAt}`);
  }
}

const binary = (bytes) => new Response(bytes, { headers: { 'content-type': 'application/octet-stream' } });

export class LayerStation extends Station {
  constructor(state, env) {
    super(state, env, 'layer station', 'layers', (s, a, b, o) => WasmLayerStation.open(s, a, b, o));
  }

  async handle(url, request, station) {
    switch (url.pathname) {
      case '/step': {
        const message = new Uint8Array(await request.arrayBuffer());
        const route = parseRoute(request.headers.get('x-knot-route'), (address) => isBinding(this.env, address));
        const assess = route === null ? null : parseAssessHeader(request.headers.get('x-knot-assess'));
        this.count();
        const out = station.step(message);
        return route === null ? binary(out) : this.forward(route, out, assess);
      }
      case '/forget': {
        station.forget(Number(url.searchParams.get('conversation')));
        return Response.json({ ok: true });
      }
      case '/keep': {
        const body = await request.arrayBuffer();
        if (body.byteLength % 4 !== 0) throw Object.assign(new Error('keep: the body must be u32 ids'), { status: 400 });
        station.keep(Number(url.searchParams.get('conversation')), new Uint32Array(body));
        return Response.json({ ok: true });
      }
      case '/claim': {
        const q = url.searchParams;
        const hit = station.claim(Number(q.get('conversation')), Number(q.get('len')), q.get('hash') ?? '');
        return Response.json({ hit });
      }
      default: return fail(404, `unknown route ${url.pathname}`, 'unknown_url');
    }
  }

  /**
   * This station's output along `route`: to the next layer station, answering what it answers;
   * from the last, to the head shards, answering their answers bundled — or nothing, when the
   * message is not the last of a prompt (no logits wanted). The traffic of the calls made here
   * and behind rides back in `x-knot-chain`; with `assess` (x-knot-assess), this hop's
   * assessment and those of the stations behind in `x-knot-assessments`.
   */
  async forward(route, out, assess) {
    const traffic = noTraffic();
    let body = new Uint8Array(0);
    const to = route.next.length > 0 ? [route.next[0].name] : (route.heads ?? []).map((h) => h.name);
    const own = assess === null ? null : assessHop(assess, `layers-${this.part.join('-')}`, to, out);
    let behind = null;
    if (route.next.length > 0) {
      const [first, ...rest] = route.next;
      const onward = { ...route, next: rest };
      const r = await callStation(this.env, first, 'step', out, {
        headers: { 'x-knot-route': JSON.stringify(onward), ...(assess === null ? {} : { 'x-knot-assess': nextAssessHeader(assess) }) },
        timeoutMs: chainTimeout(onward),
        pipe: true,
      });
      if (r === null) throw new StationError(`${first.name} did not answer within ${chainTimeout(onward)} ms`);
      addTraffic(traffic, r.traffic);
      traffic.answer = r.traffic.answer;
      // The answer streams through, not buffered: the head shards' logits cross every layer
      // station on the way back, and piping overlaps those transfers. A station that could
      // not report its size was read whole.
      body = r.stream ?? r.bytes;
      behind = r.assessments;
    } else if (route.heads !== null) {
      const call = (station, path, bytes, options) => callStation(this.env, station, path, bytes, options);
      body = bundleAnswers(await gatherHeads(call, route.heads, out, route, route.timeoutMs, traffic));
      traffic.answer = body.byteLength;
    }
    const headers = { 'content-type': 'application/octet-stream', 'x-knot-chain': JSON.stringify(traffic) };
    // This hop's blob first, then the ones behind (the coordinator reads them all).
    if (own !== null) headers['x-knot-assessments'] = assessmentsHeader(own, behind);
    return new Response(body, { headers });
  }
}

export class HeadStation extends Station {
  constructor(state, env) {
    super(state, env, 'head station', 'rows', (s, a, b, o) => WasmHeadStation.open(s, a, b, o));
  }

  async handle(url, request, station) {
    switch (url.pathname) {
      case '/logits': {
        const message = new Uint8Array(await request.arrayBuffer());
        this.count();
        // Rows of the top ids ride with the logits (0: none, the coordinator holds its table);
        // its largest `pick` logits (0: every one), the hidden states kept as `step`'s.
        const number = (name) => Number(url.searchParams.get(name) ?? 0);
        return binary(station.logits(message, number('top'), number('pick'), number('step')));
      }
      case '/again': {
        // More of a step's logits, for the picks its first answer did not settle.
        this.count();
        return binary(station.again(Number(url.searchParams.get('step') ?? 0), await request.text()));
      }
      case '/rows': {
        const body = await request.arrayBuffer();
        if (body.byteLength % 4 !== 0) throw Object.assign(new Error('rows: the body must be u32 ids'), { status: 400 });
        return binary(station.rows(new Uint32Array(body)));
      }
      default: return fail(404, `unknown route ${url.pathname}`, 'unknown_url');
    }
  }
}
