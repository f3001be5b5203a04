// A model split across stations (Durable Objects, see stations.js), behind the interface the
// Worker's routes use of the package's HostShim: encode, applyChatTemplate, streamTokens, stats,
// info. This isolate holds the index, the tokenizer, the decode loop (WasmCoordinator) and the
// embedding rows: the whole table when it fits `embeddingBudget` (read once at open), otherwise
// rows the head stations hand over — a prompt's missing rows in one parallel round to the shards
// owning them, each picked token's row riding with the logits that picked it (one more round
// when it did not: a miss). Nothing on the per-token path reads R2. For each token it carries the
// hidden states through the layer stations in order, fans the last ones out to the head shards,
// and folds their answers: every shard answered → the next token; some did not answer in time →
// those slots alone are asked once more; one answered with an error (or the retry fails) → the
// request fails with that error. Each generation is a new conversation for the stations, and is
// forgotten by them when it ends, however it ends.
//
// `stats().hops`: `messages` counts every station request, `rounds` the sequential round trips
// (a fan-out to the head shards counts once); `hopRounds` lists them per token of the last
// generation (the first entry is the prompt's).
import { WasmCoordinator, wasmMemoryBytes } from 'knot-wasm';
import { R2KnotSource } from './r2.js';
import { currentMeter } from './meter.js';
import { hop } from './simulate.js';

const MiB = 2 ** 20;

/**
 * The stations from `KNOT_STATIONS`: `{ "layers": [binding, ...], "heads": [binding, ...] }`,
 * one entry per station, each the name of the Durable Object namespace binding that serves it
 * (in production all layer stations can share one namespace; locally each runs in an isolate
 * of its own, so each has its own binding).
 */
function stationTable(env) {
  let table;
  try {
    table = JSON.parse(env.KNOT_STATIONS);
  } catch (e) {
    throw new Error(`KNOT_STATIONS must be JSON {"layers": [...], "heads": [...]}: ${e.message}`);
  }
  for (const kind of ['layers', 'heads']) {
    const list = table?.[kind];
    if (!Array.isArray(list) || list.length === 0 || list.some((b) => typeof env[b]?.idFromName !== 'function')) {
      throw new Error(`KNOT_STATIONS.${kind} must list Durable Object bindings, got ${JSON.stringify(list)}`);
    }
  }
  return table;
}

/** A station that failed or did not answer: the split model's upstream failed (502). */
class StationError extends Error {
  code = 'station_failed';
}

export class SplitModel {
  /**
   * @param {Record<string, any>} env
   * @param {{ key: string, open: { maxContext: number } }} settings the Worker's
   */
  static async open(env, settings) {
    const table = stationTable(env);
    const source = new R2KnotSource(env.MODELS, settings.key);
    const coordinator = await WasmCoordinator.open(source, JSON.stringify({
      maxContext: settings.open.maxContext,
      maxBatch: Number(env.KNOT_STATION_MAX_BATCH || 64),
      headShards: table.heads.length,
      maxReadBytes: 4 * MiB,
      // Absent → the package's defaults (64 MiB: SmolLM2's table is resident, Gemma-3's not).
      embeddingBudget: env.KNOT_EMBEDDING_BUDGET_MB ? Number(env.KNOT_EMBEDDING_BUDGET_MB) * MiB : undefined,
      rowCacheBytes: env.KNOT_ROW_CACHE_MB ? Number(env.KNOT_ROW_CACHE_MB) * MiB : undefined,
    }));
    // A stub is an I/O object of the request that made it: one per call, from the namespace.
    const stub = (binding, name) => {
      const ns = env[binding];
      const id = ns.idFromName(name);
      return () => ns.get(id);
    };
    const layers = coordinator.layerRanges(table.layers.length).map(([a, b], i) => ({
      name: `layers ${a}-${b}`, query: `layers=${a}-${b}`, stub: stub(table.layers[i], `layers-${a}-${b}`),
    }));
    const heads = coordinator.headSlices().map(([a, b], i) => ({
      name: `head ${a}-${b}`, query: `rows=${a}-${b}`, stub: stub(table.heads[i], `rows-${a}-${b}`),
    }));
    return new SplitModel(coordinator, source, layers, heads, Number(env.KNOT_STATION_TIMEOUT_MS || 60000));
  }

  constructor(coordinator, source, layers, heads, timeoutMs) {
    this.coordinator = coordinator;
    this.source = source;
    this.layers = layers;
    this.heads = heads;
    this.timeoutMs = timeoutMs;
    // Conversation ids: unique across coordinator isolates (a random base) and within one.
    this.nextConversation = Math.floor(Math.random() * 2 ** 40) * 1024;
    this.hops = { messages: 0, rounds: 0, bytes: 0, ms: 0 };
    /** Sequential round trips of the token in progress. */
    this.rounds = 0;
    this.lastHopRounds = [];
    this.lastPrefillMs = 0;
    /** @type {{ status: string, reused: number } | null} */
    this.lastPrefix = null;
    this.lastTokenMs = [];
  }

  get vocabSize() { return this.coordinator.vocabSize; }
  get layerCount() { return this.coordinator.layerCount; }
  get contextLength() { return this.coordinator.contextLength; }

  encode(text) { return this.coordinator.encode(text); }
  applyChatTemplate(messages) { return this.coordinator.chatPrompt(JSON.stringify(messages)); }
  info() { return JSON.parse(this.coordinator.info()); }

  stats() {
    return {
      wasmMemoryBytes: wasmMemoryBytes(),
      contextLength: this.contextLength,
      prefix: this.lastPrefix ?? null,
      prefillMs: this.lastPrefillMs,
      tokenMs: this.lastTokenMs,
      stations: { layers: this.layers.map((s) => s.name), heads: this.heads.map((s) => s.name) },
      hops: this.hops,
      hopRounds: this.lastHopRounds,
      // R2 reads at open and since (0), the embedding's mode, rounds of rows and misses.
      coordinator: this.coordinator.stats(),
    };
  }

  /** Nothing to take back: a generation holds no lock in this isolate's wasm across awaits. */
  async reclaim() {}

  /** Each station's own figures (`GET /stats` of every station). */
  async stationStats() {
    const all = [...this.layers, ...this.heads];
    return Promise.all(all.map(async (s) => {
      const res = await s.stub().fetch(`https://station/stats?${s.query}`);
      return { station: s.name, ...(await res.json()) };
    }));
  }

  /**
   * One request to a station, raced against the timeout: the answer's bytes, or null when the
   * station did not answer in time. A station's error answer throws it.
   */
  async call(station, path, body, params = '') {
    const t0 = Date.now();
    // A subrequest of this generation; the simulated profile's latency per call (none deployed).
    currentMeter()?.doCall();
    await hop();
    let timer;
    const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve(null), this.timeoutMs); });
    try {
      const answer = station.stub().fetch(`https://station/${path}?${station.query}${params}`, { method: 'POST', body })
        .then(async (res) => {
          if (!res.ok) {
            const text = await res.text();
            let message = text;
            try { message = JSON.parse(text).error.message; } catch { /* not JSON */ }
            throw new StationError(`${station.name}: ${message}`);
          }
          return new Uint8Array(await res.arrayBuffer());
        });
      const bytes = await Promise.race([answer, timeout]);
      if (bytes !== null) {
        this.hops.messages++;
        this.hops.bytes += body.byteLength + bytes.byteLength;
        this.hops.ms += Date.now() - t0;
      }
      return bytes;
    } finally {
      clearTimeout(timer);
    }
  }

  /** One sequential round trip on the token's path (a fan-out counts once). */
  round() {
    this.rounds++;
    this.hops.rounds++;
  }

  /** Hidden states through every layer station in order. */
  async throughLayers(message) {
    let m = message;
    for (const s of this.layers) {
      this.round();
      const next = await this.call(s, 'step', m);
      if (next === null) throw new StationError(`${s.name} did not answer within ${this.timeoutMs} ms`);
      m = next;
    }
    return m;
  }

  /**
   * The head shards' answers for `slots` (others kept from `answers`): each its logits with the
   * embedding rows of its top `logitRows` ids.
   */
  async gather(message, slots, answers) {
    this.round();
    const top = `&top=${this.coordinator.logitRows}`;
    await Promise.all(slots.map(async (i) => {
      try {
        answers[i] = await this.call(this.heads[i], 'logits', message, top);
      } catch (e) {
        answers[i] = e instanceof Error ? e : new Error(String(e));
      }
    }));
    return answers;
  }

  /** The next token from the hidden states of the last message (`positions` new positions). */
  async pick(message, positions) {
    const answers = await this.gather(message, this.heads.map((_, i) => i), new Array(this.heads.length).fill(null));
    let e = this.coordinator.pick(answers, positions);
    if (e.retry !== undefined) {
      await this.gather(message, e.retry, answers);
      // Still missing after the retry: a failure now.
      for (const i of e.retry) {
        if (answers[i] === null) answers[i] = new Error(`${this.heads[i].name} did not answer within ${this.timeoutMs} ms`);
      }
      e = this.coordinator.pick(answers, positions);
    }
    return e;
  }

  /**
   * The embedding rows the next messages need that this isolate does not hold, from the head
   * shards owning them, all at once (one round; nothing when the table is resident, the rows
   * are cached, or they rode with the logits). A shard that does not answer is asked once more.
   */
  async fetchRows() {
    const wanted = this.coordinator.rowsWanted();
    if (wanted.length === 0) return;
    this.round();
    await Promise.all(wanted.map(async ({ slot, ids }) => {
      const head = this.heads[slot];
      const body = new Uint8Array(ids.buffer, ids.byteOffset, ids.byteLength);
      const bytes = (await this.call(head, 'rows', body)) ?? (await this.call(head, 'rows', body));
      if (bytes === null) throw new StationError(`${head.name} did not answer within ${this.timeoutMs} ms`);
      this.coordinator.addRows(slot, bytes);
    }));
  }

  /**
   * @param {Uint32Array} ids
   * @param {Record<string, unknown>} [options] the generation options (HostShim's), and `signal`
   */
  async *streamTokens(ids, options = {}) {
    const { signal, reusePrefix, ...rest } = options;
    let conversation = null;
    let kept = 0;
    this.lastPrefix = reusePrefix ? { status: 'miss', reused: 0 } : null;
    if (reusePrefix) {
      // Prefix replay: skip the prefill of a prefix only if every layer station holds it.
      const replay = this.coordinator.replayFor(ids);
      if (replay !== null) {
        const params = `&conversation=${replay.conversation}&len=${replay.len}&hash=${replay.hash}`;
        const answers = await Promise.all(this.layers.map((s) => this.call(s, 'claim', new Uint8Array(0), params)
          .then((bytes) => (bytes === null ? null : JSON.parse(new TextDecoder().decode(bytes)).hit === true), () => null)));
        if (this.coordinator.replayVerdict(answers)) {
          conversation = replay.conversation;
          kept = replay.len;
          this.lastPrefix = { status: 'hit', reused: kept };
        } else {
          await this.forget(replay.conversation);
        }
      }
    }
    conversation ??= this.nextConversation++;
    const t0 = Date.now();
    this.coordinator.start(conversation, ids, JSON.stringify(rest), kept);
    let positions = ids.length - kept;
    let first = true;
    let failed = true;
    this.lastTokenMs = [];
    this.lastHopRounds = [];
    try {
      for (;;) {
        signal?.throwIfAborted();
        const t = Date.now();
        this.rounds = 0;
        // The prompt's rows, or a picked token's that did not ride with the logits (a miss).
        await this.fetchRows();
        const messages = this.coordinator.next();
        if (messages === null) break;
        let last;
        for (const m of messages) last = await this.throughLayers(m);
        const e = await this.pick(last, positions);
        if (first) this.lastPrefillMs = Date.now() - t0;
        else this.lastTokenMs.push(Date.now() - t);
        this.lastHopRounds.push(this.rounds);
        first = false;
        yield { id: e.id, text: e.text, finishReason: e.finishReason };
        if (e.finishReason !== null) break;
        positions = 1;
      }
      failed = false;
    } finally {
      // A generation that ran to its end is kept for prefix replay when asked to; one that
      // failed, or that its consumer left early (a stop sequence), is forgotten by every
      // station, whatever state it left.
      const done = !failed && reusePrefix ? this.coordinator.finish() : null;
      if (done === null) {
        this.coordinator.end();
        await this.forget(conversation);
      } else {
        const body = new Uint8Array(done.ids.buffer, done.ids.byteOffset, done.ids.byteLength);
        const keep = await Promise.all(this.layers.map((s) => this.call(s, 'keep', body, `&conversation=${done.conversation}`)
          .then((b) => b !== null, () => false)));
        if (!keep.every(Boolean)) await this.forget(done.conversation);
        for (const c of done.forget) await this.forget(c);
      }
    }
  }

  /** Every layer station forgets `conversation` (best effort: one that fails has lost it anyway). */
  async forget(conversation) {
    await Promise.all(this.layers.map((s) => this.call(s, 'forget', new Uint8Array(0), `&conversation=${conversation}`)
      .then(() => {}, () => {})));
  }
}
