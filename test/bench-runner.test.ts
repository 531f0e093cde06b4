// runBench()'s own bounds, against a stand-in client (no network): an abort ends a run at once
// and leaves no timer, and the run's timers fire however fast operations settle.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { BenchClip } from '../src/benchmark/media.ts';
import { runBench } from '../src/benchmark/run.ts';
import type { SpeechClient } from '../src/client/index.ts';
import { WORKLOADS } from '../src/protocol/limits.ts';

const pcm = Buffer.alloc(32_000);
const clips: BenchClip[] = [{ name: 'a', pcm, wav: pcm, seconds: 1 }];

/** A client whose fast transcription does `transcribe` (nothing else is used by a fast run). */
function stubClient(transcribe: (signal: AbortSignal) => AsyncIterable<{ is_final: boolean }>): SpeechClient {
  return {
    admissionStats: () => WORKLOADS.map((workload) => ({ workload, rejections: 0, pausedMs: 0 })),
    fast: { transcribe: (_wav: Buffer, o: { signal: AbortSignal }) => transcribe(o.signal) },
  } as unknown as SpeechClient;
}

/** An operation that ends only when it is cut. */
const never = (signal: AbortSignal) => ({
  async *[Symbol.asyncIterator]() {
    await new Promise((_, reject) => {
      if (signal.aborted) reject(signal.reason);
      signal.addEventListener('abort', () => reject(signal.reason));
    });
    yield { is_final: true };
  },
});

const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

test('a signal aborted before the run starts ends it at once', async () => {
  const report = await runBench({
    client: stubClient(never),
    workload: 'fast',
    transport: 'http',
    concurrency: 1,
    durationSec: 3600,
    clips,
    signal: AbortSignal.abort(),
  });
  assert.equal(report.interrupted, true);
});

test('an abort of an open-loop run leaves no timer waiting for the next arrival', async () => {
  const before = timers();
  const controller = new AbortController();
  const report = await runBench({
    // The first operation is due at once; the next in 1000 s.
    client: stubClient((signal) => {
      setImmediate(() => controller.abort());
      return never(signal);
    }),
    workload: 'fast',
    transport: 'http',
    rate: 0.001,
    durationSec: 3600,
    clips,
    signal: controller.signal,
  });
  assert.equal(report.interrupted, true);
  assert.equal(report.operations.started, 1);
  assert.equal(timers(), before, 'the scheduler timer went with the abort');
});

test('operations that settle without I/O still let the run end at its duration', async () => {
  let calls = 0;
  const report = await runBench({
    client: stubClient(() => {
      calls++;
      throw Object.assign(new Error('refused before sending'), { code: 'TTS_INPUT_TOO_LONG' });
    }),
    workload: 'fast',
    transport: 'http',
    concurrency: 2,
    durationSec: 0.05,
    clips,
  });
  assert.equal(report.operations.failed, calls);
  assert.equal(report.errors.TTS_INPUT_TOO_LONG, calls);
});

test('an open loop far behind its schedule gives the event loop turns (an abort is heard)', async () => {
  const controller = new AbortController();
  // Whatever is due after the first operation is over capacity; the abort comes on the next
  // turn of the event loop, which a scheduler that never yields would not give before it had
  // counted every one of the 10^8 operations due in the first second.
  setImmediate(() => controller.abort());
  const report = await runBench({
    client: stubClient(never),
    workload: 'fast',
    transport: 'http',
    rate: 1e8,
    durationSec: 1,
    maxInFlight: 1,
    clips,
    signal: controller.signal,
  });
  assert.equal(report.interrupted, true);
  assert.ok(report.operations.started < 1e6, `${report.operations.started} operations due before the abort`);
});

test('a duration longer than a timer can wait is refused, not ended at once', async () => {
  await assert.rejects(
    runBench({
      client: stubClient(never),
      workload: 'fast',
      transport: 'http',
      concurrency: 1,
      durationSec: 3_000_000,
      clips,
    }),
    { code: 'ERR_INVALID_ARGUMENT' },
  );
});
