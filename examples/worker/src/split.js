// A model split across stations (Durable Objects, see stations.js): a `Backend` of the package's
// OpenAI module (knot-wasm/openai), as HostShim is, plus what the Worker's own routes read
// (stats, info, stationStats). This isolate holds the index, the tokenizer, the decode loop (WasmCoordinator) and the
// embedding rows: the whole table when it fits `embeddingBudget` (read once at open), otherwise
// rows the head stations hand over — a prompt's missing rows in one parallel round to the shards
// owning them, each picked token's row riding with the logits that picked it (one more round
// when it did not: a miss). Nothing on the per-token path reads R2. For each token it sends the
// hidden states to the first layer station with the route (chain.js): each layer station
// forwards to the next, the last fans out to the head shards, and their answers come back up the
// chain — one call of this request per token, whatever the number of stations. It folds the
// answers: every shard answered → the next token; one answered with an error, or did not answer
// even when asked again → the request fails with that error. Each generation is a new
// conversation for the stations, and is forgotten by them when it ends, however it ends.
//
// With `KNOT_MAX_SEQUENCES` > 1 generations run together (`SplitSequences`, stepped by the
// package's SequenceBatch): each step carries every running conversation's rows — each decoding
// one's token, a chunk of the oldest prompt still running — in one bundle through the chain,
// so a step's round trips do not grow with the number of conversations.
//
// `stats().hops`: `messages` counts every station request (the chain's too), `rounds` the
// sequential round trips (a fan-out to the head shards counts once), `calls` the requests this
// isolate made itself (its subrequests), `ms` its time waiting on them; `hopRounds` lists the
// rounds per token of the last generation (the first entry is the prompt's).
import { SequenceBatch, WasmCoordinator, wasmMemoryBytes } from 'knot-wasm';
import { ApiError } from 'knot-wasm/openai';
import { R2KnotSource } from './r2.js';
import { StationError, callStation, chainTimeout, unbundleAnswers } from './chain.js';
import { currentMeter } from './meter.js';
import { assessmentsOf, hopAssessmentSettings } from './assess.js';

const MiB = 2 ** 20;

const noWindows = () => new ApiError(404, 'Prefill windows are not available on a model split across stations', { code: 'prefill_windows_disabled' });

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

/** @implements {import('knot-wasm/openai').Backend} */
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
      // Rows of its top ids each head shard sends with its logits (a sharded table). 16, not the
      // package's 4: sampled at T=0.9, top_p 0.95, Gemma-3 on 4 + 4 missed the picked token's row
      // on 18.8% of tokens with 4 (one more round each), 3.9% with 16, for 3% more bytes.
      logitRows: Number(env.KNOT_LOGIT_ROWS || 16),
      maxSequences: settings.sequences ?? 1,
    }));
    // Each station as the route names it (chain.js): its binding, its object's name, its part.
    const layers = coordinator.layerRanges(table.layers.length).map(([a, b], i) => ({
      binding: table.layers[i], name: `layers-${a}-${b}`, query: `layers=${a}-${b}`,
    }));
    const heads = coordinator.headSlices().map(([a, b], i) => ({
      binding: table.heads[i], name: `rows-${a}-${b}`, query: `rows=${a}-${b}`,
    }));
    const model = new SplitModel(env, coordinator, source, layers, heads, Number(env.KNOT_STATION_TIMEOUT_MS || 60000));
    model.assess = hopAssessmentSettings(env);
    // Every station loads its part now, all at once: the first token would otherwise wait for
    // each station's load in turn, as the chain reaches it. A station that cannot load fails
    // the open (the next request opens again).
    await model.stationStats(currentMeter());
    return model;
  }

  constructor(env, coordinator, source, layers, heads, timeoutMs) {
    this.env = env;
    this.coordinator = coordinator;
    this.source = source;
    this.layers = layers;
    this.heads = heads;
    this.timeoutMs = timeoutMs;
    // Conversation ids: unique across coordinator isolates (a random base) and within one.
    this.nextConversation = Math.floor(Math.random() * 2 ** 40) * 1024;
    this.hops = { messages: 0, rounds: 0, bytes: 0, calls: 0, ms: 0 };
    /** Sequential round trips of the token in progress. */
    this.rounds = 0;
    this.lastHopRounds = [];
    this.lastPrefillMs = 0;
    /** @type {{ status: string, reused: number } | null} */
    this.lastPrefix = null;
    this.lastTokenMs = [];
    /** Generations run together (KNOT_MAX_SEQUENCES), or null: one at a time. */
    this.batch = coordinator.maxSequences > 1 ? SequenceBatch.over(new SplitSequences(this), coordinator.maxSequences) : null;
    /** Rounds of each of the latest steps run together (newest last). */
    this.stepRounds = [];
    this.steps = 0;
    /** Hop assessments (KNOT_HOP_ASSESSMENT, assess.js): their settings, or null when off. */
    this.assess = null;
    /** The health monitor's report of the last pick, as a blob's spectral part (one generation at a time only). */
    this.spectral = null;
    /** Tokens picked in the generation running. */
    this.picks = 0;
    /** The blobs of the last hop through the chain, one per layer station. */
    this.lastAssessments = [];
  }

  /** Generations run together at most (undefined: one at a time). */
  get maxSequences() { return this.batch === null ? undefined : this.coordinator.maxSequences; }

  get vocabSize() { return this.coordinator.vocabSize; }
  get layerCount() { return this.coordinator.layerCount; }
  get contextLength() { return this.coordinator.contextLength; }

  encode(text) { return this.coordinator.encode(text); }
  applyChatTemplate(messages, options = {}) {
    const tools = options.tools === undefined ? undefined : JSON.stringify(options.tools);
    return this.coordinator.chatPrompt(JSON.stringify(messages), tools, options.addGenerationPrompt);
  }

  chatTemplateTools() { return this.coordinator.chatTemplateTools(); }

  // Explicit prefill windows need a conversation every layer station keeps on request; a split
  // model has implicit prefix replay only (the Worker turns the routes off in stations mode).
  createPrefillWindow() { return Promise.reject(noWindows()); }
  updatePrefillWindow() { return Promise.reject(noWindows()); }
  prefillWindow() { return null; }
  deletePrefillWindow() { return false; }
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
      ...(this.assess === null ? {} : { hopAssessments: this.lastAssessments }),
      // Run together: steps so far, the latest steps' rounds, generations running and waiting.
      ...(this.batch === null ? {} : {
        steps: this.steps,
        stepRounds: this.stepRounds,
        sequences: { active: this.batch.active, waiting: this.batch.waiting },
      }),
      // R2 reads at open and since (0), the embedding's mode, rounds of rows and misses.
      coordinator: this.coordinator.stats(),
    };
  }

  /** Nothing to take back: a generation holds no lock in this isolate's wasm across awaits. */
  async reclaim() {}

  /**
   * Each station's own figures (`GET /stats` of every station, all at once), loading its part
   * first if it has not. A station that answers with an error throws it. The calls count into
   * `meter` (the open's; the `/stations` route's own request is not metered).
   * @param {import('./meter.js').Meter | null} [meter]
   */
  async stationStats(meter = null) {
    const all = [...this.layers, ...this.heads];
    return Promise.all(all.map(async (s) => {
      const r = await callStation(this.env, s, 'stats', new Uint8Array(0), { timeoutMs: this.timeoutMs, meter });
      if (r === null) throw new StationError(`${s.name} did not answer within ${this.timeoutMs} ms`);
      return { station: s.name, ...JSON.parse(new TextDecoder().decode(r.bytes)) };
    }));
  }

  /**
   * One request of this isolate to a station (chain.js's `callStation`), counted: the answer's
   * bytes and the traffic behind them, or null when the station did not answer in time. A
   * station's error answer throws it. Its rounds count only where the caller says so (`round`):
   * a token's path, not bookkeeping.
   * @param {{ params?: string, headers?: Record<string, string>, timeoutMs?: number }} [options]
   */
  async call(station, path, body, options = {}) {
    const t0 = Date.now();
    const r = await callStation(this.env, station, path, body, { timeoutMs: this.timeoutMs, ...options });
    this.hops.calls++;
    this.hops.ms += Date.now() - t0;
    if (r === null) return null;
    this.hops.messages += r.traffic.messages;
    this.hops.bytes += r.traffic.bytes;
    return r;
  }

  /** `n` sequential round trips on the token's path (a fan-out counts once). */
  round(n = 1) {
    this.rounds += n;
    this.hops.rounds += n;
  }

  /**
   * Hidden states through the chain of layer stations; for the last message of a step
   * (`logits`), on to the head shards: their answers (a Uint8Array or an Error each), each its
   * logits with the embedding rows of its top `logitRows` ids.
   */
  async carry(message, logits) {
    const [first, ...next] = this.layers;
    const route = { next, heads: logits ? this.heads : null, top: this.coordinator.logitRows, timeoutMs: this.timeoutMs };
    const timeoutMs = chainTimeout(route);
    const headers = { 'x-knot-route': JSON.stringify(route) };
    if (this.assess !== null) headers['x-knot-assess'] = JSON.stringify({ hop: 0, spectral: this.spectral, settings: this.assess });
    const r = await this.call(first, 'step', message, { headers, timeoutMs });
    if (r === null) throw new StationError(`${first.name} did not answer within ${timeoutMs} ms`);
    this.round(r.traffic.rounds);
    if (this.assess !== null) this.lastAssessments = assessmentsOf(r.assessments);
    return logits ? unbundleAnswers(r.bytes, this.heads.length) : null;
  }

  /** The next token from the last message of a step (`positions` new positions). */
  async pick(message, positions) {
    const e = this.coordinator.pick(await this.carry(message, true), positions);
    // The last layer station asked the silent shards again already; none is missing here.
    if (e.retry !== undefined) throw new StationError(`head shards ${e.retry.join(', ')} gave no answer`);
    // What the next hops carry of this step's health (the generation's `health` option).
    const step = this.picks++;
    this.spectral = e.step?.health === undefined ? null : { step, report: e.step.health };
    return e;
  }

  /**
   * The embedding rows the next messages need that this isolate does not hold, from the head
   * shards owning them, all at once (one round; nothing when the table is resident, the rows
   * are cached, or they rode with the logits). A shard that does not answer is asked once more.
   */
  async fetchRows(wanted = this.coordinator.rowsWanted()) {
    if (wanted.length === 0) return;
    this.round();
    await Promise.all(wanted.map(async ({ slot, ids }) => {
      const head = this.heads[slot];
      const body = new Uint8Array(ids.buffer, ids.byteOffset, ids.byteLength);
      const r = (await this.call(head, 'rows', body)) ?? (await this.call(head, 'rows', body));
      if (r === null) throw new StationError(`${head.name} did not answer within ${this.timeoutMs} ms`);
      this.coordinator.addRows(slot, r.bytes);
    }));
  }

  /**
   * @param {Uint32Array} ids
   * @param {Record<string, unknown>} [options] the generation options (HostShim's), and `signal`
   */
  async *streamTokens(ids, options = {}) {
    // No explicit windows here (see createPrefillWindow).
    const { signal, reusePrefix, prefillWindow: _window, ...rest } = options;
    if (this.batch !== null) {
      // Run together: a cold prefill (no prefix replay), stepped with the others.
      this.lastPrefix = reusePrefix ? { status: 'miss', reused: 0 } : null;
      for await (const e of this.batch.run(ids, JSON.stringify(rest), signal)) {
        yield { id: e.id, text: e.text, finishReason: e.finishReason };
      }
      return;
    }
    let conversation = null;
    let kept = 0;
    this.lastPrefix = reusePrefix ? { status: 'miss', reused: 0 } : null;
    if (reusePrefix) {
      // Prefix replay: skip the prefill of a prefix only if every layer station holds it.
      const replay = this.coordinator.replayFor(ids);
      if (replay !== null) {
        const params = `&conversation=${replay.conversation}&len=${replay.len}&hash=${replay.hash}`;
        const answers = await Promise.all(this.layers.map((s) => this.call(s, 'claim', new Uint8Array(0), { params })
          .then((r) => (r === null ? null : JSON.parse(new TextDecoder().decode(r.bytes)).hit === true), () => null)));
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
    this.spectral = null;
    this.picks = 0;
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
        for (const m of messages.slice(0, -1)) await this.carry(m, false);
        const e = await this.pick(messages[messages.length - 1], positions);
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
        const keep = await Promise.all(this.layers.map((s) => this.call(s, 'keep', body, { params: `&conversation=${done.conversation}` })
          .then((b) => b !== null, () => false)));
        if (!keep.every(Boolean)) await this.forget(done.conversation);
        for (const c of done.forget) await this.forget(c);
      }
    }
  }

  /** Every layer station forgets `conversation` (best effort: one that fails has lost it anyway). */
  async forget(conversation) {
    await Promise.all(this.layers.map((s) => this.call(s, 'forget', new Uint8Array(0), { params: `&conversation=${conversation}` })
      .then(() => {}, () => {})));
  }
}

/**
 * The conversations of a SplitModel run together: what the package's SequenceBatch steps (its
 * `admit` / `cancel` / `step` / `drainReads`). A step: the rows its plan needs that this isolate
 * lacks (one round, when any), the bundle of every conversation's rows through the chain (one
 * call of this isolate), every conversation's pick. Conversations that end are forgotten by
 * the layer stations after the step; a step whose carry fails ends every conversation.
 */
class SplitSequences {
  /** @param {SplitModel} model */
  constructor(model) {
    this.model = model;
    /** @type {number[]} ended conversations the layer stations have not been told to forget */
    this.ended = [];
  }

  admit(ids, json) {
    const conversation = this.model.nextConversation++;
    this.model.coordinator.admit(conversation, ids, json);
    return conversation;
  }

  cancel(id) {
    if (this.model.coordinator.cancel(id)) this.ended.push(id);
  }

  async step() {
    const m = this.model;
    const co = m.coordinator;
    await this.drainReads();
    m.rounds = 0;
    let events;
    try {
      const wanted = co.planStep();
      if (wanted === null) return [];
      await m.fetchRows(wanted);
      const { message, logits } = co.stepMessage();
      events = co.pickStep(await m.carry(message, logits));
    } catch (err) {
      // The hop failed as a whole: the stations' state of every conversation is unknown.
      this.ended.push(...co.abandon());
      throw err;
    }
    m.steps++;
    m.stepRounds.push(m.rounds);
    if (m.stepRounds.length > 64) m.stepRounds.shift();
    for (const e of events) if (e.done) this.ended.push(e.sequence);
    return events;
  }

  /** The layer stations forget the conversations that ended (all at once). */
  async drainReads() {
    const ended = this.ended.splice(0);
    await Promise.all(ended.map((c) => this.model.forget(c)));
  }
}
