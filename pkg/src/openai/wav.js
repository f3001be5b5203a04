// WAV (RIFF/WAVE) for 16-bit PCM mono: written for /v1/audio/speech, read back from the
// synthesizer's output and by the tests. Small on purpose: one format, no dependency.

const HEADER_BYTES = 44;

/**
 * A WAV file of `samples` (16-bit signed, mono) at `sampleRate`.
 * @param {Int16Array} samples
 * @param {number} sampleRate
 * @returns {Uint8Array}
 */
export function encodeWav(samples, sampleRate) {
  const dataBytes = samples.length * 2;
  const bytes = new Uint8Array(HEADER_BYTES + dataBytes);
  const v = new DataView(bytes.buffer);
  const ascii = (at, s) => {
    for (let i = 0; i < s.length; i++) bytes[at + i] = s.charCodeAt(i);
  };
  ascii(0, 'RIFF');
  v.setUint32(4, HEADER_BYTES - 8 + dataBytes, true);
  ascii(8, 'WAVE');
  ascii(12, 'fmt ');
  v.setUint32(16, 16, true); // the fmt chunk's size for PCM
  v.setUint16(20, 1, true); // format 1: PCM
  v.setUint16(22, 1, true); // channels
  v.setUint32(24, sampleRate, true);
  v.setUint32(28, sampleRate * 2, true); // bytes per second
  v.setUint16(32, 2, true); // bytes per frame
  v.setUint16(34, 16, true); // bits per sample
  ascii(36, 'data');
  v.setUint32(40, dataBytes, true);
  pcmInto(samples, bytes.subarray(HEADER_BYTES));
  return bytes;
}

/**
 * Samples as raw little-endian 16-bit PCM (the byte order of WAV, whatever the machine's).
 * @param {Int16Array} samples
 * @returns {Uint8Array}
 */
export function encodePcm(samples) {
  return pcmInto(samples, new Uint8Array(samples.length * 2));
}

/** @param {Int16Array} samples @param {Uint8Array} out */
function pcmInto(samples, out) {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let i = 0; i < samples.length; i++) v.setInt16(i * 2, samples[i], true);
  return out;
}

/**
 * Reads a WAV file: its format fields and, for 16-bit PCM, its samples. Walks the chunks (a
 * writer may put others before `data`); throws on anything that is not RIFF/WAVE.
 * @param {Uint8Array} bytes
 * @returns {{ riffSize: number, format: number, channels: number, sampleRate: number,
 *   bitsPerSample: number, dataOffset: number, dataBytes: number, samples: Int16Array }}
 */
export function readWav(bytes) {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const tag = (at) => String.fromCharCode(...bytes.subarray(at, at + 4));
  if (bytes.byteLength < 12 || tag(0) !== 'RIFF' || tag(8) !== 'WAVE') throw new Error('not a RIFF/WAVE file');
  const riffSize = v.getUint32(4, true);
  let fmt = null;
  for (let at = 12; at + 8 <= bytes.byteLength;) {
    const id = tag(at);
    const size = v.getUint32(at + 4, true);
    const body = at + 8;
    if (id === 'fmt ') {
      fmt = {
        format: v.getUint16(body, true), channels: v.getUint16(body + 2, true),
        sampleRate: v.getUint32(body + 4, true), bitsPerSample: v.getUint16(body + 14, true),
      };
    } else if (id === 'data') {
      if (fmt === null) throw new Error('WAV data chunk before its fmt chunk');
      const dataBytes = Math.min(size, bytes.byteLength - body);
      const samples = new Int16Array(fmt.bitsPerSample === 16 ? dataBytes >> 1 : 0);
      for (let i = 0; i < samples.length; i++) samples[i] = v.getInt16(body + i * 2, true);
      return { riffSize, ...fmt, dataOffset: body, dataBytes: size, samples };
    }
    at = body + size + (size & 1); // chunks are padded to even sizes
  }
  throw new Error('WAV file without a data chunk');
}
