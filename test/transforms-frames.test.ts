// toFrames(): PCM bytes to live input frames: flags, lookahead, odd bytes, sizes, stream id, and
// the same frames however the input is split.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import type { MediaError } from '../src/audio/media-error.ts';
import { InvalidArgumentError } from '../src/protocol/errors.ts';
import { decodeFrame } from '../src/protocol/frame.ts';
import {
  DEFAULT_FRAME_MS,
  FrameCutter,
  type ToFramesOptions,
  toFrames,
} from '../src/transforms/to-frames.ts';
import { splitAt } from './helpers/chunks.ts';
import { collectObjects } from './helpers/collect.ts';

function frames(chunks: Buffer[], options: ToFramesOptions = {}): Promise<Buffer[]> {
  return collectObjects<Buffer>(chunks, toFrames(options));
}

function pcm(bytes: number): Buffer {
  const b = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i++) b[i] = (i * 31 + 7) & 0xff;
  return b;
}

/** Every property a frame sequence must have, for input `input` and frame size `frameBytes`. */
function checkSequence(out: Buffer[], input: Buffer, frameBytes: number, streamId?: string): void {
  const decoded = out.map((f) => decodeFrame(f)); // throws on anything the service rejects
  assert.ok(decoded.length > 0);
  assert.ok(Buffer.concat(decoded.map((f) => f.pcm)).equals(input), 'the PCM, in order, nothing lost');
  decoded.forEach((f, i) => {
    assert.equal(f.isStart, i === 0, `is_start only on the first (frame ${i})`);
    assert.equal(f.isFinal, i === decoded.length - 1, `is_final only on the last (frame ${i})`);
    assert.ok(f.pcm.length > 0 && f.pcm.length <= frameBytes);
    if (i < decoded.length - 1) assert.equal(f.pcm.length, frameBytes, 'only the last frame is short');
    assert.equal(f.streamId, streamId ?? decoded[0]!.streamId);
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
        const streamId = '0f0e0d0c-0b0a-4908-8706-050403020100';
        const whole = await frames([input], { frameMs, streamId });
        checkSequence(whole, input, frameBytes, streamId);
        const split = await frames(splitAt(input, cuts), { frameMs, streamId });
        assert.deepEqual(split, whole);
      },
    ),
    { numRuns: 150 },
  );
});

test('a one-frame stream carries both flags; one extra sample makes a second, final frame', async () => {
  const [only] = await frames([pcm(3200)], { frameMs: 100 });
  assert.deepEqual([decodeFrame(only!).isStart, decodeFrame(only!).isFinal], [true, true]);
  const two = await frames([pcm(3202)], { frameMs: 100 });
  assert.deepEqual(
    two.map((f) => [decodeFrame(f).isStart, decodeFrame(f).isFinal, decodeFrame(f).pcm.length]),
    [
      [true, false, 3200],
      [false, true, 2],
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

test('defaults: HTTP (as sttStream), 1 s frames; 100 ms for Socket.IO; language auto; a fresh stream id it exposes', async () => {
  assert.deepEqual(DEFAULT_FRAME_MS, { http: 1000, socketio: 100 });
  const byDefault = toFrames();
  assert.equal(byDefault.frameBytes, 32000, 'one POST a second, as sttStream sends by default');
  assert.equal(byDefault.language, 'auto');
  assert.equal(toFrames({ transport: 'socketio' }).frameBytes, 3200);
  const stream = toFrames({ language: 'ar', frameMs: 20 });
  const out: Buffer[] = [];
  stream.on('data', (f: Buffer) => out.push(f));
  stream.end(pcm(1280));
  await new Promise((resolve) => stream.once('end', resolve));
  assert.equal(out.length, 2);
  for (const f of out) {
    const d = decodeFrame(f);
    assert.equal(d.streamId, stream.streamId);
    assert.equal(d.language, 'ar');
  }
  assert.notEqual(toFrames().streamId, toFrames().streamId);
  const fixed = new Uint8Array(16).fill(9);
  assert.equal(toFrames({ streamId: fixed }).streamId, '09090909-0909-0909-0909-090909090909');
});

test('invalid options are refused up front', () => {
  assert.throws(() => toFrames({ frameMs: 600_000 }), InvalidArgumentError); // over the 16 MiB frame limit
  assert.throws(() => toFrames({ frameMs: 0 }), InvalidArgumentError);
  assert.throws(() => toFrames({ language: 'fr' as 'en' }), InvalidArgumentError);
  assert.throws(() => toFrames({ streamId: 'not-a-uuid' }));
  assert.throws(() => new FrameCutter(3));
});
