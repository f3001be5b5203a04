// The package's stations coordinator (knot-wasm/stations) driving the Worker's own station
// classes (src/stations.js) through the Worker's transport (src/transport.js), all in one Node
// process: each Durable Object binding a map of instances, R2 a bucket over the file in memory.
// No workerd, so it is quick; what it checks is the coordinator's bookkeeping (steps, claims,
// keeps, forgets) against what one process computes: SmolLM2 on 2 layer + 2 head stations, each
// generation equal to a HostShim's alone, run together or alone, resumed or cold.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { BufferKnotSource, HostShim } from 'knot-wasm';
import { Coordinator } from 'knot-wasm/stations';
import { HeadStation, LayerStation, stationOptions } from '../src/stations.js';
import { stationTable, transport } from '../src/transport.js';
import { modelFile } from '../scripts/local.mjs';

const bytes = readFileSync(modelFile());
/** The file under any key: each environment names its own, so that its stations open their parts
 * anew (an isolate keeps a part by its key, stations.js) with that environment's options. */
const MODELS = {
  async get(_key, { range }) {
    const part = bytes.subarray(range.offset, range.offset + range.length);
    return { arrayBuffer: async () => part.buffer.slice(part.byteOffset, part.byteOffset + part.byteLength) };
  },
};

/**
 * An environment binding every station as a Durable Object namespace of this process (each
 * object built on first use and kept, as workerd keeps it); `stationVars[binding]` adds vars to
 * that station's.
 */
let environments = 0;
function environment(vars, stationVars = {}) {
  const env = {
    MODELS, MODEL_KEY: `model-${environments++}.knot`, KNOT_MAX_CONTEXT: '256', ...vars,
    KNOT_STATIONS: JSON.stringify({ layers: ['LAYERS_0', 'LAYERS_1'], heads: ['HEADS_0', 'HEADS_1'] }),
  };
  const namespace = (binding, Class) => {
    const objects = new Map();
    return {
      idFromName: (name) => name,
      get(name) {
        if (!objects.has(name)) objects.set(name, new Class({}, { ...env, ...stationVars[binding] }));
        const object = objects.get(name);
        return { fetch: (url, init) => object.fetch(new Request(url, init)) };
      },
    };
  };
  for (const b of ['LAYERS_0', 'LAYERS_1']) env[b] = namespace(b, LayerStation);
  for (const b of ['HEADS_0', 'HEADS_1']) env[b] = namespace(b, HeadStation);
  return env;
}

/** The coordinator over `env`'s stations, as model.js opens it (`call`: the transport). */
async function coordinator(env, call = transport(env)) {
  const table = stationTable(env);
  return Coordinator.open(new BufferKnotSource(bytes), {
    ...stationOptions(env), layers: table.layers, heads: table.heads, call, timeoutMs: 10_000,
  });
}

/** A generation's text, and how its prompt was served. */
async function run(backend, prompt, options) {
  let text = '';
  let served = null;
  for await (const t of backend.streamTokens(prompt, options)) {
    if (t.prompt !== undefined) served = t.prompt;
    text += t.text;
  }
  return { text, served };
}

const OPTIONS = [
  { temperature: 0, maxTokens: 12, reusePrefix: true },
  { temperature: 0.9, topP: 0.95, seed: 7, maxTokens: 12, reusePrefix: true },
  { seed: 3, maxTokens: 12, moa: { k: 3 }, reusePrefix: true },
];
const CHATS = [
  [{ role: 'user', content: 'Name a colour.' }],
  [{ role: 'user', content: 'Write a haiku about rain.' }],
  [{ role: 'user', content: 'What is two plus two?' }],
];
/** The next turn of a chat: its history, the answer, a new question. */
const next = (messages, answer, question) => [...messages, { role: 'assistant', content: answer }, { role: 'user', content: question }];

describe('the stations coordinator in one process', () => {
  /** @type {HostShim} */
  let whole;
  before(async () => {
    whole = await HostShim.open(new BufferKnotSource(bytes), { kvCache: 'f16', maxContext: 256 });
  });
  after(() => whole?.dispose());
  /** What one process gives for `messages` cold. */
  const alone = async (messages, options) => (await run(whole, messages, { ...options, reusePrefix: false })).text;

  test('generations run together, and each next turn resumes its kept conversation: every one as one process alone', async () => {
    const env = environment({ KNOT_MAX_SEQUENCES: '3', KNOT_STATION_CONVERSATIONS: '6', KNOT_STATION_MAX_BATCH: '16' });
    const co = await coordinator(env);
    try {
      assert.equal(co.maxSequences, 3);
      assert.equal(co.info().chatTemplate.source, 'file');
      const first = await Promise.all(CHATS.map((m, i) => run(co, m, OPTIONS[i])));
      for (const [i, got] of first.entries()) {
        assert.equal(got.text, await alone(CHATS[i], OPTIONS[i]), `turn 1 of chat ${i}`);
        assert.equal(got.served.prefix.status, 'miss');
        assert.equal(got.served.tokens, co.countTokens(CHATS[i]));
      }
      const second = CHATS.map((m, i) => next(m, first[i].text, 'And then?'));
      const turn2 = await Promise.all(second.map((m, i) => run(co, m, OPTIONS[i])));
      for (const [i, got] of turn2.entries()) {
        assert.equal(got.text, await alone(second[i], OPTIONS[i]), `turn 2 of chat ${i}`);
        assert.equal(got.served.prefix.status, 'hit', JSON.stringify(got.served));
        assert.ok(got.served.prefix.reused >= first[i].served.tokens, JSON.stringify(got.served));
      }
      const s = co.stats();
      // A step is one call through the chain (2 layer stations and the head fan-out), and one
      // round of /again when a sampled pick needs more of the logits than the candidates.
      assert.ok(s.stepRounds.every((r) => r <= 4), JSON.stringify(s.stepRounds));
      assert.ok(s.hops.again > 0 && s.hops.again <= s.steps, JSON.stringify(s.hops));
      assert.ok(s.queue.peakActive >= 2, `ran together: ${s.queue.peakActive}`);
      assert.equal(s.coordinator.readsSinceOpen, 0);
      assert.equal(s.prefixReuse.hits, 3);
      assert.equal(s.prefixReuse.windowsHeld, 3);
    } finally {
      co.dispose();
    }
  });

  test('a claim a station does not grant runs the prompt whole; a failing station ends the generation it carried, and the next runs', async () => {
    // Layer station 1 fails its 3rd step once; `refuse` makes it answer a claim with a miss.
    const env = environment({ KNOT_MAX_SEQUENCES: '1', KNOT_STATION_CONVERSATIONS: '2' }, { LAYERS_1: { KNOT_STATION_FAIL_AT: '3' } });
    let refuse = false;
    const call = transport(env);
    const co = await coordinator(env, async (station, path, body, o) => {
      if (refuse && path === 'claim' && station.address === 'LAYERS_1') {
        return { bytes: new TextEncoder().encode('{"hit":false}'), traffic: { messages: 1, bytes: 0, rounds: 1, answer: 0 } };
      }
      return call(station, path, body, o);
    });
    try {
      await assert.rejects(run(co, CHATS[0], OPTIONS[0]), (e) => e.code === 'station_failed' && /layers-\d+-30: .*injected failure/.test(e.message));
      const told = [];
      const cold = await run(co, CHATS[0], { ...OPTIONS[0], onToken: (t) => told.push(t.text) });
      assert.equal(cold.text, await alone(CHATS[0], OPTIONS[0]));
      assert.equal(told.join(''), cold.text, 'onToken is told of every token');
      assert.equal(cold.served.prefix.status, 'miss', 'a failed generation is not kept');
      // Its next turn: kept, but station 1 does not grant the claim; the stations forget it and
      // the prompt runs whole, as one process runs it.
      const second = next(CHATS[0], cold.text, 'Why?');
      refuse = true;
      const missed = await run(co, second, OPTIONS[0]);
      refuse = false;
      assert.equal(missed.served.prefix.status, 'miss');
      assert.equal(missed.text, await alone(second, OPTIONS[0]));
      // And the turn after resumes the conversation that ran whole.
      const third = next(second, missed.text, 'Sure?');
      const hit = await run(co, third, OPTIONS[0]);
      assert.equal(hit.served.prefix.status, 'hit');
      assert.equal(hit.text, await alone(third, OPTIONS[0]));
      const s = co.stats();
      assert.equal(s.prefixReuse.hits, 1);
      assert.equal(s.coordinator.readsSinceOpen, 0);
    } finally {
      co.dispose();
    }
  });
});
