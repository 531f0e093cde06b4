// Admission control: one p-queue per workload, sized to the account's plan. An admission 429
// (`CONCURRENCY_LIMIT_EXCEEDED`, `RATE_LIMIT_EXCEEDED`, `SESSION_SLOTS_EXHAUSTED`) pauses the
// whole workload for Retry-After and puts the operation back in the queue, ahead of new work,
// and a concurrency rejection lowers the workload's concurrency (raised again on successes after
// a cool-down, for queued operations and held slots alike), so a burst of submissions ends with
// no failures and no retry storm. The one-POST-in-flight refusal of a diarization stream is not
// admission (see isAdmissionRejection).

import PQueue from 'p-queue';
import { STREAM_REQUESTS_IN_FLIGHT_BOUND } from '../protocol/error-codes.ts';
import { SpeechServiceError, TransportError } from '../protocol/errors.ts';
import { DEFAULT_LIMITS, WORKLOADS, type Workload } from '../protocol/limits.ts';
import { type BackoffOptions, backoffDelay } from './retry.ts';

const ADMISSION_CODES = new Set([
  'CONCURRENCY_LIMIT_EXCEEDED',
  'RATE_LIMIT_EXCEEDED',
  'SESSION_SLOTS_EXHAUSTED',
]);

/**
 * Whether `err` is a rejection of admission (nothing was consumed; retry after a pause). Not the
 * one-POST-in-flight refusal of a stream: that is waited out by the stream alone, without
 * pausing the workload or lowering its concurrency.
 */
export function isAdmissionRejection(err: unknown): err is SpeechServiceError {
  if (!(err instanceof SpeechServiceError) || err.status !== 429) return false;
  if (isStreamRequestInFlight(err)) return false;
  return ADMISSION_CODES.has(err.code) || err.origin === 'intermediary' || err.code === 'HTTP_429';
}

/** Whether `err` refuses a POST because another one for the same stream is in flight. */
function isStreamRequestInFlight(err: unknown): boolean {
  if (!(err instanceof SpeechServiceError) || err.status !== 429) return false;
  return (err.data as { bound?: unknown } | undefined)?.bound === STREAM_REQUESTS_IN_FLIGHT_BOUND;
}

/** A slot held with `Admission.acquire()`. */
export interface Slot {
  /**
   * The service accepted the operation (200 headers, a positive acknowledgement, an accepted
   * start frame): counts as a success, toward raising concurrency after a rejection lowered it.
   */
  succeeded(): void;
  /**
   * An admission rejection seen while starting: pauses the workload (and may lower
   * concurrency). `requeued`: the operation waits for a slot again (counted in `retries`).
   */
  rejected(err: SpeechServiceError, attempt: number, requeued?: boolean): void;
  /** Give the slot back. Neutral: a release alone is neither a success nor a rejection. */
  release(): void;
  /** Settles once the slot is free again in the queue (after release()). */
  readonly freed: Promise<void>;
}

/** Options of the client's admission control (`ClientOptions.admission` takes `probeAfterMs` and `backoff`). */
export interface AdmissionOptions {
  /** Concurrent operations per workload (the plan's limits). */
  concurrency?: Partial<Record<Workload, number>>;
  /**
   * After a concurrency rejection, how long before concurrency is raised again toward the
   * plan limit: by operations the service accepts, or, while operations wait and none could
   * start to be accepted (the slots are held by long operations such as live sessions), by
   * letting one more start as a probe. Default 10 s: probing sooner keeps hitting the
   * account's real limit.
   */
  probeAfterMs?: number;
  /**
   * Pause after an admission rejection that carries no Retry-After. Default 500 ms first, 30 s ceiling.
   */
  backoff?: BackoffOptions;
  /** Clock of the cool-down (tests inject one). Default `Date.now`. */
  now?: () => number;
}

/** One workload's admission queue, as `SpeechClient.admissionStats()` reads it. */
export interface WorkloadStats {
  /** The workload this row describes. */
  workload: Workload;
  /** The plan limit. */
  limit: number;
  /** Current concurrency (lowered after concurrency rejections, raised back on successes). */
  concurrency: number;
  /** Operations running (a held live slot counts). */
  running: number;
  /** Operations waiting for a slot. */
  queued: number;
  /** Whether the workload is paused now (after a rejection). */
  paused: boolean;
  /** Times the workload was paused for a rejection. */
  pauses: number;
  /** Operations retried after an admission rejection. */
  retries: number;
  /** Times concurrency was raised back toward the limit after a concurrency rejection. */
  raises: number;
  /** Admission rejections (429) seen. */
  rejections: number;
  /** Milliseconds the workload spent paused (Retry-After and backoff), pauses that overlap counted once. */
  pausedMs: number;
}

/** An admission rejection the service answered (what a cluster passes on to its other workers). */
export interface AdmissionRejection {
  /** The workload that paused. */
  workload: Workload;
  /** The rejection's error code, e.g. `CONCURRENCY_LIMIT_EXCEEDED`. */
  code: string;
  /** How long the workload pauses (Retry-After when the service sent one). */
  pauseMs: number;
}

interface Lane {
  workload: Workload;
  queue: PQueue;
  limit: number;
  pauses: number;
  retries: number;
  raises: number;
  resumeAt: number;
  timer: NodeJS.Timeout | undefined;
  rejections: number;
  pausedMs: number;
  /** When the current pause began (Date.now()). */
  pausedSince: number;
  successes: number;
  /** No raise before this time (set by a concurrency rejection). */
  probeAt: number;
  /** Raises concurrency by one at `probeAt` when operations wait (see `probeAfterMs`). */
  probe: NodeJS.Timeout | undefined;
}

/**
 * Admission control: one queue per workload, sized to the plan's concurrency. An admission 429
 * pauses the whole workload (for Retry-After, else a backoff) and queues the operation again
 * ahead of new work; a `CONCURRENCY_LIMIT_EXCEEDED` also lowers the workload's concurrency, raised
 * back one at a time on successes after `probeAfterMs`.
 */
export class Admission {
  readonly #lanes = new Map<Workload, Lane>();
  readonly #backoff: BackoffOptions;
  readonly #closed = new AbortController();
  readonly #probeAfterMs: number;
  readonly #now: () => number;
  readonly #listeners = new Set<(rejection: AdmissionRejection) => void>();

  /** @throws RangeError when a workload's concurrency is not a positive integer. */
  constructor(options: AdmissionOptions = {}) {
    this.#now = options.now ?? Date.now;
    this.#probeAfterMs = options.probeAfterMs ?? 10_000;
    // A partial backoff keeps the other defaults (given `maxMs` alone, the pause still starts at 500 ms).
    this.#backoff = { baseMs: 500, maxMs: 30_000, ...options.backoff };
    for (const workload of WORKLOADS) {
      const limit = options.concurrency?.[workload] ?? DEFAULT_LIMITS.accountConcurrency[workload];
      if (!Number.isSafeInteger(limit) || limit < 1)
        throw new RangeError(`concurrency.${workload} must be a positive integer`);
      const queue = new PQueue({ concurrency: limit });
      const lane: Lane = {
        workload,
        queue,
        limit,
        pauses: 0,
        retries: 0,
        raises: 0,
        resumeAt: 0,
        rejections: 0,
        pausedMs: 0,
        pausedSince: 0,
        timer: undefined,
        successes: 0,
        probeAt: 0,
        probe: undefined,
      };
      // A pause keeps the process alive only while an operation waits for it: a one-shot
      // operation's 429 with a long Retry-After must not hold a finished program for that long.
      queue.addEventListener('add', () => {
        lane.timer?.ref();
        // An operation waits while concurrency is lowered: probe for room again (see #armProbe).
        if (lane.queue.concurrency < lane.limit && !lane.probe && !this.#closed.signal.aborted)
          this.#armProbe(lane);
      });
      queue.addEventListener('empty', () => lane.timer?.unref());
      this.#lanes.set(workload, lane);
    }
  }

  /**
   * Hold a slot of the workload until `release()` (live sessions hold one for their lifetime).
   * The holder reports what the service said: `succeeded()` when it accepted the operation,
   * `rejected(err)` for an admission rejection (pausing the workload). A 500, a 409, a lost
   * connection or an abort report neither, and must not raise concurrency.
   */
  async acquire(
    workload: Workload,
    options: { signal?: AbortSignal | undefined; retrying?: boolean } = {},
  ): Promise<Slot> {
    const { signal } = options;
    const lane = this.#lane(workload);
    const closed = this.#closed.signal;
    // The signal ends the wait for a slot, not the holding of it: a slot is held until
    // release() (p-queue would free it on abort while the holder still uses it, e.g. while an
    // aborted live session is still being ended at the service). A listener on each of the
    // caller's signal and the client's closing one, not AbortSignal.any: a composite signal per
    // operation is made, registered with both sources for garbage collection, and dropped.
    const waiting = new AbortController();
    const onSignal = () => waiting.abort(signal!.reason);
    const onClosed = () => waiting.abort(closed.reason);
    const unlisten = () => {
      signal?.removeEventListener('abort', onSignal);
      closed.removeEventListener('abort', onClosed);
    };
    if (signal?.aborted) onSignal();
    else if (closed.aborted) onClosed();
    else {
      signal?.addEventListener('abort', onSignal, { once: true });
      closed.addEventListener('abort', onClosed, { once: true });
    }
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const task = lane.queue.add(
      () => {
        unlisten();
        started();
        return held;
      },
      { signal: waiting.signal, priority: options.retrying ? 1 : 0 },
    );
    task.catch(unlisten);
    await Promise.race([running, task]);
    let released = false;
    let reported = false;
    return {
      succeeded: () => {
        if (reported || released) return;
        reported = true;
        this.#succeeded(lane);
      },
      rejected: (err, attempt, requeued = true) => {
        reported = true;
        this.#rejected(lane, err, attempt, true);
        if (requeued) lane.retries++;
      },
      release: () => {
        if (released) return;
        released = true;
        release();
      },
      freed: task.then(
        () => {},
        () => {},
      ),
    };
  }

  /** Call `listener` on every admission rejection (after the workload paused); returns its removal. */
  onRejection(listener: (rejection: AdmissionRejection) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Pause a workload until `ms` from now (a later end wins). `rejected`: for an admission 429
   * its caller waits out itself (a live frame), counted in the stats' `rejections`.
   */
  pause(workload: Workload, ms: number, rejected = false): void {
    const lane = this.#lane(workload);
    if (rejected) lane.rejections++;
    this.#pause(lane, ms);
  }

  /**
   * Queue depth, running operations, concurrency and pauses of each workload, in `WORKLOADS` order.
   */
  stats(): WorkloadStats[] {
    return WORKLOADS.map((workload) => {
      const lane = this.#lane(workload);
      return {
        workload,
        limit: lane.limit,
        concurrency: lane.queue.concurrency,
        running: lane.queue.pending,
        queued: lane.queue.size,
        paused: lane.queue.isPaused,
        pauses: lane.pauses,
        retries: lane.retries,
        raises: lane.raises,
        rejections: lane.rejections,
        pausedMs: lane.pausedMs + (lane.timer ? Date.now() - lane.pausedSince : 0),
      };
    });
  }

  /** Reject everything queued, stop the pause timers. Running tasks are not interrupted. */
  close(): void {
    this.#closed.abort(new TransportError('ERR_CLIENT_CLOSED', 'the client was closed'));
    for (const lane of this.#lanes.values()) {
      if (lane.timer) {
        clearTimeout(lane.timer);
        lane.pausedMs += Date.now() - lane.pausedSince;
      }
      lane.timer = undefined;
      clearTimeout(lane.probe);
      lane.probe = undefined;
      lane.queue.start();
    }
  }

  #lane(workload: Workload): Lane {
    const lane = this.#lanes.get(workload);
    if (!lane) throw new RangeError(`unknown workload ${workload}`);
    return lane;
  }

  /**
   * `counted`: the rejected operation still counts in the queue's `pending`. A held slot does;
   * a failed `run` task has already left (p-queue frees it before `add()` rejects to us).
   */
  #rejected(lane: Lane, err: SpeechServiceError, attempt: number, counted: boolean): void {
    lane.rejections++;
    if (err.code === 'CONCURRENCY_LIMIT_EXCEEDED') {
      // The account is busier than our plan share: run fewer at once (raised back on successes).
      // What else still runs is what the service admits now.
      const others = lane.queue.pending - (counted ? 1 : 0);
      lane.queue.concurrency = Math.max(1, Math.min(lane.queue.concurrency - 1, others));
      lane.successes = 0;
      lane.probeAt = this.#now() + this.#probeAfterMs;
      this.#armProbe(lane);
    }
    const pauseMs = backoffDelay(attempt, this.#backoff, err.retryAfterMs);
    this.#pause(lane, pauseMs);
    for (const listener of this.#listeners) listener({ workload: lane.workload, code: err.code, pauseMs });
  }

  #succeeded(lane: Lane): void {
    if (lane.queue.concurrency >= lane.limit) return;
    lane.successes++;
    if (this.#now() < lane.probeAt) return;
    if (lane.successes >= lane.queue.concurrency) this.#raise(lane);
  }

  #raise(lane: Lane): void {
    lane.queue.concurrency = lane.queue.concurrency + 1;
    lane.successes = 0;
    lane.raises++;
  }

  /**
   * At `probeAt`, if concurrency is still lowered and operations wait, let one more start: the
   * slots may all be held by operations that run for long (live sessions), whose acceptances
   * are over, so no success would come to raise it and the queue would wait for them to end.
   * A probe the service refuses lowers concurrency again and sets the next probe.
   */
  #armProbe(lane: Lane): void {
    clearTimeout(lane.probe);
    lane.probe = setTimeout(
      () => {
        lane.probe = undefined;
        if (this.#closed.signal.aborted || lane.queue.concurrency >= lane.limit) return;
        if (this.#now() < lane.probeAt) {
          this.#armProbe(lane);
          return;
        }
        if (lane.queue.size > 0) {
          this.#raise(lane);
          lane.probeAt = this.#now() + this.#probeAfterMs;
        }
        if (lane.queue.concurrency < lane.limit && lane.queue.size > 0) this.#armProbe(lane);
      },
      Math.max(0, lane.probeAt - this.#now()),
    );
    // Waiting operations keep the process alive by themselves; the probe alone must not.
    lane.probe.unref();
  }

  #pause(lane: Lane, ms: number): void {
    if (this.#closed.signal.aborted) return;
    const resumeAt = Date.now() + ms;
    if (lane.timer && resumeAt <= lane.resumeAt) return;
    lane.pauses++;
    lane.resumeAt = resumeAt;
    lane.queue.pause();
    if (lane.timer) clearTimeout(lane.timer);
    else lane.pausedSince = Date.now();
    lane.timer = setTimeout(() => {
      lane.timer = undefined;
      lane.pausedMs += Date.now() - lane.pausedSince;
      lane.queue.start();
    }, ms);
    if (lane.queue.size === 0) lane.timer.unref();
  }
}
