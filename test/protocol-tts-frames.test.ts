import assert from 'node:assert/strict';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  demuxTts,
  encodeTtsFrame,
  IncompleteStreamError,
  ProtocolError,
  type TtsChunk,
  TtsDemuxer,
} from '../src/index.ts';
import { TTS_FRAME_HEADER_BYTES } from '../src/protocol/tts-frames.ts';
import { uuidToBytes } from '../src/protocol/uuid.ts';
import { chunksOf, cutsFor, splitAt } from './helpers/chunks.ts';

const ID = '6ba7b810-9dad-41d1-80b4-00c04fd430c8';
const ID_BYTES = uuidToBytes(ID);

function body(frames: Buffer[], finalIndex = frames.length - 1): Buffer {
  return Buffer.concat(frames.map((pcm, i) => encodeTtsFrame(ID, i === finalIndex, pcm)));
}

function demux(chunks: Buffer[], coalesceBytes?: number): { pcm: Buffer; out: TtsChunk[] } {
  const d = new TtsDemuxer(ID, coalesceBytes === undefined ? {} : { coalesceBytes });
  const out: TtsChunk[] = [];
  for (const c of chunks) d.push(c, out);
  d.end(out);
  return { pcm: Buffer.concat(out.map((c) => c.pcm)), out };
}

function checkShape(out: TtsChunk[]) {
  assert.ok(out.length > 0);
  out.forEach((c, i) => {
    assert.equal(c.pcm.length % 2, 0, 'whole samples only');
    assert.equal(c.final, i === out.length - 1, 'final only on the last chunk');
  });
}

test('single chunk: frames concatenate and the last chunk is final', () => {
  const frames = [Buffer.alloc(6, 1), Buffer.alloc(4, 2), Buffer.alloc(2, 3)];
  const { pcm, out } = demux([body(frames)]);
  assert.deepEqual(pcm, Buffer.concat(frames));
  checkShape(out);
});

test('a final frame with no PCM completes the stream', () => {
  const { pcm, out } = demux([body([Buffer.alloc(8, 5), Buffer.alloc(0)])]);
  assert.deepEqual(pcm, Buffer.alloc(8, 5));
  checkShape(out);
  assert.equal(out.at(-1)!.pcm.length, 0);
});

test('every read boundary, including inside the 17-byte header, gives the same PCM', () => {
  const frames = [Buffer.alloc(10, 1), Buffer.alloc(30, 2), Buffer.alloc(4, 3)];
  const whole = body(frames);
  for (let size = 1; size <= whole.length; size++) {
    const { pcm, out } = demux(chunksOf(whole, size));
    assert.deepEqual(pcm, Buffer.concat(frames), `read size ${size}`);
    checkShape(out);
  }
});

test('odd PCM byte counts are carried across chunks and frames', () => {
  const frames = [Buffer.from([1, 2, 3]), Buffer.from([4, 5, 6, 7, 8]), Buffer.from([9, 10])];
  const whole = body(frames);
  for (let size = 1; size <= whole.length; size++) {
    const { pcm, out } = demux(chunksOf(whole, size));
    assert.deepEqual(pcm, Buffer.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]));
    checkShape(out);
  }
});

test('PCM that contains prefixes of the request UUID is not mistaken for a header', () => {
  const tricky = Buffer.concat([ID_BYTES.subarray(0, 15), Buffer.from([0]), ID_BYTES.subarray(0, 8)]);
  const frames = [tricky, Buffer.concat([Buffer.alloc(2), ID_BYTES.subarray(0, 14)])];
  const whole = body(frames);
  for (let size = 1; size <= 40; size++) {
    const { pcm } = demux(chunksOf(whole, size));
    assert.deepEqual(pcm, Buffer.concat(frames));
  }
});

test('input that ends before the final frame is an IncompleteStreamError', () => {
  const d = new TtsDemuxer(ID);
  d.push(encodeTtsFrame(ID, false, Buffer.alloc(4)));
  assert.throws(
    () => d.end(),
    (err: unknown) => err instanceof IncompleteStreamError && err.code === 'ERR_INCOMPLETE_STREAM',
  );
  assert.throws(() => new TtsDemuxer(ID).end(), IncompleteStreamError);
  // Truncated inside the final frame's header.
  const cut = new TtsDemuxer(ID);
  cut.push(
    Buffer.concat([
      encodeTtsFrame(ID, false, Buffer.alloc(4)),
      encodeTtsFrame(ID, true, Buffer.alloc(0)).subarray(0, 16),
    ]),
  );
  assert.throws(() => cut.end(), IncompleteStreamError);
});

test('a frame after the final frame is a protocol error (staged small reads: by end() at the latest)', () => {
  const bytes = Buffer.concat([
    encodeTtsFrame(ID, true, Buffer.alloc(4)),
    encodeTtsFrame(ID, false, Buffer.alloc(2)),
  ]);
  for (const coalesceBytes of [0, 4096]) {
    const d = new TtsDemuxer(ID, { coalesceBytes });
    assert.throws(
      () => {
        d.push(bytes);
        d.end();
      },
      (err: unknown) => err instanceof ProtocolError && err.code === 'ERR_TTS_FRAME',
    );
  }
  // Without staging it fails on the read that carries the extra frame.
  assert.throws(() => new TtsDemuxer(ID, { coalesceBytes: 0 }).push(bytes), { code: 'ERR_TTS_FRAME' });
});

test('a body that does not start with the request header is a protocol error', () => {
  const other = encodeTtsFrame('6ba7b811-9dad-41d1-80b4-00c04fd430c8', true, Buffer.alloc(4));
  assert.throws(() => new TtsDemuxer(ID).push(other), { code: 'ERR_TTS_FRAME' });
  // Detected as soon as the first mismatching byte arrives.
  assert.throws(() => new TtsDemuxer(ID).push(Buffer.from([ID_BYTES[0]! ^ 1])), { code: 'ERR_TTS_FRAME' });
  assert.throws(() => new TtsDemuxer(ID).push(Buffer.from('{"code":"X"}')), { code: 'ERR_TTS_FRAME' });
});

test('a flag byte other than 0 or 1 is a protocol error', () => {
  const f = encodeTtsFrame(ID, true, Buffer.alloc(2));
  f[16] = 2;
  assert.throws(() => new TtsDemuxer(ID).push(f), { code: 'ERR_TTS_FRAME' });
});

test('coalescing gathers PCM split across reads into fewer chunks, bounded in size', () => {
  const frames = Array.from({ length: 10 }, (_, i) => Buffer.alloc(3200, i));
  const reads = chunksOf(body(frames), 1000);
  const plain = demux(reads, 0);
  const gathered = demux(reads, 4096);
  assert.deepEqual(gathered.pcm, plain.pcm);
  assert.ok(
    gathered.out.length < plain.out.length / 2,
    `${gathered.out.length} vs ${plain.out.length} chunks`,
  );
  for (const c of gathered.out) assert.ok(c.pcm.length <= 4096);
  assert.throws(() => new TtsDemuxer(ID, { coalesceBytes: -1 }), { code: 'ERR_INVALID_ARGUMENT' });
});

test('property: staged PCM waits at most coalesceBytes, whatever the frame sizes', () => {
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 0, max: 1500 }), { minLength: 1, maxLength: 12 }),
      fc.constantFrom(64, 1000, 4096),
      fc.array(fc.integer({ min: 1, max: 4095 }), { minLength: 1, maxLength: 32 }),
      (sizes, coalesce, readSizes) => {
        const frames = sizes.map((n, i) => Buffer.alloc(n * 2, i + 1));
        const whole = body(frames);
        const d = new TtsDemuxer(ID, { coalesceBytes: coalesce });
        const out: TtsChunk[] = [];
        let received = 0;
        for (let at = 0, k = 0; at < whole.length; k++) {
          const size = Math.min(readSizes[k % readSizes.length]! % coalesce || 1, whole.length - at);
          d.push(whole.subarray(at, at + size), out);
          at += size;
          received += size;
          // Not yet emitted: staged bytes (under coalesceBytes), a carried half sample, and bytes
          // that may be a header cut short.
          const held = received - TTS_FRAME_HEADER_BYTES * d.frames - d.pcmBytes;
          assert.ok(
            held <= coalesce + TTS_FRAME_HEADER_BYTES,
            `${held} bytes held with coalesceBytes ${coalesce}`,
          );
        }
        d.end(out);
        assert.deepEqual(Buffer.concat(out.map((c) => c.pcm)), Buffer.concat(frames));
        checkShape(out);
      },
    ),
    { numRuns: Number(process.env.FC_RUNS ?? 300) },
  );
});

test('a trailing half sample at the end is an error, never dropped', () => {
  const d = new TtsDemuxer(ID);
  d.push(encodeTtsFrame(ID, true, Buffer.from([1, 2, 3])));
  assert.throws(() => d.end(), { code: 'ERR_TTS_FRAME' });
});

const framesArb = fc.array(
  fc.uint8Array({ maxLength: 80 }).map((a) => Buffer.from(a)),
  { minLength: 1, maxLength: 8 },
);

test('property: any split of a valid body gives the one-chunk output', () => {
  fc.assert(
    fc.property(
      framesArb.chain((frames) => {
        const total = frames.reduce((n, f) => n + f.length, 0);
        // Whole samples overall, so the body is valid.
        if (total % 2) frames[frames.length - 1] = Buffer.concat([frames.at(-1)!, Buffer.of(0)]);
        const whole = body(frames);
        return fc.tuple(
          fc.constant(frames),
          fc.constant(whole),
          cutsFor(whole.length),
          fc.constantFrom(0, 1, 2, 3, 16, 4096),
        );
      }),
      ([frames, whole, cuts, coalesce]) => {
        const one = demux([whole]);
        const many = demux(splitAt(whole, cuts), coalesce);
        assert.deepEqual(many.pcm, Buffer.concat(frames));
        assert.deepEqual(one.pcm, many.pcm);
        checkShape(many.out);
      },
    ),
    { numRuns: Number(process.env.FC_RUNS ?? 300) },
  );
});

test('property: random bytes only ever produce typed errors', () => {
  fc.assert(
    fc.property(
      fc.oneof(
        fc.uint8Array({ maxLength: 100 }).map((a) => Buffer.from(a)),
        fc.uint8Array({ maxLength: 100 }).map((a) => Buffer.concat([ID_BYTES, Buffer.from(a)])),
      ),
      cutsFor(120),
      (bytes, cuts) => {
        try {
          demux(splitAt(bytes, cuts));
        } catch (err) {
          assert.ok(err instanceof ProtocolError || err instanceof IncompleteStreamError, String(err));
        }
      },
    ),
  );
});

test('demuxTts stream adapter: bytes in, {final, pcm} out', async () => {
  const frames = [Buffer.alloc(100, 7), Buffer.alloc(50, 8), Buffer.alloc(0)];
  const got: TtsChunk[] = [];
  await pipeline(Readable.from(chunksOf(body(frames), 13)), demuxTts({ requestId: ID }), async (source) => {
    for await (const c of source) got.push(c as TtsChunk);
  });
  assert.deepEqual(Buffer.concat(got.map((c) => c.pcm)), Buffer.concat(frames));
  checkShape(got);
});

test('demuxTts fails the pipeline with IncompleteStreamError on a truncated body', async () => {
  // Cut inside the final frame's header (bytes 117..133): the final flag never arrives.
  const truncated = body([Buffer.alloc(100, 7), Buffer.alloc(50, 8)]).subarray(0, 125);
  await assert.rejects(
    pipeline(Readable.from([truncated]), demuxTts({ requestId: ID }), async (source) => {
      for await (const _ of source);
    }),
    IncompleteStreamError,
  );
});

/** What demuxTts passed on before it failed (a Writable sink: flowing mode), and the error. */
async function demuxUntilError(
  chunks: Buffer[],
  coalesceBytes?: number,
): Promise<{ pcm: Buffer; error: unknown }> {
  const got: Buffer[] = [];
  let error: unknown;
  try {
    await pipeline(
      Readable.from(chunks),
      demuxTts(coalesceBytes === undefined ? { requestId: ID } : { requestId: ID, coalesceBytes }),
      new Writable({
        objectMode: true,
        write(chunk: TtsChunk, _encoding, callback) {
          got.push(chunk.pcm);
          callback();
        },
      }),
    );
  } catch (err) {
    error = err;
  }
  return { pcm: Buffer.concat(got), error };
}

test('property: demuxTts passes on the same PCM before an error for any split', async () => {
  const broken = framesArb.chain((frames) => {
    const whole = body(frames);
    const starts: number[] = [];
    for (let i = 0, at = 0; i < frames.length; at += 17 + frames[i]!.length, i++) starts.push(at);
    return fc.oneof(
      // cut anywhere: inside a header, inside PCM, or a half sample at the end
      fc.integer({ min: 1, max: whole.length }).map((n) => whole.subarray(0, n)),
      // a bad flag byte in some header
      fc.tuple(fc.constantFrom(...starts), fc.integer({ min: 2, max: 255 })).map(([at, flag]) => {
        const b = Buffer.from(whole);
        b[at + 16] = flag;
        return b;
      }),
      // a frame after the final one
      fc.uint8Array({ maxLength: 20 }).map((pcm) => Buffer.concat([whole, encodeTtsFrame(ID, false, pcm)])),
    );
  });
  await fc.assert(
    fc.asyncProperty(
      broken.chain((bytes) =>
        fc.tuple(fc.constant(bytes), cutsFor(bytes.length), fc.constantFrom(0, 1, 3, 16, 4096)),
      ),
      async ([bytes, cuts, coalesce]) => {
        const one = await demuxUntilError([bytes]);
        const many = await demuxUntilError(splitAt(bytes, cuts), coalesce);
        assert.equal(String(many.error), String(one.error));
        assert.equal(
          (many.error as { code?: string } | undefined)?.code,
          (one.error as { code?: string } | undefined)?.code,
        );
        assert.equal(
          (many.error as { offset?: number } | undefined)?.offset,
          (one.error as { offset?: number } | undefined)?.offset,
        );
        assert.deepEqual(many.pcm, one.pcm);
      },
    ),
    { numRuns: Number(process.env.FC_RUNS ?? 300) },
  );
});

test('the PCM before an error is passed on, not dropped with its chunk', async () => {
  const good = encodeTtsFrame(ID, false, Buffer.alloc(8, 1));
  const bad = encodeTtsFrame(ID, false, Buffer.alloc(2));
  bad[16] = 9;
  const afterFinal = Buffer.concat([
    encodeTtsFrame(ID, true, Buffer.alloc(6, 2)),
    encodeTtsFrame(ID, false, Buffer.alloc(2)),
  ]);
  for (const coalesceBytes of [0, 4, 16384]) {
    const flag = await demuxUntilError([Buffer.concat([good, bad])], coalesceBytes);
    assert.equal((flag.error as ProtocolError).code, 'ERR_TTS_FRAME');
    assert.deepEqual(flag.pcm, Buffer.alloc(8, 1), `bad flag, coalesceBytes ${coalesceBytes}`);
    const extra = await demuxUntilError([afterFinal], coalesceBytes);
    assert.equal((extra.error as ProtocolError).code, 'ERR_TTS_FRAME');
    assert.deepEqual(extra.pcm, Buffer.alloc(6, 2), `frame after final, coalesceBytes ${coalesceBytes}`);
    const cut = await demuxUntilError([good.subarray(0, 23)], coalesceBytes);
    assert.ok(cut.error instanceof IncompleteStreamError);
    assert.equal(cut.error.operation, 'tts.http');
    assert.deepEqual(cut.pcm, Buffer.alloc(6, 1), `truncated, coalesceBytes ${coalesceBytes}`);
  }
});
