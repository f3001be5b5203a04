// Coordinator: a model split across stations (layer stations running ranges of layers, head
// stations slices of the vocabulary), as a Backend of the server and the OpenAI module, as
// HostShim is. It holds the index, the tokenizer, the decode loop and the embedding rows
// (WasmCoordinator, crates/host/src/wasm/station.rs) and runs every generation through the
// package's one line (scheduler.js) as a sequence: `maxSequences` at once, each step one bundle
// of every running sequence's rows through the chain of stations (chain.js) — one call of the
// coordinator's whatever the number of sequences and stations — and each sequence able to resume
// a conversation the layer stations kept (prefix replay: its prefix claimed from every layer
// station before its first step, only the rest carried). Nothing on a step's path reads the
// file: the embedding rows are the coordinator's table, or the head stations' (a prompt's
// missing rows in one round, each picked token's riding with the logits that picked it).
//
// How a call reaches a station is the caller's (`call`; in the Worker, a Durable Object fetch):
// this module knows stations by the address the caller gave, the name and the part.
//
// The head shards answer a step with their largest logits and a bound on the rest (the
// coordinator's `candidates` option; 0: every logit); a pick they do not settle asks them for
// more of that step's logits (`/again`, straight from the coordinator, as many rounds as it
// takes: at most two), and is then exactly the pick every logit gives.
//
// `stats().hops`: `messages` counts every station request (the chain's too), `rounds` the
// sequential round trips (a fan-out to the head shards counts once; claims, keeps and forgets
// are bookkeeping and do not count), `bytes` both ways (`back` of them the answers', counted at
// every hop they cross; `answers` the head shards' answers as they reach the coordinator, each
// counted once), `again` the rounds of `/again`, `tokens` the picks made, `calls` the requests the coordinator made
// itself (its subrequests for generations: `stationStats` is not counted), `ms` its time
// waiting on them; `stepRounds` the rounds of the latest steps.
import { Scheduler } from '../scheduler.js';
import { coded } from '../errors.js';
import { isPlainObject, optionsJson, toCallback, toPrompt, toSignal } from '../convert.js';
import { resolveWasm, runtimeDefaults, wasmMemory } from '../resolver.js';
import { StationError, chainTimeout, unbundleAnswers } from './chain.js';
import { assessmentsOf } from './assess.js';

/** The options that stay in JS (the rest are the stations', read in Rust). */
const JS_OPTIONS = ['layers', 'heads', 'call', 'timeoutMs', 'hopAssessment', 'wasm'];
const LINE_OPTIONS = ['maxWaiting', 'waitTimeoutMs', 'stallMs', 'preemptMs', 'requestScopedIo', 'onTurn'];
const EMPTY = new Uint8Array(0);
/** Steps whose rounds `stats().stepRounds` keeps. */
const STEP_ROUNDS = 64;

const noWindows = () => coded('disabled', 'prefill windows are not available on a model split across stations', Error);

/**
 * @typedef {import('./chain.js').Hop} Hop
 * @typedef {import('./chain.js').Call} Call
 */

/** @implements {import('../types/openai.js').Backend} */
export class Coordinator {
  /** @type {any} the WasmCoordinator */
  #co;
  /** @type {Scheduler} */
  #line;
  /** @type {Call} */
  #transport;
  /** @type {WebAssembly.Memory | undefined} */
  #memory;
  /** A step is being carried (the line's target is busy), and the steps given up on. */
  #stepping = false;
  #disposed = false;
  #epoch = 0;
  /** How each sequence's claim was decided, until its first event carries it (`prefix`). */
  #claiming = new Map();
  /** Picks so far of each running sequence, and the health report of the latest pick. */
  #picks = new Map();
  /** @type {{ step: number, report: object } | null} */
  #spectral = null;
  /** @type {object | null} */
  #lastPrefix = null;
  #rounds = 0;

  /**
   * Opens the coordinator of a model split across stations over `source` (the knot file; read
   * at open only: the index, the tokenizer, the embedding table when it fits) and has every
   * station load its part, all at once.
   * @param {{ rangeGet(start: number, end: number): Promise<Uint8Array> }} source
   * @param {{ layers: string[], heads: string[], call: Call, timeoutMs?: number,
   *   hopAssessment?: object | null, wasm?: object } & Record<string, unknown>} options
   *   `layers` and `heads`: each station's address, in order (what `call` reaches it by);
   *   `call`: the transport; `timeoutMs`: a station call's (default 60000); `hopAssessment`:
   *   settings (assess.js) or null; the line's options (`maxWaiting`, `waitTimeoutMs`,
   *   `stallMs`, `preemptMs`, `requestScopedIo`, `onTurn`: scheduler.js); the rest are the
   *   stations' options (crates/host/src/station/options.rs), with `headShards` the heads.
   * @returns {Promise<Coordinator>}
   */
  static async open(source, options) {
    if (!isPlainObject(options)) throw coded('invalid_argument', 'Coordinator.open: options must be an object');
    const rest = { ...options };
    /** @type {Record<string, any>} */
    const own = {};
    for (const key of [...JS_OPTIONS, ...LINE_OPTIONS]) {
      if (key in rest) own[key] = rest[key];
      delete rest[key];
    }
    const addresses = (list, what) => {
      if (!Array.isArray(list) || list.length === 0 || list.some((a) => typeof a !== 'string')) {
        throw coded('invalid_option', `Coordinator.open: ${what} must list each station's address, got ${JSON.stringify(list)}`);
      }
      return list;
    };
    const layers = addresses(own.layers, 'layers');
    const heads = addresses(own.heads, 'heads');
    const call = /** @type {Call} */ (toCallback(own.call, 'call'));
    if (call === undefined) throw coded('invalid_option', 'Coordinator.open: call (the transport to the stations) is required');
    const timeoutMs = own.timeoutMs ?? 60000;
    if (typeof timeoutMs !== 'number' || !(timeoutMs > 0)) throw coded('invalid_option', `Coordinator.open: timeoutMs must be > 0, got ${String(timeoutMs)}`);
    if ('headShards' in rest) throw coded('invalid_option', 'Coordinator.open: headShards is the number of heads; give heads instead');
    const ns = await resolveWasm(own.wasm);
    const co = await ns.WasmCoordinator.open(source, optionsJson({ ...rest, headShards: heads.length }));
    /** @type {Hop[]} */
    const layerHops = co.layerRanges(layers.length).map(([a, b], i) => ({ address: layers[i], name: `layers-${a}-${b}`, query: `layers=${a}-${b}` }));
    /** @type {Hop[]} */
    const headHops = co.headSlices().map(([a, b], i) => ({ address: heads[i], name: `rows-${a}-${b}`, query: `rows=${a}-${b}` }));
    const line = Object.fromEntries(LINE_OPTIONS.filter((k) => k in own).map((k) => [k, own[k]]));
    const model = new Coordinator(co, wasmMemory(ns), call, layerHops, headHops, timeoutMs, own.hopAssessment ?? null, line);
    try {
      // The first step would otherwise wait for each station's load in turn, as it reaches it.
      // A station that cannot load fails the open.
      await model.stationStats();
    } catch (e) {
      model.dispose();
      throw e;
    }
    return model;
  }

  /**
   * Use Coordinator.open.
   * @param {any} co @param {WebAssembly.Memory | undefined} memory @param {Call} call
   * @param {Hop[]} layers @param {Hop[]} heads @param {number} timeoutMs
   * @param {object | null} assess @param {Record<string, any>} line
   */
  constructor(co, memory, call, layers, heads, timeoutMs, assess, line) {
    this.#co = co;
    this.#memory = memory;
    this.#transport = call;
    /** The layer stations, in order, and the head stations, by slot. */
    this.layers = layers;
    this.heads = heads;
    this.timeoutMs = timeoutMs;
    /** Hop assessments' settings (assess.js), or null: off. */
    this.assess = assess;
    this.hops = { messages: 0, rounds: 0, bytes: 0, back: 0, answers: 0, again: 0, tokens: 0, calls: 0, ms: 0 };
    this.steps = 0;
    /** Rounds of each of the latest steps (newest last). */
    this.stepRounds = [];
    /** The blobs of the last hop through the chain, one per layer station. */
    this.lastAssessments = [];
    const self = this;
    // What the line runs: admissions and cancellations between steps, steps, and (drainReads)
    // the layer stations told what to keep and forget once a step is done.
    const target = {
      admit: (prompt, json) => self.#admit(prompt, json),
      cancel: (id) => self.#ended([id]) && self.#live().cancel(id),
      step: () => self.#step(),
      drainReads: () => self.#settle(),
      abort: () => self.#abort(),
      dropReads: () => {},
      get busy() {
        return self.#stepping;
      },
    };
    this.#line = new Scheduler(target, {
      slots: co.maxSequences,
      ...line,
      requestScopedIo: line.requestScopedIo ?? runtimeDefaults().requestScopedIo,
      onIdle: () => {
        if (this.#disposed) this.#free();
      },
    });
  }

  /** Sequences run together at most (the others wait in line). */
  get maxSequences() {
    return this.#live().maxSequences;
  }

  get contextLength() {
    return this.#live().contextLength;
  }

  get vocabSize() {
    return this.#live().vocabSize;
  }

  get layerCount() {
    return this.#live().layerCount;
  }

  /** @param {string} text @returns {Uint32Array} */
  encode(text) {
    return this.#live().encode(text);
  }

  chatTemplateTools() {
    return this.#live().chatTemplateTools();
  }

  /** @param {unknown} prompt */
  countTokens(prompt) {
    return this.#live().countTokens(toPrompt(prompt));
  }

  info() {
    return this.#live().info();
  }

  // A split model has prefix replay only: explicit prefill windows would need a conversation
  // every layer station pins on request.
  createPrefillWindow() {
    return Promise.reject(noWindows());
  }

  updatePrefillWindow() {
    return Promise.reject(noWindows());
  }

  prefillWindow() {
    return null;
  }

  deletePrefillWindow() {
    return false;
  }

  /**
   * A generation, token by token, through the line: the first token says how the prompt was
   * served (`prompt: { tokens, prefix }`), the last what the generation did (`report`).
   * @param {unknown} prompt token ids, text, or chat messages (as HostShim takes them)
   * @param {Record<string, unknown>} [options] the generation options, `signal`, `priority`,
   *   `tag` (what the steps it runs count their I/O against: the line's `onTurn`), and as
   *   HostShim's `onToken` (each token as yielded) and `onStep` (each step's report)
   */
  async *streamTokens(prompt, options = {}) {
    if (!isPlainObject(options)) throw coded('invalid_argument', 'options must be an object');
    const { signal, priority, tag, onToken, onStep, ...rest } = /** @type {Record<string, any>} */ (options);
    if (priority !== undefined && typeof priority !== 'boolean') throw coded('invalid_option', 'priority must be true or false');
    const tell = toCallback(onToken, 'onToken');
    const step = toCallback(onStep, 'onStep');
    const p = toPrompt(prompt);
    const json = optionsJson(rest);
    const run = this.#line.generate(p, json, { signal: toSignal(signal), priority: priority === true, preemptible: true, tag });
    for await (const e of run) {
      const t = /** @type {any} */ (e);
      const token = {
        id: t.id, text: t.text, finishReason: t.finishReason,
        ...(t.prompt === undefined ? {} : { prompt: t.prompt }),
        ...(t.constraint === undefined ? {} : { constraint: t.constraint }),
        ...(t.health === undefined ? {} : { health: t.health }),
        ...(t.report === undefined ? {} : { report: t.report }),
      };
      step?.(t.step);
      tell?.(token);
      yield token;
    }
  }

  /**
   * The coordinator's figures: its memory, the hops, the steps and the sequences, the kept
   * conversations' reuse, the line (`queue`), and the coordinator's own (`coordinator`: reads
   * of the file, 0 after open; the embedding).
   */
  stats() {
    const s = this.#live().sequenceStats();
    return {
      wasmMemoryBytes: this.#memory?.buffer.byteLength,
      contextLength: this.contextLength,
      prefix: this.#lastPrefix,
      stations: { layers: this.layers.map((h) => h.name), heads: this.heads.map((h) => h.name) },
      hops: { ...this.hops },
      steps: this.steps,
      stepRounds: [...this.stepRounds],
      sequences: s.sequences,
      prefixReuse: s.prefixReuse,
      ...(this.assess === null ? {} : { hopAssessments: this.lastAssessments }),
      coordinator: this.#live().stats(),
      queue: this.#line.stats,
    };
  }

  /**
   * Each station's own figures (`stats` of every station, all at once), loading its part first
   * if it has not. A station that answers with an error throws it. Not counted in `hops`: they
   * report what generations cost, and reading them must not change them.
   */
  async stationStats() {
    return Promise.all([...this.layers, ...this.heads].map(async (s) => {
      const r = await this.#transport(s, 'stats', EMPTY, { timeoutMs: this.timeoutMs });
      if (r === null) throw new StationError(`${s.name} did not answer within ${this.timeoutMs} ms`);
      return { station: s.name, ...JSON.parse(new TextDecoder().decode(r.bytes)) };
    }));
  }

  /**
   * No new generations; those waiting or running fail. Frees the coordinator now, or once the
   * step in flight has unwound.
   */
  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#line.dispose(coded('disposed', 'Coordinator: used after dispose()', Error));
    if (!this.#stepping) this.#free();
  }

  /** The WasmCoordinator, while not disposed. */
  #live() {
    if (this.#co === undefined) throw coded('disposed', 'Coordinator: used after dispose()', Error);
    return this.#co;
  }

  #free() {
    const co = this.#co;
    if (co === undefined) return;
    this.#co = undefined;
    co.free?.();
  }

  /**
   * Sequences that ended outside a step's events: what was kept for them goes.
   * @param {number[]} ids
   */
  #ended(ids) {
    for (const id of ids) {
      this.#claiming.delete(id);
      this.#picks.delete(id);
    }
    return true;
  }

  /** @param {unknown} prompt @param {string} json */
  #admit(prompt, json) {
    const a = this.#live().admit(prompt, json);
    // With a claim, its prefix is known once the stations answer it (its first step): its first
    // event says so (`prefix`).
    this.#lastPrefix = a.prefix;
    return { id: a.id, promptTokens: a.promptTokens, prefix: a.prefix };
  }

  /**
   * One step of every running sequence: the layer stations told what to keep and forget, the
   * claims of the sequences admitted since, the rows the plan needs that are not here (one
   * round), the bundle through the chain (one call), every sequence's pick. A step whose carry
   * fails ends the sequences in it, each told the error; the others go on.
   */
  async #step() {
    const epoch = this.#epoch;
    const current = () => epoch === this.#epoch;
    this.#stepping = true;
    try {
      // Keeps and forgets owed (where the line does not drain after each step), the claims,
      // then the forgets of claims not granted: all before a step carries those conversations.
      await this.#settle();
      await this.#claims(current);
      await this.#settle();
      if (!current()) return [];
      this.#rounds = 0;
      const wanted = this.#live().planStep();
      if (wanted === null) return [];
      let answers, message, logits, step, pick, top;
      try {
        await this.#fetchRows(wanted);
        if (!current()) return [];
        ({ message, logits, step, pick, top } = this.#live().stepMessage());
        answers = await this.#carry(message, logits, { top, pick, step });
      } catch (error) {
        if (!current()) return [];
        // The hop failed as a whole: what the stations hold of the step's sequences is unknown.
        const ended = this.#live().abandon();
        this.#ended(ended);
        return ended.map((sequence) => ({ sequence, token: null, done: true, finishReason: null, error }));
      }
      if (!current()) return [];
      const events = this.#live().pickStep(answers);
      // Picks the first answers did not settle: more of the step's logits, from the shards
      // that hold them. A round that fails ends those sequences, as a failed carry would.
      for (let asked = this.#live().again(); asked.length > 0; asked = this.#live().again()) {
        const more = await this.#again(asked, step);
        if (!current()) return [];
        events.push(...this.#live().pickAgain(more));
      }
      this.hops.tokens += events.filter((e) => e.token !== null).length;
      this.steps++;
      this.stepRounds.push(this.#rounds);
      if (this.stepRounds.length > STEP_ROUNDS) this.stepRounds.shift();
      for (const e of events) {
        this.#picked(e);
        // The first event of a sequence whose claim was decided says how its prompt was served.
        const decided = this.#claiming.get(e.sequence);
        if (decided !== undefined) {
          e.prefix = decided;
          this.#claiming.delete(e.sequence);
        }
      }
      return events;
    } finally {
      if (current()) this.#stepping = false;
      if (this.#disposed && !this.#stepping) this.#free();
    }
  }

  /**
   * Keeps what the next hops carry of a pick's health (the generation's `health` option) and
   * each sequence's pick count.
   * @param {{ sequence: number, token: any, done: boolean }} e
   */
  #picked(e) {
    const n = this.#picks.get(e.sequence) ?? 0;
    const health = e.token?.step?.health;
    if (health !== undefined) this.#spectral = { step: n, report: health };
    if (e.done) this.#picks.delete(e.sequence);
    else this.#picks.set(e.sequence, n + 1);
  }

  /**
   * Every layer station's answer to each claim waiting, all at once: a sequence resumes its
   * conversation only if every station grants it.
   * @param {() => boolean} current
   */
  async #claims(current) {
    const claims = this.#live().claims();
    await Promise.all(claims.map(async ({ sequence, len, hash }) => {
      const params = `&conversation=${sequence}&len=${len}&hash=${hash}`;
      const answers = await Promise.all(this.layers.map((s) => this.#call(s, 'claim', EMPTY, { params })
        .then((r) => (r === null ? null : JSON.parse(new TextDecoder().decode(r.bytes)).hit === true), () => null)));
      if (!current()) return;
      const { prefix } = this.#live().claimed(sequence, answers);
      if (prefix != null) {
        this.#claiming.set(sequence, prefix);
        this.#lastPrefix = prefix;
      }
    }));
  }

  /**
   * The layer stations told what the coordinator decided between steps: the conversations to
   * keep (a station that does not take one has it forgotten by all) and to forget.
   */
  async #settle() {
    for (;;) {
      const { keep, forget } = this.#live().settle();
      if (keep.length === 0 && forget.length === 0) return;
      await Promise.all([
        ...keep.map(async ({ conversation, ids }) => {
          const body = new Uint8Array(ids.buffer, ids.byteOffset, ids.byteLength);
          const params = `&conversation=${conversation}`;
          const kept = await Promise.all(this.layers.map((s) => this.#call(s, 'keep', body, { params }).then((r) => r !== null, () => false)));
          if (!kept.every(Boolean)) this.#live().keepFailed(conversation);
        }),
        ...forget.map((c) => this.#forget(c)),
      ]);
    }
  }

  /** Every layer station forgets `conversation` (best effort: one that fails has lost it anyway). */
  async #forget(conversation) {
    await Promise.all(this.layers.map((s) => this.#call(s, 'forget', EMPTY, { params: `&conversation=${conversation}` })
      .then(() => {}, () => {})));
  }

  /**
   * A step given up on (it stalled: its request will never resume it). Its sequences end; the
   * line cancels the others.
   */
  #abort() {
    if (!this.#stepping) return;
    this.#epoch++;
    this.#stepping = false;
    this.#ended(this.#live().abandon());
  }

  /**
   * The embedding rows the step needs that this isolate does not hold, from the head shards
   * owning them, all at once (one round; nothing when the table is resident, the rows are
   * cached, or they rode with the logits). A shard that does not answer is asked once more.
   * @param {{ slot: number, ids: Uint32Array }[]} wanted
   */
  async #fetchRows(wanted) {
    if (wanted.length === 0) return;
    this.#round();
    await Promise.all(wanted.map(async ({ slot, ids }) => {
      const head = this.heads[slot];
      const body = new Uint8Array(ids.buffer, ids.byteOffset, ids.byteLength);
      const r = (await this.#call(head, 'rows', body)) ?? (await this.#call(head, 'rows', body));
      if (r === null) throw new StationError(`${head.name} did not answer within ${this.timeoutMs} ms`);
      this.#live().addRows(slot, r.bytes);
    }));
  }

  /**
   * A step's bundle through the chain of layer stations; when a part wants logits, on to the
   * head shards: their answers (a Uint8Array or an Error each), each a bundle of one answer per
   * part wanting logits, with the embedding rows of its top ids.
   * @param {Uint8Array} message @param {boolean} logits
   * @param {{ top: number, pick: number, step: number }} ask what the head shards send back
   */
  async #carry(message, logits, ask) {
    const [first, ...next] = this.layers;
    const route = { next, heads: logits ? this.heads : null, ...ask, timeoutMs: this.timeoutMs };
    const timeoutMs = chainTimeout(route);
    /** @type {Record<string, string>} */
    const headers = { 'x-knot-route': JSON.stringify(route) };
    if (this.assess !== null) headers['x-knot-assess'] = JSON.stringify({ hop: 0, spectral: this.#spectral, settings: this.assess });
    const r = await this.#call(first, 'step', message, { headers, timeoutMs });
    if (r === null) throw new StationError(`${first.name} did not answer within ${timeoutMs} ms`);
    this.#round(r.traffic.rounds);
    if (logits) this.hops.answers += r.bytes.byteLength;
    if (this.assess !== null) this.lastAssessments = assessmentsOf(r.assessments ?? null);
    return logits ? unbundleAnswers(r.bytes, this.heads.length) : null;
  }

  /**
   * One round of `/again`: each head shard asked for more of the step's logits at once (one
   * that does not answer in time asked once more), its answer bytes or an Error, in order.
   * @param {{ slot: number, body: string }[]} asked @param {number} step
   */
  async #again(asked, step) {
    this.#round();
    this.hops.again++;
    return Promise.all(asked.map(async ({ slot, body }) => {
      const head = this.heads[slot];
      const bytes = new TextEncoder().encode(body);
      const ask = () => this.#call(head, 'again', bytes, { params: `&step=${step}` });
      try {
        const r = (await ask()) ?? (await ask());
        if (r !== null) this.hops.answers += r.bytes.byteLength;
        return r === null ? new StationError(`${head.name} did not answer within ${this.timeoutMs} ms`) : r.bytes;
      } catch (e) {
        return e instanceof Error ? e : new Error(String(e));
      }
    }));
  }

  /** `n` sequential round trips on a step's path (a fan-out counts once). */
  #round(n = 1) {
    this.#rounds += n;
    this.hops.rounds += n;
  }

  /**
   * One call of the coordinator's to a station, counted: the answer's bytes and the traffic
   * behind them, or null when the station did not answer in time. A station's error answer
   * throws it.
   * @param {Hop} station @param {string} path @param {Uint8Array} body
   * @param {{ params?: string, headers?: Record<string, string>, timeoutMs?: number }} [options]
   */
  async #call(station, path, body, options = {}) {
    const t0 = Date.now();
    try {
      const r = await this.#transport(station, path, body, { timeoutMs: this.timeoutMs, ...options });
      if (r !== null) {
        this.hops.messages += r.traffic.messages;
        this.hops.bytes += r.traffic.bytes;
        this.hops.back += r.traffic.back;
      }
      return r;
    } finally {
      this.hops.calls++;
      this.hops.ms += Date.now() - t0;
    }
  }
}
