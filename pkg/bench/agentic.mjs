// The agentic loop's model time: the transcript of docs/agentic.md (SmolLM2 asked "What is 17
// multiplied by 23?" with tool_choice 'required' and the test MCP server's calculator: a call,
// its result, the answer) run through knot-serve, `model_ms` summed over the loop's steps. With
// `--baseline DIR`, the same against another checkout's knot-serve (e.g. a `git worktree` of an
// older commit, its package built), the two alternating run by run on the same machine, and the
// ratio of the medians printed.
//
//   node bench/agentic.mjs [--runs 5] [--baseline ../baseline] [--model models/SmolLM2….knot]
import { parseArgs } from 'node:util';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { startMcpServer } from '../test/mcp-server.js';
import { post, startServer } from '../test/servers.js';
import { ROOT, SMOL } from '../test/support.js';

const { values: o } = parseArgs({
  options: {
    runs: { type: 'string', default: '5' },
    baseline: { type: 'string' },
    model: { type: 'string', default: SMOL },
  },
});
const runs = Number(o.runs);

const mcp = await startMcpServer();
const dir = mkdtempSync(join(tmpdir(), 'knot-agentic-bench-'));
const config = join(dir, 'mcp.json');
writeFileSync(config, JSON.stringify([{ name: 'tools', url: `${mcp.url}/mcp` }]));

/** knot-serve of the checkout at `root`. */
const serve = (root) => startServer(process.execPath,
  [join(root, 'pkg/bin/knot-serve.js'), o.model, '--port', '0', '--model-id', 'm', '--max-context', '2048', '--mcp', config], {});

const request = {
  model: 'm', temperature: 0, max_tokens: 120, tool_choice: 'required',
  messages: [{ role: 'user', content: 'What is 17 multiplied by 23?' }], knot: { agentic: { servers: ['tools'] } },
};

/** One transcript: its steps' model time, prompt tokens, and the prefill reuse of each. */
async function transcript(url) {
  const r = await post(url, '/v1/chat/completions', request, { headers: { 'x-knot-agentic': 'tools' } });
  if (r.status !== 200) throw new Error(`${r.status}: ${r.text}`);
  const steps = r.json.knot.agentic.steps.filter((s) => !s.skipped);
  return {
    modelMs: steps.reduce((a, s) => a + s.model_ms, 0),
    steps: steps.map((s) => ({ prompt: s.prompt_tokens, completion: s.completion_tokens, ms: s.model_ms })),
    answer: r.json.choices[0].message.content,
  };
}

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

const sides = [{ name: 'this checkout', root: resolve(ROOT) }];
if (o.baseline !== undefined) sides.push({ name: `baseline ${o.baseline}`, root: resolve(o.baseline) });
const servers = [];
for (const side of sides) servers.push(await serve(side.root));
try {
  // One run each first: the layers' first reads and the tools listing are not what is measured.
  for (const s of servers) await transcript(s.url);
  const times = sides.map(() => []);
  let last = [];
  for (let r = 0; r < runs; r++) {
    // Alternate the order: a noisy neighbour then hits both sides alike.
    const order = r % 2 === 0 ? sides.map((_, i) => i) : sides.map((_, i) => i).reverse();
    for (const i of order) {
      const t = await transcript(servers[i].url);
      times[i].push(t.modelMs);
      last[i] = t;
    }
  }
  for (const [i, side] of sides.entries()) {
    console.log(`${side.name}: model time ${median(times[i])} ms (median of ${runs}; runs ${times[i].join(', ')}); steps ${JSON.stringify(last[i].steps)}; answer ${JSON.stringify(last[i].answer)}`);
  }
  if (sides.length === 2) console.log(`this checkout / baseline: ${(median(times[0]) / median(times[1])).toFixed(3)}x`);
} finally {
  for (const s of servers) s.child.kill();
  await mcp.close();
}
