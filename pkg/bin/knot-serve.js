#!/usr/bin/env node
// knot-serve: an OpenAI-compatible server over a model file, in Node >= 20, Bun or Deno.
//
//   npx knot-serve models/model.knot [--port 8080] [--host 127.0.0.1] [--api-key-file keys.txt]
//
// On loopback it serves whoever asks; anywhere else it needs an API key (or --insecure).
// Every layer is resident (read once at start). Routes: /health, /stats, /v1/models,
// /v1/chat/completions, /v1/completions, /v1/audio/speech (needs the optional package
// espeak-ng), /prefill/windows. `--help` lists the options.
import { readFile } from 'node:fs/promises';
import process from 'node:process';
import { parseArgs } from 'node:util';
import { FileKnotSource, HostShim } from '../src/node.js';
import { AccessConfigError, createGate, parseApiKeys } from '../src/server.js';
import { createServer } from '../src/server.js';
import { listen } from '../src/serve.js';
import { knotFor } from '../src/gguf-cache.js';
import { agenticFromEnv, agenticSettings, closeStdioServers } from '../src/openai/index.js';
import { autoAudioMode, parseAudioMode, probeAudio, speechPlayback } from '../src/speech-playback.js';

const HELP = `usage: knot-serve MODEL.knot|MODEL.gguf [options]

  --port N                 port (default 8080; 0 picks a free one)
  --host ADDR              address to listen on (default 127.0.0.1); any address but loopback
                           needs an API key, or --insecure
  --api-key KEY            a key clients must send (Authorization: Bearer KEY, or x-api-key);
                           repeat for more. Prefer --api-key-file: a command line is visible to
                           other users of the machine
  --api-key-file FILE      keys, one per line (or JSON with scopes and limits: docs/security.md)
                           (default: KNOT_API_KEYS, the same text)
  --insecure               serve a non-loopback --host without a key: anyone who reaches it may
                           use the model (and the agentic loop's MCP servers)
  --cors-origin LIST       origins (comma-separated, or *) whose browser pages may call the
                           server (default: KNOT_CORS_ORIGINS; unset: none)
  --rate-limit N[/SEC]     requests each key may make per SEC seconds (default 60), bursting to
                           N; past it 429 with Retry-After (default: KNOT_RATE_LIMIT; unset: none)
  --concurrent-per-key N   generations each key may run at once (default: none)
  --max-body-bytes N       the largest request body (default 262144; past it 413)
  --max-messages N         the most messages a chat request may send (default 1024)
  --max-tools N            the most tools a chat request may send (default 256)
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

/** Whether `host` is an address only this machine reaches. */
function isLoopback(host) {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h) || h === '::ffff:127.0.0.1';
}

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
      'api-key': { type: 'string', multiple: true },
      'api-key-file': { type: 'string' },
      insecure: { type: 'boolean', default: false },
      'cors-origin': { type: 'string', default: process.env.KNOT_CORS_ORIGINS || undefined },
      'rate-limit': { type: 'string', default: process.env.KNOT_RATE_LIMIT || undefined },
      'concurrent-per-key': { type: 'string' },
      'max-body-bytes': { type: 'string', default: String(256 * 1024) },
      'max-messages': { type: 'string', default: '1024' },
      'max-tools': { type: 'string', default: '256' },
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

// Who may ask: keys, their limits, browser origins. Settled before the model opens, and a server
// others can reach without a key is refused unless its owner says so.
let gate;
try {
  const keyText = o['api-key-file'] !== undefined
    ? await readFile(o['api-key-file'], 'utf8').catch((e) => fail(`--api-key-file: ${e.message}`))
    : process.env.KNOT_API_KEYS ?? '';
  const keys = [
    ...(o['api-key'] ?? []).flatMap((k, i) => parseApiKeys(JSON.stringify([{ key: k, name: `arg-${i + 1}` }]), '--api-key')),
    ...parseApiKeys(keyText, o['api-key-file'] ?? 'KNOT_API_KEYS'),
  ];
  if (new Set(keys.map((k) => k.key)).size !== keys.length) throw new AccessConfigError('a key is given twice', '--api-key');
  const rate = /^(\d+)(?:\/(\d+))?$/.exec(o['rate-limit'] ?? '');
  if (o['rate-limit'] !== undefined && (rate === null || Number(rate[1]) < 1 || Number(rate[2] ?? 60) < 1)) {
    fail(`--rate-limit (or KNOT_RATE_LIMIT) must be N or N/SECONDS (whole numbers >= 1), got '${o['rate-limit']}'`);
  }
  gate = createGate({
    keys,
    corsOrigins: (o['cors-origin'] ?? '').split(',').map((x) => x.trim()).filter(Boolean),
    ...(rate === null ? {} : { rateLimit: { limit: Number(rate[1]), windowMs: Number(rate[2] ?? 60) * 1000 } }),
    ...(o['concurrent-per-key'] === undefined ? {} : { concurrent: int('concurrent-per-key', o['concurrent-per-key'], 1) }),
  });
} catch (e) {
  fail(e.message);
}
if (!gate.needsKey && !isLoopback(o.host) && !o.insecure) {
  fail(`refusing to serve ${o.host} without an API key: anyone who can reach it could use the model`
    + `${agentic.servers.length > 0 ? ' and call your MCP servers with their credentials' : ''}. `
    + 'Give --api-key-file FILE (or KNOT_API_KEYS), or --insecure if that is what you want.');
}
for (const origin of gate.report().cors_origins) {
  if (origin !== '*' && !/^https?:\/\/[^/\s]+$/.test(origin)) fail(`--cors-origin: '${origin}' is not an origin (scheme://host[:port], or *)`);
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
  gate,
  maxTokens: int('max-tokens', o['max-tokens'], 1),
  maxBodyBytes: int('max-body-bytes', o['max-body-bytes'], 1),
  maxMessages: int('max-messages', o['max-messages'], 1),
  maxTools: int('max-tools', o['max-tools'], 0),
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

server = await listen((request, peer) => handler(request, { client: peer.client }), { port: int('port', o.port), host: o.host });
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
      + `${audioMode === 'auto' ? ' (auto)' : ''}\n`)
  + (gate.needsKey ? `knot-serve: ${gate.report().keys} API key(s) required\n`
    : isLoopback(o.host) ? '' : `knot-serve: WARNING: serving ${o.host} without an API key (--insecure)\n`));

