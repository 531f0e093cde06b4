// A Piscina pool for resampling (the only DSP heavy enough to pay for a thread hop). Tasks are
// moved, not copied, both ways; the queue is bounded and waiting for a slot is the backpressure;
// idle workers do not keep the process alive.

import { availableParallelism } from 'node:os';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Piscina } from 'piscina';
import type { ResampleTask } from '../audio/resampler.ts';
import { InvalidArgumentError, SpeechpipeError } from '../protocol/errors.ts';

/** Options of a {@link ResamplePool}. */
export interface ResamplePoolOptions {
  /**
   * Worker threads, at least 1. Default: the available parallelism (the main thread mostly waits
   * while the workers run; with one thread the pool is slower than inline, see the workers benchmark).
   */
  threads?: number;
  /** Tasks admitted beyond one per thread before `run` waits (0 or more). Default: 2 per thread. */
  maxQueue?: number;
  /** Milliseconds an idle worker lives (0 or more). Default 2000. */
  idleTimeoutMs?: number;
}

/** The pool was closed while a task waited or ran. */
export class PoolClosedError extends SpeechpipeError {
  override name = 'PoolClosedError';
  constructor() {
    super('ERR_POOL_CLOSED', 'the resample pool is closed');
  }
}

/** A task failed in its worker (it threw there, or the worker died); `cause` is what Piscina gave. */
export class WorkerFailedError extends SpeechpipeError {
  override name = 'WorkerFailedError';
  constructor(cause: unknown) {
    super(
      'ERR_WORKER_FAILED',
      `a resample worker task failed: ${cause instanceof Error ? cause.message : String(cause)}`,
      {
        cause,
      },
    );
  }
}

// The task's CommonJS entry next to this one (resample-entry.cts says why): `.cts` when run
// from source (Node's type stripping), `.cjs` from dist/.
const TASK_FILE = fileURLToPath(
  new URL(
    `./resample-entry${extname(fileURLToPath(import.meta.url)) === '.ts' ? '.cts' : '.cjs'}`,
    import.meta.url,
  ),
);

/**
 * Worker threads (Piscina) that run resampling tasks, for `resample()` and `decode()` on bulk
 * audio. Admits at most `capacity` tasks; more wait. Idle workers end after `idleTimeoutMs`.
 */
export class ResamplePool {
  /** Worker threads at most. */
  readonly threads: number;
  /** Tasks admitted at once (queued or running): `threads + maxQueue`. */
  readonly capacity: number;
  readonly #piscina: Piscina<ResampleTask, Int16Array>;
  #active = 0;
  #waiters: Array<{ resolve: () => void; reject: (err: Error) => void }> = [];
  #idle: Array<() => void> = [];
  #closed = false;
  #closing: Promise<void> | undefined;

  /**
   * A pool with no worker running yet: workers start with the first tasks.
   * @throws InvalidArgumentError when `threads`, `maxQueue` or `idleTimeoutMs` is invalid.
   */
  constructor(options: ResamplePoolOptions = {}) {
    const { threads = availableParallelism(), idleTimeoutMs = 2000 } = options;
    const maxQueue = options.maxQueue ?? 2 * threads;
    if (!(Number.isSafeInteger(threads) && threads >= 1)) {
      throw new InvalidArgumentError(
        `ResamplePool: threads must be a whole number, at least 1, got ${threads}`,
      );
    }
    if (!(Number.isSafeInteger(maxQueue) && maxQueue >= 0)) {
      throw new InvalidArgumentError(
        `ResamplePool: maxQueue must be a whole number, at least 0, got ${maxQueue}`,
      );
    }
    if (!(idleTimeoutMs >= 0 && Number.isFinite(idleTimeoutMs))) {
      throw new InvalidArgumentError(
        `ResamplePool: idleTimeoutMs must be a finite number >= 0, got ${idleTimeoutMs}`,
      );
    }
    this.threads = threads;
    this.capacity = threads + maxQueue;
    this.#piscina = new Piscina({
      filename: TASK_FILE,
      minThreads: 0,
      maxThreads: this.threads,
      idleTimeout: idleTimeoutMs,
      // Our own admission (below) bounds the queue; Piscina's never fills.
      maxQueue: this.capacity,
      // Blocking Atomics.wait in idle workers would keep them busy for nothing.
      atomics: 'disabled',
    });
    // Errors Piscina cannot pin on a task (the reply of a task aborted a moment before, a worker
    // that died between tasks) concern no caller: every task settles through its own promise.
    // Left unhandled, the 'error' event would crash the process.
    this.#piscina.on('error', () => {});
  }

  /** Tasks admitted (queued or running). */
  get pending(): number {
    return this.#active;
  }

  /** Fraction of time the workers were busy (Piscina's measure). */
  get utilization(): number {
    return this.#piscina.utilization;
  }

  /**
   * Run a task; resolves with its output. Waits for a slot when `capacity` tasks are admitted.
   * The task's window buffer is transferred: do not use it afterwards. Rejects with
   * `WorkerFailedError` when the task fails in its worker, `PoolClosedError`, or the signal's
   * reason when aborted.
   * @internal `resample()` and `decode()` run their tasks here.
   */
  run(task: ResampleTask, signal?: AbortSignal): Promise<Int16Array> {
    if (this.#closed) return Promise.reject(new PoolClosedError());
    if (signal?.aborted) return Promise.reject(signal.reason);
    const start = () => {
      const window = task.window;
      const whole = window.byteOffset === 0 && window.byteLength === window.buffer.byteLength;
      const transferList = (whole ? [window.buffer] : []) as ArrayBuffer[];
      return this.#piscina
        .run(task, { transferList, signal: signal ?? null })
        .catch((err: unknown) => {
          // Aborted: the signal's own reason, as while waiting for a slot; else a typed failure.
          throw signal?.aborted ? signal.reason : new WorkerFailedError(err);
        })
        .finally(() => this.#release());
    };
    // Admitted at once: handed to Piscina in this tick, so close() always finds it there.
    if (this.#active < this.capacity) {
      this.#active++;
      return start();
    }
    return this.#wait(signal).then(start);
  }

  #wait(signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        reject(signal!.reason);
      };
      const waiter = {
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
        reject: (err: Error) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  #release(): void {
    const next = this.#waiters.shift();
    // The slot passes straight to the next waiter.
    if (next) next.resolve();
    else if (--this.#active === 0) for (const idle of this.#idle.splice(0)) idle();
  }

  /** Stop admitting tasks, let admitted ones finish, end the workers. Idempotent. */
  close(): Promise<void> {
    if (!this.#closing) {
      this.#closed = true;
      for (const w of this.#waiters.splice(0)) w.reject(new PoolClosedError());
      const idle =
        this.#active === 0 ? Promise.resolve() : new Promise<void>((resolve) => this.#idle.push(resolve));
      this.#closing = idle.then(() => this.#piscina.close());
    }
    return this.#closing;
  }
}

let shared: ResamplePool | undefined;

/**
 * One process-wide pool, created on first use. Its idle workers are unreferenced, so it never
 * keeps the process alive; `closeSharedResamplePool()` ends it explicitly.
 */
export function sharedResamplePool(): ResamplePool {
  shared ??= new ResamplePool();
  return shared;
}

/**
 * Close the process-wide pool of {@link sharedResamplePool}, if it was created; the next
 * `sharedResamplePool()` creates a new one.
 */
export async function closeSharedResamplePool(): Promise<void> {
  const pool = shared;
  shared = undefined;
  await pool?.close();
}
