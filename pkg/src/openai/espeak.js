// eSpeak NG, the speech synthesizer behind /v1/audio/speech: the npm package `espeak-ng`
// (eSpeak NG's command line compiled to WebAssembly by Emscripten, its voice data inside the
// .wasm). It is GPL-3.0-or-later, so this package never bundles or requires it: it is an
// optional peer dependency, imported the first time speech is asked for (docs/speech.md).
import { ApiError } from './errors.js';
import { readWav } from './wav.js';

/** The package, and the version whose layout (dist/espeak-ng.wasm, its CLI) this file reads. */
export const ESPEAK_PACKAGE = 'espeak-ng';
export const ESPEAK_VERSION = '1.0.2';

/**
 * @typedef {{ samples: Int16Array, sampleRate: number }} Audio
 * @typedef {{ languages: Set<string>, variants: Set<string>,
 *   synthesize(o: { text: string, voice: string, wpm: number }): Promise<Audio> }} SpeechEngine
 */

const NODE_FS = 'node:fs/promises';

/** One load per package name; a failed load is forgotten, so installing it later works. */
const engines = new Map();

/**
 * The eSpeak NG engine, loaded once. Rejects with a 501 `speech_engine_missing` when the
 * package is not installed.
 * @param {string} [specifier] the package to import (tests name one that is not installed)
 * @returns {Promise<SpeechEngine>}
 */
export function loadEspeak(specifier = ESPEAK_PACKAGE) {
  let engine = engines.get(specifier);
  if (engine === undefined) {
    engine = openEngine(specifier);
    engines.set(specifier, engine);
    engine.catch(() => engines.delete(specifier));
  }
  return engine;
}

/** @param {string} specifier */
async function openEngine(specifier) {
  let factory;
  let wasmUrl;
  try {
    // A name in a variable: bundlers leave the import alone, so the GPL code never enters a
    // bundle of this package; it is resolved at run time, where it is installed.
    factory = (await import(/* @vite-ignore */ specifier)).default;
    wasmUrl = new URL('espeak-ng.wasm', import.meta.resolve(specifier));
  } catch (e) {
    throw missing(specifier, e);
  }
  // Also by a name in a variable: this module sits in bundles (the Worker's), which have no fs.
  const { readFile } = await import(/* @vite-ignore */ NODE_FS);
  // Compiled once; each synthesis instantiates it afresh (below).
  const module = await WebAssembly.compile(await readFile(wasmUrl));
  const run = (args, text = '') => runCli(factory, module, args, text);
  const languages = new Set(columns(await run(['--voices'])).map((c) => c[1].toLowerCase()));
  const variants = new Set(columns(await run(['--voices=variant']))
    .map((c) => c.find((x) => x.startsWith('!v/'))?.slice(3).toLowerCase())
    // This build has no Klatt synthesizer: eSpeak answers those variants "Bad voice attribute".
    .filter((v) => v !== undefined && !v.startsWith('klatt')));
  // One synthesis at a time: each holds a 32 MiB instance (the build's fixed memory), so the
  // line bounds the memory speech takes, whatever the number of requests.
  let line = Promise.resolve();
  return {
    languages,
    variants,
    synthesize({ text, voice, wpm }) {
      const turn = line.then(() => synthesizeOnce(run, text, voice, wpm));
      line = turn.then(() => {}, () => {});
      return turn;
    },
  };
}

/** @param {string} specifier @param {any} cause */
function missing(specifier, cause) {
  return new ApiError(501, `Speech synthesis needs the optional package ${specifier} (eSpeak NG, GPL-3.0-or-later), `
    + `which is not installed here: npm install ${specifier}@${ESPEAK_VERSION} (see docs/speech.md for the licence) `
    + `[${cause?.code ?? cause?.message ?? cause}]`, { code: 'speech_engine_missing' });
}

/**
 * Runs eSpeak NG's command line in a fresh instance: nothing one request leaves in its memory
 * or files can reach the next. The text goes in a file, never the command line, so text that
 * starts with '-' is spoken, not read as an option.
 * @returns {Promise<{ files: any, out: string[], err: string[] }>}
 */
function runCli(factory, module, args, text) {
  const out = [];
  const err = [];
  return new Promise((resolve, reject) => {
    factory({
      arguments: args,
      locateFile: (path) => path,
      preRun: [(m) => m.FS.writeFile('/in.txt', text)],
      instantiateWasm: (imports, ok) => {
        // eSpeak seeds the randomness of its voices (breath, jitter) from the wall clock: a
        // fixed clock makes the same request give the same audio, byte for byte.
        const env = { ...imports.env, emscripten_date_now: () => 0 };
        WebAssembly.instantiate(module, { ...imports, env }).then((instance) => ok(instance), reject);
        return {};
      },
      print: (line) => out.push(line),
      printErr: (line) => err.push(line),
    }).then((m) => resolve({ files: m.FS, out, err }), reject);
  });
}

/** The rows of eSpeak's `--voices` table, split on blanks, without the header. */
const columns = (r) => r.out.slice(1).map((line) => line.trim().split(/\s+/)).filter((c) => c.length >= 5);

/** @returns {Promise<Audio>} */
async function synthesizeOnce(run, text, voice, wpm) {
  const { files, err } = await run(['-v', voice, '-s', String(wpm), '-w', '/out.wav', '-f', '/in.txt'], text);
  let wav;
  try {
    wav = files.readFile('/out.wav');
  } catch {
    throw new Error(`eSpeak NG wrote no audio: ${err.filter((l) => !l.startsWith('program exited')).join(' ') || 'no message'}`);
  }
  const { samples, sampleRate, channels, bitsPerSample } = readWav(wav);
  if (channels !== 1 || bitsPerSample !== 16) throw new Error(`eSpeak NG wrote ${channels} channels of ${bitsPerSample} bits, not mono 16-bit`);
  return { samples, sampleRate };
}
