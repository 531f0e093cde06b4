// Latency recording for `speechpipe bench`: an HDR histogram per metric (hdr-histogram-js, 3
// significant digits from 1 ms to 1 h, so p99.9 is exact enough at any count), the exact
// minimum, maximum and sum beside it, and a bounded sample of (time, latency) points for the
// latency-over-time picture.

import { build, type Histogram } from 'hdr-histogram-js';

/** Percentiles of one metric, milliseconds; `null` when nothing was recorded (no 0 ms made up). */
export interface LatencySummary {
  count: number;
  p50: number | null;
  p90: number | null;
  p99: number | null;
  p999: number | null;
  max: number | null;
  mean: number | null;
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
  /** The values as recorded (whole ms, 1 ms to 1 h): exact, where the histogram has buckets. */
  #min = Number.POSITIVE_INFINITY;
  #max = 0;
  #sum = 0;

  /** Record one latency (ms) observed `atSec` seconds into the run. */
  record(ms: number, atSec: number): void {
    const value = Math.min(3_600_000, Math.max(1, Math.round(ms)));
    this.#histogram.recordValue(value);
    this.#seen++;
    this.#min = Math.min(this.#min, value);
    this.#max = Math.max(this.#max, value);
    this.#sum += value;
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

  /**
   * The latency at percentile `p` (0 to 100). The histogram answers with the top of the bucket
   * the value fell in (4075 ms for 4074 ms at 3 significant digits), so a percentile could pass
   * the maximum: it is kept within the values recorded, as every percentile of them is.
   */
  percentile(p: number): number | null {
    if (this.#seen === 0) return null;
    return Math.min(this.#max, Math.max(this.#min, this.#histogram.getValueAtPercentile(p)));
  }

  summary(): LatencySummary {
    const none = this.#seen === 0;
    return {
      count: this.#seen,
      p50: this.percentile(50),
      p90: this.percentile(90),
      p99: this.percentile(99),
      p999: this.percentile(99.9),
      max: none ? null : this.#max,
      mean: none ? null : Math.round((this.#sum / this.#seen) * 10) / 10,
    };
  }

  /** Latency at each percentile from 0 to 100 (for the distribution picture). */
  distribution(): Array<[number, number]> {
    if (this.#seen === 0) return [];
    return [0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 100].map((p) => [
      p,
      this.percentile(p)!,
    ]);
  }

  destroy(): void {
    this.#histogram.destroy();
  }
}
