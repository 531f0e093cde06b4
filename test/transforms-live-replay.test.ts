// No speech lost when a live session fails (issue 13): the audio a failed session accepted and
// the service had not finalised is sent again on the next session, and words already emitted
// are not emitted again. The same audio with and without faults gives the same words, matched
// on the pipeline's timeline. Against the fake live service (real sessions and retry policy,
// the emulator's engines); the same faults from the emulator itself, over both transports, are
// in live-faults.test.ts and the soak.

import assert from 'node:assert/strict';
import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import {
  assembleTranscript,
  type FinalEvent,
  type LiveStreamOptions,
  type LostAudio,
  type SessionChange,
  sttStream,
  type TranscriptEvent,
  toFrames,
} from '../src/index.ts';
import { IncompleteStreamError, TransportError } from '../src/protocol/errors.ts';
import type { AsrRecord, WordSegment } from '../src/protocol/records.ts';
import { type FakeFault, FakeLiveService } from './helpers/fake-live.ts';
import { speechWithPauses } from './helpers/speech.ts';
import { diffWords } from './helpers/word-diff.ts';

const pcm = await speechWithPauses(
  [
    'The quick brown fox jumps over the lazy dog.',
    'A journey of a thousand miles begins with a single step.',
    'Speech pipelines should never lose a word when the network fails.',
    'Every restarted session hears again what was not final.',
    'Nothing is lost and nothing is said twice.',
    'Thank you for listening to this short test recording.',
  ],
  700,
);

async function transcribe(service: FakeLiveService, options: Partial<LiveStreamOptions> = {}) {
  const events: TranscriptEvent[] = [];
  const changes: SessionChange[] = [];
  const lostEvents: LostAudio[] = [];
  // sttStream's own committed words (not assembleTranscript's, which also drops repeats).
  const committed: WordSegment[] = [];
  const stt = sttStream({
    sessions: service.sessions({ finalTimeoutMs: 200, endTimeoutMs: 200 }),
    coalesceMs: 0,
    restartBackoff: { baseMs: 1, maxMs: 5 },
    ...options,
  });
  stt.on('session', (c: SessionChange) => changes.push(c));
  stt.on('audio-lost', ({ start_time, end_time }: LostAudio) => lostEvents.push({ start_time, end_time }));
  await pipeline(
    Readable.from([pcm]),
    toFrames({ language: 'en', frameMs: 500 }),
    stt,
    new Transform({
      objectMode: true,
      transform(record: AsrRecord, _e, cb) {
        if (record.is_speech_final || record.is_final) committed.push(...record.words);
        cb(null, record);
      },
    }),
    assembleTranscript(),
    new Writable({
      objectMode: true,
      write(event: TranscriptEvent, _e, cb) {
        events.push(event);
        cb();
      },
    }),
  );
  const final = events.at(-1) as FinalEvent;
  assert.equal(final.type, 'final');
  return { words: committed, changes, final, lostEvents };
}

/**
 * A service whose connection is lost after it accepted frames 7, 14, 21 and 28 (the client
 * cannot tell whether they were taken), and whose answer to frame 10 breaks off.
 */
function withCuts(): FakeLiveService {
  const service = new FakeLiveService();
  const faults: FakeFault[] = [7, 14, 21, 28].map((nth) => ({ nth, action: { type: 'lost' } }));
  for (const f of [...faults, { nth: 10, action: { type: 'cut' } } as const]) service.fault(f);
  return service;
}

const reference = await transcribe(new FakeLiveService());

test('the same audio with and without connection failures gives the same words', async (t) => {
  assert.ok(reference.words.length > 20, `${reference.words.length} reference words`);
  const faulty = await transcribe(withCuts());
  assert.ok(faulty.changes.length >= 3, `${faulty.changes.length} restarts`);
  assert.ok(
    faulty.changes.some((c) => (c.replaySec ?? 0) > 0),
    'some audio was heard again',
  );
  const diff = diffWords(reference.words, faulty.words);
  t.diagnostic(JSON.stringify(diff));
  assert.equal(diff.lost, 0, `lost words: ${JSON.stringify(diff)}`);
  assert.equal(diff.duplicated, 0, `duplicated words: ${JSON.stringify(diff)}`);
  // A session that starts mid-stream can cut one region into one word more or less.
  assert.ok(diff.resegmented + diff.extra <= faulty.changes.length, JSON.stringify(diff));
  assert.equal(faulty.final.lost, undefined);
});

test('without the replay buffer the same failures lose words (the measure can fail)', async (t) => {
  const faulty = await transcribe(withCuts(), { replayBuffer: false });
  const diff = diffWords(reference.words, faulty.words);
  t.diagnostic(JSON.stringify(diff));
  assert.ok(diff.lost > 0, JSON.stringify(diff));
});

test('a failure that outlasts the replay buffer: the lost time range is an event and is in the final transcript', async () => {
  const { final, lostEvents } = await transcribe(withCuts(), { replayBuffer: { maxSec: 1 } });
  assert.ok(lostEvents.length > 0, 'no loss reported');
  assert.deepEqual(final.lost, lostEvents);
  for (const range of lostEvents) assert.ok(range.end_time > range.start_time);
  // Every word missing from the run lies in a range reported lost: no loss is silent.
  const got = final.words;
  const missing = reference.words.filter(
    (r) =>
      !got.some((w) => Math.abs((w.start_time + w.end_time) / 2 - (r.start_time + r.end_time) / 2) < 0.25),
  );
  assert.ok(missing.length > 0, 'the bound dropped no word (the test would not show anything)');
  for (const w of missing) {
    assert.ok(
      lostEvents.some((r) => w.end_time > r.start_time - 1e-6 && w.start_time < r.end_time + 1e-6),
      `word at ${w.start_time}-${w.end_time} lost outside every reported range ${JSON.stringify(lostEvents)}`,
    );
  }
});

/**
 * Run the first 6 s of `pcm` through sttStream until it ends, or until it restarted `cap` times
 * (then it is destroyed with an error saying so): the error it failed with, and its restarts.
 */
async function restartsUntilFailure(
  service: FakeLiveService,
  cap: number,
): Promise<{ error: unknown; restarts: number }> {
  let restarts = 0;
  const stt = sttStream({
    sessions: service.sessions({ endTimeoutMs: 500, finalTimeoutMs: 200 }),
    coalesceMs: 0,
    maxRestarts: 5,
    restartBackoff: { baseMs: 1, maxMs: 5 },
  });
  stt.on('session-error', () => {
    if (++restarts === cap) stt.destroy(new Error(`still restarting after ${cap} restarts`));
  });
  const error = await pipeline(
    Readable.from([pcm.subarray(0, 32_000 * 6)]),
    toFrames({ language: 'en', frameMs: 500 }),
    stt,
    new Writable({ objectMode: true, write: (_r, _e, cb) => cb() }),
  ).then(
    () => undefined,
    (err: unknown) => err,
  );
  return { error, restarts };
}

test('sessions that each accept the replayed audio and never finalise it are restarted only maxRestarts times', async () => {
  // The final record never comes: each session accepts the replay (the final frame with it)
  // and fails waiting for it. Hearing the same audio again is no progress.
  const service = new FakeLiveService();
  service.fault({ match: (f) => f.isFinal, times: Number.POSITIVE_INFINITY, action: { type: 'dropFinal' } });
  const { error, restarts } = await restartsUntilFailure(service, 50);
  assert.ok(error instanceof IncompleteStreamError, String(error));
  assert.equal(restarts, 5);
});

test('every answer cut before its records: the replayed frame accepted again and again is no progress', async () => {
  const service = new FakeLiveService();
  service.fault({ nth: 3, times: Number.POSITIVE_INFINITY, action: { type: 'cut' } });
  const { error, restarts } = await restartsUntilFailure(service, 50);
  assert.ok(error instanceof TransportError || error instanceof IncompleteStreamError, String(error));
  assert.ok(restarts <= 6, `${restarts} restarts`);
});
