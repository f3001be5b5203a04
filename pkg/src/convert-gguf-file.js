// convertGguf between two local files (Node, Bun, Deno): the knot is written to a temporary file
// beside the output and renamed into place once complete, so a half-written file never has the
// output's name.
import { open, rename, rm } from 'node:fs/promises';
import process from 'node:process';
import { basename, dirname, extname, join } from 'node:path';
import { convertGguf } from './convert-gguf.js';
import { FileKnotSource } from './file.js';

/**
 * @param {string} ggufPath
 * @param {string} knotPath
 * @param {{ onProgress?: (done: number, total: number) => void, dtype?: string, name?: string,
 *   wasm?: object }} [options] as convertGguf; a GGUF without a name is named after its file
 * @returns {Promise<import('./types/convert.js').ConvertSummary>}
 */
export async function convertGgufFile(ggufPath, knotPath, options = {}) {
  const source = await FileKnotSource.open(ggufPath);
  const base = basename(String(ggufPath));
  const temp = join(dirname(String(knotPath)),
    `.${basename(String(knotPath))}.${process.pid}.${Math.random().toString(36).slice(2)}.partial`);
  let handle;
  try {
    handle = await open(temp, 'wx');
    const out = handle;
    const sink = {
      /** @param {Uint8Array} bytes */
      async write(bytes) {
        let written = 0;
        while (written < bytes.byteLength) {
          const { bytesWritten } = await out.write(bytes, written, bytes.byteLength - written);
          written += bytesWritten;
        }
      },
      async close() {
        await out.sync();
      },
    };
    const summary = await convertGguf(source, sink, {
      fallbackName: base.slice(0, base.length - extname(base).length),
      ...options,
    });
    await handle.close();
    handle = undefined;
    await rename(temp, knotPath);
    return summary;
  } catch (err) {
    await handle?.close().catch(() => {});
    await rm(temp, { force: true }).catch(() => {});
    throw err;
  } finally {
    await source.close();
  }
}
