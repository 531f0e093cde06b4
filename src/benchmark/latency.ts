// Latency recording for `speechpipe bench`: an HDR histogram per metric (hdr-histogram-js, 3
// significant digits from 1 ms to 1 h, so p99.9 and max are exact enough at any count), and a
// bounded sample of (time, latency) points for the latency-over-time picture.

import { build, type Histogram } from 'hdr-histogram-js';

/** Percentiles of one metric, milliseconds. */
export interface LatencySummary {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

/** Points kept per metric for the picture; later points replace random earlier ones. */
const SAMPLE_POINTS = 4000;

export class LatencyRecorder {
  readonly #histogram: Histogram = build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 3_600_000,
    numberOfSignificantValueDigits: 3,
  });
  /** [seconds since the run started, latency ms] */
  readonly points: Array<[number, number]> = [];
  #seen = 0;

  /** Record one latency (ms) observed `atSec` seconds into the run. */
  record(ms: number, atSec: number): void {
    const value = Math.min(3_600_000, Math.max(1, Math.round(ms)));
    this.#histogram.recordValue(value);
    this.#seen++;
    if (this.points.length < SAMPLE_POINTS) this.points.push([atSec, ms]);
    else {
      // Reservoir sampling: every point has the same chance to be kept.
      const slot = Math.floor(Math.random() * this.#seen);
      if (slot < SAMPLE_POINTS) this.points[slot] = [atSec, ms];
    }
  }

  get count(): number {
    return this.#seen;
  }

  summary(): LatencySummary {
    const h = this.#histogram;
    if (this.#seen === 0) return { count: 0, p50: 0, p90: 0, p99: 0, p999: 0, max: 0, mean: 0 };
    return {
      count: this.#seen,
      p50: h.getValueAtPercentile(50),
      p90: h.getValueAtPercentile(90),
      p99: h.getValueAtPercentile(99),
      p999: h.getValueAtPercentile(99.9),
      max: h.maxValue,
      mean: Math.round(h.mean * 10) / 10,
    };
  }

  /** Latency at each percentile from 0 to 99.99 (for the distribution picture). */
  distribution(): Array<[number, number]> {
    if (this.#seen === 0) return [];
    const out: Array<[number, number]> = [];
    for (const p of [0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 100])
      out.push([p, this.#histogram.getValueAtPercentile(p)]);
    return out;
  }

  destroy(): void {
    this.#histogram.destroy();
  }
}
