// Compiled by `npm run typecheck` only: the seed's call shape and the documented API type-check.
import {
  BufferKnotSource, CachedKnotSource, HostShim, HttpKnotSource, coltraneFromResponseFormat, createMoaAgents, deficitWeightedMerge,
  MAX_MESH_GRID_VERTICES, buildAlphaBoundaryWallIndices, buildStatelessMeshGrid,
  attachDeblurEnsembleToMeshCarrierAssessmentJson, carrierReadingOf, encodeMeshCarrierAssessmentV1Json,
  mergeDeblurFoldIntoMeshCarrierJson, parseMeshCarrierAssessmentV1Json, type ImageCarrierColumns,
  type CoordinatorStats, type KnotByteSource, type StepInfo, type WasmCoordinator,
} from '../src/index.js';

declare const wasm: { WasmHost: unknown };

export async function seedCallShape(source: KnotByteSource): Promise<Uint32Array> {
  const shim = await HostShim.open(source, wasm, { lruCapacity: 6, draftMode: false });
  const tokens = await shim.generate(new Uint32Array([1, 2, 3]), 32);
  shim.dispose();
  return tokens;
}

export async function readApi(source: KnotByteSource): Promise<number> {
  const shim = await HostShim.open(source, { lruCapacity: 2, readTimeoutMs: 5000, readRetries: 3, readBackoffMs: 50 });
  const s = shim.stats();
  await shim.dispose();
  const flaky: KnotByteSource = {
    size: null,
    rangeGet: async () => {
      throw Object.assign(new Error('gone'), { permanent: true });
    },
  };
  void flaky;
  return s.readRetries + s.readTimeouts;
}

export async function draftApi(source: KnotByteSource): Promise<number> {
  const shim = await HostShim.open(source, { lruCapacity: 2, draftMode: { ngram: 3, maxDraft: 8, adaptive: true } });
  await shim.generate([1, 2, 3], 16, { draftMode: false });
  const r = (await shim.generateText('Once', { draftMode: { maxDraft: 4, margin: 0.5 } })).report;
  const s = shim.stats().generation;
  return (r?.tokensPerPass ?? 0) + (s?.layerReadsPerToken ?? 0) + (s?.verifyPasses ?? 0) + (s?.accepted ?? 0) / Math.max(1, s?.drafted ?? 0);
}

export async function textApi(): Promise<string> {
  const shim = await HostShim.open(new BufferKnotSource(new Uint8Array(1)), { lruCapacity: 2 });
  const http = await HttpKnotSource.open('https://example.com/m.knot', { retries: 2 });
  void http.size;
  const cached = await CachedKnotSource.open(http, { onNotice: (n) => void [n.kind, n.message] });
  await cached.flush();
  void [cached.stats().hits, cached.caching, http.validator, await CachedKnotSource.clear()];
  const controller = new AbortController();
  let text = '';
  for await (const piece of shim.stream([{ role: 'user', content: 'hi' }], { signal: controller.signal, topK: 40 })) {
    text += piece;
  }
  const r = await shim.generateText('Once', { maxTokens: 8, onToken: (t) => void [t.text, t.id, t.finishReason] });
  return text + r.text + shim.stats().misses;
}

export async function moaApi(shim: HostShim): Promise<number> {
  const temps: number[] = createMoaAgents({ k: 3, temperatureSpread: 0.6 });
  const { merged, weights, deficit } = deficitWeightedMerge([[0.5, 0.5], [1, 0]], { strategy: 'deficit', useKl: false });
  let spreads = 0;
  const r = await shim.generateText('Once', {
    moa: { k: 3, baseTemperature: 0.7, temperatureSpread: 0.4, merge: 'deficit', topK: 40, sensitivity: 0.1 },
    seed: 7n,
    onStep: (step: StepInfo) => {
      if (step.picker === 'moa') spreads += step.spread + step.weights.length;
    },
  });
  await shim.generate([1, 2], 4, { moa: true, onStep: (s) => void s.candidates });
  return temps[0] + merged[0] + weights[0] + deficit + spreads + r.steps.length;
}

export async function coltraneApi(shim: HostShim): Promise<boolean> {
  const coltrane = coltraneFromResponseFormat({ type: 'json_schema', json_schema: { name: 'p', schema: { type: 'object' } } });
  const r = await shim.generateText('JSON please', {
    maxTokens: 64,
    coltrane: coltrane ?? { preset: 'balanced', eddy: { ngram: 8 }, prosody: 'bias', maxDepth: 4, fallbackMass: 0.05 },
    onStep: (s) => void s.stages.map((st) => st.maskUs ?? st.changed),
  });
  return (r.constraint?.closed ?? false) && r.constraint?.maskUsP50 !== undefined;
}

export async function longLivedApi(source: KnotByteSource): Promise<number> {
  const shim = await HostShim.open(source, {
    lruCapacity: 4, kvCache: 'f16', maxContext: 2048, maxBatch: 256, memoryBudget: 96 * 2 ** 20,
    prefixWindows: 2, prefixTtlMs: 15000, maxReadBytes: 4 * 2 ** 20, readConcurrency: 4,
  });
  let n = shim.contextLength;
  for await (const e of shim.streamTokens(new Uint32Array([1, 2]), { maxTokens: 4, reusePrefix: true, presencePenalty: 0.5, frequencyPenalty: -0.5 })) {
    n += e.id + e.text.length + (e.finishReason === 'stop' ? 1 : 0);
  }
  const s = shim.stats();
  const prefix = s.generation?.prefix;
  n += (prefix?.reused ?? 0) + (prefix?.status === 'hit' ? 1 : 0) + (s.memoryPlan?.total ?? 0) + s.kvCacheBytes;
  n += s.prefixReuse.hits + s.sequences.max + (s.queue?.waiting ?? 0);
  shim.abort();
  shim.reset();
  const info = shim.info();
  return n + info.contextLength + info.maxSequences + (info.chatTemplate?.name?.length ?? 0);
}

/** A split model's coordinator (stations mode): a step's protocol and its counters. */
export function coordinatorApi(c: WasmCoordinator, headAnswer: Uint8Array): number {
  const admitted = c.admit(new Uint32Array([1, 2]), '{}');
  let n = admitted.id + admitted.promptTokens + (admitted.claim?.len ?? 0) + (admitted.prefix?.reused ?? 0);
  for (const { sequence, len, hash } of c.claims()) n += sequence + len + hash.length;
  for (const { slot, ids } of c.planStep() ?? []) n += slot + ids.length;
  c.addRows(0, headAnswer);
  const { message, logits } = c.stepMessage();
  const events: unknown[] = c.pickStep(logits ? [headAnswer] : null);
  const { keep, forget } = c.settle();
  const s: CoordinatorStats = c.stats();
  const mode: 'resident' | 'sharded' = s.embedding.mode;
  const seqs = c.sequenceStats();
  return n + message.length + events.length + keep.length + forget.length + s.readsSinceOpen
    + (s.generation?.rows.misses ?? 0) + mode.length + c.logitRows + seqs.sequences.active + seqs.prefixReuse.hits;
}

export function meshApi(alpha: Uint8Array): number {
  const grid = buildStatelessMeshGrid({ width: 64, height: 48, solid: true });
  const walls: Uint32Array = buildAlphaBoundaryWallIndices(alpha, grid.width, grid.height, 128);
  return grid.indices.length + walls.length + grid.front.count + grid.back.first + MAX_MESH_GRID_VERTICES;
}

export function meshCarrierApi(columns: ImageCarrierColumns, members: Uint32Array[]): number {
  const carrier = carrierReadingOf(columns, { sampleRange: [0, 1] });
  const json = encodeMeshCarrierAssessmentV1Json({
    hop: { index: 0, station: 'layers-0-14', to: ['layers-15-29'], position: 3, rows: 1, bytes: 2340 },
    carrier,
  });
  const folded = attachDeblurEnsembleToMeshCarrierAssessmentJson(json, columns, { observerBandwidth: 256, members });
  const blob = parseMeshCarrierAssessmentV1Json(mergeDeblurFoldIntoMeshCarrierJson(json, parseMeshCarrierAssessmentV1Json(folded).deblur!));
  return blob.carrier!.observers[0].resolutions + (blob.deblur?.verdicts.contradicted ?? 0) + (blob.spectral?.report.entropy ?? 0);
}
