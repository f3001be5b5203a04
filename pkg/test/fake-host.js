// A stand-in for the wasm-bindgen WasmHost that HostShim drives (the contract at the top of
// src/shim.js), for the tests of the shim and its line without a model (shim.test.js) and of the
// OpenAI module over a shim (openai.test.js).

const utf8 = new TextDecoder();
/** Byte tokens: id = byte, decoded as lossy UTF-8 like a byte-level BPE. */
const decodeBytes = (ids) => utf8.decode(Uint8Array.from(ids));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A stand-in for the wasm-bindgen WasmHost (the contract at the top of src/shim.js) that records
 * its calls and plays the Rust side's part: `admit` takes a prompt (token ids, text, or `{ chat,
 * … }`, bytes for ids) and the options JSON; each `step` gives every admitted sequence its next
 * token — the bytes of `reply` one at a time, with the text a streaming decoder would give (a
 * split character comes out whole on its last byte), then id 0 (end of text, 'stop'), or
 * 'length' at maxTokens —, the last event of a sequence with its report. `stepMs` makes each step
 * take that long; `holdNext` makes the next step wait until `release()` (it then runs) or
 * `abort()`, which ends it as Rust does: every sequence in it fails with an AbortError (or, with
 * `unwindOnAbort` false, it never settles, as a step whose request was canceled).
 */
export function recordingHost(reply = 'ok', { maxSequences = 1, stepMs = 0 } = {}) {
  const calls = [];
  const bytes = [...new TextEncoder().encode(reply)];
  /** @type {Map<number, { pos: number, left: number, held: number[], made: number, promptTokens: number }>} */
  const seqs = new Map();
  let nextId = 1;
  /** @type {((events: object[]) => void) | undefined} */
  let aborted;
  /** The prompt as recorded: ids as an array, text and chat objects as they came. */
  const shown = (prompt) => (prompt instanceof Uint32Array ? Array.from(prompt) : prompt);
  const idsOf = (prompt) => {
    if (prompt instanceof Uint32Array) return Array.from(prompt);
    if (typeof prompt === 'string') return [...new TextEncoder().encode(prompt)];
    return [...new TextEncoder().encode(host.chatPrompt(prompt.chat) + (prompt.suffix ?? ''))];
  };
  const abortError = () => Object.assign(new Error('the call was aborted'), { name: 'AbortError', code: 'aborted' });
  const host = {
    calls,
    vocabSize: 256,
    layerCount: 4,
    contextLength: 64,
    maxSequences,
    eosIds: new Uint32Array([0]),
    busy: false,
    /** Make the next step wait for `abort()` (or `release()`, which lets it run). */
    holdNext: false,
    release: () => {},
    unwindOnAbort: true,
    encode: (text) => Uint32Array.from(new TextEncoder().encode(text)),
    decode: (ids) => decodeBytes(ids),
    chatPrompt: (json) => `<${JSON.parse(json).map((m) => m.content).join('|')}>`,
    chatTemplateTools: () => ({ takesTools: false, callTag: null }),
    countTokens: (prompt) => idsOf(prompt).length,
    admit(prompt, json) {
      const options = JSON.parse(json);
      calls.push(['admit', shown(prompt), options]);
      if (seqs.size >= maxSequences) throw Object.assign(new Error(`all ${maxSequences} sequences run`), { code: 'busy' });
      const id = nextId++;
      const promptTokens = idsOf(prompt).length;
      seqs.set(id, { pos: 0, left: options.maxTokens ?? 256, held: [], made: 0, promptTokens });
      return { id, promptTokens, prefix: options.reusePrefix ? { status: 'miss', reused: 0, prefilled: promptTokens, window: 0, kind: 'implicit', id: null } : null };
    },
    cancel(id) {
      calls.push(['cancel', id]);
      return seqs.delete(id);
    },
    async step() {
      calls.push('step');
      host.busy = true;
      try {
        if (host.holdNext) {
          host.holdNext = false;
          const ended = await new Promise((resolve) => {
            aborted = resolve;
            host.release = () => resolve(null);
          });
          aborted = undefined;
          if (ended !== null) return ended;
        }
        if (stepMs > 0) await sleep(stepMs);
        const events = [];
        for (const [id, s] of seqs) {
          const report = () => ({ promptTokens: s.promptTokens, decodeTokens: s.made, prefix: null });
          if (s.left === 0) {
            seqs.delete(id);
            events.push({ sequence: id, token: null, done: true, finishReason: 'length', report: report() });
            continue;
          }
          s.left--;
          s.made++;
          const tokenId = s.pos < bytes.length ? bytes[s.pos++] : 0;
          let text = '';
          if (tokenId !== 0) {
            s.held.push(tokenId);
            const piece = decodeBytes(s.held);
            if (!piece.endsWith('\uFFFD')) { text = piece; s.held = []; }
          }
          const finishReason = tokenId === 0 ? 'stop' : s.left === 0 ? 'length' : null;
          const done = finishReason !== null;
          if (done) seqs.delete(id);
          events.push({
            sequence: id, done, finishReason,
            token: { id: tokenId, text, finishReason, step: { token: tokenId, picker: 'greedy' } },
            ...(done ? { report: report() } : {}),
          });
        }
        return events;
      } finally {
        host.busy = false;
      }
    },
    reset() { calls.push('reset'); },
    async prefetchLayer(l) { calls.push(['prefetch', l]); },
    async drainReads() { calls.push('drain'); },
    dropReads() { calls.push('dropReads'); return 0; },
    async createPrefillWindow(prompt, json) {
      calls.push(['createPrefillWindow', shown(prompt), JSON.parse(json)]);
      return { id: 'pw-1-00000000', tokens: idsOf(prompt).length, expiresAt: 0, replaced: null };
    },
    async updatePrefillWindow(id, prompt, json) {
      calls.push(['updatePrefillWindow', id, prompt === undefined ? undefined : shown(prompt), JSON.parse(json)]);
      return { id, tokens: prompt === undefined ? 0 : idsOf(prompt).length, expiresAt: 0 };
    },
    prefillWindow: (id) => (id === 'pw-1-00000000' ? { id, tokens: 1, expiresAt: 0 } : null),
    prefillWindows: () => [],
    deletePrefillWindow: (id) => id === 'pw-1-00000000',
    stats: () => ({ misses: 1 }),
    info: () => ({ name: 'fake', maxSequences, chatTemplate: null }),
    abort() {
      calls.push('abort');
      if (aborted === undefined) return;
      const end = aborted;
      aborted = undefined;
      if (!host.unwindOnAbort) {
        // The wasm side unwound; the JS continuation of its call never runs.
        host.busy = false;
        return;
      }
      const events = [...seqs.keys()].map((id) => ({ sequence: id, token: null, done: true, finishReason: null, error: abortError() }));
      seqs.clear();
      end(events);
    },
    free() { calls.push('free'); },
    /** Sequences admitted and not ended. */
    get active() { return seqs.size; },
  };
  return host;
}

/** A recording host whose next step hangs (a read that never settles) until `abort()`. */
export function hangingHost(reply = 'abc', options = {}) {
  const host = recordingHost(reply, options);
  host.holdNext = true;
  return host;
}

/** The admit calls a host saw: [prompt, options]. */
export const admits = (host) => host.calls.filter((c) => Array.isArray(c) && c[0] === 'admit').map((c) => c.slice(1));
