// Four clients, each a four-turn chat, at once against one server — then the same sixteen turns
// one after another — as a new user would run them: wall time of each, their ratio, and each
// turn's prefix reuse. Each pass runs on a server of its own, started the same way and warmed by
// one unrelated request (a server that had already seen the chats would serve their prompts from
// the conversations it kept). The server: knot-serve of this checkout started with no flags (its
// defaults), another checkout's (`--baseline DIR`), or a running one (`--url`, e.g. the Worker
// under `npm start` in examples/worker: there both passes share it, and they alternate which goes
// first).
//
//   node bench/chats.mjs [--runs 3] [--baseline ../baseline] [--url http://127.0.0.1:8787 --model M]
import { parseArgs } from 'node:util';
import { join, resolve } from 'node:path';
import { CHATS, chat, problems } from '../test/chats.js';
import { startServer } from '../test/servers.js';
import { ROOT, SMOL } from '../test/support.js';

const { values: o } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    baseline: { type: 'string' },
    url: { type: 'string' },
    model: { type: 'string', default: 'm' },
    'max-tokens': { type: 'string', default: '24' },
  },
});
const runs = Number(o.runs);
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const opts = { model: o.model, maxTokens: Number(o['max-tokens']) };

/** knot-serve of the checkout at `root`, with no flags but the port and the model's id. */
const serve = (root) => startServer(process.execPath, [join(root, 'pkg/bin/knot-serve.js'), SMOL, '--port', '0', '--model-id', 'm'], {});

/** A server for one pass: a fresh one of `root`, or the one at `url`; warmed. */
async function server(side) {
  const p = side.root === undefined ? null : await serve(side.root);
  const url = p?.url ?? side.url;
  await chat(url, ['Hello! Say one word.'], { ...opts, maxTokens: 8 });
  return { url, close: () => p?.child.kill() };
}

/** Every chat at once; the wall time and the turns. */
async function together(url) {
  const t0 = Date.now();
  const turns = await Promise.all(CHATS.map((c) => chat(url, c, opts)));
  return { ms: Date.now() - t0, turns };
}

/** The same chats one after another. */
async function alone(url) {
  const t0 = Date.now();
  const turns = [];
  for (const c of CHATS) turns.push(await chat(url, c, opts));
  return { ms: Date.now() - t0, turns };
}

const sides = o.url !== undefined ? [{ name: o.url, url: o.url }]
  : [{ name: 'this checkout', root: resolve(ROOT) }, ...(o.baseline ? [{ name: `baseline ${o.baseline}`, root: resolve(o.baseline) }] : [])];
for (const side of sides) {
  const ratios = [];
  let last;
  for (let r = 0; r < runs; r++) {
    // On a shared server the pass that goes first alternates.
    const order = side.root === undefined && r % 2 === 1 ? ['alone', 'together'] : ['together', 'alone'];
    const got = {};
    for (const pass of order) {
      const s = await server(side);
      try {
        got[pass] = await (pass === 'together' ? together(s.url) : alone(s.url));
      } finally {
        s.close();
      }
    }
    ratios.push(got.together.ms / got.alone.ms);
    last = got;
    console.log(`${side.name} run ${r + 1}: at once ${got.together.ms} ms, one after another ${got.alone.ms} ms (${(got.together.ms / got.alone.ms).toFixed(3)}x)`);
  }
  const hits = last.together.turns.flatMap((c) => c.slice(1)).map((t) => `${t.prefill}:${t.reused}`);
  console.log(`${side.name}: at once / one after another ${median(ratios).toFixed(3)}x (median of ${runs}); at once, turns after the first: ${hits.join(' ')}`);
  const found = problems({ together: last.together.turns, alone: last.alone.turns });
  console.log(found.length === 0 ? `${side.name}: every later turn a hit, answers equal alone` : `${side.name}: ${found.join('; ')}`);
}
