// Calibrates the decode-health monitor's thresholds on real generations (docs/health.md).
//
//   node scripts/health/calibrate.mjs [--knot target/release/knot] [--out tests/fixtures/health/calibration.json]
//
// Runs every prompt of tests/fixtures/health/prompts.json through `knot generate --chat
// --health observe --json` on SmolLM2-135M-Instruct and Gemma-3-270M, greedy and at
// temperature 0.7 (seed 1), and labels each step from the tokens alone, looking ahead (what the
// monitor cannot do):
//   boundary-collapse  the step is inside an exact loop (period ≤ 32, the last two periods equal)
//                      that the generation stays in for two more periods, or to its end;
//   pre-collapse       not that, but such a loop, or a tail whose 4-grams nearly all repeat
//                      earlier ones, begins within the next 48 steps;
//   normal             otherwise.
// It then searches the thresholds that best separate the labels on the even-numbered prompts
// (macro-F1 of the three states, from the monitor's recorded features), reports the confusion
// table on the odd-numbered ones and on all, and writes the per-run tokens, labels and the
// states the chosen thresholds give. The defaults in crates/engine/src/health/config.rs are set
// from its output; `--check` instead runs the CLI with the compiled-in defaults and prints their
// confusion table (what docs/health.md quotes). `--policy` measures the policy instead: on every
// run (greedy or sampled) that collapses into a loop, the share of repeated 4-grams with the policy acting
// and without (observing only).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const { values: args } = parseArgs({
  options: {
    knot: { type: 'string', default: `${ROOT}target/release/knot` },
    out: { type: 'string', default: `${ROOT}tests/fixtures/health/calibration.json` },
    n: { type: 'string', default: '160' },
    check: { type: 'boolean', default: false },
    policy: { type: 'boolean', default: false },
  },
});
const MODELS = {
  smollm2: `${ROOT}models/SmolLM2-135M-Instruct.Q4_1.knot`,
  gemma3: `${ROOT}models/gemma-3-270m.knot`,
};
const MODES = { greedy: ['--temperature', '0'], t07: ['--temperature', '0.7', '--seed', '1'] };
const STATES = ['normal', 'pre-collapse', 'boundary-collapse'];
const LOOK_AHEAD = 48;
const { prompts } = JSON.parse(readFileSync(`${ROOT}tests/fixtures/health/prompts.json`, 'utf8'));

/**
 * The generation's steps through the CLI, the monitor observing. SmolLM2 through its chat
 * template; Gemma-3-270M (a base model, no template) continues a plain dialogue.
 */
function generate(model, prompt, mode, health = 'observe') {
  const text = model === 'gemma3' ? `User: ${prompt}\nAssistant:` : prompt;
  const chat = model === 'gemma3' ? [] : ['--chat'];
  const out = execFileSync(args.knot, [
    'generate', MODELS[model], '--prompt', text, ...chat, '-n', args.n, '--health', health, '--json', ...MODES[mode],
  ], { encoding: 'utf8', maxBuffer: 1 << 28 });
  return JSON.parse(out).steps.map((s) => ({ token: s.token, ...s.health }));
}

/** Whether tokens[end - 2p + 1 ..= end] repeat with period p. */
const periodic = (tokens, end, p) => end + 1 >= 2 * p && Array.from({ length: p }, (_, i) => tokens[end - i] === tokens[end - i - p]).every(Boolean);

/** Each step's label from the tokens (see the header). */
function label(tokens) {
  const n = tokens.length;
  const inLoop = new Array(n).fill(false);
  for (let t = 0; t < n; t++) {
    for (let p = 1; p <= 32 && !inLoop[t]; p++) {
      if (!periodic(tokens, t, p) || (p === 1 && !periodic(tokens, t, 2))) continue;
      // The loop goes on for two more periods, or to the end.
      const until = Math.min(n - 1, t + 2 * p);
      let stays = true;
      for (let u = t + 1; u <= until; u++) stays &&= tokens[u] === tokens[u - p];
      inLoop[t] = stays;
    }
  }
  // Repetition tail: from which step on nearly every 4-gram repeats an earlier one.
  const seen = new Set();
  const repeated = tokens.map((_, i) => {
    if (i < 3) return false;
    const key = tokens.slice(i - 3, i + 1).join(',');
    const r = seen.has(key);
    seen.add(key);
    return r;
  });
  let tail = n;
  for (let s = n - 32; s >= 0; s--) {
    const share = repeated.slice(s).filter(Boolean).length / (n - s);
    if (share >= 0.9) tail = s;
  }
  const degenerate = (t) => inLoop[t] || t >= tail;
  return tokens.map((_, t) => {
    if (inLoop[t]) return 'boundary-collapse';
    for (let u = t + 1; u <= Math.min(n - 1, t + LOOK_AHEAD); u++) if (degenerate(u)) return 'pre-collapse';
    return 'normal';
  });
}

/** The monitor's state for recorded features under thresholds `th` (its classify rule). */
function classify(steps, t, th) {
  const s = steps[t];
  if (s.loopPeriod !== undefined) {
    const span = Math.min(t + 1, s.loopPeriod * th.collapseRepeats);
    let h = 0;
    for (let u = t - span + 1; u <= t; u++) h += steps[u].entropy;
    if (h / span <= th.collapseEntropy) return 'boundary-collapse';
  }
  const drifting = s.alpha !== undefined && s.alpha.entropy >= th.preAlpha && s.entropySlope <= th.preEntropySlope
    && s.repetition >= th.preRepetition && s.repetitionTrend >= 0;
  return drifting ? 'pre-collapse' : 'normal';
}

/** Confusion counts [truth][predicted] and macro-F1. */
function confusion(pairs) {
  const m = STATES.map(() => STATES.map(() => 0));
  for (const [truth, got] of pairs) m[STATES.indexOf(truth)][STATES.indexOf(got)]++;
  const f1 = STATES.map((_, k) => {
    const tp = m[k][k];
    const fp = STATES.reduce((a, _, i) => a + (i === k ? 0 : m[i][k]), 0);
    const fn = STATES.reduce((a, _, j) => a + (j === k ? 0 : m[k][j]), 0);
    return tp === 0 ? 0 : (2 * tp) / (2 * tp + fp + fn);
  });
  return { matrix: m, f1, macroF1: f1.reduce((a, b) => a + b, 0) / f1.length };
}

function table(title, c) {
  const lines = [`${title} (rows: label, columns: monitor; macro-F1 ${c.macroF1.toFixed(3)})`, `| label \\ monitor | ${STATES.join(' | ')} | F1 |`, `|---|${STATES.map(() => '---').join('|')}|---|`];
  STATES.forEach((s, k) => lines.push(`| ${s} | ${c.matrix[k].join(' | ')} | ${c.f1[k].toFixed(3)} |`));
  return lines.join('\n');
}

// Generations already made by an interrupted run of this script (same binary, same prompt).
// (--check always generates afresh: it tests the compiled-in thresholds.)
const CACHE = args.check ? undefined : process.env.KNOT_HEALTH_CACHE;
const cache = CACHE && existsSync(CACHE) ? JSON.parse(readFileSync(CACHE, 'utf8')) : {};
/** The share of `tokens`' 4-grams that repeat an earlier one. */
function repeated4(tokens) {
  const seen = new Set();
  let rep = 0;
  for (let i = 3; i < tokens.length; i++) {
    const key = tokens.slice(i - 3, i + 1).join(',');
    if (seen.has(key)) rep++;
    seen.add(key);
  }
  return tokens.length > 3 ? rep / (tokens.length - 3) : 0;
}

if (args.policy) {
  const rows = [];
  for (const model of Object.keys(MODELS)) {
    for (const prompt of prompts) for (const mode of Object.keys(MODES)) {
      const observe = generate(model, prompt, mode);
      if (!observe.some((s) => s.state === 'boundary-collapse')) continue;
      const acting = generate(model, prompt, mode, 'on');
      rows.push({
        model, prompt, mode,
        without: repeated4(observe.map((s) => s.token)), with: repeated4(acting.map((s) => s.token)),
        eddySteps: acting.filter((s) => s.actions.eddyBans > 0).length, tokens: [observe.length, acting.length],
      });
      process.stderr.write('.');
    }
  }
  process.stderr.write('\n');
  console.log('| model | prompt | decoding | repeated 4-grams without the policy | with it | steps with eddy bans | tokens (without, with) |');
  console.log('|---|---|---|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.model} | ${r.prompt} | ${r.mode} | ${r.without.toFixed(3)} | ${r.with.toFixed(3)} | ${r.eddySteps} | ${r.tokens.join(', ')} |`);
  const mean = (k) => rows.reduce((a, r) => a + r[k], 0) / rows.length;
  console.log(`mean over ${rows.length} looping runs: ${mean('without').toFixed(3)} without, ${mean('with').toFixed(3)} with`);
  process.exit(0);
}

const runs = [];
for (const model of Object.keys(MODELS)) {
  for (const [i, prompt] of prompts.entries()) {
    for (const mode of Object.keys(MODES)) {
      const key = `${model}|${mode}|${prompt}`;
      const steps = cache[key] ?? generate(model, prompt, mode);
      if (CACHE) {
        cache[key] = steps;
        writeFileSync(CACHE, JSON.stringify(cache));
      }
      runs.push({ model, prompt: i, mode, split: i % 2 === 0 ? 'calibration' : 'held-out', steps, labels: label(steps.map((s) => s.token)) });
      process.stderr.write('.');
    }
  }
}
process.stderr.write('\n');
const pairsOf = (rs, th) => rs.flatMap((r) => r.steps.map((s, t) => [r.labels[t], th ? classify(r.steps, t, th) : s.state]));

if (args.check) {
  console.log(table('Compiled-in thresholds, all runs', confusion(pairsOf(runs))));
  console.log(table('Held-out prompts', confusion(pairsOf(runs.filter((r) => r.split === 'held-out')))));
  process.exit(0);
}

/** Every threshold combination searched; `alphas`: the pre-collapse α thresholds tried. */
function grid(alphas) {
  const out = [];
  for (const preAlpha of alphas) {
    for (const preEntropySlope of [0.01, 0.005, 0, -0.001, -0.002, -0.005, -0.01, -0.02]) {
      for (const preRepetition of [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5]) {
        for (const collapseEntropy of [0.1, 0.25, 0.5, 1, 2, 3, 4]) {
          out.push({ preAlpha, preEntropySlope, preRepetition, collapseRepeats: 3, collapseEntropy });
        }
      }
    }
  }
  return out;
}
const calibration = runs.filter((r) => r.split === 'calibration');
/** The thresholds of `candidates` with the best macro-F1 on the calibration prompts. */
function search(candidates) {
  let found;
  for (const th of candidates) {
    const c = confusion(pairsOf(calibration, th));
    if (found === undefined || c.macroF1 > found.c.macroF1) found = { th, c };
  }
  return found;
}
// Pre-collapse as the state is defined: a drift toward white or redder (α ≥ 0) …
const best = search(grid([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5]));
// … and the same search without the α condition, to show what the spectrum adds.
const ablation = search(grid([-Infinity]));
const heldOut = confusion(pairsOf(runs.filter((r) => r.split === 'held-out'), best.th));
const all = confusion(pairsOf(runs, best.th));
console.log('thresholds', JSON.stringify(best.th));
console.log(table('Calibration prompts', best.c));
console.log(table('Held-out prompts', heldOut));
console.log(table('All', all));
const ablationHeldOut = confusion(pairsOf(runs.filter((r) => r.split === 'held-out'), ablation.th));
console.log(`without the α condition: ${JSON.stringify(ablation.th)}, macro-F1 ${ablation.c.macroF1.toFixed(3)} on calibration, ${ablationHeldOut.macroF1.toFixed(3)} held out`);
const short = { normal: 'n', 'pre-collapse': 'p', 'boundary-collapse': 'b' };
writeFileSync(args.out, `${JSON.stringify({
  about: 'Written by scripts/health/calibrate.mjs: per run, the tokens, the labels from them (n normal, p pre-collapse, b boundary-collapse) and the states the chosen thresholds give.',
  thresholds: best.th,
  macroF1: { calibration: best.c.macroF1, heldOut: heldOut.macroF1, all: all.macroF1 },
  withoutAlpha: { thresholds: { ...ablation.th, preAlpha: null }, macroF1: { calibration: ablation.c.macroF1, heldOut: ablationHeldOut.macroF1 } },
  confusion: { calibration: best.c.matrix, heldOut: heldOut.matrix, all: all.matrix, order: STATES },
  runs: runs.map((r) => ({
    model: r.model, prompt: r.prompt, mode: r.mode, split: r.split,
    tokens: r.steps.map((s) => s.token),
    labels: r.labels.map((l) => short[l]).join(''),
    states: r.steps.map((_, t) => short[classify(r.steps, t, best.th)]).join(''),
  })),
}, null, 1)}\n`);
