// The demo page: opens a knot over HTTP range reads (spans kept in Cache Storage), loads every
// layer with a progress bar, then chats through the model's template, streaming the reply.
//
// Automation contract (tests and benchmarks drive the page through it):
//   elements #prompt #generate #stop #output progress#load;
//   document.body.dataset.state: loading | ready | generating | done | error;
//   query: ?model=URL &prompt=TEXT &n=N &greedy=1 &autorun=1 (&nocache=1 reads uncached)
//   &threads=N (#threads: 1 runs the one-thread build; more, the threaded one where the page is
//   cross-origin isolated; empty, every core up to 8);
//   after a run, window.knotResult = { ids, text, prefillTokS, decodeTokS, promptTokens,
//   finishReason, threads, wasmBuild } (ids include a final end-of-text id when the model
//   stopped by itself); document.body.dataset.wasmBuild: threads | single once open.
import { CachedKnotSource, HostShim, HttpKnotSource, loadWasm } from 'knot-wasm';
import { setUpCarrier } from './carrier.js';

const DEFAULT_MODEL = 'models/SmolLM2-135M-Instruct.Q4_1.knot';
const params = new URLSearchParams(location.search);
const $ = (/** @type {string} */ id) => /** @type {any} */ (document.getElementById(id));

/** @type {HostShim | undefined} */
let shim;
/** @type {{ role: string, content: string }[]} */
let messages = [];
/** @type {AbortController | undefined} */
let controller;
/** Bumped by every open: a superseded open stops touching the page. */
let opening = 0;

/** @param {'loading' | 'ready' | 'generating' | 'done' | 'error'} state */
function setState(state) {
  document.body.dataset.state = state;
  // After a failed generation the model is still open: the user may try again.
  const idle = state === 'ready' || state === 'done' || (state === 'error' && shim !== undefined);
  $('generate').disabled = !idle;
  $('stop').disabled = state !== 'generating';
  $('open').disabled = state === 'loading' || state === 'generating';
  $('new-chat').disabled = state === 'generating';
}

/** @param {string} message @param {'info' | 'error'} [kind] */
function showNotice(message, kind = 'info') {
  const notice = $('notice');
  notice.textContent = message;
  notice.hidden = false;
  if (kind === 'error') console.warn(message);
}

/** @param {unknown} err */
function fail(err) {
  showNotice(err instanceof Error ? err.message : String(err), 'error');
  setState('error');
}

const mb = (/** @type {number} */ bytes) => (bytes / 2 ** 20).toFixed(1);

/** @param {string} url */
async function openModel(url) {
  const mine = ++opening;
  controller?.abort();
  shim?.dispose();
  shim = undefined;
  messages = [];
  renderHistory();
  $('output').textContent = '';
  $('notice').hidden = true;
  setState('loading');
  const bar = $('load');
  const status = $('load-status');
  bar.value = 0;
  try {
    status.textContent = 'Loading the engine…';
    await loadWasm();
    status.textContent = `Reading the header of ${url}…`;
    const http = await HttpKnotSource.open(new URL(url, location.href));
    const total = /** @type {number} */ (http.size);
    /** @type {HttpKnotSource | CachedKnotSource} */
    let source = http;
    if (!params.has('nocache')) {
      try {
        source = await CachedKnotSource.open(http, {
          onNotice: (n) => showNotice(`${n.message}.`, n.kind === 'quota' ? 'info' : 'error'),
        });
      } catch (err) {
        // No Cache Storage here (an insecure or sandboxed origin): still a working page.
        showNotice(`Cache Storage is not available here (${err instanceof Error ? err.message : String(err)}): the model is read uncached.`);
      }
    }
    const cached = source instanceof CachedKnotSource ? source : undefined;
    let phase = 'header, tokenizer and resident tensors';
    /** @param {{ bytesLoaded: number, rangeReads: number }} p */
    const onProgress = (p) => {
      if (mine !== opening) return;
      bar.max = total;
      bar.value = Math.min(p.bytesLoaded, total);
      const fromCache = cached === undefined ? '' : ` · ${cached.stats().hits} from the cache`;
      status.textContent = `${phase}: ${mb(p.bytesLoaded)} of ${mb(total)} MB · ${p.rangeReads} range reads${fromCache}`;
    };
    const threads = $('threads').value === '' ? undefined : Number($('threads').value);
    const opened = await HostShim.open(source, { onProgress, ...(threads === undefined ? {} : { threads }) });
    if (mine !== opening) return opened.dispose();
    shim = opened;
    // Every layer now, so the first reply does not wait for the network.
    for (let layer = 0; layer < shim.layerCount; layer++) {
      phase = `layer ${layer + 1} of ${shim.layerCount}`;
      await shim.prefetchLayer(layer);
      if (mine !== opening) return undefined;
    }
    await cached?.flush();
    const s = shim.stats();
    bar.max = 1;
    bar.value = 1;
    const fromCache = cached === undefined ? 'uncached' : `${mb(cached.stats().bytesFromCache)} MB from the cache`;
    const build = shim.wasmBuild === 'threads' ? `${shim.threads} threads (threaded build)` : 'one thread (single-thread build)';
    document.body.dataset.wasmBuild = shim.wasmBuild;
    status.textContent = `Ready: ${shim.layerCount} layers, ${mb(s.bytesFetched)} MB in ${s.rangeReads} range reads (${fromCache}), context ${shim.contextLength} tokens, ${build}.`;
    setState('ready');
    return undefined;
  } catch (err) {
    if (mine === opening) fail(err);
    return undefined;
  }
}

/** The conversation so far, but for the latest reply: that one is in #output. */
function renderHistory() {
  const list = $('history');
  const earlier = messages.at(-1)?.role === 'assistant' ? messages.slice(0, -1) : messages;
  list.replaceChildren(...earlier.map((m) => {
    const li = document.createElement('li');
    li.className = m.role;
    li.textContent = m.content;
    return li;
  }));
}

/** Sampling options from the form (greedy = temperature 0). */
function samplingOptions() {
  const number = (/** @type {string} */ id) => Number($(id).value);
  /** @type {Record<string, unknown>} */
  const options = { maxTokens: number('max-tokens'), seed: number('seed'), reusePrefix: true };
  if ($('moa').checked) options.moa = true;
  else Object.assign(options, { temperature: number('temperature'), topP: number('top-p') });
  if ($('coltrane').checked) options.coltrane = { preset: 'json' };
  return options;
}

/** @param {string} text */
async function generate(text) {
  if (shim === undefined) return;
  const options = samplingOptions();
  const previous = messages;
  messages = [...messages, { role: 'user', content: text }];
  renderHistory();
  const output = $('output');
  output.textContent = '';
  $('speed').textContent = '';
  controller = new AbortController();
  setState('generating');
  const promptTokens = shim.encode(shim.applyChatTemplate(messages)).length;
  /** @type {number[]} */
  const ids = [];
  let reply = '';
  let finishReason = 'stop';
  const t0 = performance.now();
  let tFirst = t0;
  let tLast = t0;
  try {
    for await (const e of shim.streamTokens(messages, { ...options, signal: controller.signal })) {
      tLast = performance.now();
      if (ids.length === 0) tFirst = tLast;
      ids.push(e.id);
      reply += e.text;
      output.textContent = reply;
      if (e.finishReason !== null) finishReason = e.finishReason;
    }
  } catch (err) {
    if (!controller.signal.aborted) {
      messages = previous;
      renderHistory();
      fail(err);
      return;
    }
    finishReason = 'abort';
  }
  const prefillTokS = promptTokens / ((tFirst - t0) / 1000);
  const decodeTokS = ids.length > 1 ? (ids.length - 1) / ((tLast - tFirst) / 1000) : 0;
  messages = [...messages, { role: 'assistant', content: reply }];
  window.knotResult = {
    ids, text: reply, prefillTokS, decodeTokS, promptTokens, finishReason,
    threads: shim?.threads, wasmBuild: shim?.wasmBuild,
  };
  $('speed').textContent = `${promptTokens} prompt tokens at ${prefillTokS.toFixed(0)} tok/s · ` +
    `${ids.length} generated at ${decodeTokS.toFixed(1)} tok/s` +
    (finishReason === 'abort' ? ' · stopped' : finishReason === 'length' ? ' · reached max tokens' : '');
  setState('done');
}

$('model-form').addEventListener('submit', (/** @type {Event} */ e) => {
  e.preventDefault();
  openModel($('model-url').value);
});
$('clear-cache').addEventListener('click', async () => {
  const had = await CachedKnotSource.clear().catch(() => false);
  showNotice(had ? 'The span cache is cleared: the next open reads from the network.' : 'The span cache was empty.');
});
$('ask').addEventListener('submit', (/** @type {Event} */ e) => {
  e.preventDefault();
  const text = $('prompt').value.trim();
  if (text !== '') generate(text);
});
$('stop').addEventListener('click', () => controller?.abort(new DOMException('stopped by the user', 'AbortError')));
$('new-chat').addEventListener('click', () => {
  messages = [];
  renderHistory();
  $('output').textContent = '';
  $('speed').textContent = '';
});

setUpCarrier();

const model = params.get('model') ?? DEFAULT_MODEL;
$('model-url').value = new URL(model, location.href).href;
if (params.has('prompt')) $('prompt').value = params.get('prompt');
if (params.has('n')) $('max-tokens').value = params.get('n');
if (params.get('greedy') === '1') $('temperature').value = '0';
if (params.has('threads')) $('threads').value = params.get('threads');
await openModel(model);
if (params.get('autorun') === '1' && document.body.dataset.state === 'ready') {
  await generate($('prompt').value.trim());
}
