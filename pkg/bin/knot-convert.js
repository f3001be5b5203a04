#!/usr/bin/env node
// knot-convert: GGUF → knot without the Rust CLI (Node >= 20, Bun, Deno).
//   npx knot-convert model.gguf model.knot [--dtype keep|f32|f16|q8_0|q4_0|q4_k] [--name NAME]
// A progress bar on stderr when it is a terminal; otherwise one summary line at the end.
import process from 'node:process';
import { parseArgs } from 'node:util';
import { convertGgufFile } from '../src/node.js';

const USAGE = 'usage: knot-convert <input.gguf> <output.knot> [--dtype keep|f32|f16|q8_0|q4_0|q4_k] [--name NAME]';

function fail(message, status = 1) {
  process.stderr.write(`knot-convert: ${message}\n`);
  process.exit(status);
}

let args;
try {
  args = parseArgs({
    args: process.argv.slice(2),
    allowPositionals: true,
    options: {
      dtype: { type: 'string' },
      name: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
} catch (err) {
  fail(`${err.message}\n${USAGE}`, 2);
}
if (args.values.help) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}
if (args.positionals.length !== 2) fail(USAGE, 2);
const [input, output] = args.positionals;

const tty = process.stderr.isTTY === true;
const MiB = (n) => (n / (1 << 20)).toFixed(1);
let lastDraw = 0;
/** @param {number} done @param {number} total */
function progress(done, total) {
  if (!tty) return;
  const now = Date.now();
  if (done < total && now - lastDraw < 100) return;
  lastDraw = now;
  const width = 30;
  const frac = total > 0 ? done / total : 1;
  const filled = Math.round(frac * width);
  process.stderr.write(`\r[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${(frac * 100).toFixed(0).padStart(3)}%  ${MiB(done)}/${MiB(total)} MiB`);
}

const started = Date.now();
try {
  const s = await convertGgufFile(input, output, {
    onProgress: progress,
    ...(args.values.dtype !== undefined && { dtype: args.values.dtype }),
    ...(args.values.name !== undefined && { name: args.values.name }),
  });
  if (tty) process.stderr.write('\n');
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  process.stderr.write(`${output}: ${s.name} (${s.architecture}, ${s.nLayers} layers, ${s.nTensors} tensors, ${s.convertedTensors} converted), ${s.fileLen} bytes in ${seconds} s\n`);
} catch (err) {
  if (tty) process.stderr.write('\n');
  fail(err?.code ? `${err.message} [${err.code}]` : String(err?.stack ?? err));
}
