// Compiled by `npm run typecheck` only: the seed's call shape and the documented API type-check.
import { BufferKnotSource, HostShim, HttpKnotSource, type KnotByteSource } from '../src/index.js';

declare const wasm: { WasmHost: unknown };

export async function seedCallShape(source: KnotByteSource): Promise<Uint32Array> {
  const shim = await HostShim.open(source, wasm, { lruCapacity: 6, draftMode: false });
  const tokens = await shim.generate(new Uint32Array([1, 2, 3]), 32);
  shim.dispose();
  return tokens;
}

export async function textApi(): Promise<string> {
  const shim = await HostShim.open(new BufferKnotSource(new Uint8Array(1)), { lruCapacity: 2 });
  const http = await HttpKnotSource.open('https://example.com/m.knot', { retries: 2 });
  void http.size;
  const controller = new AbortController();
  let text = '';
  for await (const piece of shim.stream([{ role: 'user', content: 'hi' }], { signal: controller.signal, topK: 40 })) {
    text += piece;
  }
  const r = await shim.generateText('Once', { maxTokens: 8, onToken: (piece, id) => void [piece, id] });
  return text + r.text + shim.stats().misses;
}
