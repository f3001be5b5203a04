// Stations: Durable Objects that each hold one part of a model split across isolates. A
// LayerStation runs a contiguous range of layers (and keeps their KV cache per conversation), a
// HeadStation computes the logits of one slice of the vocabulary. Each opens its part of the knot
// file from R2 on first use (range reads of that part only) and keeps it for its lifetime.
//
//   POST /step?layers=A-B           body: hidden states (KNHS wire message) → the next ones
//   POST /forget?layers=A-B&conversation=N
//   POST /keep?layers=A-B&conversation=N      body: the ids its KV holds (u32 little-endian)
//   POST /claim?layers=A-B&conversation=N&len=L&hash=H   → { hit }: holds the first L (hash H)
//   POST /logits?rows=A-B           body: hidden states → the slice's logits (f32, little-endian)
//   GET  /stats?layers=A-B | ?rows=A-B   { part, weightBytes, wasmMemoryBytes, requests }
//
// The part rides on every request, so a station opened for one part refuses requests for another
// (a coordinator configured differently, a stale binding) instead of answering wrongly.
// Failures answer as OpenAI-shaped JSON errors with a 4xx/5xx status; the station keeps serving.
import { WasmHeadStation, WasmLayerStation, wasmMemoryBytes } from 'knot-wasm';
import { R2KnotSource } from './r2.js';

const MiB = 2 ** 20;

/** Options of a station from the environment (wrangler.toml [vars]). */
function stationOptions(env) {
  const int = (name, fallback) => (env[name] === undefined || env[name] === '' ? fallback : Number(env[name]));
  return JSON.stringify({
    maxContext: int('KNOT_MAX_CONTEXT', 2048),
    maxBatch: int('KNOT_STATION_MAX_BATCH', 64),
    kvCache: env.KNOT_KV_CACHE || 'f32',
    maxConversations: int('KNOT_STATION_CONVERSATIONS', 4),
    maxReadBytes: int('KNOT_MAX_READ_MB', 4) * MiB,
  });
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

/** What both kinds share: opening once (a failed open is retried by the next request), the part check, errors. */
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
      this.part = want;
      const source = new R2KnotSource(this.env.MODELS, this.env.MODEL_KEY);
      const opening = this.openPart(source, want[0], want[1], stationOptions(this.env));
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
    try {
      const station = await this.station(url);
      if (url.pathname === '/stats') {
        return Response.json({
          kind: this.kind,
          part: this.part,
          weightBytes: station.weightBytes,
          wasmMemoryBytes: wasmMemoryBytes(),
          requests: this.requests,
        });
      }
      if (request.method !== 'POST') return fail(405, `${request.method} ${url.pathname}: use POST`, 'method_not_allowed');
      return await this.handle(url, request, station);
    } catch (e) {
      return fail(e.status ?? 500, `${this.kind}: ${e.message}`, e.status ? 'invalid_value' : 'station_failed');
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
        this.count();
        return binary(station.step(message));
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
}

export class HeadStation extends Station {
  constructor(state, env) {
    super(state, env, 'head station', 'rows', (s, a, b, o) => WasmHeadStation.open(s, a, b, o));
  }

  async handle(url, request, station) {
    if (url.pathname !== '/logits') return fail(404, `unknown route ${url.pathname}`, 'unknown_url');
    const message = new Uint8Array(await request.arrayBuffer());
    this.count();
    const logits = station.logits(message);
    return binary(new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength));
  }
}
