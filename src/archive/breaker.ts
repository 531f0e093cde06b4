// The circuit breaker of an archive run: connection failures in a row stop inputs from
// starting while the service is probed, so an outage does not burn every input's retries; the
// run goes on when the service answers, and stops if it stays unreachable too long.

import type { ArchiveEvent, Reason } from './events.ts';
import { tcpProbe } from './tcp-probe.ts';

/**
 * The circuit breaker of a run: after `failures` connection failures in a row no input starts
 * while the service is probed, and the run stops if it stays unreachable for `maxOutageMs`.
 */
export interface BreakerOptions {
  /** Connection failures in a row that open the breaker. Default 3. */
  failures?: number;
  /** How long the service may stay unreachable before the run stops. Default 10 min. */
  maxOutageMs?: number;
  /** First pause between probes; doubles up to 30 s. Default 1 s. */
  probeIntervalMs?: number;
  /**
   * Whether the service answers. Default: a TCP connection to the service's host and port
   * within 5 s.
   */
  probe?: (signal: AbortSignal) => Promise<boolean>;
}

class Stopped extends Error {}

/** Connection failures in a row open it; while open, probes decide when files start again. */
export class Breaker {
  readonly #threshold: number;
  readonly #maxOutageMs: number;
  readonly #intervalMs: number;
  readonly #probe: (signal: AbortSignal) => Promise<boolean>;
  readonly #signal: AbortSignal;
  readonly #emit: (event: ArchiveEvent) => void;
  readonly #stop: (reason: Reason) => void;
  #consecutive = 0;
  #open: Promise<void> | undefined;

  constructor(
    options: BreakerOptions,
    url: string,
    signal: AbortSignal,
    emit: (event: ArchiveEvent) => void,
    stop: (reason: Reason) => void,
  ) {
    this.#threshold = options.failures ?? 3;
    this.#maxOutageMs = options.maxOutageMs ?? 600_000;
    this.#intervalMs = options.probeIntervalMs ?? 1000;
    this.#probe = options.probe ?? tcpProbe(url);
    this.#signal = signal;
    this.#emit = emit;
    this.#stop = stop;
  }

  /** Resolves when files may start (at once unless open). */
  get isOpen(): boolean {
    return this.#open !== undefined;
  }

  ready(): Promise<void> {
    return this.#open ?? Promise.resolve();
  }

  success(): void {
    this.#consecutive = 0;
  }

  failure(err: unknown): void {
    if (++this.#consecutive >= this.#threshold) this.trip(err);
  }

  /** Open now (a probe at the start found nothing, or failures in a row). */
  trip(err: unknown): void {
    if (this.#open) return;
    const message = err instanceof Error ? err.message : String(err);
    this.#emit({ type: 'paused', reason: { code: 'ERR_SERVICE_UNREACHABLE', message } });
    this.#open = this.#probeUntilAnswered(message).finally(() => {
      this.#open = undefined;
      this.#consecutive = 0;
    });
    // Waiters see the rejection; nobody may be waiting yet.
    this.#open.catch(() => {});
  }

  async #probeUntilAnswered(message: string): Promise<void> {
    const since = performance.now();
    let interval = this.#intervalMs;
    for (;;) {
      if (this.#signal.aborted) throw new Stopped();
      if (await this.#probe(this.#signal)) {
        this.#emit({ type: 'resumed', pausedMs: Math.round(performance.now() - since) });
        return;
      }
      if (performance.now() - since >= this.#maxOutageMs) {
        this.#stop({
          code: 'ERR_SERVICE_UNREACHABLE',
          message: `the service did not answer for ${Math.round(this.#maxOutageMs / 1000)} s (${message})`,
        });
        throw new Stopped();
      }
      await delay(Math.min(interval, this.#maxOutageMs), this.#signal);
      interval = Math.min(interval * 2, 30_000);
    }
  }
}

function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
