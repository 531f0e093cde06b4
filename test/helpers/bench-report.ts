// A `speechpipe bench` report made by hand, for what shows reports (tables, comparisons, pages).

import type { LatencySummary } from '../../src/benchmark/latency.ts';
import type { BenchReport } from '../../src/benchmark/run.ts';

/** A fast-transcription report of one operation: `final` its latency, `completed` 1 or 0 (failed). */
export function benchReport(final: LatencySummary, completed: 0 | 1 = 1): BenchReport {
  return {
    tool: 'speechpipe bench',
    workload: 'fast',
    transport: 'http',
    load: { model: 'concurrency', concurrency: 1 },
    duration_sec: 1,
    warmup_sec: 0,
    pace: null,
    target: 't',
    started_at: 'x',
    interrupted: false,
    media: { clips: 1, audio_seconds: 1 },
    operations: { started: 1, completed, failed: 1 - completed, cut: 0 },
    throughput: { audio_seconds_per_second: 10 * completed, requests_per_second: 10 * completed },
    latency_ms: { final },
    real_time_factor: completed > 0 ? { p50: 0.1, p90: 0.1, max: 0.1 } : { p50: null, p90: null, max: null },
    errors: completed > 0 ? {} : { SERVER_INTERNAL: 1 },
    rate_limited: { responses_429: 0, retry_after_wait_ms: 0 },
    client_cpu_seconds_per_audio_second: 0.001,
  };
}
