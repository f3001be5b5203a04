// What the page's tests and bench share: Debian's Chromium driven by playwright-core, the page's
// own server, and the native CLI as the reference.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { deflateSync } from 'node:zlib';
import { REPO } from '../server.mjs';

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
export const haveChromium = () => existsSync(CHROMIUM);
export const KNOT_BIN = process.env.KNOT_BIN ?? join(REPO, 'target', 'release', 'knot');
export const SMOL_KNOT = join(REPO, 'models', 'SmolLM2-135M-Instruct.Q4_1.knot');

/** Flags for a closed network: no background connections, no sandbox as root, no GPU. */
export const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

/** Chromium through playwright-core (imported lazily: the tests list as skipped without it). */
export async function launch() {
  const { chromium } = await import('playwright-core');
  return chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
}

/**
 * Collects what a page says on its console and what it throws.
 * @param {import('playwright-core').Page} page
 */
export function watchConsole(page) {
  /** @type {string[]} */
  const errors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
    if (process.env.KNOT_TEST_VERBOSE) console.log(`[page] ${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`uncaught: ${e.message}`));
  return errors;
}

/**
 * Waits until the page's state is one of `states`; fails naming the notice on `error`.
 * @param {import('playwright-core').Page} page
 * @param {string[]} states
 * @param {number} [timeout]
 */
export async function waitForState(page, states, timeout = 180_000) {
  await page.waitForFunction(
    (wanted) => wanted.includes(document.body.dataset.state) || document.body.dataset.state === 'error',
    states, { timeout, polling: 50 },
  );
  const state = await page.evaluate(() => document.body.dataset.state);
  if (!states.includes(state)) {
    const notice = await page.textContent('#notice');
    throw new Error(`the page went to state ${state}: ${notice}`);
  }
  return state;
}

/**
 * Clicks #generate and waits for the run to end.
 * @param {import('playwright-core').Page} page
 * @returns {Promise<any>} the page's window.knotResult
 */
export async function generateIn(page) {
  await page.click('#generate');
  await waitForState(page, ['generating', 'done']);
  await waitForState(page, ['done']);
  return page.evaluate(() => window.knotResult);
}

const run = promisify(execFile);
const tmp = mkdtempSync(join(tmpdir(), 'knot-web-test-'));
let files = 0;

/**
 * The native CLI's generation for chat messages (greedy unless `flags` say otherwise): what the
 * page must give.
 * @param {{ role: string, content: string }[]} messages
 * @param {number} n
 * @param {string[]} [flags]
 */
export async function nativeChat(messages, n, flags = ['--temperature', '0']) {
  if (!existsSync(KNOT_BIN)) throw new Error(`${KNOT_BIN} is missing: run scripts/prepare-model.sh`);
  const file = join(tmp, `messages-${files++}.json`);
  writeFileSync(file, JSON.stringify(messages));
  const { stdout } = await run(KNOT_BIN, ['generate', SMOL_KNOT, '--messages', file, '-n', String(n), ...flags, '--json'],
    { encoding: 'utf8', maxBuffer: 1 << 26 });
  return JSON.parse(stdout);
}

/**
 * A PNG of RGB or RGBA pixels (8-bit, no filter, no interlace): the test images for the carrier
 * panel.
 * @param {number} width
 * @param {number} height
 * @param {Uint8Array} pixels
 * @param {3 | 4} [channels]
 */
export function encodePng(width, height, pixels, channels = 3) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (bytes) => {
    let c = 0xffffffff;
    for (const b of bytes) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    out.write(type, 4, 'latin1');
    Buffer.from(data).copy(out, 8);
    out.writeUInt32BE(crc(out.subarray(4, 8 + data.length)), 8 + data.length);
    return out;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  // 8-bit, truecolor (with alpha: 6), deflate, no filter, no interlace
  header.set([8, channels === 4 ? 6 : 2, 0, 0, 0], 8);
  const row = channels * width;
  const raw = Buffer.alloc(height * (1 + row));
  for (let y = 0; y < height; y++) {
    raw[y * (1 + row)] = 0; // filter: none
    Buffer.from(pixels.subarray(y * row, (y + 1) * row)).copy(raw, y * (1 + row) + 1);
  }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0)),
  ]);
}
