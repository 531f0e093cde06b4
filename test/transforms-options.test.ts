// Options a factory cannot work with are refused when the stream is made, with an
// InvalidArgumentError that names the option: not a TypeError from inside, not a stream that
// never does what was asked.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidArgumentError } from '../src/protocol/errors.ts';
import { liveInput } from '../src/sources/live-input.ts';
import { alignSpeakersStream } from '../src/transforms/align-speakers.ts';
import { demuxTts } from '../src/transforms/demux-tts.ts';
import { mergeDiarization } from '../src/transforms/merge-diarization.ts';

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
