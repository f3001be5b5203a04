// `npm run bench:bytes`: what a token costs on the wire between the stations, per kind of pick —
// greedy, JSON, penalties, top-p, temperature alone, MOA, the health monitor and draft mode (on
// a chat that copies, where drafts are kept) — for SmolLM2 2 + 2 and (with
// --gemma) Gemma-3-270M 4 + 4, all in workerd (Miniflare, local R2), each request a chat through
// the OpenAI route (so COLTRANE's class tier and terminal prosody run, as deployed). Per token:
// `back`, the head shards' answers coming back through the chain; `out`, the hidden states (and
// pick asks) going forward; `rowRounds`, rounds of `/rows` (Gemma's table is sharded across the
// head shards, SmolLM2's resident); `again`, rounds of `/again` over the request; `steps`, steps
// through the chain (fewer than tokens when drafts are kept). With --every-logit, the
// same requests with the head shards answering every logit (KNOT_CANDIDATES 0: before candidates).
// --vars K=V,K=V adds station variables to every run (KNOT_LOGIT_ROWS=4, say).
//   node scripts/bench-bytes.mjs [--tokens 16] [--gemma] [--every-logit] [--vars K=V,...]
import { join } from 'node:path';
import { REPO, startStations } from './local.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const TOKENS = arg('tokens', 16);
const GEMMA = process.argv.includes('--gemma');
const EVERY_LOGIT = process.argv.includes('--every-logit');
const EXTRA = Object.fromEntries((process.argv[process.argv.indexOf('--vars') + 1] ?? '')
  .split(',').filter((kv) => process.argv.includes('--vars') && kv.includes('=')).map((kv) => kv.split('=')));

const model = GEMMA
  ? { id: 'gemma-3-270m', key: 'gemma-3-270m.knot', file: join(REPO, 'models/gemma-3-270m.knot'), layers: 4, heads: 4 }
  : { id: 'SmolLM2-135M-Instruct', key: 'SmolLM2-135M-Instruct.Q4_1.knot', file: undefined, layers: 2, heads: 2 };
const MESSAGES = [{ role: 'user', content: 'Tell me a story about a lighthouse keeper.' }];
const MODES = [
  ['greedy', { temperature: 0 }],
  ['json_object (greedy)', { temperature: 0, response_format: { type: 'json_object' } }],
  ['T 0.7, presence 0.5, frequency 0.3', { temperature: 0.7, presence_penalty: 0.5, frequency_penalty: 0.3, seed: 3 }],
  ['T 0.8, top_p 0.9', { temperature: 0.8, top_p: 0.9, seed: 5 }],
  ['T 0.8', { temperature: 0.8, seed: 7 }],
  ['MOA', { seed: 9, moa: { k: 3 } }],
  ['health monitor, greedy', { temperature: 0, health: true }],
  ['health monitor, T 0.8', { temperature: 0.8, seed: 7, health: true }],
  ['draft mode, greedy', { temperature: 0, draft_mode: true }, 'copy'],
  ['draft mode, T 0.7, presence 0.3', { temperature: 0.7, presence_penalty: 0.3, seed: 3, draft_mode: true }, 'copy'],
];
const COPY = [{ role: 'user', content: 'Copy this text exactly: The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.' }];
const json = async (url) => (await fetch(url)).json();

async function run(label, vars) {
  const local = await startStations({
    layers: model.layers,
    heads: model.heads,
    modelKey: model.key,
    modelFile: model.file,
    vars: { MODEL_ID: model.id, MODEL_KEY: model.key, KNOT_MAX_TOKENS: String(TOKENS), ...EXTRA, ...vars },
  });
  const rows = [];
  try {
    for (const [mode, options, chat] of MODES) {
      const started = await json(`${local.url}/stations`);
      const before = started.hops;
      const res = await fetch(`${local.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: model.id, messages: chat === 'copy' ? COPY : MESSAGES, max_tokens: TOKENS, ...options }),
      });
      const body = await res.json();
      if (!res.ok) throw new Error(`${mode}: ${res.status} ${JSON.stringify(body)}`);
      const s = await json(`${local.url}/stations`);
      const after = s.hops;
      const tokens = body.usage.completion_tokens;
      // Rounds of `/rows` in the request: a picked token's embedding row that did not ride.
      const fetched = s.coordinator.generation?.rows;
      const back = after.back - before.back;
      const both = after.bytes - before.bytes;
      rows.push({
        config: label,
        mode,
        tokens,
        backKiBPerToken: +(back / tokens / 1024).toFixed(1),
        outKiBPerToken: +((both - back) / tokens / 1024).toFixed(1),
        again: after.again - before.again,
        steps: s.steps - started.steps,
        rowRounds: fetched?.rounds ?? null,
      });
    }
  } finally {
    await local.dispose();
  }
  return rows;
}

const split = `${model.id} ${model.layers} + ${model.heads}${Object.keys(EXTRA).length ? ` ${JSON.stringify(EXTRA)}` : ''}`;
const rows = await run(split, {});
if (EVERY_LOGIT) rows.push(...await run(`${split}, every logit`, { KNOT_CANDIDATES: '0' }));
console.log(`${TOKENS}-token chat requests through the OpenAI route, all in workerd; per token: back (answers), out (forward)`);
console.table(rows);
