// Generates an answer with the knot wasm package from a file source, in Node, Bun or Deno:
//   node examples/node/generate.mjs [model.knot] ["question"] [maxTokens] [--moa]
// Streams the answer (greedy, or MOA ensemble sampling with --moa), then prints prefill and
// decode speed and what was fetched.
import { HostShim, FileKnotSource } from '../../pkg/src/node.js';

const args = process.argv.slice(2);
const moa = args.includes('--moa');
const [path = 'models/SmolLM2-135M-Instruct.Q4_1.knot',
  question = 'What is the capital of France? Answer in one sentence.',
  maxTokens = '64'] = args.filter((a) => a !== '--moa');

const source = await FileKnotSource.open(path);
const t0 = performance.now();
const shim = await HostShim.open(source, { lruCapacity: 64 });
const openMs = performance.now() - t0;
try {
  const messages = [{ role: 'user', content: question }];
  const decoding = moa ? { moa: true, seed: 1 } : { temperature: 0 };
  for await (const piece of shim.stream(messages, { maxTokens: Number(maxTokens), ...decoding })) {
    process.stdout.write(piece);
  }
  process.stdout.write('\n');
  const s = shim.stats();
  // What the generation did (the report of the one that ended last): its prefill, and the time
  // between its tokens after the first.
  const g = s.generation;
  const decodeMs = g.tokenMs.reduce((a, b) => a + b, 0);
  const decodeTokS = g.tokenMs.length > 0 ? g.tokenMs.length / (decodeMs / 1000) : 0;
  console.error(
    `[wasm (${shim.wasmBuild === 'threads' ? `${shim.threads} threads` : 'one thread'}): ${g.prefillTokens} prompt tokens, ${(g.prefillTokens / (g.prefillMs / 1000)).toFixed(1)} tok/s prefill; ` +
    `${g.decodeTokens} generated, ${decodeTokS.toFixed(1)} tok/s decode; opened in ${openMs.toFixed(0)} ms; ` +
    `${(s.bytesFetched / 1048576).toFixed(1)} MiB in ${s.rangeReads} range reads]`,
  );
} finally {
  shim.dispose();
  await source.close();
}
