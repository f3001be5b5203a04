// Whether answers of one kind take measurably longer than answers of another: the check the API
// key tests make on 401s (docs/security.md). Requests of every kind are interleaved in a shuffled
// order, so the machine's drift falls on all of them alike; two kinds differ measurably when a
// Mann-Whitney U test rejects "same distribution" at p < 1e-4 (|z| > 3.9) AND their medians are
// further apart than `minMs` — a shift below that is no key's length or prefix an attacker could
// read over a network.

/**
 * Mann-Whitney U's z score of `a` against `b` (normal approximation, ties given mid ranks).
 * Positive: `a` tends larger.
 * @param {number[]} a
 * @param {number[]} b
 */
export function mannWhitneyZ(a, b) {
  const all = [...a.map((v) => ({ v, a: true })), ...b.map((v) => ({ v, a: false }))].sort((x, y) => x.v - y.v);
  let rankA = 0;
  for (let i = 0; i < all.length;) {
    let j = i;
    while (j < all.length && all[j].v === all[i].v) j++;
    const mid = (i + j + 1) / 2;
    for (let k = i; k < j; k++) if (all[k].a) rankA += mid;
    i = j;
  }
  const n1 = a.length;
  const n2 = b.length;
  const u = rankA - (n1 * (n1 + 1)) / 2;
  const mean = (n1 * n2) / 2;
  const sd = Math.sqrt((n1 * n2 * (n1 + n2 + 1)) / 12);
  return (u - mean) / sd;
}

export const medianOf = (xs) => {
  const s = [...xs].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/**
 * Times `n` calls of each kind, interleaved in a shuffled order after `warmup` rounds.
 * @param {Record<string, () => Promise<unknown>>} kinds
 * @param {{ n?: number, warmup?: number }} [o]
 * @returns {Promise<Record<string, number[]>>} milliseconds per call, by kind
 */
export async function timeKinds(kinds, { n = 150, warmup = 20 } = {}) {
  const names = Object.keys(kinds);
  const times = Object.fromEntries(names.map((k) => [k, []]));
  for (let round = 0; round < warmup + n; round++) {
    const order = [...names].sort(() => Math.random() - 0.5);
    for (const k of order) {
      const t0 = performance.now();
      await kinds[k]();
      const ms = performance.now() - t0;
      if (round >= warmup) times[k].push(ms);
    }
  }
  return times;
}

/**
 * Each pair of kinds: its z, the medians' difference, and whether that is measurable.
 * @param {Record<string, number[]>} times
 * @param {{ z?: number, minMs?: number }} [o]
 */
export function timingDifferences(times, { z = 3.9, minMs = 0.05 } = {}) {
  const names = Object.keys(times);
  const pairs = [];
  for (let i = 0; i < names.length; i++) {
    for (let j = i + 1; j < names.length; j++) {
      const [a, b] = [names[i], names[j]];
      const score = mannWhitneyZ(times[a], times[b]);
      const deltaMs = medianOf(times[a]) - medianOf(times[b]);
      pairs.push({ a, b, z: score, deltaMs, measurable: Math.abs(score) > z && Math.abs(deltaMs) > minMs });
    }
  }
  return pairs;
}

/**
 * Asserts no kind is measurably slower than another: measured twice when the first says so (a
 * shared machine's burst rarely falls on one kind twice), failing only when both do.
 * @param {Record<string, () => Promise<unknown>>} kinds
 * @param {{ n?: number, log?: (line: string) => void }} [o]
 */
export async function noTimingDifference(kinds, o = {}) {
  let pairs = [];
  for (let attempt = 1; attempt <= 2; attempt++) {
    const times = await timeKinds(kinds, { n: o.n });
    pairs = timingDifferences(times);
    const summary = pairs.map((p) => `${p.a} vs ${p.b}: z ${p.z.toFixed(2)}, medians ${p.deltaMs >= 0 ? '+' : ''}${(p.deltaMs * 1000).toFixed(0)} µs`).join('; ');
    o.log?.(`timing (attempt ${attempt}, ${o.n ?? 150} each; medians ${Object.entries(times).map(([k, t]) => `${k} ${medianOf(t).toFixed(3)} ms`).join(', ')}): ${summary}`);
    if (!pairs.some((p) => p.measurable)) return pairs;
  }
  throw new Error(`a timing difference measurable above noise, twice: ${JSON.stringify(pairs.filter((p) => p.measurable))}`);
}
