// The figures `speechpipe bench` reports: percentiles within what was recorded (the histogram's
// buckets round up), nothing made up when nothing was measured, and changes that round to
// nothing shown as 0.0%.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { LatencyRecorder, type LatencySummary } from '../src/benchmark/latency.ts';
import { compareReports, formatReport, percentChange } from '../src/benchmark/report.ts';
import { benchReport } from './helpers/bench-report.ts';

const PERCENTILES = ['p50', 'p90', 'p99', 'p999', 'max'] as const;

function summarize(values: readonly number[]): LatencySummary {
  const recorder = new LatencyRecorder();
  try {
    for (const [i, v] of values.entries()) recorder.record(v, i);
    return recorder.summary();
  } finally {
    recorder.destroy();
  }
}

test('a percentile never passes the maximum: 99 operations of 100 ms and one of 4074 ms', () => {
  const s = summarize([...Array(99).fill(100), 4074]);
  assert.deepEqual(
    { p50: s.p50, p90: s.p90, p99: s.p99, p999: s.p999, max: s.max, mean: s.mean },
    { p50: 100, p90: 100, p99: 100, p999: 4074, max: 4074, mean: 139.7 },
  );
});

test('percentiles lie between the least and the greatest value recorded, in order; max and mean are exact', () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.oneof(fc.double({ min: 0, max: 5_000_000, noNaN: true }), fc.integer({ min: 1000, max: 70_000 })),
        {
          minLength: 1,
          maxLength: 300,
        },
      ),
      (values) => {
        // As recorded: whole ms from 1 ms to 1 h.
        const recorded = values.map((v) => Math.min(3_600_000, Math.max(1, Math.round(v))));
        const least = Math.min(...recorded);
        const greatest = Math.max(...recorded);
        const s = summarize(values);
        assert.equal(s.count, values.length);
        assert.equal(s.max, greatest);
        const mean = recorded.reduce((a, b) => a + b, 0) / recorded.length;
        assert.ok(Math.abs(s.mean! - mean) <= 0.05 + 1e-9, `mean ${s.mean}, exact ${mean}`);
        let previous = least;
        for (const p of PERCENTILES) {
          const v = s[p]!;
          assert.ok(v >= previous && v <= greatest, `${p} ${v} within ${previous}..${greatest}`);
          previous = v;
        }
      },
    ),
  );
});

test('with no operation completed, no latency is made up: null in JSON, - in the table and the comparison', () => {
  const empty = summarize([]);
  assert.deepEqual(empty, { count: 0, p50: null, p90: null, p99: null, p999: null, max: null, mean: null });
  const none = benchReport(empty, 0);
  const table = formatReport(none);
  const row = table.split('\n').find((l) => l.startsWith('final '));
  assert.ok(row, table);
  assert.doesNotMatch(row, /\d+ ms/);
  assert.match(row, /^final( +-){5} +0$/);
  assert.match(table, /real-time factor p50 -/);
  assert.match(JSON.stringify(none), /"p99":null/);
  const compared = compareReports(benchReport(summarize([120]), 1), none);
  assert.match(compared, /^final p99 +120 ms +- +-$/m);
});

test('a change that rounds to nothing is 0.0%, never -0.0% or +0.0%', () => {
  assert.equal(percentChange(4011, 4010), '0.0%');
  assert.equal(percentChange(100, 150), '+50.0%');
  assert.equal(percentChange(100, 50), '-50.0%');
  assert.equal(percentChange(0, 0), '0.0%');
  assert.equal(percentChange(0, 3), 'new');
  assert.equal(percentChange(null, 3), '-');
  fc.assert(
    fc.property(
      fc.double({ min: 1e-6, max: 1e7, noNaN: true }),
      fc.double({ min: 0, max: 1e7, noNaN: true }),
      (a, b) => {
        const shown = percentChange(a, b);
        assert.match(shown, /^([+-](?!0\.0%)\d+\.\d%|0\.0%)$/);
        const value = Number(shown.replace('%', ''));
        assert.ok(
          Math.abs(value - ((b - a) / a) * 100) <= 0.05 + 1e-6 * Math.abs(value),
          `${a} -> ${b}: ${shown}`,
        );
      },
    ),
  );
  const a = benchReport(summarize([4011]), 1);
  const b = benchReport(summarize([4010]), 1);
  assert.doesNotMatch(compareReports(a, b), /-0\.0%/);
});
