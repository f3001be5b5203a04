#!/usr/bin/env node
// knot-serve: an OpenAI-compatible server over a model file, in Node >= 20, Bun or Deno.
//
//   npx knot-serve models/model.knot [--port 8080] [--host 127.0.0.1]
//
// Every layer is resident (read once at start). Routes: /health, /stats, /v1/models,
// /v1/chat/completions, /v1/completions, /v1/audio/speech (needs the optional package
// espeak-ng), /prefill/windows. `--help` lists the options.
import { readFile } from 'node:fs/promises';
import process from 'node:process';
import { parseArgs } from 'node:util';
import { FileKnotSource, HostShim } from '../src/node.js';
import { createServer } from '../src/server.js';
import { listen } from '../src/serve.js';
import { knotFor } from '../src/gguf-cache.js';
import { agenticFromEnv, agenticSettings, closeStdioServers } from '../src/openai/index.js';
import { autoAudioMode, parseAudioMode, probeAudio, speechPlayback } from '../src/speech-playback.js';

const HELP = `usage: knot-serve MODEL.knot|MODEL.gguf [options]

  --port N                 port (default 8080; 0 picks a free one)
  --host ADDR              address to listen on (default 127.0.0.1)
  --model-id NAME          the model's id in requests (default: the file's name)
  --max-tokens N           the most max_tokens a request may ask, and the default (512)
  --max-context N          positions of the KV cache (default 4096, capped by the model)
  --kv-cache f16|f32       KV cache type (default f16)
  --memory-budget-mb N     refuse a model whose plan exceeds this (default: none)
  --chat-template FILE     a Jinja chat template used instead of the file's (a file without one
                           gets the one its special tokens imply: Gemma turns, ChatML, Llama 3)
  --parallel N|auto        requests answered at once, their tokens in one batch per step (each
                           as it would be alone; a KV cache each; default auto: 4, or as many as
                           --memory-budget-mb holds at the whole context)
  --prefix-windows N       KV caches kept beyond one per request, for the prefixes of more
                           conversations than run at once (default 4)
  --queue N                requests that may wait for the model (default 16; past it, 429)
  --queue-timeout-ms N     the longest a request waits for the model (default 120000; then 429)
  --terminal-prosody MODE  bias | observe | off (default: TERMINAL_PROSODY or bias)
  --no-prefix-reuse        prefill every prompt from the start
  --no-prefill-windows     turn off /prefill/windows (also KNOT_PREFILL_WINDOWS=0)
  --agentic MODE           on | off | request: the MCP tool loop for every chat request, for
                           none, or for requests that ask (default: KNOT_AGENTIC or request)
  --mcp FILE.json          MCP servers: { "mcpServers": { NAME: { command, args, env, cwd }
                           | { url, headers } } } as Claude Desktop, Cursor and VS Code write
                           it, or a list of { name, url | command, … } (default:
                           KNOT_MCP_SERVERS); stdio servers start once and are shared
  --agentic-allow LIST     URL prefixes (comma-separated, or *) the loop may call, and requests
                           may name (default: KNOT_AGENTIC_ALLOW; unset: the configured only)
  --tts-audio-mode MODE    what /v1/audio/speech does besides answering the audio: none | file
                           (also writes each WAV, its path in x-knot-audio-file) | alsa (also
                           plays it with aplay) | auto (alsa where a sound card and aplay are,
                           else file) (default: KNOT_TTS_AUDIO_MODE or none)
  --tts-audio-dir DIR      file mode's directory (default: KNOT_TTS_AUDIO_DIR or a new temp dir)

A .gguf is converted once into a .knot-cache directory next to it and reused after.`;

function fail(message) {
  process.stderr.write(`knot-serve: ${message}\n`);
  process.exit(2);
}

const int = (name, v, min = 0) => {
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min) fail(`--${name} must be an integer >= ${min}, got '${v}'`);
  return n;
};

let args;
try {
  args = parseArgs({
    allowPositionals: true,
    options: {
      port: { type: 'string', default: '8080' },
      host: { type: 'string', default: '127.0.0.1' },
      'model-id': { type: 'string' },
      'max-tokens': { type: 'string', default: '512' },
      'max-context': { type: 'string', default: '4096' },
      'kv-cache': { type: 'string', default: 'f16' },
      'memory-budget-mb': { type: 'string' },
      'chat-template': { type: 'string' },
      queue: { type: 'string', default: '16' },
      'queue-timeout-ms': { type: 'string', default: '120000' },
      parallel: { type: 'string', default: 'auto' },
      'prefix-windows': { type: 'string', default: '4' },
      'terminal-prosody': { type: 'string', default: process.env.TERMINAL_PROSODY || 'bias' },
      'no-prefix-reuse': { type: 'boolean', default: false },
      agentic: { type: 'string' },
      mcp: { type: 'string' },
      'agentic-allow': { type: 'string' },
      'tts-audio-mode': { type: 'string', default: process.env.KNOT_TTS_AUDIO_MODE || 'none' },
      'tts-audio-dir': { type: 'string', default: process.env.KNOT_TTS_AUDIO_DIR || undefined },
      'no-prefill-windows': { type: 'boolean', default: process.env.KNOT_PREFILL_WINDOWS === '0' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
} catch (e) {
  fail(`${e.message}\n\n${HELP}`);
}
const { values: o, positionals } = args;
if (o.help) {
  process.stdout.write(`${HELP}\n`);
  process.exit(0);
}
if (positionals.length !== 1) fail(`give one model file\n\n${HELP}`);
if (!['bias', 'observe', 'off'].includes(o['terminal-prosody'])) fail(`--terminal-prosody must be bias, observe or off, got '${o['terminal-prosody']}'`);
let audioMode;
try {
  audioMode = parseAudioMode(o['tts-audio-mode']);
} catch (e) {
  fail(`--tts-audio-mode (or KNOT_TTS_AUDIO_MODE) ${e.message}`);
}

// The agentic loop's settings: the environment, then the flags. Checked before the model opens.
let agentic;
try {
  agentic = agenticFromEnv({
    ...process.env,
    ...(o.agentic === undefined ? {} : { KNOT_AGENTIC: o.agentic }),
    ...(o.mcp === undefined ? {} : { KNOT_MCP_SERVERS: await readFile(o.mcp, 'utf8').catch((e) => fail(`--mcp: ${e.message}`)) }),
    ...(o['agentic-allow'] === undefined ? {} : { KNOT_AGENTIC_ALLOW: o['agentic-allow'] }),
  });
  agenticSettings(agentic);
} catch (e) {
  fail(`${o.mcp !== undefined && e.field === 'KNOT_MCP_SERVERS' ? e.message.replace('KNOT_MCP_SERVERS', o.mcp) : e.message}`);
}

// Speech playback, settled before the model opens: a bad directory fails at once.
const playback = await speechPlayback(audioMode === 'auto' ? autoAudioMode(probeAudio()) : audioMode, { dir: o['tts-audio-dir'] })
  .catch((e) => fail(`--tts-audio-dir: ${e.message}`));

const modelPath = await knotFor(positionals[0], (line) => process.stderr.write(line));
const modelId = o['model-id'] ?? positionals[0].replace(/^.*[\\/]/, '').replace(/\.(knot|gguf)$/, '');
const source = await FileKnotSource.open(modelPath);
const t0 = Date.now();
const parallel = o.parallel === 'auto' ? 'auto' : int('parallel', o.parallel, 1);
if (parallel !== 'auto' && parallel > 64) fail(`--parallel must be at most 64 or auto, got ${parallel}`);
let shim;
try {
  shim = await HostShim.open(source, {
    maxContext: int('max-context', o['max-context'], 1),
    kvCache: o['kv-cache'],
    maxSequences: parallel,
    prefixWindows: int('prefix-windows', o['prefix-windows']),
    ...(o['no-prefill-windows'] ? { prefillWindows: 0 } : {}),
    ...(o['memory-budget-mb'] === undefined ? {} : { memoryBudget: int('memory-budget-mb', o['memory-budget-mb'], 1) * 2 ** 20 }),
    ...(o['chat-template'] === undefined ? {} : { chatTemplate: await readFile(o['chat-template'], 'utf8') }),
    maxWaiting: int('queue', o.queue),
    waitTimeoutMs: int('queue-timeout-ms', o['queue-timeout-ms'], 1),
    stallMs: 120_000,
  });
} catch (e) {
  fail(`cannot open ${modelPath}: ${e.message}`);
}
const info = shim.info();
if (info.chatTemplate === null) {
  fail(`${modelPath} has no chat template and its special tokens imply none (not Gemma turns, ChatML or Llama 3 headers): `
    + 'give one with --chat-template FILE');
}
const { fetch: handler } = createServer(shim, {
  modelId,
  maxTokens: int('max-tokens', o['max-tokens'], 1),
  prefixReuse: !o['no-prefix-reuse'],
  prefillWindows: !o['no-prefill-windows'],
  terminalProsody: /** @type {any} */ (o['terminal-prosody']),
  agentic,
  speech: playback.speech,
});
// Graceful shutdown: stop taking connections, let the answers in flight end, free the model.
// (Set up before the startup line: whoever reads it may signal at once.)
/** @type {{ url: string, close(): Promise<void> } | undefined} */
let server;
let stopping = false;
const stop = async (signal) => {
  if (stopping) return;
  stopping = true;
  process.stderr.write(`knot-serve: ${signal}, shutting down\n`);
  const forced = setTimeout(() => process.exit(1), 10_000);
  await server?.close();
  await closeStdioServers();
  await shim.dispose();
  await source.close?.();
  clearTimeout(forced);
  process.stderr.write('knot-serve: stopped\n');
  process.exit(0);
};
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => stop(signal));
}

server = await listen(handler, { port: int('port', o.port), host: o.host });
const runtime = globalThis.Bun ? 'Bun' : globalThis.Deno ? 'Deno' : 'Node';
// One write: whoever waits for the URL reads the whole startup message with it.
const template = info.chatTemplate.name === null ? `${info.chatTemplate.source} chat template` : `${info.chatTemplate.name} chat template (implied)`;
process.stdout.write(`knot-serve: ${modelId} on ${server.url} (OpenAI API at ${server.url}/v1; ${runtime}; `
  + `${shim.layerCount} layers resident, context ${shim.contextLength}, `
  + `${shim.maxSequences} requests at once, prefix reuse ${o['no-prefix-reuse'] ? 'off' : 'on'}, ${template}, `
  + `opened in ${Date.now() - t0} ms)\n`
  + (agentic.mode !== 'off' && agentic.servers.length > 0
    ? `knot-serve: agentic loop ${agentic.mode === 'on' ? 'on for every chat request' : 'for requests that ask'}; `
      + `MCP servers: ${agentic.servers.map((s) => s.name).join(', ')}\n`
    : '')
  + (playback.mode === 'none' ? ''
    : `knot-serve: speech audio ${playback.mode === 'file' ? `written to ${playback.dir}` : 'played with aplay'}`
      + `${audioMode === 'auto' ? ' (auto)' : ''}\n`));

