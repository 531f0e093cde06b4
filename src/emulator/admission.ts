// Admission: the per-key request rate (429 RATE_LIMIT_EXCEEDED), concurrent operations per
// account and workload (429 CONCURRENCY_LIMIT_EXCEEDED) and HTTP pseudo-session slots per account
// (429 SESSION_SLOTS_EXHAUSTED), after the operation's own validation. A rejected request takes
// nothing from any of them.

import type { Limits, Workload } from '../protocol/limits.ts';
import { limitData, reject } from './rejection.ts';
import type { SharedState } from './shared-state.ts';
import type { StatsCollector } from './stats.ts';

/** Seconds a client is told to wait after a concurrency or slot rejection. */
export const CONCURRENCY_RETRY_AFTER_SEC = 1;

/** Gives back what an admission took; calling it again does nothing. */
export type Release = () => void;

export const NOTHING: Release = () => {};

/**
 * Admit a request that passed its own validation: a request-rate token, then what `acquire`
 * takes (concurrency, slots). Returns the release of what `acquire` took.
 */
export type Admit = (acquire?: () => Release) => Release;

/**
 * Refusals that consume nothing: validation (bad request, too large, too long) and admission
 * (429), whenever they come.
 */
const REFUSAL_STATUSES: ReadonlySet<number> = new Set([400, 413, 422, 429]);

/**
 * One request's admission. The rate token is taken once, when the request is first admitted;
 * it is given back when `acquire` refuses the request, or when the request is refused later by
 * validation that can only run after admission (an upload read while it is admitted).
 */
export class RequestAdmission {
  readonly #rate: RateLimiter | undefined;
  readonly #key: string;
  readonly #batch: boolean;
  #taken = false;
  #refund: Release = NOTHING;

  constructor(rate: RateLimiter | undefined, key: string, batch: boolean) {
    this.#rate = rate;
    this.#key = key;
    this.#batch = batch;
  }

  /** See {@link Admit}. A method, not a closure per request: every live frame is admitted. */
  admit(acquire?: () => Release): Release {
    if (this.#taken) return acquire ? acquire() : NOTHING;
    const refund = this.#rate?.take(this.#key, this.#batch) ?? NOTHING;
    let release: Release = NOTHING;
    if (acquire) {
      try {
        release = acquire();
      } catch (err) {
        refund();
        throw err;
      }
    }
    this.#taken = true;
    this.#refund = refund;
    return release;
  }

  /** The request was answered with error `status`: a refusal gives its token back. */
  answered(status: number): void {
    if (!REFUSAL_STATUSES.has(status)) return;
    this.#refund();
    this.#refund = NOTHING;
  }
}

/** Counts of held units by key; `take` returns the release of one unit. */
class Holdings {
  readonly #held = new Map<string, number>();

  held(key: string): number {
    return this.#held.get(key) ?? 0;
  }

  take(key: string, onRelease?: () => void): Release {
    this.#held.set(key, this.held(key) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const now = this.held(key) - 1;
      if (now <= 0) this.#held.delete(key);
      else this.#held.set(key, now);
      onRelease?.();
    };
  }
}

export class ConcurrencyGate {
  readonly #holdings = new Holdings();
  readonly #limits: Limits;
  readonly #stats: StatsCollector;
  readonly #shared: SharedState | undefined;

  /** With `shared`, the limits hold across every thread of the emulator. */
  constructor(limits: Limits, stats: StatsCollector, shared?: SharedState) {
    this.#limits = limits;
    this.#stats = stats;
    this.#shared = shared;
  }

  acquire(account: string, workload: Workload): Release {
    const limit = this.#limits.accountConcurrency[workload];
    if (this.#shared) {
      const taken = this.#shared.take(account, workload, limit);
      if (typeof taken === 'number') throw concurrencyRejection(workload, limit, taken);
      this.#stats.acquired(workload);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        taken();
        this.#stats.released(workload);
      };
    }
    const key = `${account}\u0000${workload}`;
    const used = this.#holdings.held(key);
    if (used + 1 > limit) throw concurrencyRejection(workload, limit, used);
    this.#stats.acquired(workload);
    return this.#holdings.take(key, () => this.#stats.released(workload));
  }
}

function concurrencyRejection(workload: Workload, limit: number, used: number) {
  return reject(
    'CONCURRENCY_LIMIT_EXCEEDED',
    `the account already has ${used} concurrent ${workload} operations (limit ${limit})`,
    {
      retryAfterSec: CONCURRENCY_RETRY_AFTER_SEC,
      data: limitData(`account_concurrency_${workload}`, limit, used + 1),
    },
  );
}

/**
 * Concurrent HTTP pseudo-sessions an account holds in this process (an emulator served by
 * several threads is one process: with `shared`, the count covers every thread).
 */
export class SessionSlots {
  readonly #holdings = new Holdings();
  readonly #slots: number;
  readonly #shared: SharedState | undefined;

  constructor(slots: number, shared?: SharedState) {
    if (!(Number.isSafeInteger(slots) && slots > 0))
      throw new RangeError('sessionSlots must be a positive integer');
    this.#slots = slots;
    this.#shared = shared;
  }

  acquire(account: string): Release {
    const taken = this.#shared?.take(account, 'slot', this.#slots);
    if (typeof taken === 'function') return taken;
    const used = taken ?? this.#holdings.held(account);
    if (used + 1 > this.#slots) {
      throw reject(
        'SESSION_SLOTS_EXHAUSTED',
        `the account holds ${used} HTTP pseudo-sessions, the most this process allows`,
        { retryAfterSec: CONCURRENCY_RETRY_AFTER_SEC },
      );
    }
    return this.#holdings.take(account);
  }
}

/** A token bucket per key: `burst` requests at once, refilled at `requestsPerSecond`. */
export class RateLimiter {
  readonly #buckets = new Map<string, { tokens: number; at: number }>();
  readonly #rate: number;
  readonly #burst: number;
  readonly #shared: SharedState | undefined;

  /** With `shared`, one bucket per key across every thread of the emulator. */
  constructor(options: { requestsPerSecond: number; burst: number }, shared?: SharedState) {
    if (!(options.requestsPerSecond > 0 && options.burst >= 1))
      throw new RangeError('rateLimit needs requestsPerSecond > 0 and burst >= 1');
    this.#rate = options.requestsPerSecond;
    this.#burst = options.burst;
    this.#shared = shared;
  }

  /**
   * Take one token or throw 429 (the batch body carries `data.capacity` and no `request_id`).
   * Returns the token's refund (once; the bucket never holds more than the burst).
   */
  take(key: string, batch: boolean, now = performance.now()): Release {
    if (this.#shared) {
      const taken = this.#shared.takeToken(key, this.#rate, this.#burst);
      if (typeof taken === 'function') return taken;
      throw this.#refusal(taken, batch);
    }
    const bucket = this.#buckets.get(key) ?? { tokens: this.#burst, at: now };
    bucket.tokens = Math.min(this.#burst, bucket.tokens + ((now - bucket.at) / 1000) * this.#rate);
    bucket.at = now;
    this.#buckets.set(key, bucket);
    if (bucket.tokens < 1) throw this.#refusal(bucket.tokens, batch);
    bucket.tokens -= 1;
    let refunded = false;
    return () => {
      if (refunded) return;
      refunded = true;
      bucket.tokens = Math.min(this.#burst, bucket.tokens + 1);
    };
  }

  #refusal(tokens: number, batch: boolean) {
    const waitSec = Math.max(1, Math.ceil((1 - tokens) / this.#rate));
    return reject('RATE_LIMIT_EXCEEDED', `more than ${this.#rate} requests per second for this key`, {
      retryAfterSec: waitSec,
      ...(batch ? { data: { capacity: this.#burst }, omitRequestId: true } : {}),
    });
  }
}
