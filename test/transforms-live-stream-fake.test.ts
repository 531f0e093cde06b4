// sttStream and diarizationStream against a fake channel: real LiveSessions and the real retry
// policy, the emulator's engines for the words, no network. Faults of every kind the live path
// meets, one after another: every word arrives once, and what a stream gives up on is reported.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IncompleteStreamError, localServiceError, SpeechServiceError } from '../src/protocol/errors.ts';
import { DEFAULT_LIMITS } from '../src/protocol/limits.ts';
import type { AsrRecord, DiarizationRecord, WordSegment } from '../src/protocol/records.ts';
import { type LostAudio, sttStream } from '../src/transforms/live-stream.ts';
import { type FakeFault, FakeLiveService, type FakeRun, runThroughFake } from './helpers/fake-live.ts';
import { speechWithPauses } from './helpers/speech.ts';
import { diffWords } from './helpers/word-diff.ts';

const pcm = await speechWithPauses(
  [
    'The quick brown fox jumps over the lazy dog.',
    'A journey of a thousand miles begins with a single step.',
    'Speech pipelines should never lose a word when the network fails.',
    'Nothing is lost and nothing is said twice.',
  ],
  600,
);

const run = (service: FakeLiveService, options: Parameters<typeof runThroughFake>[2] = {}) =>
  runThroughFake(pcm, service, options);

const reference = await run(new FakeLiveService());

test('the fake gives the words the emulator engine gives, and a clean run reports nothing lost', () => {
  assert.equal(reference.error, undefined);
  assert.ok(reference.words.length > 20, `${reference.words.length} words`);
  assert.deepEqual(reference.lost, []);
  assert.equal(reference.records.at(-1)!.is_final, true);
});

const busy = (code: string, status: number, retryable: boolean) =>
  new SpeechServiceError({ status, code, retryable, retryAfterMs: 1 });

/** A fault of every kind, spread over the stream. */
const CYCLE: FakeFault[] = [
  { nth: 3, action: { type: 'cut' } },
  { nth: 6, action: { type: 'lost' } },
  { nth: 9, action: { type: 'refuse', error: busy('ASR_TRANSCRIPTION_FAILED', 500, true) } },
  // A retryable refusal with a code the catalogue does not have, as Socket.IO delivers it (no status).
  { nth: 12, action: { type: 'refuse', error: busy('SERVER_UNAVAILABLE', 0, true) } },
  { nth: 15, action: { type: 'refuse', error: localServiceError('SESSION_EXPIRED', 'gone') } },
  { nth: 18, action: { type: 'refuse', error: localServiceError('SESSION_IDLE_TIMEOUT', 'idle') } },
  { nth: 21, action: { type: 'refuse', error: busy('SESSION_BYTE_RATE_EXCEEDED', 429, true) } },
  { match: (f) => f.isFinal, times: 2, action: { type: 'dropFinal' } },
];

test('faults of every kind in one run: every word once, none lost, nothing reported lost', async () => {
  const service = new FakeLiveService();
  for (const f of CYCLE) service.fault(f);
  const faulty = await run(service);
  assert.equal(faulty.error, undefined, String(faulty.error));
  assert.ok(faulty.changes.length >= 8, `${faulty.changes.length} restarts`);
  const diff = diffWords(reference.words, faulty.words);
  assert.equal(diff.lost, 0, JSON.stringify(diff));
  assert.equal(diff.duplicated, 0, JSON.stringify(diff));
  assert.deepEqual(faulty.lost, []);
  assert.equal(service.stats.live, 0, 'no stream left live at the service');
  assert.equal(service.stats.channelsOpen, 0, 'no channel left open');
});

test('diarization: the same faults, every segment still covered, nothing reported lost', async () => {
  const clean = await run(new FakeLiveService(), { kind: 'diarization' });
  const service = new FakeLiveService();
  for (const f of CYCLE) service.fault(f);
  const faulty = await run(service, { kind: 'diarization' });
  assert.equal(faulty.error, undefined, String(faulty.error));
  const closed = (r: FakeRun) =>
    r.records
      .flatMap((x) => (x as DiarizationRecord).final_segments)
      .reduce((s, g) => s + ((g.end_time ?? g.start_time) - g.start_time), 0);
  assert.ok(
    Math.abs(closed(faulty) - closed(clean)) < 0.5,
    `${closed(faulty)} s of segments against ${closed(clean)}`,
  );
  assert.deepEqual(faulty.lost, []);
});

test('sessions whose final records never come are restarted; the final waits are not outage', async () => {
  const service = new FakeLiveService();
  service.fault({ match: (f) => f.isFinal, times: 3, action: { type: 'dropFinal' } });
  // As long a restart window as each final wait (60 s each by default): three waits in a row
  // are far longer than the window, and none of them is the service being down.
  const faulty = await run(service, { restartWithinMs: 100 });
  assert.equal(faulty.error, undefined, String(faulty.error));
  assert.equal(faulty.changes.filter((c) => c.reason === 'restart').length, 3);
  assert.equal(diffWords(reference.words, faulty.words).lost, 0);
});

test('giving up reports what was taken in and never transcribed, and the stream says so', async () => {
  const service = new FakeLiveService();
  service.fault({ nth: 40, times: Number.POSITIVE_INFINITY, action: { type: 'cut' } });
  const failed = await run(service, { maxRestarts: 2 });
  assert.ok(
    failed.error instanceof IncompleteStreamError || failed.error instanceof SpeechServiceError,
    String(failed.error),
  );
  assert.equal(failed.lost.length, 1);
  assert.deepEqual(failed.stream.lostAudio, failed.lost);
  const [range] = failed.lost;
  // It runs from where the service stopped finalising to the end of the audio taken in.
  const lastWord = Math.max(...failed.words.map((w) => w.end_time));
  assert.ok(
    range!.start_time <= lastWord + 1.5 && range!.start_time >= lastWord - 1e-6,
    JSON.stringify({ range, lastWord }),
  );
  assert.ok(range!.end_time > range!.start_time);
  for (const w of reference.words.filter(
    (r) => r.start_time > range!.start_time && r.end_time < range!.end_time,
  ))
    assert.ok(
      !failed.words.some((x) => Math.abs(x.start_time - w.start_time) < 0.05),
      'a word in the lost range was transcribed',
    );
});

test('without the replay buffer the same faults lose words (the measure above can fail), each in a range reported lost', async () => {
  const service = new FakeLiveService();
  for (const f of CYCLE) service.fault(f);
  const faulty = await run(service, { replayBuffer: false });
  assert.ok(diffWords(reference.words, faulty.words).lost > 0);
  const mid = (w: WordSegment) => (w.start_time + w.end_time) / 2;
  const missing = reference.words.filter((r) => !faulty.words.some((w) => Math.abs(mid(w) - mid(r)) < 0.25));
  assert.ok(missing.length > 0);
  for (const w of missing)
    assert.ok(
      faulty.lost.some((r) => w.end_time > r.start_time - 1e-6 && w.start_time < r.end_time + 1e-6),
      `"${w.word}" at ${w.start_time} s is missing and in no range reported lost: ${JSON.stringify(faulty.lost)}`,
    );
  assert.deepEqual(
    (faulty.records.at(-1) as AsrRecord & { lost_audio?: LostAudio[] }).lost_audio,
    faulty.lost,
  );
});

test('a frame over the size limit once a session is open fails the stream with the 413 and ends that session: no hang, no slot held', {
  timeout: 10_000,
}, async () => {
  const service = new FakeLiveService();
  const stream = sttStream({ sessions: service.sessions({ endTimeoutMs: 100 }), coalesceMs: 0 });
  let error: unknown;
  stream.on('error', (err) => (error = err));
  stream.resume();
  stream.write({ pcm: Buffer.alloc(3200), language: 'en', isFinal: false });
  // The session refuses it (typed, locally) and stays live: the stream gives up.
  stream.write({ pcm: Buffer.alloc(DEFAULT_LIMITS.realtimeAsrFrameBytes), language: 'en', isFinal: false });
  await new Promise((resolve) => stream.on('close', resolve));
  assert.ok(error instanceof SpeechServiceError && error.status === 413, String(error));
  assert.equal(service.running(), 0, 'the slot is still held');
  assert.equal(service.stats.live, 0, 'the stream is still live at the service');
  assert.equal(service.stats.channelsOpen, 0);
});
