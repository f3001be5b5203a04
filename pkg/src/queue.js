// The order of a HostShim's calls into wasm. WasmHost runs one async call at a time, so calls
// queue. One generation runs at a time, except that a stream waiting for its consumer
// (`suspended`) gives way to the next generation, which supersedes it. `release()` takes the
// queue back from a call whose JS continuations will never run (workerd cancels a request's
// pending work when its client goes away): an epoch makes their late bookkeeping, should any of
// it run, a no-op. Nothing here knows about wasm, so it is tested on its own.
import { coded } from './errors.js';

export const SUPERSEDED = 'HostShim: this stream was superseded by a later call (a stream not pulled to its end gives way to the next generation)';

/**
 * A generation: `suspended` while it waits for its consumer (a stream between pulls);
 * `superseded` once a later call took its place.
 * @typedef {{ suspended: boolean, superseded: boolean, epoch: number, preemptible: boolean,
 *   detach: () => void }} Run
 */

export class CallQueue {
  #tail = Promise.resolve();
  #busy = 0;
  #epoch = 0;
  /** @type {Run | undefined} the generation in progress */
  #generation;
  /** @type {Run | undefined} the generation whose call is running now */
  #calling;
  /** @type {() => any} */
  #enter;
  /** @type {() => void} */
  #idle;

  /**
   * @param {() => any} enter gives what a call runs on; throws when there is nothing any more
   *   (a disposed shim), and is asked again when a call fails, so a call cut short by that
   *   rejects with its error
   * @param {() => void} idle called when the last queued call has ended
   */
  constructor(enter, idle) {
    this.#enter = enter;
    this.#idle = idle;
  }

  /** Calls queued or running. */
  get pending() {
    return this.#busy;
  }

  /** The generation whose call is running now. */
  get calling() {
    return this.#calling;
  }

  /** Nothing queued and no generation in progress. */
  get idle() {
    return this.#busy === 0 && this.#generation === undefined;
  }

  /** No call in flight, and no generation or only a stream waiting for its consumer. */
  get settled() {
    return this.#busy === 0 && (this.#generation === undefined || this.#generation.suspended);
  }

  /**
   * Runs `fn` on what `enter` gives, after every earlier call has finished.
   * @template T
   * @param {(target: any) => Promise<T>} fn
   * @returns {Promise<T>}
   */
  run(fn) {
    const job = async () => {
      const epoch = this.#epoch;
      this.#busy++;
      try {
        return await fn(this.#enter());
      } catch (err) {
        this.#enter();
        throw err;
      } finally {
        if (epoch === this.#epoch) {
          this.#busy--;
          if (this.#busy === 0) this.#idle();
        }
      }
    };
    const result = this.#tail.then(job, job);
    this.#tail = result.then(() => undefined, () => undefined);
    return result;
  }

  /**
   * Begins a generation. A preemptible one suspended for its consumer is superseded; any other
   * in progress makes this throw (`busy`).
   * @param {boolean} preemptible a later generation may take over while its consumer is away
   * @param {() => void} detach undoes what the generation hooked up (an abort listener)
   * @returns {Run}
   */
  begin(preemptible, detach) {
    const previous = this.#generation;
    if (previous !== undefined) {
      if (!(previous.preemptible && previous.suspended)) {
        throw coded('busy', 'HostShim: another generation is in progress; await it first', Error);
      }
      supersede(previous);
    }
    /** @type {Run} */
    const run = { suspended: false, superseded: false, epoch: this.#epoch, preemptible, detach };
    this.#generation = run;
    return run;
  }

  /**
   * One call of generation `run`, queued behind earlier calls. It fails as superseded if a
   * later generation took over, and with the signal's reason once `signal` is aborted,
   * whatever the call itself said.
   * @template T
   * @param {Run} run
   * @param {(target: any) => Promise<T>} fn
   * @param {AbortSignal} [signal]
   * @returns {Promise<T>}
   */
  call(run, fn, signal) {
    return this.run(async (target) => {
      if (run.superseded) throw new Error(SUPERSEDED);
      signal?.throwIfAborted();
      this.#calling = run;
      try {
        return await fn(target);
      } catch (err) {
        signal?.throwIfAborted();
        throw err;
      } finally {
        this.#calling = undefined;
      }
    });
  }

  /**
   * Whether `run` still owns its bookkeeping: not superseded, and begun since the last release.
   * @param {Run} run
   */
  current(run) {
    return !run.superseded && run.epoch === this.#epoch;
  }

  /**
   * Ends generation `run` (a no-op for one already superseded).
   * @param {Run} run
   */
  end(run) {
    if (this.#generation === run) this.#generation = undefined;
  }

  /** Supersedes the generation in progress, if any: a stream waiting for its consumer. */
  supersede() {
    if (this.#generation !== undefined) supersede(this.#generation);
    this.#generation = undefined;
  }

  /**
   * Takes the queue back from calls that will never continue: their places are released,
   * their generation superseded, and their late bookkeeping (an older epoch) ignored.
   */
  release() {
    this.#epoch++;
    this.#busy = 0;
    this.#tail = Promise.resolve();
    this.#calling = undefined;
    this.supersede();
  }
}

/** @param {Run} run */
function supersede(run) {
  run.superseded = true;
  run.detach();
}
