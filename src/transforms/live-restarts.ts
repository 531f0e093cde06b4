// How long a live stream keeps starting fresh sessions when they fail. Two bounds, each on what
// it can see: how many sessions in a row failed with no progress, and how long the service was
// unreachable or refusing, counted only while no session was taking audio. A session that took
// the audio and then failed (its final record never came, its answer was cut) used service time,
// not outage time: its own wait must not spend the budget of the sessions that follow it.

import { type BackoffOptions, backoffDelay } from '../client/retry.ts';
import type { SpeechServiceError } from '../protocol/errors.ts';

/** Options of a {@link RestartBudget}. */
export interface RestartBudgetOptions {
  /** Restarts in a row with no progress between them. Default unbounded. */
  maxRestarts?: number | undefined;
  /** Outage time (no session taking audio) since the last progress. Default 60 s. */
  withinMs?: number | undefined;
  /** Pause before each restart; Retry-After wins. Default 250 ms doubling to 10 s. */
  backoff?: BackoffOptions | undefined;
  /** Monotonic clock in ms (tests inject one). Default `performance.now`. */
  now?: () => number;
  /** Jitter source (tests inject one). Default `Math.random`. */
  random?: () => number;
}

export class RestartBudget {
  readonly #maxRestarts: number;
  readonly #withinMs: number;
  readonly #backoff: BackoffOptions;
  readonly #now: () => number;
  readonly #random: () => number;
  /** Restarts since the last progress. */
  #restarts = 0;
  /** Outage time since the last progress, down periods that ended. */
  #downMs = 0;
  /** When the down period under way began (no session has taken audio since). */
  #downSince: number | undefined;

  constructor(options: RestartBudgetOptions = {}) {
    this.#maxRestarts = options.maxRestarts ?? Number.POSITIVE_INFINITY;
    this.#withinMs = options.withinMs ?? 60_000;
    this.#backoff = { baseMs: 250, maxMs: 10_000, ...options.backoff };
    this.#now = options.now ?? (() => performance.now());
    this.#random = options.random ?? Math.random;
  }

  /** Restarts since the last progress. */
  get restarts(): number {
    return this.#restarts;
  }

  /** Outage time since the last progress, in ms. */
  get downMs(): number {
    return this.#downMs + (this.#downSince === undefined ? 0 : this.#now() - this.#downSince);
  }

  /**
   * New source audio was accepted, or a record finalised audio: the budget is whole again.
   * (Audio heard again after a failure, and provisional records of it, are not progress:
   * sessions that each take the replay and fail before finalising it would restart for ever.)
   */
  progress(): void {
    this.#restarts = 0;
    this.#downMs = 0;
  }

  /** A session took audio: the service answers again, and the outage (if any) is over. */
  accepted(): void {
    if (this.#downSince === undefined) return;
    this.#downMs += this.#now() - this.#downSince;
    this.#downSince = undefined;
  }

  /**
   * A session failed: the pause before the next one, or `undefined` when the budget is spent
   * (more than `maxRestarts` restarts, or more than `withinMs` of outage, since the last progress,
   * or a `Retry-After` that would take the outage past `withinMs`).
   */
  failed(err: unknown): number | undefined {
    this.#downSince ??= this.#now();
    this.#restarts++;
    if (this.#restarts > this.#maxRestarts || this.downMs > this.#withinMs) return undefined;
    const retryAfterMs = (err as Partial<SpeechServiceError> | undefined)?.retryAfterMs;
    // A Retry-After longer than what is left of the bound: no session could take audio within it.
    if (retryAfterMs !== undefined && this.downMs + retryAfterMs > this.#withinMs) return undefined;
    return backoffDelay(this.#restarts - 1, this.#backoff, retryAfterMs, this.#random);
  }
}
