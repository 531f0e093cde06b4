// The transforms compose: audio to paced live frames (in the pool or inline alike), and ASR plus
// diarization records to speaker-labelled WebVTT.

import assert from 'node:assert/strict';
import * as streams from 'node:stream';
import { type Duplex, Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import type { AsrRecord, DiarizationRecord } from '../src/protocol/records.ts';
import { alignSpeakersStream, SpeakerTimeline } from '../src/transforms/align-speakers.ts';
import { assembleTranscript } from '../src/transforms/assemble-transcript.ts';
import { decode } from '../src/transforms/decode.ts';
import { mergeDiarization } from '../src/transforms/merge-diarization.ts';
import { pace } from '../src/transforms/pace.ts';
import { toCaptions } from '../src/transforms/to-captions.ts';
import { type AudioFrame, toFrames } from '../src/transforms/to-frames.ts';
import { ResamplePool } from '../src/workers/resample-pool.ts';
import { chunksOf } from './helpers/chunks.ts';
import { collectBytes, collectObjects } from './helpers/collect.ts';
import { sineFile } from './helpers/ffmpeg.ts';

// Several stages as one Duplex (`stream.compose`, missing from @types/node).
const chain = (...parts: Duplex[]) =>
  (streams as unknown as { compose(...p: Duplex[]): Duplex }).compose(...parts) as NodeJS.ReadWriteStream;

test('a 48 kHz stereo WAV becomes paced live frames; the pool gives the same frames as inline', async (t) => {
  const pool = new ResamplePool({ threads: 2 });
  t.after(() => pool.close());
  const wav = await sineFile({ seconds: 2.5, rate: 48000, channels: 2, codec: 'pcm_s16le' });
  const run = (options: Parameters<typeof decode>[0]) =>
    collectObjects<AudioFrame>(
      chunksOf(wav, 8192),
      chain(decode(options), toFrames({ language: 'en' }), pace({ speed: 10_000 })),
    );
  const inline = await run({});
  const pooled = await run({ pool });
  assert.equal(inline.length, 25);
  assert.equal(
    inline.reduce((n, f) => n + f.pcm.length, 0),
    2.5 * 16000 * 2,
  );
  assert.ok(inline.at(-1)!.isFinal && inline.slice(0, -1).every((f) => !f.isFinal));
  assert.deepEqual(pooled, inline);
});

test('ASR and diarization records become speaker-labelled WebVTT', async () => {
  const id = '4b1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f';
  const words = [
    ['Hello', 0.2, 0.5],
    ['there.', 0.55, 0.9],
    ['Hi,', 1.4, 1.6],
    ['how', 1.65, 1.8],
    ['are', 1.85, 1.95],
    ['you?', 2.0, 2.3],
  ].map(([word, start_time, end_time]) => ({ word, start_time, end_time }) as AsrRecord['words'][number]);
  const asr: AsrRecord[] = [
    { id, seq: 1, transcription: 'Hello', words: words.slice(0, 1), is_speech_final: false, is_final: false },
    {
      id,
      seq: 2,
      transcription: 'Hello there.',
      words: words.slice(0, 2),
      is_speech_final: true,
      is_final: false,
    },
    {
      id,
      seq: 3,
      transcription: 'Hi, how are you?',
      words: words.slice(2),
      is_speech_final: true,
      is_final: true,
    },
  ];
  const diarization: DiarizationRecord[] = [
    {
      id,
      final_segments: [{ speaker: 'A', start_time: 0, end_time: 1.2 }],
      active_segments: [{ speaker: 'B', start_time: 1.3 }],
      is_final: false,
    },
    {
      id,
      final_segments: [{ speaker: 'B', start_time: 1.3, end_time: 2.5 }],
      active_segments: [],
      is_final: true,
    },
  ];
  const timeline = new SpeakerTimeline();
  const speakers = pipeline(Readable.from(diarization), mergeDiarization(), timeline.writable());
  const vtt = collectBytes(
    asr,
    chain(assembleTranscript(), alignSpeakersStream({ timeline }), toCaptions({ format: 'vtt' })),
  );
  await speakers;
  assert.equal(
    (await vtt).toString(),
    'WEBVTT\n\n00:00:00.200 --> 00:00:01.200\n<v A>Hello there.\n\n00:00:01.400 --> 00:00:02.400\n<v B>Hi, how are you?\n\n',
  );
});
