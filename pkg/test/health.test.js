// The decode-health monitor through the package (docs/health.md): the per-step reports and the
// generation's metrics, the native CLI's states and (to the logits' last bits) numbers, the
// policy's eddy breaker changing a collapsed loop as natively, observing alone changing nothing,
// and bad options.
import assert from 'node:assert/strict';
import { describe, test, testIf } from './harness.js';
import { FileKnotSource, HostShim } from '../src/node.js';
import { existsSync } from 'node:fs';
import { ROOT, TINY, haveNative, nativeGenerateJson } from './support.js';

// Gemma-3-270M greedy falls into an exact loop on this prompt from its 33rd token, and the eddy
// breaker acts on the 34th (tests/fixtures/health/calibration.json): 48 tokens show both.
const GEMMA = process.env.KNOT_GEMMA3 ?? `${ROOT}models/gemma-3-270m.knot`;
const PROMPT = 'User: List fifty fruits, one per line.\nAssistant:';
const N = 48;

describe('health', () => {
  testIf(existsSync(GEMMA) && haveNative(), 'Gemma-3-270M: reports and metrics equal the native CLI\'s, observing changes no token, the eddy breaker acts as natively', async () => {
    const file = await FileKnotSource.open(GEMMA);
    const shim = await HostShim.open(file, {});
    try {
      const ids = Array.from(shim.encode(PROMPT));
      const observed = await shim.generateText(Uint32Array.from(ids), { maxTokens: N, health: { policy: { capDrafts: false, moaValve: false, eddy: false } } });
      // Observing changes no token: the tokens of the native CLI without the monitor (which the
      // package's greedy tokens equal, tests/parity.rs and the reference tests check).
      const plain = nativeGenerateJson(GEMMA, ids, N);
      assert.deepEqual(Array.from(observed.tokens), plain.ids);
      assert.ok(observed.steps.every((s) => typeof s.health?.entropy === 'number' && typeof s.health.state === 'string'));
      assert.equal(observed.health.steps, observed.steps.length);

      // The logits differ from the native kernels' in the last bits (sums in another order), so
      // the numbers agree closely and the states exactly.
      const native = nativeGenerateJson(GEMMA, ids, N, ['--temperature', '0', '--health', 'observe']);
      const near = (a, b, what) => assert.ok(Math.abs(a - b) <= 1e-3 * Math.max(1, Math.abs(b)), `${what}: ${a} vs ${b}`);
      observed.steps.forEach((s, t) => {
        const [h, g] = [s.health, native.steps[t].health];
        assert.equal(h.state, g.state, `step ${t}`);
        assert.equal(h.loopPeriod, g.loopPeriod, `step ${t}`);
        for (const k of ['entropy', 'surprisal', 'margin', 'repetition']) near(h[k], g[k], `step ${t} ${k}`);
      });
      assert.equal(observed.health.boundaryCollapseSteps, native.health.boundaryCollapseSteps);
      assert.equal(observed.health.preCollapseSteps, native.health.preCollapseSteps);
      // This prompt loops: the monitor sees the collapse.
      assert.ok(observed.health.boundaryCollapseSteps > 0, JSON.stringify(observed.health));

      // The policy on: the eddy breaker bans the loop's continuation, the same tokens as natively.
      const acting = await shim.generateText(Uint32Array.from(ids), { maxTokens: N, health: true });
      const nativeActing = nativeGenerateJson(GEMMA, ids, N, ['--temperature', '0', '--health', 'on']);
      assert.deepEqual(Array.from(acting.tokens), nativeActing.ids.filter((_, i) => i < acting.tokens.length));
      assert.ok(acting.health.eddySteps > 0, JSON.stringify(acting.health));
      assert.notDeepEqual(Array.from(acting.tokens), plain.ids);
      assert.ok(acting.steps.some((s) => s.health.actions.eddyBans > 0));
    } finally {
      shim.dispose();
      await file.close();
    }
  });

  test('bad health options are refused by name; without the option, no report', async () => {
    const file = await FileKnotSource.open(TINY);
    const shim = await HostShim.open(file, {});
    try {
      for (const [health, param] of [
        [3, 'health'], [{ window: 8 }, 'health.window'], [{ window: 2000 }, 'health.window'],
        [{ thresholds: { preAlpha: 'x' } }, 'health.thresholds.preAlpha'], [{ thresholds: { collapseRepeats: 1 } }, 'health.thresholds.collapseRepeats'],
        [{ policy: { eddy: 'yes' } }, 'health.policy.eddy'], [{ windows: 32 }, 'health.windows'],
      ]) {
        await assert.rejects(shim.generateText(new Uint32Array([1, 2, 3]), { maxTokens: 2, health }),
          (e) => e.code === 'invalid_option' && e.message.includes(param), JSON.stringify(health));
      }
      const ok = await shim.generateText(new Uint32Array([1, 2, 3]), { maxTokens: 4, health: true });
      assert.equal(ok.health.steps, ok.steps.length);
      // Without the option, no report at all.
      const none = await shim.generateText(new Uint32Array([1, 2, 3]), { maxTokens: 4 });
      assert.equal(none.health, undefined);
      assert.ok(none.steps.every((s) => s.health === undefined));
    } finally {
      shim.dispose();
      await file.close();
    }
  });
});
