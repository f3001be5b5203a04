// `npm run bench:parallel`: several requests at once on one isolate (KNOT_MAX_SEQUENCES), in
// workerd with wrangler.toml's settings otherwise (layers streamed from R2 through an LRU of 4,
// 96 MiB), under each profile (production's R2 latency simulated, scripts/profiles.mjs): for 1, 2
// and 4 concurrent streams, the aggregate and per-stream decode tok/s, ratios against one stream
// on the same isolate, in the same run. `--stations 2+2`: the model split across 2 layer
// stations and 2 head shards instead (the coordinator running the streams together, one hop
// through the chain per step for all of them).
//   node scripts/bench-parallel.mjs [--tokens 48] [--rounds 2] [--profiles local,prod] [--streams 1,2,4] [--stations L+H]
import { streamOnce as stream } from './stream.mjs';
import { startLocal, startStations, CONFIG } from './local.mjs';
import { describeProfile, profilesFromArgs } from './profiles.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const TOKENS = Number(arg('tokens', 48));
const ROUNDS = Number(arg('rounds', 2));
const STREAMS = arg('streams', '1,2,4').split(',').map(Number);
const PROFILES = profilesFromArgs(process.argv.slice(2), { list: true, fallback: 'local,prod' });
const MOST = Math.max(...STREAMS);
const STATIONS = arg('stations', null)?.split('+').map(Number) ?? null;
const MiB = 2 ** 20;
const ASKS = ['Write a long story about a lighthouse keeper and a storm.', 'Explain how rain forms, step by step.',
  'Describe a walk through a busy market.', 'Write a letter to a friend about a journey.',
  'Tell the history of bread.', 'Describe the life of a bee.', 'Write a story about a robot learning to paint.',
  'Explain how a bicycle works.'];
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** `n` streams at once: each one's decode tok/s (after its first token) and the slowest's time. */
async function together(url, n) {
  const t0 = performance.now();
  const runs = await Promise.all(ASKS.slice(0, n).map((content) => stream(url, '/v1/chat/completions', {
    model: CONFIG.vars.MODEL_ID, messages: [{ role: 'user', content }], temperature: 0, max_tokens: TOKENS,
  })));
  return { perStream: median(runs.map((r) => r.decodeTokS)), tokens: runs.reduce((s, r) => s + r.tokens, 0), ms: performance.now() - t0 };
}

const rows = [];
for (const profile of PROFILES) {
  console.log(`profile ${describeProfile(profile)}`);
  const vars = { KNOT_MAX_SEQUENCES: String(MOST) };
  const local = STATIONS === null
    ? await startLocal({ quiet: true, vars, profile })
    : await startStations({ quiet: true, layers: STATIONS[0], heads: STATIONS[1], vars, profile });
  try {
    await together(local.url, 1); // warm: the first reads
    const by = new Map(STREAMS.map((s) => [s, []]));
    for (let r = 0; r < ROUNDS; r++) for (const s of STREAMS) by.get(s).push(await together(local.url, s));
    const stats = await (await fetch(`${local.url}/stats`)).json();
    const split = STATIONS === null ? null : await (await fetch(`${local.url}/stations`)).json();
    const one = median(by.get(STREAMS[0]).map((x) => x.perStream));
    for (const s of STREAMS) {
      const perStream = median(by.get(s).map((x) => x.perStream));
      rows.push({
        profile: profile.name, streams: s, perStreamTokS: +perStream.toFixed(1), aggregateTokS: +(perStream * s).toFixed(1),
        xOneStream: +((perStream * s) / one).toFixed(2), msPerToken: +(1000 / perStream).toFixed(1),
        wasmMiB: +(stats.wasmMemoryBytes / MiB).toFixed(1),
        ...(split === null
          ? { planMiB: +(stats.memoryPlan.total / MiB).toFixed(1), context: stats.memoryPlan.context }
          : { roundsPerStep: Math.max(...split.stepRounds) }),
        peakActive: stats.queue.peakActive,
      });
    }
  } finally {
    await local.dispose();
  }
}
const where = STATIONS === null ? 'one isolate' : `${STATIONS[0]} layer stations + ${STATIONS[1]} head shards`;
console.log(`SmolLM2-135M-Instruct Q4_1 in workerd (${where}), KNOT_MAX_SEQUENCES=${MOST}, ${TOKENS} tokens per request, greedy, `
  + `medians of ${ROUNDS} rounds; aggregate = per-stream decode tok/s × streams (all decoding at once)`);
console.table(rows);
