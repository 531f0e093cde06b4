// Counters behind `emulator.stats()`: requests per operation, rejections by code, jobs,
// sessions, bytes and concurrency, so client tests can assert what reached the service.

import { WORKLOADS, type Workload } from '../protocol/limits.ts';
import { OPERATIONS, type OperationName } from '../protocol/operations.ts';
import { generatedRecognizerStats, type RecognizerStats } from './engine/recognizer.ts';
import type { EmulatorStats, SessionStats } from './types.ts';

export type SessionEnd = 'finished' | 'expired' | 'retired' | 'cancelled' | 'failed';

const perWorkload = (): Record<Workload, number> =>
  Object.fromEntries(WORKLOADS.map((w) => [w, 0])) as Record<Workload, number>;

export class StatsCollector {
  readonly requests = Object.fromEntries(OPERATIONS.map((op) => [op, 0])) as Record<OperationName, number>;
  readonly rejections: Record<string, number> = {};
  readonly faultsApplied: Record<string, number> = {};
  readonly sessions: SessionStats = {
    opened: 0,
    finished: 0,
    expired: 0,
    retired: 0,
    cancelled: 0,
    failed: 0,
    active: 0,
  };
  readonly maxConcurrent = perWorkload();
  readonly concurrent = perWorkload();
  /** Operation-milliseconds per workload, up to the last change of `concurrent` (see busyMs()). */
  readonly #busyMs = perWorkload();
  readonly #changedAt = perWorkload();
  readonly socketConnections = { opened: 0, rejected: 0, active: 0 };
  jobsCreated = 0;
  framesAccepted = 0;
  bytesIn = 0;
  bytesOut = 0;
  ttsSyntheses = 0;
  /** The recognizer's statistics, read when a snapshot is taken. */
  recognizer: () => RecognizerStats = generatedRecognizerStats;

  request(op: OperationName): void {
    this.requests[op]++;
  }

  rejection(code: string): void {
    this.rejections[code] = (this.rejections[code] ?? 0) + 1;
  }

  fault(type: string): void {
    this.faultsApplied[type] = (this.faultsApplied[type] ?? 0) + 1;
  }

  sessionOpened(): void {
    this.sessions.opened++;
    this.sessions.active++;
  }

  sessionEnded(how: SessionEnd): void {
    this.sessions[how]++;
    this.sessions.active--;
  }

  /** Adds the time since the workload's last change, at its concurrency then. */
  #settle(workload: Workload, now = performance.now()): void {
    this.#busyMs[workload] += this.concurrent[workload] * (now - this.#changedAt[workload]);
    this.#changedAt[workload] = now;
  }

  acquired(workload: Workload): void {
    this.#settle(workload);
    this.concurrent[workload]++;
    if (this.concurrent[workload] > this.maxConcurrent[workload])
      this.maxConcurrent[workload] = this.concurrent[workload];
  }

  released(workload: Workload): void {
    this.#settle(workload);
    this.concurrent[workload]--;
  }

  snapshot(): EmulatorStats {
    for (const w of WORKLOADS) this.#settle(w);
    const busyMs = Object.fromEntries(WORKLOADS.map((w) => [w, Math.round(this.#busyMs[w])])) as Record<
      Workload,
      number
    >;
    return structuredClone({
      requests: this.requests,
      rejections: this.rejections,
      jobsCreated: this.jobsCreated,
      sessions: this.sessions,
      framesAccepted: this.framesAccepted,
      bytesIn: this.bytesIn,
      bytesOut: this.bytesOut,
      ttsSyntheses: this.ttsSyntheses,
      maxConcurrent: this.maxConcurrent,
      concurrent: this.concurrent,
      busyMs,
      faultsApplied: this.faultsApplied,
      socketConnections: this.socketConnections,
      recognizer: this.recognizer(),
    });
  }
}
