// A GGUF given where a knot is expected (knot-serve): converted once into a `.knot-cache`
// directory next to it, named by the GGUF's size and modification time, and reused after.
import { mkdir, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/**
 * The knot file for `path`: itself, or its GGUF's cached conversion (made now if missing).
 * @param {string} path a .knot or .gguf file
 * @param {(line: string) => void} [log] told of a conversion
 * @returns {Promise<string>}
 */
export async function knotFor(path, log = () => {}) {
  if (!path.toLowerCase().endsWith('.gguf')) return path;
  const { size, mtimeMs } = await stat(path);
  const dir = join(dirname(path), '.knot-cache');
  const knot = join(dir, `${basename(path, '.gguf')}-${size}-${Math.floor(mtimeMs)}.knot`);
  try {
    await stat(knot);
    return knot;
  } catch {
    // Not converted yet.
  }
  await mkdir(dir, { recursive: true });
  log(`converting ${path} into ${knot} (once)\n`);
  const { convertGgufFile } = await import('./node.js');
  const t0 = Date.now();
  await convertGgufFile(path, knot);
  log(`converted in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  return knot;
}
