// Options a factory cannot work with are refused when the stream is made, with an
// InvalidArgumentError that names the option: not a TypeError from inside, not a stream that
// never does what was asked.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createClient } from '../src/client/client.ts';
import { InvalidArgumentError } from '../src/protocol/errors.ts';
import { liveInput } from '../src/sources/live-input.ts';
import { alignSpeakersStream } from '../src/transforms/align-speakers.ts';
import { decode } from '../src/transforms/decode.ts';
import { demuxTts } from '../src/transforms/demux-tts.ts';
import { sttStream } from '../src/transforms/live-stream.ts';
import { mergeDiarization } from '../src/transforms/merge-diarization.ts';
import { toCaptions } from '../src/transforms/to-captions.ts';

const refused = (option: RegExp) => (err: unknown) =>
  err instanceof InvalidArgumentError && err.code === 'ERR_INVALID_ARGUMENT' && option.test(err.message);

test('demuxTts without a request id', () => {
  assert.throws(() => demuxTts(undefined as never), refused(/requestId/));
  assert.throws(() => demuxTts({} as never), refused(/requestId/));
});

test('alignSpeakersStream without a timeline', () => {
  assert.throws(() => alignSpeakersStream({} as never), refused(/timeline/));
  assert.throws(() => alignSpeakersStream({ timeline: { closedUntil: 0 } } as never), refused(/timeline/));
});

test('mergeDiarization with a gap that is no number of seconds (NaN never merged anything)', () => {
  for (const maxGapSec of [Number.NaN, -1, '2' as never])
    assert.throws(() => mergeDiarization({ maxGapSec }), refused(/maxGapSec/), String(maxGapSec));
  mergeDiarization({ maxGapSec: 0 }).destroy();
});

test('liveInput with a sample rate ffmpeg cannot give (it failed only later, inside ffmpeg)', () => {
  for (const input of ['-', 'rtmp://127.0.0.1:1/live'])
    for (const sampleRate of [0, -16_000, 16_000.5, Number.NaN])
      assert.throws(() => liveInput(input, { sampleRate }), refused(/sampleRate/), `${input} ${sampleRate}`);
});

test('sttStream with options it would quietly misuse (a NaN keepalive sent a frame a millisecond)', () => {
  const sessions = () => assert.fail('no session is opened for a stream refused at construction');
  const bad: [string, Record<string, unknown>][] = [
    ['keepaliveMs', { keepaliveMs: Number.NaN }],
    ['keepaliveMs', { keepaliveMs: -1 }],
    ['keepaliveMs', { keepaliveMs: 2 ** 31 }],
    ['coalesceMs', { coalesceMs: Number.NaN }],
    ['maxRestarts', { maxRestarts: -1 }],
    ['maxRestarts', { maxRestarts: 1.5 }],
    ['restartWithinMs', { restartWithinMs: -5 }],
    ['rotateAfterSec', { rotateAfterSec: 0 }],
    ['restartBackoff.baseMs', { restartBackoff: { baseMs: Number.NaN } }],
    ['replayBuffer.maxSec', { replayBuffer: { maxSec: -1 } }],
    ['transport', { transport: 'bogus' }],
    ['transport', { transport: 'HTTP' }],
  ];
  for (const [name, options] of bad)
    assert.throws(
      () => sttStream({ sessions, ...options } as never),
      refused(new RegExp(name.replace('.', '\\.'))),
      name,
    );
  // Bounds that mean "none", and 0 for "off", are taken.
  for (const options of [
    { maxRestarts: Number.POSITIVE_INFINITY, restartWithinMs: Number.POSITIVE_INFINITY },
    { keepaliveMs: 0 },
  ])
    sttStream({ sessions, ...options } as never).destroy();
});

test('a live session with options it would misuse (HTTP in capitals went over Socket.IO)', async () => {
  const client = createClient({ apiUrl: 'http://127.0.0.1:9', apiKey: 'test-key-0123456789' });
  try {
    for (const [name, options] of [
      ['transport', { transport: 'HTTP' }],
      ['maxRateRetries', { maxRateRetries: -1 }],
      ['highWaterMark', { highWaterMark: 0 }],
      ['finalTimeoutMs', { finalTimeoutMs: 0 }],
      ['ackTimeoutMs', { ackTimeoutMs: Number.NaN }],
      ['endTimeoutMs', { endTimeoutMs: 2 ** 31 }],
    ] as const)
      assert.throws(() => client.live.stt(options as never), refused(new RegExp(name)), name);
    // No bound at all is a choice (a 429 is still not waited out past the session's expiry).
    client.live
      .stt({ startDeadlineMs: Number.POSITIVE_INFINITY, maxRateRetries: Number.POSITIVE_INFINITY })
      .abort();
  } finally {
    await client.close();
  }
});

test('createClient with admission settings that cannot work, or a policy it does not know', () => {
  const base = { apiUrl: 'http://127.0.0.1:9', apiKey: 'test-key-0123456789' };
  for (const admission of [{ maxRetries: -1 }, { probeAfterMs: Number.NaN }, { backoff: { baseMs: -1 } }])
    assert.throws(() => createClient({ ...base, admission }), RangeError, JSON.stringify(admission));
  assert.throws(
    () => createClient({ ...base, onAmbiguousSubmit: 'bogus' as never }),
    refused(/onAmbiguousSubmit/),
  );
});

test('decode with an ffmpeg mode it does not know; toCaptions without its options', () => {
  assert.throws(() => decode({ ffmpeg: 'bogus' as never }), refused(/ffmpeg/));
  assert.throws(() => toCaptions(undefined as never), refused(/toCaptions/));
});
