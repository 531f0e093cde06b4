// The live path under the faults that used to break it: final records that never come, a
// retryable refusal with a code outside the catalogue, and an abort while the service holds a
// frame. End to end through the emulator, over both transports: what a pipeline gives up on is
// reported lost with its range, and the account's slots come back at once.

import assert from 'node:assert/strict';
import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type TestContext, test } from 'node:test';
import type { FaultRule } from '../src/emulator/index.ts';
import {
  type LiveStreamOptions,
  type LostAudio,
  type SessionChange,
  SpeechServiceError,
  sttStream,
  toFrames,
} from '../src/index.ts';
import type { AsrRecord, WordSegment } from '../src/protocol/records.ts';
import { until } from './helpers/emulator-fixtures.ts';
import { startService } from './helpers/service.ts';
import { speechWithPauses } from './helpers/speech.ts';
import { diffWords } from './helpers/word-diff.ts';

const pcm = await speechWithPauses(
  [
    'The quick brown fox jumps over the lazy dog.',
    'A journey of a thousand miles begins with a single step.',
    'Nothing is lost and nothing is said twice.',
  ],
  600,
);

const { emulator, client, newClient } = await startService({
  limits: { accountConcurrency: { realtime_asr: 2 } },
});

const operationOf = (transport: 'http' | 'socketio') => (transport === 'http' ? 'stt.http' : 'stt.socket');

function withFault(t: TestContext, rule: FaultRule): void {
  const added = emulator.faults.add(rule);
  t.after(() => added.remove());
}

interface Run {
  words: WordSegment[];
  changes: SessionChange[];
  lost: LostAudio[];
  error: unknown;
}

async function transcribe(transport: 'http' | 'socketio', options: Partial<LiveStreamOptions> = {}) {
  const run: Run = { words: [], changes: [], lost: [], error: undefined };
  const stt = sttStream({
    client,
    transport,
    coalesceMs: 0,
    restartBackoff: { baseMs: 1, maxMs: 5 },
    ...options,
  });
  stt.on('session', (c: SessionChange) => run.changes.push(c));
  stt.on('audio-lost', ({ start_time, end_time }: LostAudio) => run.lost.push({ start_time, end_time }));
  run.error = await pipeline(
    Readable.from([pcm]),
    toFrames({ language: 'en', frameMs: 500 }),
    stt,
    new Transform({
      objectMode: true,
      transform(record: AsrRecord, _e, cb) {
        if (record.is_speech_final || record.is_final) run.words.push(...record.words);
        cb();
      },
    }),
    new Writable({ objectMode: true, write: (_c, _e, cb) => cb() }),
  ).then(
    () => undefined,
    (err: unknown) => err,
  );
  return run;
}

const reference = { http: await transcribe('http'), socketio: await transcribe('socketio') };

for (const transport of ['http', 'socketio'] as const) {
  test(`${transport}: two final records dropped in a row: the sessions are restarted, every word arrives`, {
    timeout: 30_000,
  }, async (t) => {
    assert.equal(reference[transport].error, undefined);
    withFault(t, { operation: operationOf(transport), times: 2, action: { type: 'endWithoutFinal' } });
    // The final wait and the restart window as long as each other, as by default (60 s each):
    // a session's own wait for its final record is not the service being down.
    const run = await transcribe(transport, {
      restartWithinMs: 400,
      session: { finalTimeoutMs: 400, endTimeoutMs: 500 },
    });
    assert.equal(run.error, undefined, String(run.error));
    assert.ok(run.changes.length >= 2, `${run.changes.length} restarts`);
    const diff = diffWords(reference[transport].words, run.words);
    assert.equal(diff.lost, 0, JSON.stringify(diff));
    assert.equal(diff.duplicated, 0, JSON.stringify(diff));
    assert.deepEqual(run.lost, []);
  });

  test(`${transport}: a pipeline that gives up reports the audio it never transcribed as lost, with its range`, {
    timeout: 30_000,
  }, async (t) => {
    // From the third frame on, every answer is cut as soon as the frame was accepted: nothing
    // after it is ever transcribed, and the sessions that hear it again fail the same way.
    withFault(t, {
      operation: operationOf(transport),
      nth: 3,
      times: Number.POSITIVE_INFINITY,
      action:
        transport === 'http' ? { type: 'reset', afterBytes: 0 } : { type: 'reset', stage: 'afterEffect' },
    });
    const run = await transcribe(transport, {
      maxRestarts: 2,
      session: { finalTimeoutMs: 300, endTimeoutMs: 500 },
    });
    assert.ok(run.error instanceof Error, 'the pipeline failed');
    assert.ok(run.lost.length > 0, 'nothing was reported lost');
    // Every word of the fault-free run is transcribed, or inside a range reported lost, or after
    // the audio the stream took in (where the last range ends: the source's audio after it was
    // never taken, and the failed pipeline says so).
    const takenUntil = run.lost.at(-1)!.end_time;
    const missing = reference[transport].words.filter(
      (r) =>
        !run.words.some(
          (w) => Math.abs((w.start_time + w.end_time) / 2 - (r.start_time + r.end_time) / 2) < 0.25,
        ),
    );
    const lostInside = missing.filter((w) => w.start_time < takenUntil - 1e-6);
    assert.ok(lostInside.length > 0, 'no word taken in was missing (the test would show nothing)');
    for (const w of lostInside) {
      assert.ok(
        run.lost.some((r) => w.end_time > r.start_time - 1e-6 && w.start_time < r.end_time + 1e-6),
        `word at ${w.start_time}-${w.end_time} lost outside every reported range ${JSON.stringify(run.lost)}`,
      );
    }
    // Nothing transcribed lies in a lost range.
    for (const w of run.words)
      assert.ok(
        !run.lost.some((r) => w.start_time >= r.start_time && w.end_time <= r.end_time),
        JSON.stringify(w),
      );
  });

  test(`${transport}: a retryable refusal with a code outside the catalogue restarts the session`, {
    timeout: 30_000,
  }, async (t) => {
    withFault(t, {
      operation: operationOf(transport),
      nth: 4,
      times: 1,
      action: { type: 'status', status: 503, code: 'SERVER_UNAVAILABLE' },
    });
    const run = await transcribe(transport);
    assert.equal(run.error, undefined, String(run.error));
    const failure = run.changes.find((c) => c.reason === 'restart')?.error;
    assert.ok(
      failure instanceof SpeechServiceError && failure.code === 'SERVER_UNAVAILABLE',
      String(failure),
    );
    const diff = diffWords(reference[transport].words, run.words);
    assert.equal(diff.lost, 0, JSON.stringify(diff));
    assert.equal(diff.duplicated, 0, JSON.stringify(diff));
  });

  test(`${transport}: after aborting a session whose frame the service holds, new sessions up to the limit start at once`, {
    timeout: 20_000,
  }, async (t) => {
    const fresh = newClient({ concurrency: { realtime_asr: 2 } });
    const second = pcm.subarray(0, 3200);
    const held = fresh.live.stt({ transport, language: 'en' });
    await held.send(second);
    const stalledBefore = emulator.stats().faultsApplied.stall ?? 0;
    withFault(t, { operation: operationOf(transport), times: 1, action: { type: 'stall' } });
    const stalled = held.send(second).catch((err: unknown) => err);
    await until(() => (emulator.stats().faultsApplied.stall ?? 0) > stalledBefore, 'the frame is held');
    held.abort();
    await stalled;
    // Two sessions, the account's whole limit: neither waits for the aborted stream's expiry
    // (60 s) nor is refused for it.
    const next = [
      fresh.live.stt({ transport, language: 'en' }),
      fresh.live.stt({ transport, language: 'en' }),
    ];
    await Promise.all(next.map((s) => s.send(second)));
    const stats = fresh.admissionStats().find((s) => s.workload === 'realtime_asr')!;
    assert.equal(stats.rejections, 0, JSON.stringify(stats));
    assert.equal(stats.concurrency, 2);
    for (const s of next) s.abort();
    await Promise.all(next.map((s) => s.ended));
  });
}
