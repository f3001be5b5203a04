// Bundles the Worker as wrangler does: esbuild with the Workers export conditions, the package's
// .wasm kept as a module of its own (CompiledWasm). Writes dist/ and reports the sizes against
// the Workers limits (3 MB compressed on the free plan, 10 MB paid).
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const DIST = join(ROOT, 'dist');

/**
 * @param {{ entry?: string, out?: string, quiet?: boolean }} [options]
 * @returns {Promise<{ modules: { type: string, path: string }[], sizes: object }>}
 */
export async function bundle(options = {}) {
  const entry = options.entry ?? join(ROOT, 'src/index.js');
  const out = options.out ?? join(DIST, 'index.js');
  mkdirSync(dirname(out), { recursive: true });
  const wasm = new Set();
  await esbuild.build({
    entryPoints: [entry],
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    conditions: ['workerd', 'worker', 'browser'],
    mainFields: ['module', 'main'],
    outfile: out,
    logLevel: 'warning',
    plugins: [{
      name: 'compiled-wasm',
      setup(build) {
        build.onResolve({ filter: /\.wasm$/ }, (args) => {
          const path = resolve(args.resolveDir, args.path);
          wasm.add(path);
          return { path: `./${basename(path)}`, external: true };
        });
      },
    }],
  });
  const modules = [{ type: 'ESModule', path: out }];
  for (const path of wasm) {
    const to = join(dirname(out), basename(path));
    copyFileSync(path, to);
    modules.push({ type: 'CompiledWasm', path: to });
  }
  const raw = modules.reduce((n, m) => n + readFileSync(m.path).byteLength, 0);
  const gzip = modules.reduce((n, m) => n + gzipSync(readFileSync(m.path), { level: 9 }).byteLength, 0);
  const sizes = { modules: modules.map((m) => basename(m.path)), bytes: raw, gzipBytes: gzip };
  if (!options.quiet) {
    console.log(`bundle: ${sizes.modules.join(' + ')}: ${(raw / 1e6).toFixed(2)} MB, ${(gzip / 1e6).toFixed(2)} MB gzipped (Workers limit: 3 MB free, 10 MB paid, compressed)`);
  }
  return { modules, sizes };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await bundle();
