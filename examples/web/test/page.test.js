// The demo page in headless Chromium (Debian's, driven by playwright-core) against its own
// server: greedy output equal to the native CLI's (also at 1, 2 and 4 threads), the progress
// bar, a reload served from the Cache API, stop mid-generation, the quota fallback, errors, and the carrier panel.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  ImageCarrierPipeline, attachDeblurEnsembleToMeshCarrierAssessmentJson, buildAlphaBoundaryWallIndices, buildStatelessMeshGrid,
  carrierReadingOf, encodeMeshCarrierAssessmentV1Json, parseMeshCarrierAssessmentV1Json,
} from '../../../pkg/src/node.js';
import { candidatePositions } from '../deblur.js';
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
    const pipeline = new ImageCarrierPipeline({ carrierBandwidth: 54, observerBandwidths: [3, 7, 54], patchSize: 4 });
    const image = { width, height, channels: 3, sampleRange: /** @type {const} */ ('byte'), data: rgb };
    const columns = pipeline.analyzeColumnar(image);
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
    // The deblur fold of the blurred candidates over observer 3's reading: the page's blob is
    // the package's in Node, byte for byte, and its map's caption counts its verdicts.
    const hop = { index: 0, station: 'page', to: [], position: null, rows: height, bytes: rgb.byteLength };
    const want = attachDeblurEnsembleToMeshCarrierAssessmentJson(
      encodeMeshCarrierAssessmentV1Json({ hop, carrier: carrierReadingOf(columns, { sampleRange: [0, 255] }) }),
      columns, { observerBandwidth: 3, members: candidatePositions(pipeline, image) });
    assert.equal(shown.assessment, want);
    const { verdicts } = parseMeshCarrierAssessmentV1Json(want).deblur;
    assert.equal(verdicts.resolved + verdicts.ambiguous + verdicts.contradicted, 180);
    // Patch means of this noise sit mid-range, where the blurs stay inside observer 3's fibers of
    // 18: some patches on one value, some on several, none ruled out.
    assert.ok(verdicts.resolved > 0 && verdicts.ambiguous > 0, JSON.stringify(verdicts));
    assert.match(await page.textContent('#carrier-deblur'),
      new RegExp(`${verdicts.resolved} resolved, ${verdicts.ambiguous} ambiguous, ${verdicts.contradicted} contradicted`));
    pipeline.free();
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
  test('the carrier panel extrudes the image as a WebGL2 relief: a screenshot shows its colours, sides and hole', async () => {
    const { page, errors } = await openReady();
    // 48×32, red on the left and blue on the right, a transparent 16×16 square in the middle:
    // with patches of 4, a 12×8 grid whose 4×4 centre patches are transparent.
    const [width, height] = [48, 32];
    const rgba = new Uint8Array(width * height * 4);
    for (let y = 0; y < height; y++) {
      for (let x = 0; x < width; x++) {
        const hole = x >= 16 && x < 32 && y >= 8 && y < 24;
        rgba.set(x < 24 ? [220, 40, 40, hole ? 0 : 255] : [40, 70, 220, hole ? 0 : 255], 4 * (y * width + x));
      }
    }
    await page.setInputFiles('#carrier-image', { name: 'hole.png', mimeType: 'image/png', buffer: encodePng(width, height, rgba, 4) });
    await page.fill('#observer-bandwidths', '3, 54');
    await page.fill('#patch-size', '4');
    await page.click('#carrier-run');
    await page.waitForFunction(() => window.carrierResult?.relief != null && document.querySelector('#carrier-relief canvas') !== null);
    const { relief } = await page.evaluate(() => window.carrierResult);
    // The patches' alpha, and the mesh the package builds for it.
    const alpha = Array.from({ length: 12 * 8 }, (_, p) => ((p % 12) >= 4 && (p % 12) < 8 && Math.floor(p / 12) >= 2 && Math.floor(p / 12) < 6 ? 0 : 255));
    assert.deepEqual(relief.alpha, alpha);
    const grid = buildStatelessMeshGrid({ width: 12, height: 8, solid: true });
    const walls = buildAlphaBoundaryWallIndices(alpha, 12, 8, relief.alphaThreshold);
    assert.equal(relief.vertexCount, grid.vertexCount);
    assert.equal(relief.wallTriangleCount, walls.length / 3);
    assert.equal(relief.triangleCount, grid.triangleCount + walls.length / 3);
    // Observer 3 leaves some patches unresolved: the relief has height.
    assert.ok(relief.depth.some((d) => d > 0) && relief.depth.some((d) => d === 0));

    mkdirSync(RESULTS, { recursive: true });
    const shot = await page.locator('#carrier-relief canvas').screenshot({ path: join(RESULTS, 'relief.png') });
    // The screenshot's pixels, decoded by the browser.
    const seen = await page.evaluate(async (b64) => {
      const bitmap = await createImageBitmap(await (await fetch(`data:image/png;base64,${b64}`)).blob());
      const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
      const context = /** @type {OffscreenCanvasRenderingContext2D} */ (canvas.getContext('2d'));
      context.drawImage(bitmap, 0, 0);
      const { data, width: w, height: h } = context.getImageData(0, 0, bitmap.width, bitmap.height);
      const at = (x, y) => Array.from(data.subarray(4 * (y * w + x), 4 * (y * w + x) + 3));
      const background = at(4, 4); // inside the border
      const count = { red: [0, 0], blue: [0, 0], dimRed: 0, dimBlue: 0, background: 0 };
      for (let y = 0; y < h; y++) {
        for (let x = 0; x < w; x++) {
          const [r, g, b] = at(x, y);
          const half = x < w / 2 ? 0 : 1;
          if (r > 150 && b < 90) count.red[half]++;
          else if (b > 150 && r < 90) count.blue[half]++;
          else if (r > 60 && r <= 150 && b < 45 && g < 45) count.dimRed++;
          else if (b > 60 && b <= 150 && r < 45) count.dimBlue++;
          if (Math.abs(r - background[0]) + Math.abs(g - background[1]) + Math.abs(b - background[2]) < 6) count.background++;
        }
      }
      return { w, h, background, centre: at(Math.floor(w / 2), Math.floor(h / 2)), count };
    }, shot.toString('base64'));
    const pixels = seen.w * seen.h;
    // The clear colour around the shape, and through the hole at the centre.
    assert.deepEqual(seen.centre, seen.background, `centre ${seen.centre}`);
    assert.ok(seen.count.background > pixels * 0.2 && seen.count.background < pixels * 0.9, JSON.stringify(seen.count));
    // Red to the left of the hole, blue to its right, each a real share of the frame.
    assert.ok(seen.count.red[0] > pixels * 0.05 && seen.count.red[0] > 10 * seen.count.red[1], JSON.stringify(seen.count));
    assert.ok(seen.count.blue[1] > pixels * 0.05 && seen.count.blue[1] > 10 * seen.count.blue[0], JSON.stringify(seen.count));
    // The walls: the colours shaded darker toward the back (4% of the frame here; 0.4% is
    // left without them, from the edges' blending).
    assert.ok(seen.count.dimRed + seen.count.dimBlue > pixels * 0.015, JSON.stringify(seen.count));
    assert.deepEqual(errors, []);
    await page.close();
  });
});
