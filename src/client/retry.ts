// Backoff with full jitter, an abortable sleep, and which failures may be retried at all.

import { SpeechServiceError, TransportError } from '../protocol/errors.ts';

/**
 * Exponential backoff with full jitter: the delay before retry `n` is random in
 * `[0, min(maxMs, baseMs * factor ** n))`.
 */
export interface BackoffOptions {
  /** First delay. Default 250 ms. */
  baseMs?: number;
  /** Ceiling of any delay. Default 30 s. */
  maxMs?: number;
  /** Growth per attempt. Default 2. */
  factor?: number;
}

/** How many times, and how far apart, a retryable failure is tried again. */
export interface RetryOptions extends BackoffOptions {
  /** Attempts in all, the first included. Default 5. */
  maxAttempts?: number;
}

/** The retry defaults: 5 attempts in all, 250 ms first delay, 30 s ceiling, factor 2. */
export const DEFAULT_RETRY: Required<RetryOptions> = Object.freeze({
  maxAttempts: 5,
  baseMs: 250,
  maxMs: 30_000,
  factor: 2,
});

/**
 * Delay before retry number `attempt` (0-based): full jitter over an exponential ceiling, so
 * that many clients retrying at once spread out. `retryAfterMs` from the service wins when
 * given (plus a little jitter, never less than it asked).
 */
export function backoffDelay(
  attempt: number,
  options: BackoffOptions = {},
  retryAfterMs?: number,
  random = Math.random,
): number {
  const base = options.baseMs ?? DEFAULT_RETRY.baseMs;
  const max = options.maxMs ?? DEFAULT_RETRY.maxMs;
  const factor = options.factor ?? DEFAULT_RETRY.factor;
  if (retryAfterMs !== undefined)
    return Math.min(retryAfterMs + random() * Math.min(base, 1000), Math.max(max, retryAfterMs));
  const ceiling = Math.min(max, base * factor ** attempt);
  return random() * ceiling;
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts. Leaves no timer. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** `promise`, or the rejection with `signal`'s reason if it aborts first (no listener left). */
export function untilAborted(promise: Promise<void>, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** A signal that aborts when any of `signals` does (undefined ones ignored). */
export function anySignal(...signals: (AbortSignal | undefined)[]): AbortSignal | undefined {
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  if (present.length === 0) return undefined;
  if (present.length === 1) return present[0];
  return AbortSignal.any(present);
}

/** Statuses that no retry can fix, whatever a (possibly wrong or hostile) body says. */
const NEVER_RETRIED = new Set([401, 403, 413, 422]);

/**
 * The service refused the key (401) or what it may do (403): every other operation would be
 * refused too, and a changed request is no remedy. The environment is wrong.
 */
export function isAuthFailure(err: unknown): err is SpeechServiceError {
  return err instanceof SpeechServiceError && (err.status === 401 || err.status === 403);
}

/**
 * Whether a failure may be retried (the caller decides whether it is *safe*: nothing
 * delivered yet, an idempotent read). 429 is left to admission control unless `include429`
 * (reads are not admission-queued, so they wait out their own 429s).
 */
export function isRetryableFailure(err: unknown, options: { include429?: boolean } = {}): boolean {
  if (err instanceof TransportError) return err.retryable && err.code !== 'ERR_CLIENT_CLOSED';
  if (!(err instanceof SpeechServiceError) || !err.retryable || NEVER_RETRIED.has(err.status)) return false;
  return err.status !== 429 || options.include429 === true;
}
