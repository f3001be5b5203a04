// Makes what the page needs with the project's own scripts when it is missing: the default model
// (and with --gemma Gemma-3-270M) as knot files, the wasm package's build, and with --chromium
// Debian's Chromium (apt-get, as root). Where Chromium cannot be installed it says so loudly and
// the browser tests skip.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { REPO } from '../server.mjs';
import { CHROMIUM } from '../test/browser.mjs';

const args = new Set(process.argv.slice(2));
const run = (cmd, argv) => execFileSync(cmd, argv, { cwd: REPO, stdio: ['ignore', 'inherit', 'inherit'] });

const models = args.has('--gemma')
  ? ['SmolLM2-135M-Instruct.Q4_1.knot', 'gemma-3-270m.knot', 'gemma-3-270m-q4_k_m.gguf', 'SmolLM2-135M-Instruct.Q4_1.gguf']
  : ['SmolLM2-135M-Instruct.Q4_1.knot'];
if (models.some((m) => !existsSync(join(REPO, 'models', m))) || !existsSync(join(REPO, 'target', 'release', 'knot'))) {
  console.error('[web] preparing the models (scripts/prepare-model.sh)');
  run(join(REPO, 'scripts', 'prepare-model.sh'), args.has('--gemma') ? ['--all'] : []);
}
if (!existsSync(join(REPO, 'pkg', 'dist', 'wasm', 'host_bg.wasm'))) {
  console.error('[web] building the wasm package (scripts/build-wasm.sh)');
  run(join(REPO, 'scripts', 'build-wasm.sh'), []);
}

if (args.has('--chromium') && !existsSync(CHROMIUM)) {
  const isRoot = process.getuid?.() === 0;
  try {
    if (!isRoot) throw new Error('not root');
    const apt = (argv) => execFileSync('apt-get', argv, {
      stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
    console.error('[web] installing Debian\'s chromium (apt-get)');
    try {
      apt(['install', '-y', '--no-install-recommends', 'chromium']);
    } catch {
      apt(['update']);
      apt(['install', '-y', '--no-install-recommends', 'chromium']);
    }
  } catch (err) {
    console.error('\n' + '!'.repeat(78));
    console.error(`[web] Chromium is missing at ${CHROMIUM} and could not be installed (${err.message}):`);
    console.error('[web] THE BROWSER TESTS WILL BE SKIPPED. Install it with `apt-get install chromium`');
    console.error('[web] or point CHROMIUM at a Chromium binary.');
    console.error('!'.repeat(78) + '\n');
  }
}
