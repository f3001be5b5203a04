// One test API for `node --test` and `bun test`, so both run the same files.
const runner = globalThis.Bun ? await import('bun:test') : await import('node:test');

export const test = runner.test;
export const describe = runner.describe;
/** Runs once before the tests of the enclosing describe (or file). */
export const before = runner.beforeAll ?? runner.before;
/** Runs once after the tests of the enclosing describe (or file). */
export const after = runner.afterAll ?? runner.after;
/**
 * `test` when `condition` holds, else the test is listed as skipped.
 * @param {boolean} condition
 * @param {string} name
 * @param {() => unknown} fn
 */
export const testIf = (condition, name, fn) => (condition ? runner.test(name, fn) : runner.test.skip(name, fn));
