// One engine, one model, one measured run, for `npm run bench` (bench/bench.mjs):
//   ?engine=knot&model=URL.knot  or  ?engine=wllama&model=URL.gguf, with &text=TEXT &n=N
//   &threads=T (default 1: knot's one-thread build, wllama's n_threads 1).
// Both get the same prompt text (the runner cuts it to 128 tokens with the knot tokenizer) and
// decode n tokens greedily past any end-of-text; one short warm-up run comes first.
// window.benchResult = { engine, promptTokens, generated, prefillTokS, decodeTokS, loadMs, info }.
const params = new URLSearchParams(location.search);
const engine = params.get('engine');
const model = new URL(/** @type {string} */ (params.get('model')), location.href).href;
const text = params.get('text') ?? '';
const n = Number(params.get('n') ?? 64);
const threads = Number(params.get('threads') ?? 1);

async function runKnot() {
  const { HostShim, HttpKnotSource, loadWasm } = await import('knot-wasm');
  const t0 = performance.now();
  await loadWasm();
  const shim = await HostShim.open(await HttpKnotSource.open(model), { threads });
  for (let layer = 0; layer < shim.layerCount; layer++) await shim.prefetchLayer(layer);
  const loadMs = performance.now() - t0;
  const ids = shim.encode(text);
  await shim.generate(ids.subarray(0, 8), 4, { ignoreEos: true });
  const times = [];
  const start = performance.now();
  await shim.generate(ids, n, { ignoreEos: true, onToken: () => times.push(performance.now()) });
  return {
    promptTokens: ids.length,
    generated: times.length,
    prefillTokS: ids.length / ((times[0] - start) / 1000),
    decodeTokS: (times.length - 1) / ((times.at(-1) - times[0]) / 1000),
    loadMs,
    info: { wasm: `knot-wasm (SIMD128, ${shim.wasmBuild} build)`, threads: shim.threads },
  };
}

async function runWllama() {
  const { Wllama } = await import('@wllama/wllama');
  const t0 = performance.now();
  const wllama = new Wllama({ default: new URL('wllama/wasm/wllama.wasm', location.href).href }, { suppressNativeLog: true });
  const blob = await (await fetch(model)).blob();
  await wllama.loadModel([blob], { n_threads: threads, n_ctx: 1024, n_batch: 512, n_gpu_layers: 0 });
  const loadMs = performance.now() - t0;
  const sampling = { temp: 0, ignore_eos: true, cache_prompt: false };
  await wllama.createCompletion({ prompt: text.slice(0, 40), max_tokens: 4, ...sampling });
  const out = await wllama.createCompletion({ prompt: text, max_tokens: n, ...sampling });
  const t = /** @type {any} */ (out).timings;
  return {
    promptTokens: t.prompt_n,
    generated: t.predicted_n,
    prefillTokS: t.prompt_per_second,
    decodeTokS: t.predicted_per_second,
    loadMs,
    info: { threads: wllama.getNumThreads(), multithread: wllama.isMultithread(), libllama: Wllama.getLibllamaVersion() },
  };
}

try {
  const result = { engine, ...(await (engine === 'knot' ? runKnot() : runWllama())) };
  window.benchResult = result;
  document.getElementById('result').textContent = JSON.stringify(result);
  document.body.dataset.state = 'done';
} catch (err) {
  window.benchError = err instanceof Error ? `${err.message}\n${err.stack}` : String(err);
  document.body.dataset.state = 'error';
}
