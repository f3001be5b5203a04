// `npm run bench:stations`: a model split across stations against the whole model in one Worker,
// everything in workerd (Miniflare, local R2) and measured in the same run, rounds interleaved:
// decode tok/s, time to the first token cold (fresh isolates) and warm, round trips, messages and
// bytes per token between isolates, R2 reads and subrequests per request, and each isolate's wasm
// memory — under each profile (production's
// costs simulated, scripts/profiles.mjs), with ratios against `local` from the same run.
// With --every-logit, each split runs a second time with its head shards answering every logit
// (KNOT_CANDIDATES 0: how every step went before candidates), in the same run.
// With --temperature T (default 0: greedy), every request samples at T with a fixed seed. With
// --draft, each split runs a second time with its requests in draft mode, in the same run.
// xBound: a split's time per token against the same split's under `local` plus its round trips
// per token × the profile's hop (doCallMs): what the hops alone would add.
//   node scripts/bench-stations.mjs [--tokens 64] [--rounds 3] [--gemma] [--profiles local,prod]
//                                   [--subrequests free|N] [--every-logit] [--temperature 0.8]
//                                   [--draft]
import { streamOnce as stream } from './stream.mjs';
import { join } from 'node:path';
import { REPO, startLocal, startStations } from './local.mjs';
import { describeProfile, profilesFromArgs } from './profiles.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const TOKENS = arg('tokens', 64);
const ROUNDS = arg('rounds', 3);
const GEMMA = process.argv.includes('--gemma');
const EVERY_LOGIT = process.argv.includes('--every-logit');
const DRAFT = process.argv.includes('--draft');
const PICK = { temperature: arg('temperature', 0), ...(arg('temperature', 0) > 0 ? { seed: 7 } : {}) };
const PROFILES = profilesFromArgs(process.argv.slice(2), { list: true, fallback: 'local,prod' });
const MiB = 2 ** 20;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const json = async (url) => (await fetch(url)).json();

const model = GEMMA
  ? { id: 'gemma-3-270m', key: 'gemma-3-270m.knot', file: join(REPO, 'models/gemma-3-270m.knot'), splits: [[4, 4], [6, 4]] }
  : { id: 'SmolLM2-135M-Instruct', key: 'SmolLM2-135M-Instruct.Q4_1.knot', file: undefined, splits: [[2, 2], [4, 2]] };
const vars = { MODEL_ID: model.id, MODEL_KEY: model.key, KNOT_MAX_TOKENS: String(TOKENS) };
const PROMPT = 'Once upon a time, in a lighthouse on a rocky island, there lived a keeper who';
// SmolLM2 is asked in chat: with its template's default system prompt, 31 tokens.
const CHAT = [{ role: 'user', content: 'Tell me a story about a lighthouse keeper.' }];

/**
 * The request this bench times (`streamOnce` in stream.mjs): a chat, or for Gemma-3 (a base
 * model) a completion; `extra` fields added (draft mode).
 */
function streamOnce(url, extra = {}) {
  return GEMMA
    ? stream(url, '/v1/completions', { model: model.id, prompt: PROMPT, ...PICK, ...extra, max_tokens: TOKENS })
    : stream(url, '/v1/chat/completions', { model: model.id, messages: CHAT, ...PICK, ...extra, max_tokens: TOKENS });
}

/** The configurations, started under `profile`. */
async function start(profile) {
  const configs = [];
  try {
    if (!GEMMA) {
      // The whole model in one isolate, as deployed (layers streamed from R2 through an LRU of 4).
      configs.push({ name: 'one Worker (LRU 4)', local: await startLocal({ quiet: true, vars, profile }) });
      // The whole model resident in one isolate: over the 128 MB limit (not deployable), the bound.
      // (Gemma-3-270M has no one-Worker row: its 262144-row embedding alone is past an isolate.)
      configs.push({ name: 'one Worker, all resident', local: await startLocal({ quiet: true, vars: { ...vars, KNOT_LRU_CAPACITY: '64', KNOT_MEMORY_BUDGET_MB: '400' }, profile }) });
    }
    for (const [layers, heads] of model.splits) {
      const split = { layers, heads, modelKey: model.key, modelFile: model.file, profile };
      configs.push({ name: `${layers} layer + ${heads} head stations`, stations: true, local: await startStations({ ...split, vars }) });
      if (EVERY_LOGIT) {
        const every = { ...vars, KNOT_CANDIDATES: '0' };
        configs.push({ name: `${layers} + ${heads}, every logit`, stations: true, local: await startStations({ ...split, vars: every }) });
      }
      if (DRAFT) {
        configs.push({ name: `${layers} + ${heads}, draft mode`, stations: true, extra: { draft_mode: true }, local: await startStations({ ...split, vars }) });
      }
    }
  } catch (e) {
    await Promise.all(configs.map((c) => c.local.dispose()));
    throw e;
  }
  return configs;
}

/** Every configuration under one profile: a cold request each, then ROUNDS interleaved rounds. */
async function measure(profile) {
  const configs = await start(profile);
  try {
    for (const c of configs) {
      // Cold: fresh isolates — the open, every station's load (in parallel), the first layers read.
      c.cold = await streamOnce(c.local.url, c.extra);
      c.runs = [];
      c.hopsBefore = c.stations ? (await json(`${c.local.url}/stations`)).hops : null;
    }
    for (let r = 0; r < ROUNDS; r++) {
      for (const c of configs) {
        c.runs.push(await streamOnce(c.local.url, c.extra));
        // What that request spent (the coordinator's, for a split model: its R2 reads and its
        // calls to the stations).
        c.runs.at(-1).spent = (await json(`${c.local.url}/stats`)).last_request;
      }
    }
    const rows = [];
    for (const c of configs) {
      const tokens = c.runs.reduce((n, x) => n + x.tokens, 0);
      const coord = await json(`${c.local.url}/stats`);
      const row = {
        hopMs: profile.doCallMs,
        config: c.name,
        profile: profile.name,
        decodeTokS: +median(c.runs.map((x) => x.decodeTokS)).toFixed(1),
        xLocal: null,
        xBound: null,
        coldFirstMs: Math.round(c.cold.firstMs),
        firstTokenMs: Math.round(median(c.runs.map((x) => x.firstMs))),
        r2ReadsPerReq: median(c.runs.map((x) => x.spent.r2_reads)),
        subreqPerReq: median(c.runs.map((x) => x.spent.subrequests)),
        subreqPerToken: median(c.runs.map((x) => x.spent.subrequests_per_token)),
        roundsPerToken: null,
        msgsPerToken: null,
        kibPerToken: null,
        backKiBPerToken: null,
        againPerToken: null,
      };
      if (c.stations) {
        // Sequential round trips and messages (the stations' forwards included) per token.
        const s = await json(`${c.local.url}/stations`);
        row.roundsPerToken = +((s.hops.rounds - c.hopsBefore.rounds) / tokens).toFixed(2);
        row.msgsPerToken = +((s.hops.messages - c.hopsBefore.messages) / tokens).toFixed(2);
        row.kibPerToken = +((s.hops.bytes - c.hopsBefore.bytes) / tokens / 1024).toFixed(1);
        // The answers coming back (the head shards' logits or candidates), and /again rounds.
        row.backKiBPerToken = +((s.hops.back - c.hopsBefore.back) / tokens / 1024).toFixed(1);
        row.againPerToken = +((s.hops.again - c.hopsBefore.again) / tokens).toFixed(2);
        row.maxIsolateMiB = +(Math.max(coord.wasmMemoryBytes, ...s.stations.map((x) => x.wasmMemoryBytes)) / MiB).toFixed(1);
      } else {
        row.maxIsolateMiB = +(coord.wasmMemoryBytes / MiB).toFixed(1);
      }
      rows.push(row);
    }
    return rows;
  } finally {
    await Promise.all(configs.map((c) => c.local.dispose()));
  }
}

const rows = [];
for (const p of PROFILES) {
  console.log(`profile ${describeProfile(p)}`);
  rows.push(...await measure(p));
}
// Each configuration against itself under `local`, measured above.
for (const r of rows) {
  const local = rows.find((x) => x.config === r.config && x.profile === 'local');
  if (local) r.xLocal = +(r.decodeTokS / local.decodeTokS).toFixed(2);
  if (local && r.roundsPerToken !== null) {
    const bound = 1000 / local.decodeTokS + r.roundsPerToken * r.hopMs;
    r.xBound = +((1000 / r.decodeTokS) / bound).toFixed(2);
  }
}
for (const r of rows) delete r.hopMs;
// Each configuration's profiles side by side.
const table = [...new Set(rows.map((r) => r.config))].flatMap((config) => rows.filter((r) => r.config === config));
console.log(`${model.id}, ${TOKENS} tokens ${PICK.temperature > 0 ? `sampled at T ${PICK.temperature}` : 'greedy'}, medians of ${ROUNDS} interleaved rounds, all in workerd (Miniflare); `
  + 'xLocal: decode against the same configuration under local; R2 reads and subrequests: the coordinator\'s per request');
console.table(table);
for (const p of PROFILES) {
  const mine = rows.filter((r) => r.profile === p.name);
  const base = mine.find((r) => r.config === 'one Worker, all resident') ?? mine[0];
  for (const r of mine) console.log(`${p.name}: ${r.config}: decode ${(r.decodeTokS / base.decodeTokS).toFixed(2)}x of '${base.config}'`);
  // Where the per-invocation limit cuts a generation short (the prefill's reads aside).
  if (p.subrequests === null) continue;
  // A split model's calls per token are 1 (the chain) plus a fixed few per request (forgets,
  // claims: test/stations.test.js checks the growth is exactly one per token); a streaming
  // Worker's reads grow with its tokens.
  for (const r of mine.filter((x) => x.subreqPerToken > 0)) {
    const perToken = r.roundsPerToken === null ? r.subreqPerToken : 1;
    const fixed = r.roundsPerToken === null ? 0 : r.subreqPerReq - TOKENS;
    console.log(`${p.name}: ${r.config}: ${r.subreqPerReq} subrequests for ${TOKENS} tokens: the limit of ${p.subrequests} is met after about ${Math.floor((p.subrequests - fixed) / perToken)} tokens`);
  }
}
