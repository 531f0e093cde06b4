// Everything the emulator holds that outlives one call: timers, child processes and temp
// files, tracked so that `close()` releases all of them and no handle is left open.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export class Lifecycle {
  readonly #controller = new AbortController();
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #cleanups = new Set<() => void>();
  #tempDir: string | undefined;
  #tempSeq = 0;

  /** Aborted when the emulator closes. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  get closed(): boolean {
    return this.#controller.signal.aborted;
  }

  /** An unref'd timeout that `close()` clears. */
  timeout(ms: number, fn: () => void): NodeJS.Timeout {
    if (this.closed) {
      // Nothing runs after close; hand back a timer that is already cleared.
      const dead = setTimeout(() => {}, 0);
      clearTimeout(dead);
      return dead;
    }
    const timer = setTimeout(
      () => {
        this.#timers.delete(timer);
        fn();
      },
      Math.max(0, ms),
    );
    timer.unref();
    this.#timers.add(timer);
    return timer;
  }

  clear(timer: NodeJS.Timeout | undefined): void {
    if (timer === undefined) return;
    clearTimeout(timer);
    this.#timers.delete(timer);
  }

  /**
   * Resolve after `ms` (never, for `Infinity`: the `stall` fault), or reject with the abort
   * reason when `signal` or the emulator aborts. `ms <= 0` resolves at once (the `instant`
   * latency model costs nothing).
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (ms <= 0 && !signal?.aborted && !this.closed) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const signals = signal ? [signal, this.signal] : [this.signal];
      const aborted = signals.find((s) => s.aborted);
      if (aborted) {
        reject(aborted.reason);
        return;
      }
      let timer: NodeJS.Timeout | undefined;
      const onAbort = (event: Event) => {
        this.clear(timer);
        for (const s of signals) s.removeEventListener('abort', onAbort);
        reject((event.target as AbortSignal).reason);
      };
      if (Number.isFinite(ms)) {
        timer = this.timeout(ms, () => {
          for (const s of signals) s.removeEventListener('abort', onAbort);
          resolve();
        });
      }
      for (const s of signals) s.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * `promise`'s value if it settles within `ms`, else `'timeout'`; `'stopped'` when `signal`
   * or the emulator aborts first. A rejection of `promise` is passed on. (No AbortController:
   * this runs for every live frame.)
   */
  within<T>(
    promise: Promise<T>,
    ms: number,
    signal?: AbortSignal,
  ): Promise<{ value: T } | 'timeout' | 'stopped'> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted || this.closed) {
        resolve('stopped');
        return;
      }
      let settled = false;
      let timer: NodeJS.Timeout | undefined;
      const settle = () => {
        settled = true;
        this.clear(timer);
        signal?.removeEventListener('abort', onAbort);
        this.signal.removeEventListener('abort', onAbort);
      };
      const onAbort = () => {
        if (settled) return;
        settle();
        resolve('stopped');
      };
      if (Number.isFinite(ms)) {
        timer = this.timeout(ms, () => {
          if (settled) return;
          settle();
          resolve('timeout');
        });
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      this.signal.addEventListener('abort', onAbort, { once: true });
      promise.then(
        (value) => {
          if (settled) return;
          settle();
          resolve({ value });
        },
        (err: unknown) => {
          if (settled) return;
          settle();
          reject(err);
        },
      );
    });
  }

  /** Register a cleanup run on close (killing a child, removing a file); returns its remover. */
  onClose(cleanup: () => void): () => void {
    if (this.closed) {
      cleanup();
      return () => {};
    }
    this.#cleanups.add(cleanup);
    return () => this.#cleanups.delete(cleanup);
  }

  /** A fresh path in the emulator's private temp directory (removed on close). */
  tempPath(suffix = ''): string {
    this.#tempDir ??= mkdtempSync(join(tmpdir(), 'speechpipe-emulator-'));
    this.#tempSeq++;
    return join(this.#tempDir, `upload-${this.#tempSeq}${suffix}`);
  }

  close(): void {
    if (!this.closed) this.#controller.abort(new Error('the emulator closed'));
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    for (const cleanup of this.#cleanups) {
      try {
        cleanup();
      } catch {
        // a failing cleanup must not keep the others from running
      }
    }
    this.#cleanups.clear();
    if (this.#tempDir) rmSync(this.#tempDir, { recursive: true, force: true });
    this.#tempDir = undefined;
  }
}
