// A long document pasted into a chat, as a new user would: knot-serve with its defaults, one
// streamed request whose prompt is ~3,900 tokens of this repository's own docs. Reports the time to
// the first token, the server's prefill rate (its /stats record) and the server process's peak
// memory (VmHWM, Linux). Each checkout's server is fresh and warmed by one short request; with
// `--baseline DIR` another checkout's knot-serve runs the same request, the two alternating over
// `--runs`, so the ratio is measured in the same run.
//
//   node bench/long-prompt.mjs [--tokens 3900] [--runs 2] [--baseline ../baseline]
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { startServer } from '../test/servers.js';
import { ROOT, SMOL } from '../test/support.js';

const { values: o } = parseArgs({
  options: {
    tokens: { type: 'string', default: '3900' },
    runs: { type: 'string', default: '2' },
    baseline: { type: 'string' },
  },
});
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

// Real prose and code blocks: the docs, in a fixed order, cut to about the asked length (SmolLM2's
// tokenizer takes ~3.6 characters of them per token; the reply reports the exact count).
const docs = ['ARCHITECTURE.md', 'docs/coltrane.md', 'docs/batching.md', 'docs/agentic.md']
  .map((p) => readFileSync(join(ROOT, p), 'utf8')).join('\n\n');
const document = docs.slice(0, Math.round(Number(o.tokens) * 3.6));
const messages = [{ role: 'user', content: `Here is a document.\n\n${document}\n\nSummarize it in one sentence.` }];

/** Peak resident memory of a process, bytes (Linux; null elsewhere). */
function peakRss(pid) {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmHWM:'));
    return Number(line.split(/\s+/)[1]) * 1024;
  } catch {
    return null;
  }
}

/** One fresh server of the checkout at `root`: warmed, then the long request. */
async function once(root) {
  const s = await startServer(process.execPath, [join(root, 'pkg/bin/knot-serve.js'), SMOL, '--port', '0', '--model-id', 'm'], {});
  try {
    const ask = (body) => fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', temperature: 0, ...body }),
    });
    await (await ask({ messages: [{ role: 'user', content: 'Hello! Say one word.' }], max_tokens: 4 })).json();
    const t0 = performance.now();
    const r = await ask({ messages, max_tokens: 8, stream: true, stream_options: { include_usage: true } });
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let ttft = null;
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      if (ttft === null && text.includes('"delta":{"content"')) ttft = performance.now() - t0;
    }
    const usage = text.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)))
      .find((e) => e.usage)?.usage;
    const stats = await (await fetch(`${s.url}/stats`)).json();
    const record = stats.recent?.at(-1) ?? {};
    return { ttftMs: ttft, promptTokens: usage?.prompt_tokens, prefillTokS: record.prefill_tok_s ?? null, peakRss: peakRss(s.child.pid) };
  } finally {
    s.child.kill();
  }
}

const sides = [{ name: 'this checkout', root: resolve(ROOT) }, ...(o.baseline ? [{ name: `baseline ${o.baseline}`, root: resolve(o.baseline) }] : [])];
const got = new Map(sides.map((s) => [s.name, []]));
for (let r = 0; r < Number(o.runs); r++) {
  for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
    const m = await once(side.root);
    got.get(side.name).push(m);
    console.log(`${side.name} run ${r + 1}: ${m.promptTokens} prompt tokens, first token after ${(m.ttftMs / 1000).toFixed(2)} s`
      + `${m.prefillTokS === null ? '' : `, prefill ${m.prefillTokS.toFixed(1)} tok/s`}, peak RSS ${m.peakRss === null ? '?' : `${(m.peakRss / 2 ** 20).toFixed(0)} MiB`}`);
  }
}
const summary = sides.map((side) => {
  const ms = got.get(side.name);
  return { name: side.name, ttft: median(ms.map((m) => m.ttftMs)), rss: median(ms.map((m) => m.peakRss ?? 0)) };
});
for (const s of summary) console.log(`${s.name}: TTFT ${(s.ttft / 1000).toFixed(2)} s, peak RSS ${(s.rss / 2 ** 20).toFixed(0)} MiB (medians of ${o.runs})`);
if (summary.length === 2) {
  console.log(`TTFT this / baseline ${(summary[0].ttft / summary[1].ttft).toFixed(3)}x, peak RSS ${(summary[0].rss / summary[1].rss).toFixed(3)}x`);
}
