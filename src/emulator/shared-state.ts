// Admission counters and fault-rule counters in one SharedArrayBuffer, so that an emulator
// served by several threads (`startEmulatorWorkers`) keeps its account limits, request rates and
// fault `nth`/`times` exact across all of them with the same synchronous decisions one thread
// makes. Holdings are kept per thread (a row each), so a thread that dies gives back what it held.

import type { Workload } from '../protocol/limits.ts';
import { WORKLOADS } from '../protocol/limits.ts';

/** What `SharedState` is laid out for; sent to every thread with the buffer. */
export interface SharedLayout {
  /** Threads (rows), plus one for the coordinating thread. */
  rows: number;
  /** Accounts and keys in a fixed order (indexes into the counters). */
  accounts: string[];
  keys: string[];
  /** Fault rules that may be in force at once. */
  ruleSlots: number;
}

/** A count of held units per account and kind; `null` when the taking was refused. */
export type HoldingKind = Workload | 'slot';
const KINDS: readonly HoldingKind[] = [...WORKLOADS, 'slot'];

/** Integers: [0] the lock (0 free, else holder row + 1); then holdings; global concurrency; its maxima; rule counters. */
export class SharedState {
  readonly layout: SharedLayout;
  readonly buffer: SharedArrayBuffer;
  readonly #ints: Int32Array;
  readonly #floats: Float64Array;
  readonly #row: number;
  readonly #accounts: Map<string, number>;
  readonly #keys: Map<string, number>;
  readonly #holdingsAt = 1;
  readonly #concurrentAt: number;
  readonly #maxAt: number;
  readonly #rulesAt: number;

  /** A new buffer for `layout` (`buffer` undefined), or a view of one another thread made. */
  constructor(layout: SharedLayout, row: number, buffer?: SharedArrayBuffer) {
    this.layout = layout;
    this.#row = row;
    const perRow = layout.accounts.length * KINDS.length;
    this.#concurrentAt = this.#holdingsAt + layout.rows * perRow;
    this.#maxAt = this.#concurrentAt + WORKLOADS.length;
    this.#rulesAt = this.#maxAt + WORKLOADS.length;
    const ints = this.#rulesAt + layout.ruleSlots * 2;
    const intBytes = Math.ceil((ints * 4) / 8) * 8;
    this.buffer = buffer ?? new SharedArrayBuffer(intBytes + layout.keys.length * 2 * 8);
    this.#ints = new Int32Array(this.buffer, 0, ints);
    this.#floats = new Float64Array(this.buffer, intBytes, layout.keys.length * 2);
    this.#accounts = new Map(layout.accounts.map((a, i) => [a, i]));
    this.#keys = new Map(layout.keys.map((k, i) => [k, i]));
  }

  #lock(): void {
    const me = this.#row + 1;
    while (Atomics.compareExchange(this.#ints, 0, 0, me) !== 0) {
      // Critical sections are a few reads and writes: spin.
    }
  }

  #unlock(): void {
    Atomics.store(this.#ints, 0, 0);
  }

  #at(row: number, account: number, kind: HoldingKind): number {
    return (
      this.#holdingsAt + (row * this.layout.accounts.length + account) * KINDS.length + KINDS.indexOf(kind)
    );
  }

  /**
   * Take one unit of `kind` for `account` unless `limit` are held across every thread: returns
   * the release (once), or the number held when refused.
   */
  take(account: string, kind: HoldingKind, limit: number): (() => void) | number {
    const a = this.#accounts.get(account);
    if (a === undefined) throw new Error(`unknown account ${account}`);
    this.#lock();
    let held = 0;
    try {
      for (let r = 0; r < this.layout.rows; r++) held += this.#ints[this.#at(r, a, kind)]!;
      if (held + 1 > limit) return held;
      this.#ints[this.#at(this.#row, a, kind)]!++;
      if (kind !== 'slot') {
        const w = WORKLOADS.indexOf(kind);
        const now = ++this.#ints[this.#concurrentAt + w]!;
        if (now > this.#ints[this.#maxAt + w]!) this.#ints[this.#maxAt + w] = now;
      }
    } finally {
      this.#unlock();
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#lock();
      try {
        this.#ints[this.#at(this.#row, a, kind)]!--;
        if (kind !== 'slot') this.#ints[this.#concurrentAt + WORKLOADS.indexOf(kind)]!--;
      } finally {
        this.#unlock();
      }
    };
  }

  /** The most operations of each workload held at once across every thread. */
  maxConcurrent(): Record<Workload, number> {
    return Object.fromEntries(
      WORKLOADS.map((w, i) => [w, Atomics.load(this.#ints, this.#maxAt + i)]),
    ) as Record<Workload, number>;
  }

  /**
   * Token bucket of `key`: take one token (refilled at `rate` a second up to `burst`), or return
   * the tokens there are when fewer than one. The release gives the token back.
   */
  takeToken(key: string, rate: number, burst: number): (() => void) | number {
    const k = this.#keys.get(key);
    if (k === undefined) throw new Error('unknown key');
    const now = performance.timeOrigin + performance.now();
    this.#lock();
    try {
      const at = this.#floats[k * 2 + 1]!;
      let tokens = at === 0 ? burst : this.#floats[k * 2]!;
      tokens = Math.min(burst, tokens + ((now - (at || now)) / 1000) * rate);
      this.#floats[k * 2 + 1] = now;
      this.#floats[k * 2] = tokens;
      if (tokens < 1) return tokens;
      this.#floats[k * 2] = tokens - 1;
    } finally {
      this.#unlock();
    }
    let refunded = false;
    return () => {
      if (refunded) return;
      refunded = true;
      this.#lock();
      try {
        this.#floats[k * 2] = Math.min(burst, this.#floats[k * 2]! + 1);
      } finally {
        this.#unlock();
      }
    };
  }

  /** Counters of the fault rule in `slot`: matches and applications, across every thread. */
  ruleCounters(slot: number): RuleCounters {
    const ints = this.#ints;
    const at = this.#rulesAt + slot * 2;
    return {
      match: () => Atomics.add(ints, at, 1) + 1,
      matched: () => Atomics.load(ints, at),
      applied: () => Atomics.load(ints, at + 1),
      tryApply: (times) => {
        for (;;) {
          const n = Atomics.load(ints, at + 1);
          if (n >= times) return false;
          if (Atomics.compareExchange(ints, at + 1, n, n + 1) === n) return true;
        }
      },
    };
  }

  /** A fresh rule slot: its counters at zero (the coordinating thread only, before use). */
  resetRule(slot: number): void {
    Atomics.store(this.#ints, this.#rulesAt + slot * 2, 0);
    Atomics.store(this.#ints, this.#rulesAt + slot * 2 + 1, 0);
  }

  /**
   * Give back everything the thread of `row` held (it died): its holdings leave the counts, and
   * a lock it died holding is taken over. The coordinating thread calls it.
   */
  releaseRow(row: number): void {
    const me = this.#row + 1;
    for (;;) {
      const holder = Atomics.compareExchange(this.#ints, 0, 0, me);
      if (holder === 0) break;
      if (holder === row + 1 && Atomics.compareExchange(this.#ints, 0, holder, me) === holder) break;
    }
    try {
      for (let a = 0; a < this.layout.accounts.length; a++) {
        for (const kind of KINDS) {
          const i = this.#at(row, a, kind);
          const held = this.#ints[i]!;
          if (kind !== 'slot') this.#ints[this.#concurrentAt + WORKLOADS.indexOf(kind)]! -= held;
          this.#ints[i] = 0;
        }
      }
    } finally {
      this.#unlock();
    }
  }
}

/** A fault rule's counts: local to one emulator, or shared by the threads of one. */
export interface RuleCounters {
  /** Count one more matching request; returns the count. */
  match(): number;
  matched(): number;
  applied(): number;
  /** Count one application unless `times` were counted; whether it was. */
  tryApply(times: number): boolean;
}

export function localRuleCounters(): RuleCounters {
  let matched = 0;
  let applied = 0;
  return {
    match: () => ++matched,
    matched: () => matched,
    applied: () => applied,
    tryApply: (times) => {
      if (applied >= times) return false;
      applied++;
      return true;
    },
  };
}
