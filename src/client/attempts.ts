// The one retry loop every operation runs through. An operation says what one attempt does and
// which of its failures may be tried again; the policy does the rest, the same way for all: an
// admission slot per attempt (admission rejections wait in the queue ahead of new work, without
// counting as attempts), Retry-After or a jittered backoff between attempts, and one overall
// deadline that bounds the attempts, the pauses and every wait inside them together.

import { DeadlineExceededError, TransportError } from '../protocol/errors.ts';
import type { Workload } from '../protocol/limits.ts';
import { MAX_TIMER_MS } from '../protocol/options.ts';
import { type Admission, isAdmissionRejection, type Slot } from './admission.ts';
import {
  anySignal,
  backoffDelay,
  DEFAULT_RETRY,
  isRetryableFailure,
  type RetryOptions,
  sleep,
} from './retry.ts';

/** What one attempt is given. */
export interface Attempt {
  /** 0 for the first; admission refusals, which wait in the queue, do not count. */
  readonly number: number;
  /**
   * Aborts on the caller's signal, the deadline and `client.close()`, with the reason to fail
   * with: pass it to every request and wait of the attempt.
   */
  readonly signal: AbortSignal;
  /** The service accepted the operation (a 200, an acknowledgement): admission counts a success. */
  accepted(): void;
  /**
   * Keep the admission slot beyond the attempt (TTS audio, fast records and live sessions hold
   * it while they run); returns its release, which settles once the slot is free in the queue
   * again. Once the operation is over, succeeded or failed, releasing it is the holder's (a
   * live session gives it back once its stream is ended at the service); while the operation
   * goes on to another attempt, the policy gives it back.
   */
  keepSlot(): () => Promise<void>;
}

/** One operation, as the policy runs it. */
export interface AttemptPlan<T> {
  /** For messages (`fast.http`, `tts.socket`, ...). */
  operation: string;
  /** One attempt. */
  run(attempt: Attempt): Promise<T>;
  /** Admission-controlled operations take a slot of this workload per attempt. */
  workload?: Workload;
  /** The caller's: ends everything, with its reason. */
  signal?: AbortSignal | undefined;
  /**
   * `signal` aborts when the client closes (a live session's does: `close()` aborts every
   * session in use), so the policy need not join it with the client's closing signal.
   */
  signalFollowsClose?: boolean;
  /**
   * The overall bound, from the first attempt on (the wait for a first slot in the client's
   * own queue is the caller's concurrency, bounded by `signal`). Default: none. A deadline the
   * operation keeps after the policy returned (records still streaming) is passed in instead.
   */
  deadline?: Deadline | number | undefined;
  /** An attempt cut by the deadline may have taken effect (default); false for reads. */
  effectful?: boolean;
  /** Attempts in all and their backoff. Default the client's retry options. */
  retry?: RetryOptions | undefined;
  /**
   * Whether a failure may be tried again. Default: a transport failure, or a service error the
   * service marks retryable (never 401, 403, 413 or 422; a 429 is admission's to wait out).
   */
  retryable?(err: unknown): boolean;
  /** Whether the operation can run again at all (a one-shot input is spent). Default yes. */
  repeatable?(): boolean;
  /** Told before each pause, with the failure and the pause. */
  onRetry?(err: unknown, delayMs: number): void;
}

/**
 * An operation's overall deadline. It starts with the first attempt and aborts `signal` when it
 * passes, with a {@link DeadlineExceededError} whose cause is the last failure before it.
 */
export class Deadline {
  readonly ms: number;
  readonly #operation: string;
  /** Made when first needed: a deadline that cannot pass (every live frame's) needs none. */
  #controller: AbortController | undefined;
  /** Whether an attempt was under way at the deadline makes the failure ambiguous. */
  readonly #effectful: boolean;
  #timer: NodeJS.Timeout | undefined;
  #endsAt = Number.POSITIVE_INFINITY;
  /** Attempts begun so far. */
  attempts = 0;
  /** An attempt is under way. */
  inFlight = false;
  /** The latest attempt's failure, the cause of the deadline's error. */
  lastFailure: unknown;

  /** `effectful`: an attempt cut by the deadline may have taken effect (not a read). */
  constructor(operation: string, ms: number, options: { effectful?: boolean } = {}) {
    if (!(ms > 0)) throw new RangeError(`${operation}: deadlineMs must be a number > 0, got ${ms}`);
    this.ms = ms;
    this.#operation = operation;
    this.#effectful = options.effectful ?? true;
  }

  /** Aborted when the deadline passes. */
  get signal(): AbortSignal {
    this.#controller ??= new AbortController();
    return this.#controller.signal;
  }

  /** Whether it has passed. */
  get passed(): boolean {
    return this.#controller?.signal.aborted === true;
  }

  /** Whether it can pass at all (not an infinite one). */
  get finite(): boolean {
    return this.ms !== Number.POSITIVE_INFINITY;
  }

  /** Whether it has started (the first attempt began). */
  get started(): boolean {
    return this.#endsAt !== Number.POSITIVE_INFINITY || this.ms === Number.POSITIVE_INFINITY;
  }

  /** From now on (once). */
  start(): void {
    if (this.started || this.passed) return;
    this.#endsAt = performance.now() + this.ms;
    // Past a timer's range (~24.8 days) none is armed: `remainingMs()` still bounds the pauses.
    if (this.ms <= MAX_TIMER_MS) {
      this.#controller ??= new AbortController();
      const controller = this.#controller;
      this.#timer = setTimeout(() => controller.abort(this.error()), this.ms);
      // The operation's own I/O keeps the process alive; a bound alone must not.
      this.#timer.unref();
    }
  }

  /** Milliseconds left (Infinity before it started). */
  remainingMs(): number {
    return Math.max(0, this.#endsAt - performance.now());
  }

  /** Whether a pause of `ms` from now would end at or past it: no attempt could follow. */
  cutsShort(ms: number): boolean {
    return this.started && ms >= this.remainingMs();
  }

  /** The error for this deadline now, `cause` the given failure or the last one. */
  error(cause: unknown = this.lastFailure): DeadlineExceededError {
    return new DeadlineExceededError(this.#operation, this.ms, {
      attempts: this.attempts,
      ambiguous: this.#effectful && this.inFlight,
      cause: cause instanceof DeadlineExceededError ? cause.cause : cause,
    });
  }

  /** The operation is over: no timer left. */
  clear(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

const noop = () => {};
/** `keepSlot` of an attempt that holds no slot. */
const noSlot = () => () => Promise.resolve();

/** What the policy shares with the client. */
export interface RetryPolicyOptions {
  /** Slots for admission-controlled operations. */
  admission?: Admission | undefined;
  /** Attempts and backoff of operations that give none. Default {@link DEFAULT_RETRY}. */
  retry?: RetryOptions | undefined;
  /** Admission refusals one operation waits out before its 429 is returned. Default 100. */
  maxAdmissionRetries?: number | undefined;
  /** Aborted by `client.close()`: everything ends, `ERR_CLIENT_CLOSED`. */
  closed?: AbortSignal | undefined;
}

/**
 * Runs operations attempt by attempt, as {@link AttemptPlan}s say. One per client: the same
 * admission, retry defaults and closing signal for every operation.
 */
export class RetryPolicy {
  readonly #admission: Admission | undefined;
  readonly #retry: Required<RetryOptions>;
  readonly #maxAdmissionRetries: number;
  readonly #closed: AbortSignal | undefined;

  constructor(options: RetryPolicyOptions = {}) {
    this.#admission = options.admission;
    this.#retry = { ...DEFAULT_RETRY, ...options.retry };
    this.#maxAdmissionRetries = options.maxAdmissionRetries ?? 100;
    this.#closed = options.closed;
  }

  /** The client's retry options (attempts and backoff). */
  get retry(): Required<RetryOptions> {
    return this.#retry;
  }

  /** The signal `client.close()` aborts. */
  get closed(): AbortSignal | undefined {
    return this.#closed;
  }

  /** Run `plan` to its result or its last failure. */
  async run<T>(plan: AttemptPlan<T>): Promise<T> {
    // The common case, a live session's every frame after the first: no slot to take and no
    // deadline. Its first attempt runs without the loop's bookkeeping (which cost a frame about
    // as much as the frame did); a failure goes on in the loop as the first attempt's.
    if (!plan.workload && plan.deadline === undefined) {
      const signal = this.#outer(plan);
      if (signal && !signal.aborted) {
        try {
          return await plan.run({ number: 0, signal, accepted: noop, keepSlot: noSlot });
        } catch (error) {
          return this.#attempts(plan, { error });
        }
      }
    }
    return this.#attempts(plan);
  }

  /** The attempts of `plan`; `first`: the failure of a first attempt already made (see run). */
  async #attempts<T>(plan: AttemptPlan<T>, first?: { error: unknown }): Promise<T> {
    const own = !(plan.deadline instanceof Deadline);
    const deadline =
      plan.deadline instanceof Deadline
        ? plan.deadline
        : new Deadline(plan.operation, plan.deadline ?? Number.POSITIVE_INFINITY, {
            effectful: plan.effectful ?? true,
          });
    const retry = { ...this.#retry, ...plan.retry };
    const retryable = plan.retryable ?? ((err: unknown) => isRetryableFailure(err));
    const outer = this.#outer(plan);
    /** An attempt's signal: `outer` and the deadline, if it can pass. */
    const scoped = () => (deadline.finite ? anySignal(outer, deadline.signal)! : (outer ?? deadline.signal));
    let failures = 0;
    let refusals = 0;
    /** The failed attempt that came before and its pause (see `#pauseAfter`). */
    const next = (err: unknown) => {
      failures++;
      return this.#pauseAfter(err, plan, deadline, retry, retryable, failures);
    };
    try {
      for (;;) {
        let slot: Slot | undefined;
        let kept = false;
        /** The operation goes on to another attempt (the slot is not the holder's then). */
        let again = false;
        /** Before the next attempt, with no slot held (others may run meanwhile). */
        let pause = 0;
        if (first) {
          // Made by run() with no slot: it counts as this loop's first attempt.
          const { error } = first;
          first = undefined;
          deadline.attempts++;
          const failure = this.#settled(error, plan.signal, deadline);
          if (failure) throw failure;
          pause = next(error);
        } else {
          try {
            if (plan.workload && this.#admission) {
              slot = await this.#admission.acquire(plan.workload, {
                signal: deadline.started ? scoped() : outer,
                retrying: failures + refusals > 0,
              });
            }
            deadline.start();
            deadline.attempts++;
            deadline.inFlight = true;
            const signal = scoped();
            signal.throwIfAborted();
            const value = await plan.run({
              number: failures,
              signal,
              accepted: () => slot?.succeeded(),
              keepSlot: () => {
                kept = true;
                const held = slot;
                return () => {
                  held?.release();
                  return held ? held.freed : Promise.resolve();
                };
              },
            });
            return value;
          } catch (err) {
            deadline.inFlight = false;
            const failure = this.#settled(err, plan.signal, deadline);
            if (failure) throw failure;
            if (slot && isAdmissionRejection(err)) {
              // Nothing was consumed: back to the queue, ahead of new work, after the pause. Not
              // a refusal the service marks not retryable (a quota spent): the service's flag
              // decides, for admission too (the workload still pauses for the others).
              const requeued =
                err.retryable && (plan.repeatable?.() ?? true) && refusals < this.#maxAdmissionRetries;
              // A Retry-After the deadline would cut short leads to no attempt: fail now.
              const late = deadline.cutsShort(err.retryAfterMs ?? 0);
              slot.rejected(err, refusals, requeued && !late);
              deadline.lastFailure = err;
              if (!requeued) throw err;
              if (late) throw deadline.error(err);
              refusals++;
              again = true;
              continue;
            }
            pause = next(err);
            again = true;
          } finally {
            deadline.inFlight = false;
            // Free in the queue by the time the operation settles, so what the caller does next
            // (or reads in the stats) sees the slot back.
            if (slot && (!kept || again)) {
              slot.release();
              await slot.freed;
            }
          }
        }
        try {
          if (pause > 0) await sleep(pause, scoped());
        } catch (reason) {
          throw this.#settled(reason, plan.signal, deadline) ?? reason;
        }
      }
    } finally {
      if (own) deadline.clear();
    }
  }

  /** The caller's signal, joined with the client's closing signal unless it follows it. */
  #outer(plan: AttemptPlan<unknown>): AbortSignal | undefined {
    // A composite signal (AbortSignal.any) per attempt cost a live frame more than the frame:
    // made, listened to (it registers with its sources for garbage collection) and read.
    return plan.signalFollowsClose && plan.signal ? plan.signal : anySignal(plan.signal, this.#closed);
  }

  /**
   * After attempt number `failures` failed with `err` (not an admission refusal): the pause
   * before the next attempt, or the failure that ends the operation, thrown.
   */
  #pauseAfter(
    err: unknown,
    plan: AttemptPlan<unknown>,
    deadline: Deadline,
    retry: Required<RetryOptions>,
    retryable: (err: unknown) => boolean,
    failures: number,
  ): number {
    deadline.lastFailure = err;
    if (!retryable(err) || failures >= retry.maxAttempts || !(plan.repeatable?.() ?? true)) throw err;
    const pause = backoffDelay(failures - 1, retry, (err as { retryAfterMs?: number }).retryAfterMs);
    // A pause the deadline would cut short leads to no attempt: fail now.
    if (deadline.cutsShort(pause)) throw deadline.error(err);
    plan.onRetry?.(err, pause);
    return pause;
  }

  /**
   * The failure that ends the operation whatever it was: the caller's abort (its own reason),
   * the client closed, the deadline passed. Undefined when the failure is the attempt's own.
   */
  #settled(err: unknown, signal: AbortSignal | undefined, deadline: Deadline): unknown {
    if (signal?.aborted) return signal.reason;
    if (this.#closed?.aborted)
      return err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED' ? err : this.#closed.reason;
    if (deadline.passed) return err instanceof DeadlineExceededError ? err : deadline.error(err);
    return undefined;
  }
}
