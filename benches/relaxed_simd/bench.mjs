// Usage: deno run --allow-read bench.mjs   |   node --experimental-wasm-relaxed-simd bench.mjs
const isDeno = typeof Deno !== "undefined";
const fs = isDeno ? null : await import("node:fs");
const read = (p) => isDeno ? Deno.readFileSync(new URL(p, import.meta.url)) : fs.readFileSync(new URL(p, import.meta.url));
const now = () => performance.now();
const ROUNDS = Number((isDeno ? Deno.args : process.argv.slice(2))[0] ?? 9);
const TARGET_MS = Number((isDeno ? Deno.args : process.argv.slice(2))[1] ?? 150);

const inst = async (p) => (await WebAssembly.instantiate(read(p), {})).instance.exports;
const S = await inst("./simd128.wasm");
let Rx;
try { Rx = await inst("./relaxed.wasm"); } catch (e) { console.log("relaxed.wasm failed to instantiate:", e.message); }
console.log(isDeno ? `Deno ${Deno.version.deno} V8 ${Deno.version.v8}` : `Node ${process.version} V8 ${process.versions.v8}`);

const variants = [
  ["A(simd128 build)", S, 0],
  ...(Rx ? [["A(relaxed build)", Rx, 0], ["B16 i16dot+2xdot_i16", Rx, 1], ["B16e i16dot+dot+extadd", Rx, 2], ["B32 i32dot_add x4", Rx, 3]] : []),
];
const med = (a) => { const s = [...a].sort((x, y) => x - y); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const f = (x, d = 3) => x.toFixed(d);

for (const [R, B, NMAT] of [[576, 18, 32], [1536, 18, 12], [576, 18, 1]]) {
  const wbytes = R * B * 24 * NMAT;
  console.log(`\n=== shape R=${R} B=${B} (${B * 32} cols), ${NMAT} matrices, weights ${(wbytes / 1048576).toFixed(2)} MiB (24 B/block) ===`);
  for (const [name, ex, v] of variants) {
    ex.setup(R, B, NMAT, 42);
    const bad = ex.verify(v);
    console.log(`verify ${name.padEnd(24)} ${bad === 0 ? "OK" : "FAIL"} (mismatched block dots: ${bad}, max rel err of out[] vs f64 scalar: ${ex.last_err().toExponential(2)})`);
  }
  // calibrate iterations on A
  let iters = 16;
  for (;;) { const t0 = now(); S.bench(0, iters); const dt = now() - t0; if (dt > TARGET_MS / 4) { iters = Math.max(NMAT, Math.round(iters * TARGET_MS / dt / NMAT) * NMAT); break; } iters *= 2; }
  for (const [, ex, v] of variants) ex.bench(v, iters); // warmup
  const blocks = iters * R * B;
  const res = variants.map(() => []);
  for (let r = 0; r < ROUNDS; r++) {
    const order = variants.map((_, i) => i);
    for (let i = order.length - 1; i > 0; i--) { const j = Math.floor(Math.random() * (i + 1)); [order[i], order[j]] = [order[j], order[i]]; }
    for (const i of order) { const [, ex, v] = variants[i]; const t0 = now(); ex.bench(v, iters); res[i].push((now() - t0) * 1e6 / blocks); }
  }
  console.log(`${iters} matvecs per measurement, ${ROUNDS} interleaved rounds (random order per round). ns per 32-element block:`);
  console.log("variant".padEnd(26), "best   median  worst  | GMAC/s(best) | ratio vs A(simd128): best/best  median-of-per-round [min..max]");
  for (let i = 0; i < variants.length; i++) {
    const t = res[i], base = res[0];
    const pr = t.map((x, k) => x / base[k]);
    console.log(variants[i][0].padEnd(26), f(Math.min(...t)), f(med(t)), f(Math.max(...t)), " | ", f(32 / Math.min(...t), 2).padStart(6),
      "      | ", f(Math.min(...t) / Math.min(...base)), "  ", f(med(pr)), `[${f(Math.min(...pr))}..${f(Math.max(...pr))}]`);
  }
}
