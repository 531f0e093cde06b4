// No speech lost when a live session fails (issue 13): the audio a failed session accepted and
// the service had not finalised is sent again on the next session, and words already emitted
// are not emitted again. The same audio with and without faults gives the same words, matched
// on the pipeline's timeline, over both transports.

import assert from 'node:assert/strict';
import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type TestContext, test } from 'node:test';
import type { FaultRule } from '../src/emulator/index.ts';
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
import { startService } from './helpers/service.ts';
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

const { emulator, client } = await startService();

async function transcribe(
  transport: 'http' | 'socketio',
  options: Pick<LiveStreamOptions, 'replayBuffer'> = {},
) {
  const events: TranscriptEvent[] = [];
  const changes: SessionChange[] = [];
  const lostEvents: LostAudio[] = [];
  // sttStream's own committed words (not assembleTranscript's, which also drops repeats).
  const committed: WordSegment[] = [];
  const stt = sttStream({
    coalesceMs: 0,
    client,
    transport,
    restartBackoff: { baseMs: 1, maxMs: 5 },
    ...options,
  });
  stt.on('session', (c: SessionChange) => changes.push(c));
  stt.on('audio-lost', ({ start_time, end_time }: LostAudio) => lostEvents.push({ start_time, end_time }));
  await pipeline(
    Readable.from([pcm]),
    toFrames({ language: 'en', frameMs: transport === 'http' ? 500 : 200 }),
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

/** Connection failures spread over the stream, each after the frame was accepted. */
function cuts(transport: 'http' | 'socketio'): FaultRule[] {
  const operation = transport === 'http' ? 'stt.http' : 'stt.socket';
  const every = transport === 'http' ? 7 : 17;
  return [1, 2, 3, 4].map((k) => ({
    operation,
    nth: k * every,
    times: 1,
    action: { type: 'reset', stage: 'afterEffect' } as const,
  }));
}

/** Add the connection failures for the rest of test `t`. */
function withCuts(t: TestContext, transport: 'http' | 'socketio'): void {
  const faults = cuts(transport).map((rule) => emulator.faults.add(rule));
  t.after(() => {
    for (const f of faults) f.remove();
  });
}

for (const transport of ['http', 'socketio'] as const) {
  test(`${transport}: the same audio with and without connection failures gives the same words`, {
    timeout: 60_000,
  }, async (t) => {
    const reference = await transcribe(transport);
    assert.ok(reference.words.length > 20, `${reference.words.length} reference words`);
    withCuts(t, transport);
    const faulty = await transcribe(transport);
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
}

test('without the replay buffer the same failures lose words (the measure can fail)', {
  timeout: 60_000,
}, async (t) => {
  const reference = await transcribe('http');
  withCuts(t, 'http');
  const faulty = await transcribe('http', { replayBuffer: false });
  const diff = diffWords(reference.words, faulty.words);
  t.diagnostic(JSON.stringify(diff));
  assert.ok(diff.lost > 0, JSON.stringify(diff));
});

test('a failure that outlasts the replay buffer: the lost time range is an event and is in the final transcript', {
  timeout: 60_000,
}, async (t) => {
  const reference = await transcribe('http');
  withCuts(t, 'http');
  const { final, lostEvents } = await transcribe('http', { replayBuffer: { maxSec: 1 } });
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
 * Run `pcm` through sttStream until it ends, or until it restarted `cap` times (then it is
 * destroyed with an error saying so): the error it failed with, and its restarts.
 */
async function restartsUntilFailure(
  transport: 'http' | 'socketio',
  cap: number,
): Promise<{ error: unknown; restarts: number }> {
  let restarts = 0;
  const stt = sttStream({
    coalesceMs: 0,
    client,
    transport,
    maxRestarts: 5,
    restartBackoff: { baseMs: 1, maxMs: 5 },
    session: { endTimeoutMs: 500, finalTimeoutMs: 200 },
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

for (const transport of ['http', 'socketio'] as const) {
  test(`${transport}: sessions that each accept the replayed audio and never finalise it are restarted only maxRestarts times`, {
    timeout: 60_000,
  }, async (t) => {
    // The final record never comes: each session accepts the replay (the final frame with it)
    // and fails waiting for it. Hearing the same audio again is no progress.
    const rule = emulator.faults.add({
      operation: transport === 'http' ? 'stt.http' : 'stt.socket',
      times: Number.POSITIVE_INFINITY,
      action: { type: 'endWithoutFinal' },
    });
    t.after(() => rule.remove());
    const { error, restarts } = await restartsUntilFailure(transport, 50);
    assert.ok(error instanceof IncompleteStreamError, String(error));
    assert.equal(restarts, 5);
  });
}

test('http: every answer cut before its records: the replayed frame accepted again and again is no progress', {
  timeout: 60_000,
}, async (t) => {
  const rule = emulator.faults.add({
    operation: 'stt.http',
    nth: 3,
    times: Number.POSITIVE_INFINITY,
    action: { type: 'reset', afterBytes: 0 },
  });
  t.after(() => rule.remove());
  const { error, restarts } = await restartsUntilFailure('http', 50);
  assert.ok(error instanceof TransportError || error instanceof IncompleteStreamError, String(error));
  assert.ok(restarts <= 6, `${restarts} restarts`);
});
