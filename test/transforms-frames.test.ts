// toFrames(): PCM bytes to frames of live audio: the final mark, lookahead, odd bytes, sizes,
// and the same frames however the input is split.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import type { MediaError } from '../src/audio/media-error.ts';
import { InvalidArgumentError } from '../src/protocol/errors.ts';
import {
  type AudioFrame,
  cutFrames,
  DEFAULT_FRAME_MS,
  FrameCutter,
  isAudioFrame,
  type ToFramesOptions,
  toFrames,
} from '../src/transforms/to-frames.ts';
import { splitAt } from './helpers/chunks.ts';
import { collectObjects } from './helpers/collect.ts';

function frames(chunks: Buffer[], options: ToFramesOptions = {}): Promise<AudioFrame[]> {
  return collectObjects<AudioFrame>(chunks, toFrames(options));
}

function pcm(bytes: number): Buffer {
  const b = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i++) b[i] = (i * 31 + 7) & 0xff;
  return b;
}

/** Every property a frame sequence must have, for input `input` and frame size `frameBytes`. */
function checkSequence(out: AudioFrame[], input: Buffer, frameBytes: number, language = 'auto'): void {
  assert.ok(out.length > 0);
  assert.ok(Buffer.concat(out.map((f) => f.pcm)).equals(input), 'the PCM, in order, nothing lost');
  out.forEach((f, i) => {
    assert.ok(isAudioFrame(f), `frame ${i} is what sttStream takes`);
    assert.equal(f.isFinal, i === out.length - 1, `final only on the last (frame ${i})`);
    assert.ok(f.pcm.length > 0 && f.pcm.length <= frameBytes);
    if (i < out.length - 1) assert.equal(f.pcm.length, frameBytes, 'only the last frame is short');
    assert.equal(f.language, language);
  });
}

test('property: any split of the input gives the same frames, with the right flags', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 20 }).chain((samples) =>
        fc.tuple(
          fc.constant(samples * 2),
          fc.integer({ min: 1, max: 4000 }).map((n) => n * 2),
        ),
      ),
      fc.array(fc.integer({ min: 0, max: 8000 }), { maxLength: 30 }),
      async ([frameBytes, length], cuts) => {
        const input = pcm(length);
        const frameMs = frameBytes / 32;
        const whole = await frames([input], { frameMs, language: 'en' });
        checkSequence(whole, input, frameBytes, 'en');
        const split = await frames(splitAt(input, cuts), { frameMs, language: 'en' });
        assert.deepEqual(split, whole);
        // Audio in memory, cut at once: the same frames.
        assert.deepEqual(cutFrames(input, { frameMs, language: 'en' }), whole);
      },
    ),
    { numRuns: 150 },
  );
});

test('a one-frame stream is final; one extra sample makes a second, final frame', async () => {
  const [only] = await frames([pcm(3200)], { frameMs: 100 });
  assert.equal(only!.isFinal, true);
  const two = await frames([pcm(3202)], { frameMs: 100 });
  assert.deepEqual(
    two.map((f) => [f.isFinal, f.pcm.length]),
    [
      [false, 3200],
      [true, 2],
    ],
  );
});

test('odd bytes are carried across chunks; an odd byte left at the end is an error', async () => {
  const input = pcm(6400);
  const out = await frames(splitAt(input, [1, 3, 3199, 3201, 5555]), { frameMs: 100 });
  checkSequence(out, input, 3200);
  await assert.rejects(
    frames([pcm(3201)], { frameMs: 100 }),
    (e: MediaError) => e.code === 'ERR_MEDIA_TRUNCATED',
  );
});

test('no audio, no frames (never an empty frame)', async () => {
  assert.deepEqual(await frames([]), []);
  assert.deepEqual(await frames([Buffer.alloc(0), Buffer.alloc(0)]), []);
});

test('defaults: 100 ms frames (sttStream joins them for HTTP), language auto; nothing encoded', async () => {
  assert.equal(DEFAULT_FRAME_MS, 100);
  const byDefault = toFrames();
  assert.equal(byDefault.frameBytes, 3200);
  assert.equal(byDefault.language, 'auto');
  const out = await collectObjects<AudioFrame>([pcm(1280)], toFrames({ language: 'ar', frameMs: 20 }));
  assert.equal(out.length, 2);
  for (const f of out) assert.equal(f.language, 'ar');
  // The frames are audio, not wire bytes: the live session gives each its stream id and flags.
  assert.ok(out.every((f) => !Buffer.isBuffer(f)));
});

test('invalid options are refused up front', () => {
  assert.throws(() => toFrames({ frameMs: 600_000 }), InvalidArgumentError); // over the 16 MiB frame limit
  assert.throws(() => toFrames({ frameMs: 0 }), InvalidArgumentError);
  assert.throws(() => toFrames({ language: 'fr' as 'en' }), InvalidArgumentError);
  // What the wire decides is not toFrames' to choose: said, not silently ignored.
  assert.throws(() => toFrames({ transport: 'http' } as ToFramesOptions), /transport is not an option/);
  assert.throws(
    () => toFrames({ streamId: '0f0e0d0c-0b0a-4908-8706-050403020100' } as ToFramesOptions),
    /streamId is not an option/,
  );
  assert.throws(() => new FrameCutter(3));
  assert.throws(() => cutFrames(pcm(4), { frameMs: 0 }), /cutFrames: frameMs 0/);
  assert.throws(() => cutFrames(pcm(4), { transport: 'http' } as ToFramesOptions), /cutFrames: transport/);
});
