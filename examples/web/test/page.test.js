// The demo page in headless Chromium (Debian's, driven by playwright-core) against its own
// server: greedy output equal to the native CLI's (also at 1, 2 and 4 threads), the progress
// bar, a reload served from the Cache API, stop mid-generation, the quota fallback, errors, and the carrier panel.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ImageCarrierPipeline } from '../../../pkg/src/node.js';
import { startServer } from '../server.mjs';
import { encodePng, generateIn, haveChromium, launch, nativeChat, waitForState, watchConsole } from './browser.mjs';

const RESULTS = join(import.meta.dirname, '..', 'test-results');
const present = haveChromium();
if (!present) {
  console.error(`\n!!! Chromium is missing (${process.env.CHROMIUM ?? '/usr/bin/chromium'}): THE BROWSER TESTS ARE SKIPPED !!!\n`);
}
const modelReads = (log) => log.filter((e) => e.method === 'GET' && e.path.startsWith('/models/'));

describe('the demo page in headless Chromium', { skip: !present }, () => {
  /** @type {Awaited<ReturnType<typeof startServer>>} */
  let server;
  /** @type {import('playwright-core').Browser} */
  let browser;
  /** @type {import('playwright-core').BrowserContext} */
  let context;

  before(async () => {
    server = await startServer({ quiet: true });
    browser = await launch();
    context = await browser.newContext();
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  const pageUrl = (query) => `${server.url}/?${new URLSearchParams(query)}`;
  /** A new page of the shared context, loaded with `query` and ready, with its console watched. */
  const openReady = async (query = {}) => {
    const page = await context.newPage();
    const errors = watchConsole(page);
    await page.goto(pageUrl(query));
    await waitForState(page, ['ready']);
    return { page, errors };
  };

  test('generates the native CLI\'s greedy tokens, no console errors, progress at 100%', async () => {
    const page = await context.newPage();
    const errors = watchConsole(page);
    const prompt = 'What is the capital of France?';
    const n = 24;
    await page.goto(pageUrl({ prompt, n, greedy: 1, autorun: 1 }));
    await waitForState(page, ['done']);
    const result = await page.evaluate(() => window.knotResult);
    const native = await nativeChat([{ role: 'user', content: prompt }], n);
    assert.deepEqual(result.ids, native.ids);
    assert.equal(result.text.trim(), 'The capital of France is Paris.');
    assert.equal(await page.textContent('#output'), result.text);
    assert.ok(result.prefillTokS > 0 && result.decodeTokS > 0, JSON.stringify(result));
    const bar = await page.evaluate(() => [document.querySelector('progress#load').value, document.querySelector('progress#load').max]);
    assert.deepEqual(bar, [1, 1]);
    assert.match(await page.textContent('#load-status'), /^Ready: 30 layers/);
    assert.deepEqual(errors, []);
    // A second turn goes through the template with the history (and reuses the first's prefix).
    await page.fill('#prompt', 'And of Italy?');
    const second = await generateIn(page);
    const history = [{ role: 'user', content: prompt }, { role: 'assistant', content: result.text }, { role: 'user', content: 'And of Italy?' }];
    assert.deepEqual(second.ids, (await nativeChat(history, n)).ids);
    assert.equal(await page.locator('#history li').count(), 3);
    mkdirSync(RESULTS, { recursive: true });
    await page.screenshot({ path: join(RESULTS, 'page.png'), fullPage: true });
    await page.close();
  });

  test('threads: the same greedy tokens at 1, 2 and 4 threads, each on the build it names', async () => {
    const prompt = 'What is the capital of France?';
    const n = 16;
    const native = await nativeChat([{ role: 'user', content: prompt }], n);
    for (const threads of [1, 2, 4]) {
      const page = await context.newPage();
      const errors = watchConsole(page);
      await page.goto(pageUrl({ prompt, n, greedy: 1, autorun: 1, threads }));
      await waitForState(page, ['done']);
      const result = await page.evaluate(() => window.knotResult);
      assert.deepEqual(result.ids, native.ids, `${threads} threads`);
      assert.equal(result.threads, threads);
      assert.equal(result.wasmBuild, threads === 1 ? 'single' : 'threads');
      assert.match(await page.textContent('#load-status'), threads === 1 ? /one thread \(single-thread build\)/ : new RegExp(`${threads} threads \\(threaded build\\)`));
      assert.deepEqual(errors, []);
      await page.close();
    }
  });

  test('a reload is served from the Cache API: no layer reads reach the server; clear cache reads them again', async () => {
    // The first load fills the cache (or finds it filled by an earlier test); the page is ready
    // only once every span is stored.
    const { page, errors } = await openReady();
    const before = modelReads(server.log).length;
    await page.reload();
    await waitForState(page, ['ready']);
    assert.equal(modelReads(server.log).length, before, 'no GET of the model reached the server');
    assert.match(await page.textContent('#load-status'), /93\.3 MB from the cache/);
    await page.click('#clear-cache');
    await page.waitForSelector('#notice:not([hidden])');
    assert.match(await page.textContent('#notice'), /cleared/);
    await page.click('#open');
    await waitForState(page, ['loading']);
    await waitForState(page, ['ready']);
    assert.ok(modelReads(server.log).length >= before + 33, 'after clearing, every span came from the server');
    assert.deepEqual(errors, []);
    await page.close();
  });

  test('stop works mid-generation, and the next generation runs normally', async () => {
    const page = await context.newPage();
    await page.goto(pageUrl({ prompt: 'Write a long story about a dragon who learns to bake bread.', n: 400, greedy: 1 }));
    await waitForState(page, ['ready']);
    // Decoding runs at hundreds of tokens a second here, so the click comes from inside the page,
    // as soon as the reply has begun: still the real #stop button and its handler.
    await page.evaluate(() => new Promise((resolve) => {
      const output = document.querySelector('#output');
      const watch = new MutationObserver(() => {
        if (output.textContent.length < 10) return;
        watch.disconnect();
        document.querySelector('#stop').click();
        resolve(undefined);
      });
      watch.observe(output, { childList: true, characterData: true, subtree: true });
      document.querySelector('#generate').click();
    }));
    await waitForState(page, ['done']);
    const stopped = await page.evaluate(() => window.knotResult);
    assert.equal(stopped.finishReason, 'abort');
    assert.ok(stopped.ids.length > 0 && stopped.ids.length < 400, `${stopped.ids.length} tokens`);
    await page.click('#new-chat');
    await page.fill('#prompt', 'What is the capital of France?');
    await page.fill('#max-tokens', '12');
    const next = await generateIn(page);
    assert.deepEqual(next.ids, (await nativeChat([{ role: 'user', content: 'What is the capital of France?' }], 12)).ids);
    await page.close();
  });

  test('the MOA and COLTRANE toggles give the native CLI\'s tokens; COLTRANE\'s reply parses as JSON', async () => {
    const { page, errors } = await openReady({ greedy: 1 });
    const ask = async (prompt, n) => {
      await page.click('#new-chat');
      await page.fill('#prompt', prompt);
      await page.fill('#max-tokens', String(n));
      return generateIn(page);
    };
    const json = 'Describe a cat as JSON with name and age.';
    await page.check('#coltrane');
    const constrained = await ask(json, 48);
    assert.doesNotThrow(() => JSON.parse(constrained.text), constrained.text);
    assert.deepEqual(constrained.ids, (await nativeChat([{ role: 'user', content: json }], 48, ['--temperature', '0', '--constraint', 'json'])).ids);
    await page.uncheck('#coltrane');
    await page.check('#moa');
    const story = 'Write a haiku about rain.';
    const moa = await ask(story, 24);
    assert.deepEqual(moa.ids, (await nativeChat([{ role: 'user', content: story }], 24, ['--moa', '', '--seed', '42'])).ids);
    assert.deepEqual(errors, []);
    await page.close();
  });

  test('a full storage quota falls back to uncached reads with a visible notice', async () => {
    const isolated = await browser.newContext();
    try {
      const page = await isolated.newPage();
      const cdp = await isolated.newCDPSession(page);
      // Chromium's own quota machinery, set to 1 MB for this origin: the first big span fails.
      await cdp.send('Storage.overrideQuotaForOrigin', { origin: server.url, quotaSize: 1 << 20 });
      await page.goto(pageUrl({ prompt: 'What is the capital of France?', n: 8, greedy: 1, autorun: 1 }));
      await waitForState(page, ['done']);
      assert.match(await page.textContent('#notice'), /quota is full; the model is read from .* uncached/);
      assert.equal(await page.isVisible('#notice'), true);
      const result = await page.evaluate(() => window.knotResult);
      assert.deepEqual(result.ids, (await nativeChat([{ role: 'user', content: 'What is the capital of France?' }], 8)).ids);
    } finally {
      await isolated.close();
    }
  });

  test('a model URL that does not exist: error state, the notice names it, the page stays usable', async () => {
    const page = await context.newPage();
    await page.goto(pageUrl({ model: 'models/missing.knot' }));
    await page.waitForFunction(() => document.body.dataset.state === 'error', undefined, { timeout: 60_000 });
    assert.match(await page.textContent('#notice'), /404.*missing\.knot/);
    await page.fill('#model-url', `${server.url}/models/SmolLM2-135M-Instruct.Q4_1.knot`);
    await page.click('#open');
    await waitForState(page, ['ready']);
    await page.close();
  });

  test('the carrier panel draws one map per observer, equal to the package in Node', async () => {
    const { page, errors } = await openReady();
    const width = 40;
    const height = 24;
    const rgb = new Uint8Array(width * height * 3).map((_, i) => (i * 53 + (i >> 7) * 11) & 0xff);
    await page.setInputFiles('#carrier-image', { name: 'tiles.png', mimeType: 'image/png', buffer: encodePng(width, height, rgb) });
    await page.fill('#observer-bandwidths', '3, 7, 54');
    await page.fill('#patch-size', '4');
    await page.selectOption('#carrier-channel', '1');
    await page.click('#carrier-run');
    await page.waitForFunction(() => document.querySelectorAll('#carrier-maps canvas').length === 3);
    const shown = await page.evaluate(() => window.carrierResult);
    const columns = new ImageCarrierPipeline({ carrierBandwidth: 54, observerBandwidths: [3, 7, 54], patchSize: 4 })
      .analyzeColumnar({ width, height, channels: 3, sampleRange: 'byte', data: rgb });
    const n = columns.cellCount;
    const patches = columns.grid.patchesX * columns.grid.patchesY;
    assert.equal(patches, 10 * 6);
    for (let o = 0; o < 3; o++) {
      const at = (p) => o * n + p * 3 + 1;
      assert.deepEqual(shown.readings[o], Array.from({ length: patches }, (_, p) => columns.readings[at(p)]), `observer ${o}`);
      assert.deepEqual(shown.copyIndices[o], Array.from({ length: patches }, (_, p) => columns.copyIndices[at(p)]));
    }
    // Observer 54 is the carrier itself: every patch resolves; b = 3 resolves only some.
    assert.ok(shown.readings[2].every((r) => r === 1));
    assert.ok(shown.readings[0].some((r) => r === 0));
    assert.match(await page.textContent('#carrier-maps'), /b = 54: 60 of 60 resolved/);
    await page.fill('#observer-bandwidths', '3, x');
    await page.click('#carrier-run');
    await page.waitForFunction(() => /whole numbers/.test(document.querySelector('#carrier-status').textContent));
    assert.deepEqual(errors, []);
    mkdirSync(RESULTS, { recursive: true });
    await page.fill('#observer-bandwidths', '3, 7, 54');
    await page.click('#carrier-run');
    await page.waitForFunction(() => document.querySelectorAll('#carrier-maps canvas').length === 3);
    await page.locator('#carrier-maps').screenshot({ path: join(RESULTS, 'carrier.png') });
    await page.close();
  });
});
