// Which timers of a given delay a test started and did not clear: a deterministic check that an
// operation leaves no timer behind, where counting the process's timers would count others too.

import type { TestContext } from 'node:test';

/**
 * Spies on the global setTimeout/clearTimeout for the rest of test `t` (restored after it).
 * `pending()` is how many timers started with `delayMs` are not cleared; pick a delay no other
 * code uses and that does not elapse during the test.
 */
export function watchTimers(t: TestContext, delayMs: number): { started(): number; pending(): number } {
  const set = t.mock.method(globalThis, 'setTimeout');
  const clear = t.mock.method(globalThis, 'clearTimeout');
  const started = () => set.mock.calls.filter((c) => c.arguments[1] === delayMs).map((c) => c.result);
  return {
    started: () => started().length,
    pending: () => {
      const cleared = new Set(clear.mock.calls.map((c) => c.arguments[0]));
      return started().filter((timer) => !cleared.has(timer)).length;
    },
  };
}

/** `promise`, or a rejection naming `what` when it takes longer than `ms` (a hang fails the test). */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: still waiting after ${ms} ms`)), ms);
    }),
  ]);
}
