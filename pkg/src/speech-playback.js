// knot-serve's speech playback: what the server does with each synthesized WAV besides
// answering it (KNOT_TTS_AUDIO_MODE, --tts-audio-mode): nothing, write it to a directory, or
// play it on the machine's sound card through ALSA's aplay. Node, Bun and Deno (node: modules).
import { spawn } from 'node:child_process';
import { accessSync, constants, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

export const TTS_AUDIO_MODES = Object.freeze(['none', 'file', 'alsa', 'auto']);

/**
 * The mode a flag or variable names; throws with the accepted ones otherwise.
 * @param {string} value
 * @returns {'none' | 'file' | 'alsa' | 'auto'}
 */
export function parseAudioMode(value) {
  if (!TTS_AUDIO_MODES.includes(value)) throw new Error(`must be ${TTS_AUDIO_MODES.join(', ')}, got '${value}'`);
  return /** @type {any} */ (value);
}

/**
 * What `auto` becomes: ALSA where it can play (Linux, aplay on the PATH, a sound card),
 * else files, so the audio is kept somewhere a person can play it.
 * @param {{ platform: string, aplay: boolean, soundDevice: boolean }} machine
 * @returns {'alsa' | 'file'}
 */
export const autoAudioMode = (machine) => (machine.platform === 'linux' && machine.aplay && machine.soundDevice ? 'alsa' : 'file');

/** This machine, as autoAudioMode reads it. */
export function probeAudio() {
  return { platform: process.platform, aplay: onPath('aplay'), soundDevice: hasSoundCard() };
}

/** @param {string} name */
function onPath(name) {
  return (process.env.PATH ?? '').split(delimiter).filter(Boolean).some((dir) => {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/**
 * A card in /proc/asound/cards (" 0 [PCH ]: ..."), or a playback device in /dev/snd. A path the
 * runtime will not look at counts as absent: Deno refuses /proc and /dev without --allow-all.
 */
function hasSoundCard() {
  try {
    if (/^\s*\d+ \[/m.test(readFileSync('/proc/asound/cards', 'utf8'))) return true;
  } catch { /* no ALSA in this kernel, or not ours to read */ }
  try {
    return readdirSync('/dev/snd').some((f) => /^pcmC\d+D\d+p$/.test(f));
  } catch {
    return false;
  }
}

/** The command that plays a WAV given on its standard input. */
export const aplayCommand = () => ({ command: 'aplay', args: ['-q', '-t', 'wav', '-'] });

/**
 * The server's `speech` option for a mode: `onAudio` writes or plays each WAV.
 * @param {'none' | 'file' | 'alsa'} mode (auto resolved already)
 * @param {{ dir?: string, log?: (line: string) => void }} [o] `dir`: file mode's directory
 *   (default: a new one under the system's temp directory)
 * @returns {Promise<{ mode: string, dir: string | null, speech: import('./types/openai.js').SpeechOptions }>}
 */
export async function speechPlayback(mode, o = {}) {
  const log = o.log ?? ((line) => process.stderr.write(`${line}\n`));
  if (mode === 'none') return { mode, dir: null, speech: {} };
  if (mode === 'file') {
    const dir = o.dir ?? await mkdtemp(join(tmpdir(), 'knot-tts-'));
    await mkdir(dir, { recursive: true });
    let n = 0;
    return {
      mode,
      dir,
      speech: {
        // Written before the response: the path in its header is there when the client reads it.
        onAudio: async (wav) => {
          const file = join(dir, `speech-${Date.now()}-${n++}.wav`);
          await writeFile(file, wav);
          return { 'x-knot-audio-file': file };
        },
      },
    };
  }
  // One at a time, in order, so answers do not talk over each other; never awaited by a response.
  let playing = Promise.resolve();
  return {
    mode,
    dir: null,
    speech: {
      onAudio: (wav) => {
        playing = playing.then(() => play(wav, log));
        return { 'x-knot-audio-playback': 'alsa' };
      },
    },
  };
}

/** Plays one WAV through aplay; resolves when it ended or failed (logged, never thrown). */
function play(wav, log) {
  const { command, args } = aplayCommand();
  return new Promise((resolve) => {
    let err = '';
    const child = spawn(command, args, { stdio: ['pipe', 'ignore', 'pipe'] });
    child.stderr.on('data', (d) => { err += d; });
    child.on('error', (e) => {
      log(`knot-serve: speech playback failed: ${command}: ${e.message}`);
      resolve(undefined);
    });
    child.on('close', (code) => {
      if (code !== 0 && code !== null) log(`knot-serve: speech playback failed: ${command} exited ${code}: ${err.trim()}`);
      resolve(undefined);
    });
    child.stdin.on('error', () => {}); // aplay gone early: its exit says why
    child.stdin.end(wav);
  });
}
