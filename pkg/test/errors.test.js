// The error-code contract: the codes Rust assigns (wasm `errorCodes()`, from ErrorCode::ALL),
// the package's code → HTTP status table (ERROR_STATUS) and docs/errors.md list the same codes,
// with the same statuses; real failures through the wasm carry their code.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from './harness.js';
import { BufferKnotSource, ERROR_STATUS, HostShim, errorStatus, loadWasm } from '../src/node.js';
import { ROOT, TINY } from './support.js';

/** docs/errors.md's table rows: [code, status]. */
function documented() {
  return readFileSync(`${ROOT}docs/errors.md`, 'utf8').split('\n')
    .map((line) => line.split('|').map((c) => c.trim()))
    .filter((cells) => /^`[a-z_]+`$/.test(cells[1] ?? ''))
    .map((cells) => [cells[1].slice(1, -1), Number(cells[3])]);
}

describe('error codes', () => {
  test('Rust, the status table and the docs list the same codes', async () => {
    const wasm = /** @type {any} */ (await loadWasm());
    const rust = Array.from(wasm.errorCodes());
    assert.deepEqual(Object.keys(ERROR_STATUS), rust);
    assert.deepEqual(documented(), rust.map((code) => [code, ERROR_STATUS[code]]));
    assert.equal(errorStatus('unsupported_schema'), 422);
    assert.equal(errorStatus({ code: 'aborted' }), 499);
    assert.equal(errorStatus(new Error('no code')), 500);
    assert.equal(errorStatus({ code: 'toString' }), 500);
  });

  test('failures through the wasm carry their code (and the option they are about)', async () => {
    await assert.rejects(HostShim.open(new BufferKnotSource(new Uint8Array(64))), { code: 'invalid_model' });
    const source = new BufferKnotSource(readFileSync(TINY));
    await assert.rejects(HostShim.open(source, { lruCapacity: 0 }), { code: 'invalid_option', param: 'lruCapacity' });
    await assert.rejects(HostShim.open(source, { lruCapcity: 2 }), { code: 'invalid_option', param: 'lruCapcity' });
    await assert.rejects(HostShim.open({}), { code: 'invalid_argument', message: /rangeGet must be a function/ });
    const shim = await HostShim.open(source, { lruCapacity: 2 });
    try {
      const cases = [
        [() => shim.generate([1, 99999], 1), 'token_out_of_range'],
        [() => shim.generate([], 1), 'empty_prompt'],
        [() => shim.generate([], 1, { continue: true }), 'no_context'],
        [() => shim.generate([1], 1, { temperature: -1 }), 'invalid_option'],
        [() => shim.generate([1], 1, { coltrane: { schema: { type: 'string', pattern: '(?=a)' } } }), 'unsupported_schema'],
        [() => shim.generateText([]), 'invalid_argument'],
        [() => shim.prefetchLayer(99), 'invalid_argument'],
        [() => shim.generate(new Uint32Array(100000).fill(1), 1), 'context_length_exceeded'],
      ];
      for (const [call, code] of cases) await assert.rejects(call(), { code }, code);
      assert.throws(() => shim.decode([99999]), { code: 'token_out_of_range' });
      const controller = new AbortController();
      controller.abort();
      await assert.rejects(shim.generate([1], 1, { signal: controller.signal }), { name: 'AbortError' });
    } finally {
      await shim.dispose();
    }
    await assert.rejects(shim.generate([1], 1), { code: 'disposed' });
  });
});
