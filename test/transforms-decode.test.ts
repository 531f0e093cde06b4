// decode(): every path (native WAV, raw PCM, Ogg and WebM Opus; ffmpeg for the rest) on lavfi
// fixtures, so it needs no media; error paths leave no child process behind.

import assert from 'node:assert/strict';
import { chmodSync, createReadStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { finished, pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import fc from 'fast-check';
import { FfmpegError, FfmpegNotFoundError } from '../src/audio/ffmpeg.ts';
import { MediaError } from '../src/audio/media-error.ts';
import { OggOpusDemuxer, OggPageWalker, oggCrc } from '../src/audio/ogg-opus.ts';
import { Mp4BoxWalker, sniffAudio } from '../src/audio/sniff.ts';
import { WebmOpusDemuxer } from '../src/audio/webm-opus.ts';
import { encodeWav } from '../src/protocol/riff.ts';
import { type DecodeFormatEvent, type DecodeOptions, decode } from '../src/transforms/decode.ts';
import { chunksOf, cutsFor, splitAt } from './helpers/chunks.ts';
import { ffmpeg, sineFile } from './helpers/ffmpeg.ts';

interface Decoded {
  pcm: Buffer;
  format: DecodeFormatEvent | undefined;
  pids: number[];
  /** The warnings it gave (a cut file: ERR_MEDIA_TRUNCATED). */
  warnings: MediaError[];
}

async function run(input: Buffer, options: DecodeOptions = {}, chunk = 4096): Promise<Decoded> {
  const d = decode(options);
  let format: DecodeFormatEvent | undefined;
  const pids: number[] = [];
  d.on('format', (f: DecodeFormatEvent) => {
    format = f;
  });
  d.on('spawn', (pid: number) => pids.push(pid));
  const warnings: MediaError[] = [];
  d.on('warning', (w: MediaError) => warnings.push(w));
  const parts: Buffer[] = [];
  await pipeline(
    Readable.from(chunksOf(input, chunk)),
    d,
    new Writable({
      write(c: Buffer, _e, cb) {
        parts.push(c);
        cb();
      },
    }),
  );
  return { pcm: Buffer.concat(parts), format, pids, warnings };
}

/** ffmpeg's own decode of the same bytes, from a file (so it can seek). */
async function reference(
  input: Buffer,
  rate = 16000,
  channels = 1,
  inputArgs: string[] = [],
): Promise<Buffer> {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  try {
    const path = join(dir, 'input');
    writeFileSync(path, input);
    return await ffmpeg([
      ...inputArgs,
      '-i',
      path,
      '-f',
      's16le',
      '-ar',
      String(rate),
      '-ac',
      String(channels),
      'pipe:1',
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Signal-to-difference ratio of two PCM16 signals over their common length, in dB. */
function snr(a: Buffer, b: Buffer): number {
  const n = Math.min(a.length, b.length) >> 1;
  let sig = 0;
  let err = 0;
  for (let i = 0; i < n; i++) {
    const x = a.readInt16LE(i * 2);
    const y = b.readInt16LE(i * 2);
    sig += x * x;
    err += (x - y) * (x - y);
  }
  return 10 * Math.log10(sig / Math.max(err, 1));
}

const ms = (bytes: number, rate = 16000, channels = 1) => (bytes / 2 / channels / rate) * 1000;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

const wavCodecs = [
  'pcm_s16le',
  'pcm_u8',
  'pcm_s24le',
  'pcm_s32le',
  'pcm_f32le',
  'pcm_f64le',
  'pcm_alaw',
  'pcm_mulaw',
];

test('WAV of every sample format decodes in-process, as ffmpeg does', async () => {
  for (const codec of wavCodecs) {
    const wav = await sineFile({ seconds: 0.5, rate: 8000, channels: 2, codec });
    const out = await run(wav);
    assert.equal(out.format?.decoder, 'wav', codec);
    assert.deepEqual(out.format?.source, { sampleRate: 8000, channels: 2 });
    assert.equal(out.pids.length, 0, 'no ffmpeg for WAV');
    const ref = await reference(wav);
    assert.ok(
      Math.abs(ms(out.pcm.length) - ms(ref.length)) <= 1,
      `${codec}: ${out.pcm.length} vs ${ref.length}`,
    );
    assert.ok(snr(ref, out.pcm) > 30, `${codec}: SNR ${snr(ref, out.pcm).toFixed(1)} dB against ffmpeg`);
  }
});

test('16 kHz mono PCM16 WAV passes through untouched', async () => {
  const wav = await sineFile({ seconds: 0.2, rate: 16000, codec: 'pcm_s16le' });
  const out = await run(wav, {}, 333);
  assert.ok(out.pcm.equals(wav.subarray(wav.length - out.pcm.length)));
  assert.equal(out.pcm.length, 0.2 * 16000 * 2);
});

test('raw PCM with a declared format: s16le, f32le, A-law, mu-law', async () => {
  const cases = [
    { encoding: 's16le', args: ['-f', 's16le'] },
    { encoding: 'f32le', args: ['-f', 'f32le'] },
    { encoding: 'alaw', args: ['-f', 'alaw'] },
    { encoding: 'mulaw', args: ['-f', 'mulaw'] },
  ] as const;
  for (const c of cases) {
    const raw = await ffmpeg([
      '-f',
      'lavfi',
      '-i',
      'sine=frequency=500:sample_rate=22050:duration=0.4',
      '-ac',
      '2',
      ...c.args,
      'pipe:1',
    ]);
    const input = { encoding: c.encoding, sampleRate: 22050, channels: 2 };
    const out = await run(raw, { input }, 1001);
    assert.equal(out.format?.decoder, 'raw');
    const ref = await reference(raw, 16000, 1, [...c.args, '-ar', '22050', '-ac', '2']);
    assert.ok(Math.abs(ms(out.pcm.length) - ms(ref.length)) <= 1, `${c.encoding} length`);
    assert.ok(snr(ref, out.pcm) > 30, `${c.encoding}: SNR ${snr(ref, out.pcm).toFixed(1)} dB`);
    // ffmpeg: 'always' decodes the same declared format with ffmpeg.
    const viaFfmpeg = await run(raw, { input, ffmpeg: 'always' });
    assert.equal(viaFfmpeg.format?.decoder, 'ffmpeg');
    assert.ok(Math.abs(viaFfmpeg.pcm.length - ref.length) <= 4);
  }
});

test('raw PCM that ends inside a sample frame is an error, not dropped (in-process and through ffmpeg)', async () => {
  const input = { encoding: 's16le', sampleRate: 16000, channels: 2 } as const;
  for (const ffmpegMode of ['fallback', 'always'] as const) {
    await assert.rejects(
      run(Buffer.alloc(4002), { input, ffmpeg: ffmpegMode }, 1001),
      (err: MediaError) => err.code === 'ERR_MEDIA_TRUNCATED',
      ffmpegMode,
    );
  }
  // Whole frames through ffmpeg, however the input is split.
  const whole = await run(Buffer.alloc(4000), { input, ffmpeg: 'always' }, 1001);
  assert.equal(whole.pcm.length, 2000);
});

test('a file ffmpeg decodes only in part warns with its words, or fails with decodeErrors: fail', async () => {
  const flac = await sineFile({ seconds: 3, rate: 44100, codec: 'flac', format: 'flac' });
  const cut = flac.subarray(0, Math.floor(flac.length * 0.6) + 1);
  await assert.rejects(
    run(cut, { decodeErrors: 'fail' }),
    (err: MediaError) => err.code === 'ERR_MEDIA_FORMAT' && /ffmpeg skipped/.test(err.message),
  );
  const d = decode();
  const warnings: MediaError[] = [];
  d.on('warning', (w: MediaError) => warnings.push(w));
  const parts: Buffer[] = [];
  await pipeline(
    Readable.from([cut]),
    d,
    new Writable({
      write(c: Buffer, _e, cb) {
        parts.push(c);
        cb();
      },
    }),
  );
  assert.equal(warnings.length, 1);
  assert.equal(warnings[0]!.code, 'ERR_MEDIA_FORMAT');
  const seconds = Buffer.concat(parts).length / 32000;
  assert.ok(seconds > 1 && seconds < 3, `${seconds} s decoded before the cut`);
});

test('a cut file ffmpeg decodes without a word (MP3 with a LAME tag, ADPCM WAV, Ogg Vorbis) warns ERR_MEDIA_TRUNCATED, or fails', async () => {
  // Written to files: to a pipe ffmpeg can write neither the LAME tag's length nor the WAV sizes.
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  const written = async (name: string, codec: string) => {
    const path = join(dir, name);
    await ffmpeg(['-f', 'lavfi', '-i', 'sine=duration=3', '-c:a', codec, '-y', path]);
    return readFileSync(path);
  };
  const files: Array<[string, Buffer]> = [
    ['mp3', await written('a.mp3', 'libmp3lame')],
    ['adpcm wav', await written('a.wav', 'adpcm_ms')],
    ['ogg vorbis', await written('a.ogg', 'libvorbis')],
  ];
  rmSync(dir, { recursive: true, force: true });
  for (const [name, file] of files) {
    const { warnings: wholeWarnings } = await run(file, {}, 999);
    assert.deepEqual(wholeWarnings, [], `${name}: whole`);
    const cut = file.subarray(0, Math.floor(file.length * 0.6) + 7);
    const { warnings } = await run(cut, {}, 999);
    assert.deepEqual(
      warnings.map((w) => w.code),
      ['ERR_MEDIA_TRUNCATED'],
      `${name}: ${warnings.map((w) => w.message)}`,
    );
    await assert.rejects(
      run(cut, { decodeErrors: 'fail' }),
      (err: MediaError) => err.code === 'ERR_MEDIA_TRUNCATED' && /cut file/.test(err.message),
      name,
    );
  }
});

test('a FLAC short of its STREAMINFO length (cut on a frame boundary, which ffmpeg decodes without a word) warns ERR_MEDIA_TRUNCATED, or fails', async () => {
  // Written to a file: to a pipe ffmpeg cannot write the total samples (0, unknown, is not judged).
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  const path = join(dir, 'a.flac');
  await ffmpeg(['-f', 'lavfi', '-i', 'sine=duration=3:sample_rate=44100', '-c:a', 'flac', '-y', path]);
  const file = readFileSync(path);
  rmSync(dir, { recursive: true, force: true });
  assert.deepEqual(sniffAudio(file, false), {
    kind: 'ffmpeg',
    flac: { sampleRate: 44100, samples: 3 * 44100 },
  });
  const { warnings: wholeWarnings } = await run(file, {}, 999);
  assert.deepEqual(wholeWarnings, []);
  // Every frame whole, the last ones missing: the header declaring 5 s of these 3 s is the same
  // input as a 5 s file cut on a frame boundary.
  const cut = Buffer.from(file);
  cut[21] = (cut[21]! & 0xf0) | 0;
  cut.writeUInt32BE(5 * 44100, 22);
  const { warnings } = await run(cut, {}, 999);
  assert.deepEqual(
    warnings.map((w) => w.code),
    ['ERR_MEDIA_TRUNCATED'],
    warnings.map((w) => w.message).join(),
  );
  await assert.rejects(
    run(cut, { decodeErrors: 'fail' }),
    (err: MediaError) =>
      err.code === 'ERR_MEDIA_TRUNCATED' && /FLAC decoded to 3000 ms, 5000 ms/.test(err.message),
  );
  // A stream's FLAC (total samples 0) is not judged.
  const piped = await sineFile({ seconds: 1, rate: 16000, codec: 'flac', format: 'flac' });
  assert.deepEqual(sniffAudio(piped, false), { kind: 'ffmpeg' });
  assert.equal((await run(piped, { decodeErrors: 'fail' })).pcm.length, 32000);
});

test('an MP4 with its index first, cut in its media data (which ffmpeg decodes without a word), warns ERR_MEDIA_TRUNCATED, or fails', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  const path = join(dir, 'a.m4a');
  await ffmpeg([
    '-f',
    'lavfi',
    '-i',
    'sine=duration=3',
    '-c:a',
    'aac',
    '-movflags',
    '+faststart',
    '-y',
    path,
  ]);
  const file = readFileSync(path);
  rmSync(dir, { recursive: true, force: true });
  const { warnings: wholeWarnings } = await run(file, {}, 999);
  assert.deepEqual(wholeWarnings, []);
  // (ffmpeg may also complain of the last frame, cut inside; cut between frames it says nothing.)
  const cut = file.subarray(0, Math.floor(file.length * 0.6));
  const { warnings } = await run(cut, {}, 999);
  assert.equal(warnings[0]?.code, 'ERR_MEDIA_TRUNCATED', warnings.map((w) => w.message).join());
  await assert.rejects(
    run(cut, { decodeErrors: 'fail' }),
    (err: MediaError) =>
      err.code === 'ERR_MEDIA_TRUNCATED' && /MP4 input ends inside a box/.test(err.message),
  );
});

test('property: Mp4BoxWalker says whether any split of boxes (32- and 64-bit sizes) ends inside one', () => {
  const box = (type: string, body: number, large = false) => {
    const head = Buffer.alloc(large ? 16 : 8);
    head.writeUInt32BE(large ? 1 : 8 + body, 0);
    head.write(type, 4, 'latin1');
    if (large) head.writeBigUInt64BE(BigInt(16 + body), 8);
    return Buffer.concat([head, Buffer.alloc(body, 7)]);
  };
  const boxes = [box('ftyp', 12), box('moov', 300), box('mdat', 5000, true), box('free', 0)];
  const file = Buffer.concat(boxes);
  const ends = new Set<number>([0]);
  let end = 0;
  for (const b of boxes) {
    end += b.length;
    ends.add(end);
  }
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: file.length }),
      fc.integer({ min: 1, max: 400 }),
      (length, chunk) => {
        const walker = new Mp4BoxWalker();
        for (const part of chunksOf(file.subarray(0, length), chunk)) walker.push(part);
        assert.equal(walker.inside, !ends.has(length), `length ${length}`);
      },
    ),
  );
  // A box running to the end of the input (size 0) is not judged.
  const open = Buffer.concat([box('ftyp', 12), Buffer.from([0, 0, 0, 0, 0x6d, 0x64, 0x61, 0x74, 1, 2])]);
  const walker = new Mp4BoxWalker();
  walker.push(open);
  assert.equal(walker.inside, false);
});

test('property: OggPageWalker says whether any split of an Ogg file ends inside a page', async () => {
  const ogg = await sineFile({ seconds: 0.5, rate: 44100, codec: 'libvorbis', format: 'ogg' });
  const boundaries = new Set([...oggPageOffsets(ogg), ogg.length]);
  fc.assert(
    fc.property(fc.integer({ min: 1, max: ogg.length }), cutsFor(ogg.length), (end, cuts) => {
      const walker = new OggPageWalker();
      for (const chunk of splitAt(
        ogg.subarray(0, end),
        cuts.filter((c) => c < end),
      ))
        walker.push(chunk);
      assert.equal(walker.inside, !boundaries.has(end), `cut at ${end}`);
    }),
    { numRuns: 200 },
  );
  const junk = new OggPageWalker();
  junk.push(Buffer.from('not an Ogg page at all, but long enough'));
  assert.equal(junk.inside, false, 'no verdict on what is not Ogg');
});

async function opusFile(
  format: 'ogg' | 'webm',
  extra: string[] = [],
  seconds = 2.37,
  channels = 1,
): Promise<Buffer> {
  return ffmpeg([
    '-f',
    'lavfi',
    '-i',
    `sine=frequency=660:sample_rate=48000:duration=${seconds}`,
    '-ac',
    String(channels),
    '-c:a',
    'libopus',
    ...extra,
    '-f',
    format,
    'pipe:1',
  ]);
}

test('Ogg Opus and WebM Opus decode in-process (no ffmpeg) to the duration ffmpeg gives', async () => {
  const inputs: Array<[string, Buffer, DecodeFormatEvent['decoder']]> = [
    ['ogg mono', await opusFile('ogg'), 'ogg-opus'],
    ['ogg stereo', await opusFile('ogg', [], 1.5, 2), 'ogg-opus'],
    ['webm to a pipe (unknown sizes)', await opusFile('webm'), 'webm-opus'],
    ['webm stereo', await opusFile('webm', [], 1.5, 2), 'webm-opus'],
    // Pages of 255 segments: packets continue across pages (prism-media's demuxer stalls here).
    [
      'ogg continued packets',
      await opusFile('ogg', ['-b:a', '400k', '-page_duration', '5000000'], 3, 2),
      'ogg-opus',
    ],
    ['ogg 60 ms frames', await opusFile('ogg', ['-frame_duration', '60']), 'ogg-opus'],
  ];
  for (const [name, file, decoder] of inputs) {
    const out = await run(file, {}, 1500);
    assert.equal(out.format?.decoder, decoder, name);
    assert.equal(out.pids.length, 0, `${name}: no ffmpeg`);
    const ref = await reference(file);
    const diff = Math.abs(ms(out.pcm.length) - ms(ref.length));
    assert.ok(diff <= 1, `${name}: ${ms(out.pcm.length)} ms vs ffmpeg ${ms(ref.length)} ms`);
    assert.ok(snr(ref, out.pcm) > 25, `${name}: SNR ${snr(ref, out.pcm).toFixed(1)} dB against ffmpeg`);
  }
});

test('property: the Ogg and WebM demuxers give the same packets however the bytes are split', async () => {
  for (const [format, make] of [
    ['ogg', () => new OggOpusDemuxer()],
    ['webm', () => new WebmOpusDemuxer()],
  ] as const) {
    const file = await opusFile(format, ['-b:a', '64k'], 0.5);
    const packets = (d: OggOpusDemuxer | WebmOpusDemuxer, chunks: Buffer[]) => {
      const items = chunks.flatMap((c) => d.push(c));
      items.push(...(d.end() ?? []));
      return items.map((i) => (i.kind === 'packet' ? i.data.toString('hex') : JSON.stringify(i)));
    };
    const whole = packets(make(), [file]);
    assert.ok(whole.length > 20);
    fc.assert(
      fc.property(cutsFor(file.length), (cuts) => {
        assert.deepEqual(packets(make(), splitAt(file, cuts)), whole);
      }),
      { numRuns: 100 },
    );
  }
});

test('property: decode() output does not depend on how the input is split (WAV, raw, Ogg Opus)', async () => {
  const inputs: Array<[Buffer, DecodeOptions]> = [
    [await sineFile({ seconds: 0.3, rate: 44100, channels: 2, codec: 'pcm_s24le' }), {}],
    [await sineFile({ seconds: 0.3, rate: 8000, channels: 1, codec: 'pcm_mulaw' }), {}],
    [
      await ffmpeg(['-f', 'lavfi', '-i', 'sine=sample_rate=22050:duration=0.3', '-f', 'f32le', 'pipe:1']),
      { input: { encoding: 'f32le', sampleRate: 22050, channels: 1 } },
    ],
    [await opusFile('ogg', [], 0.4), {}],
  ];
  for (const [file, options] of inputs) {
    const whole = (await run(file, options, file.length)).pcm;
    await fc.assert(
      fc.asyncProperty(cutsFor(file.length), async (cuts) => {
        const parts: Buffer[] = [];
        await pipeline(
          Readable.from(splitAt(file, cuts)),
          decode(options),
          new Writable({
            write(c: Buffer, _e, cb) {
              parts.push(c);
              cb();
            },
          }),
        );
        assert.ok(Buffer.concat(parts).equals(whole));
      }),
      { numRuns: 25 },
    );
  }
});

test('cut or corrupt Opus input fails with MediaError', async () => {
  const ogg = await opusFile('ogg');
  await assert.rejects(
    run(ogg.subarray(0, ogg.length - 100)),
    (e: MediaError) => e.code === 'ERR_MEDIA_TRUNCATED',
  );
  const flipped = Buffer.from(ogg);
  flipped[Math.floor(ogg.length / 2)]! ^= 0x40;
  await assert.rejects(
    run(flipped),
    (e: MediaError) => e.code === 'ERR_MEDIA_FORMAT' && /checksum/.test(e.message),
  );
  const webm = await opusFile('webm');
  await assert.rejects(
    run(webm.subarray(0, webm.length - 37)),
    (e: MediaError) => e.code === 'ERR_MEDIA_TRUNCATED',
  );
});

/** Byte offsets of the Ogg pages of `ogg`. */
function oggPageOffsets(ogg: Buffer): number[] {
  const offsets: number[] = [];
  for (let at = 0; at < ogg.length; ) {
    offsets.push(at);
    const segments = ogg[at + 26]!;
    let body = 0;
    for (let i = 0; i < segments; i++) body += ogg[at + 27 + i]!;
    at += 27 + segments + body;
  }
  return offsets;
}

test('chained Ogg Opus: a link cut before its EOS page is followed by the next link, not the end of the audio', async () => {
  const first = await opusFile('ogg', [], 1);
  const second = await opusFile('ogg', [], 1.5);
  // A recording cut short (its last page is whole, but no EOS page came), another appended.
  const cut = Buffer.from(first);
  const last = oggPageOffsets(cut).at(-1)!;
  assert.equal(cut[last + 5]! & 4, 4);
  cut[last + 5]! &= ~4;
  cut.writeUInt32LE(oggCrc(cut.subarray(last)), last + 22);
  const whole = (await run(Buffer.concat([first, second]), { sampleRate: 48000 })).pcm;
  const out = await run(Buffer.concat([cut, second]), { sampleRate: 48000 });
  assert.equal(out.format?.decoder, 'ogg-opus');
  assert.equal(ms(out.pcm.length, 48000), 2500, 'both links decoded');
  assert.ok(out.pcm.equals(whole));
});

test('a cut WAV is an error, not dropped: inside a sample, or on a sample boundary before its declared size', async () => {
  const wav = await sineFile({ seconds: 0.1, rate: 8000, channels: 2, codec: 'pcm_s24le' });
  const truncated = (err: unknown) => err instanceof MediaError && err.code === 'ERR_MEDIA_TRUNCATED';
  await assert.rejects(run(wav.subarray(0, wav.length - 2)), truncated);
  // ffmpeg wrote that one to a pipe (sizes unknown); this one declares its size.
  const sized = encodeWav(Buffer.alloc(1600, 7), 8000);
  await assert.rejects(run(sized.subarray(0, sized.length - 200)), (err: unknown) => {
    return truncated(err) && /cut file/.test((err as Error).message);
  });
  assert.equal((await run(sized)).pcm.length, 1600 * 2, 'the whole file decodes (8 to 16 kHz)');
});

test('compressed formats go through ffmpeg and keep their duration (mp3 gapless, m4a index at the end)', async () => {
  const cases: Array<[string, string[]]> = [
    ['mp3', ['-c:a', 'libmp3lame', '-f', 'mp3']],
    ['flac', ['-c:a', 'flac', '-f', 'flac']],
    ['m4a (moov after mdat)', ['-c:a', 'aac', '-f', 'ipod']],
    ['adts aac', ['-c:a', 'aac', '-f', 'adts']],
    ['ogg vorbis', ['-c:a', 'libvorbis', '-f', 'ogg']],
  ];
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  try {
    for (const [name, args] of cases) {
      // Written to a file, as encoders do: the MP3 gets its LAME tag, the M4A its index at the end.
      const path = join(dir, `x-${cases.findIndex((c) => c[0] === name)}`);
      await ffmpeg([
        '-f',
        'lavfi',
        '-i',
        'sine=frequency=440:sample_rate=44100:duration=3.21',
        '-ac',
        '2',
        ...args,
        '-y',
        path,
      ]);
      const file = Buffer.from((await import('node:fs')).readFileSync(path));
      const out = await run(file);
      assert.equal(out.format?.decoder, 'ffmpeg', name);
      assert.equal(out.pids.length, 1);
      const ref = await ffmpeg(['-i', path, '-f', 's16le', '-ar', '16000', '-ac', '1', 'pipe:1']);
      const diff = Math.abs(ms(out.pcm.length) - ms(ref.length));
      assert.ok(diff <= 10, `${name}: ${ms(out.pcm.length)} ms vs ${ms(ref.length)} ms`);
      assert.ok(snr(ref, out.pcm) > 30, `${name}: SNR ${snr(ref, out.pcm).toFixed(1)}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('sniffing: an MP4 with its index first streams, with it last is spooled to a file', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  try {
    const path = join(dir, 'a.m4a');
    const fast = join(dir, 'b.m4a');
    await ffmpeg(['-f', 'lavfi', '-i', 'sine=duration=0.5', '-c:a', 'aac', '-y', path]);
    await ffmpeg(['-i', path, '-c', 'copy', '-movflags', '+faststart', '-y', fast]);
    const { readFileSync } = await import('node:fs');
    assert.deepEqual(sniffAudio(readFileSync(path), true), { kind: 'ffmpeg', needsFile: true });
    assert.deepEqual(sniffAudio(readFileSync(fast), true), { kind: 'ffmpeg' });
    assert.deepEqual(sniffAudio(Buffer.from('RIFF'), false), { kind: 'more' });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('output rate and channels are selectable', async () => {
  const wav = await sineFile({ seconds: 0.5, rate: 44100, channels: 1, codec: 'pcm_s16le' });
  const out = await run(wav, { sampleRate: 8000, channels: 2 });
  assert.equal(out.pcm.length, 0.5 * 8000 * 2 * 2);
  for (let i = 0; i < out.pcm.length; i += 4)
    assert.equal(out.pcm.readInt16LE(i), out.pcm.readInt16LE(i + 2));
  const mp3 = await sineFile({ seconds: 0.5, rate: 44100, codec: 'libmp3lame', format: 'mp3' });
  const viaFfmpeg = await run(mp3, { sampleRate: 24000, channels: 2 });
  assert.ok(Math.abs(ms(viaFfmpeg.pcm.length, 24000, 2) - 500) < 60);
});

test('empty input is an error; ffmpeg: "never" refuses what needs ffmpeg', async () => {
  await assert.rejects(run(Buffer.alloc(0)), (e: MediaError) => e.code === 'ERR_MEDIA_FORMAT');
  const mp3 = await sineFile({ seconds: 0.2, rate: 16000, codec: 'libmp3lame', format: 'mp3' });
  await assert.rejects(run(mp3, { ffmpeg: 'never' }), MediaError);
});

test('a missing ffmpeg (FFMPEG_PATH=/nonexistent) is FfmpegNotFoundError; WAV needs no ffmpeg', async (t) => {
  const saved = process.env.FFMPEG_PATH;
  process.env.FFMPEG_PATH = '/nonexistent';
  t.after(() => {
    if (saved === undefined) delete process.env.FFMPEG_PATH;
    else process.env.FFMPEG_PATH = saved;
  });
  const mp3 = await sineFile({ seconds: 0.2, rate: 16000, codec: 'libmp3lame', format: 'mp3' });
  const wav = await sineFile({ seconds: 0.2, rate: 16000, codec: 'pcm_s16le' });
  await assert.rejects(run(mp3), FfmpegNotFoundError);
  assert.equal((await run(wav)).pcm.length, 6400);
});

test('corrupt input: ffmpeg exit code and stderr tail become the error; the child is gone', async () => {
  const garbage = Buffer.alloc(64 * 1024);
  for (let i = 0; i < garbage.length; i++) garbage[i] = (i * 7919) & 0xff;
  const d = decode();
  let pid = 0;
  d.on('spawn', (p: number) => {
    pid = p;
  });
  d.resume();
  d.end(garbage);
  await assert.rejects(finished(d), (err: FfmpegError) => {
    assert.ok(err instanceof FfmpegError);
    assert.notEqual(err.exitCode, 0);
    assert.ok(err.stderr.length > 0, 'stderr tail kept');
    return true;
  });
  assert.ok(pid > 0);
  assert.equal(alive(pid), false);
});

async function longMp3(seconds: number): Promise<Buffer> {
  return ffmpeg([
    '-f',
    'lavfi',
    '-i',
    `sine=duration=${seconds}`,
    '-c:a',
    'libmp3lame',
    '-f',
    'mp3',
    'pipe:1',
  ]);
}

test('abort mid-stream stops ffmpeg and leaves no process', async () => {
  const mp3 = await longMp3(30);
  const abort = new AbortController();
  const d = decode({ signal: abort.signal });
  let pid = 0;
  d.on('spawn', (p: number) => {
    pid = p;
  });
  d.write(mp3.subarray(0, 64 * 1024));
  d.once('data', () => abort.abort());
  await assert.rejects(finished(d), { name: 'AbortError' });
  await new Promise((resolve) => (d.closed ? resolve(null) : d.once('close', resolve)));
  assert.ok(pid > 0);
  assert.equal(alive(pid), false, 'ffmpeg was reaped before the stream closed');
});

test('destroy reaps a child that ignores SIGTERM (SIGKILL after the grace period)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const stubborn = join(dir, 'ffmpeg');
  // Answers the build-configuration question, then is one process that ignores SIGTERM.
  writeFileSync(
    stubborn,
    '#!/bin/sh\nfor a; do [ "$a" = -buildconf ] && exit 0; done\ntrap \'\' TERM\nexec sleep 60\n',
  );
  chmodSync(stubborn, 0o755);
  const d = decode({ ffmpegPath: stubborn, killGraceMs: 100 });
  let pid = 0;
  d.on('spawn', (p: number) => {
    pid = p;
  });
  d.write(Buffer.from('not audio at all, so ffmpeg is used'));
  await new Promise((resolve) => d.once('spawn', resolve));
  d.destroy();
  await new Promise((resolve) => d.once('close', resolve));
  assert.ok(pid > 0);
  assert.equal(alive(pid), false);
});

test('backpressure both ways on the ffmpeg path: a reader that stops stops the writer', async () => {
  const flac = await ffmpeg([
    '-f',
    'lavfi',
    '-i',
    'anoisesrc=duration=30:sample_rate=48000',
    '-ac',
    '2',
    '-c:a',
    'flac',
    '-f',
    'flac',
    'pipe:1',
  ]);
  const d = decode();
  const chunks = chunksOf(flac, 64 * 1024);
  let written = 0;
  // Nobody reads: ffmpeg's output fills our buffer, its stdin stops draining, and so do we.
  for (const chunk of chunks) {
    if (d.write(chunk)) {
      written++;
      continue;
    }
    const drained = await Promise.race([
      new Promise((resolve) => d.once('drain', () => resolve(true))),
      new Promise((resolve) => setTimeout(resolve, 1000, false)),
    ]);
    if (!drained) break;
    written++;
  }
  assert.ok(
    written < chunks.length / 2,
    `the writer kept going without a reader (${written} of ${chunks.length})`,
  );
  assert.ok(d.readableLength <= d.readableHighWaterMark + 128 * 1024, `buffered ${d.readableLength} bytes`);
  // A reader appears: everything flows to the end.
  let out = 0;
  d.on('data', (c: Buffer) => {
    out += c.length;
  });
  for (const chunk of chunks.slice(written + 1))
    if (!d.write(chunk)) await new Promise((r) => d.once('drain', r));
  d.end();
  await finished(d);
  assert.ok(Math.abs(ms(out) - 30_000) < 50, `decoded ${ms(out)} ms`);
});

/** Resolves with the outcome of `promise`, or 'hung' after `ms` (the timer is cleared either way). */
async function settleWithin<T>(promise: Promise<T>, ms: number): Promise<T | Error | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => {
    timer = setTimeout(resolve, ms, 'hung');
  });
  try {
    return await Promise.race([promise.catch((err: Error) => err), hung]);
  } finally {
    clearTimeout(timer);
  }
}

test('a reader that stalls, then fails, fails the pipeline and leaves no ffmpeg (file source)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'noise.flac');
  await ffmpeg(['-f', 'lavfi', '-i', 'anoisesrc=duration=30:sample_rate=48000', '-c:a', 'flac', '-y', path]);
  const d = decode();
  let pid = 0;
  d.on('spawn', (p: number) => {
    pid = p;
  });
  const failure = new Error('the sink gave up');
  // Takes the first chunk and never acknowledges it; 1.5 s later it fails.
  const stalled = new Writable({
    write(_chunk: Buffer, _encoding, callback) {
      setTimeout(() => callback(failure), 1500);
    },
  });
  const outcome = await settleWithin(pipeline(createReadStream(path), d, stalled), 20_000);
  assert.notEqual(outcome, 'hung', 'the pipeline never settled');
  assert.equal(outcome, failure);
  assert.ok(pid > 0);
  assert.equal(alive(pid), false, 'ffmpeg was reaped');
});

test('ffmpeg that exits 0 before reading all the input ends the stream (the rest is not waited for)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const early = join(dir, 'ffmpeg');
  // Answers the build-configuration question; otherwise reads 1000 bytes and exits 0.
  writeFileSync(
    early,
    '#!/bin/sh\nfor a; do [ "$a" = -buildconf ] && exit 0; done\nhead -c 1000 >/dev/null\nexit 0\n',
  );
  chmodSync(early, 0o755);
  const input = Buffer.alloc(4 * 1024 * 1024, 0x5a); // not audio: ffmpeg's path, more than a pipe holds
  const outcome = await settleWithin(run(input, { ffmpegPath: early }, 64 * 1024), 20_000);
  assert.notEqual(outcome, 'hung', 'decode() waited for a drain that could not come');
  assert.ok(!(outcome instanceof Error), `failed: ${outcome}`);
  assert.equal((outcome as Decoded).pcm.length, 0);
  assert.equal((outcome as Decoded).pids.length, 1);
});

test('MP3 gapless trimming cuts only the end padding: concatenated MP3s decode whole', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const one = join(dir, 'one.mp3');
  // Written to a file, so it has its LAME tag: 3 s exactly, padding after.
  await ffmpeg(
    ['-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=44100:duration=3', '-ac', '2'].concat([
      '-c:a',
      'libmp3lame',
      '-y',
      one,
    ]),
  );
  const single = readFileSync(one);
  const two = join(dir, 'two.mp3');
  writeFileSync(two, Buffer.concat([single, single])); // `cat one.mp3 one.mp3`
  // One file: the gapless length to the sample (ffmpeg from a pipe keeps the padding).
  assert.equal((await run(single)).pcm.length, 3 * 16000 * 2);
  // Two: everything ffmpeg decodes from the file (6.03 s), not the first file's length.
  const out = await run(readFileSync(two));
  const ref = await ffmpeg(['-i', two, '-f', 's16le', '-ar', '16000', '-ac', '1', 'pipe:1']);
  assert.ok(ms(ref.length) > 6000, `ffmpeg decodes ${ms(ref.length)} ms`);
  assert.ok(
    Math.abs(ms(out.pcm.length) - ms(ref.length)) <= 1,
    `${ms(out.pcm.length)} ms vs ${ms(ref.length)} ms`,
  );
});

test('a WAV header claiming more than 512 channels is a MediaError, not half a GiB of resampler history', async () => {
  const header = (channels: number) => {
    const h = encodeWav(Buffer.alloc(0), 44100, 1);
    h.writeUInt32LE(0xffffffff, 40); // streaming: to the end of input
    h.writeUInt16LE(channels, 22);
    // 8-bit: one byte a sample, so 65535 channels still fit the block align field.
    h.writeUInt32LE(44100 * channels, 28);
    h.writeUInt16LE(channels, 32);
    h.writeUInt16LE(8, 34);
    return h;
  };
  const frames = (channels: number) => Buffer.alloc(channels * 4, 128);
  await assert.rejects(
    run(Buffer.concat([header(65535), frames(65535)])),
    (e: MediaError) =>
      e instanceof MediaError && e.code === 'ERR_MEDIA_FORMAT' && /65535 channels/.test(e.message),
  );
  const many = await run(Buffer.concat([header(512), frames(512)]), {}, 1 << 20);
  assert.equal(many.format?.decoder, 'wav');
});

test('a WAV header with a rate the resampler refuses (999999999 Hz) is a MediaError, not a RangeError', async () => {
  const wav = encodeWav(Buffer.alloc(64), 16000, 1);
  wav.writeUInt32LE(999_999_999, 24);
  wav.writeUInt32LE(999_999_999 * 2, 28);
  await assert.rejects(
    run(wav),
    (e: MediaError) =>
      e instanceof MediaError && e.code === 'ERR_MEDIA_FORMAT' && /999999999 Hz/.test(e.message),
  );
});

test('a WAV header more than 64 times below the output rate (1 Hz) is a MediaError, not one GiB chunk', async () => {
  for (const rate of [1, 249]) {
    const wav = encodeWav(Buffer.alloc(64 * 1024), rate, 1);
    await assert.rejects(
      run(wav, {}, wav.length),
      (e: MediaError) =>
        e instanceof MediaError && e.code === 'ERR_MEDIA_FORMAT' && e.message.includes(`WAV at ${rate} Hz`),
      `${rate} Hz`,
    );
  }
  // 64 times below the output is still decoded (250 Hz to 16 kHz).
  const low = await run(encodeWav(Buffer.alloc(500), 250, 1));
  assert.equal(low.pcm.length, 250 * 64 * 2);
});

test('inputs of 0 to 11 bytes fail with a typed error, never a RangeError', async () => {
  const prefixes = [
    Buffer.alloc(12),
    Buffer.from('RIFF\x24\x00\x00\x00WAVE', 'latin1'),
    Buffer.from('OggS\x00\x02\x00\x00\x00\x00\x00\x00', 'latin1'),
    Buffer.from([0x1a, 0x45, 0xdf, 0xa3, 0x9f, 0x42, 0x86, 0x81, 0x01, 0x42, 0xf7, 0x81]),
    Buffer.from('ID3\x04\x00\x00\x00\x00\x00\x00\x00\x00', 'latin1'),
    Buffer.from([0xff, 0xfb, 0x90, 0x64, 0, 0, 0, 0, 0, 0, 0, 0]),
  ];
  const cases = prefixes.flatMap((prefix) =>
    Array.from({ length: 12 }, (_, n) =>
      (['fallback', 'never'] as const).map((mode) => ({ input: prefix.subarray(0, n), n, mode, prefix })),
    ).flat(),
  );
  const check = async ({ input, n, mode, prefix }: (typeof cases)[number]) => {
    const what = `${n} bytes of ${prefix.subarray(0, 4).toString('hex')} (ffmpeg: ${mode})`;
    await assert.rejects(
      run(input, { ffmpeg: mode }),
      (err: Error & { code?: string }) => {
        assert.ok(err instanceof MediaError || err instanceof FfmpegError, `${what}: ${err}`);
        if (mode === 'never' || n === 0) assert.equal(err.code, 'ERR_MEDIA_FORMAT', what);
        return true;
      },
      what,
    );
  };
  // Most of the fallback cases start an ffmpeg that refuses the bytes: a few at a time.
  const queue = [...cases];
  const worker = async () => {
    for (let c = queue.shift(); c; c = queue.shift()) await check(c);
  };
  // Every case is settled before the test ends, a failing one too (no ffmpeg left running).
  const failed = (await Promise.allSettled(Array.from({ length: 6 }, worker))).find(
    (r) => r.status === 'rejected',
  );
  if (failed) throw failed.reason;
});

test('property: sniffAudio decides or asks for more on any bytes, and never throws', () => {
  const magic = fc.constantFrom(
    '',
    'RIFF',
    'OggS',
    '\x1a\x45\xdf\xa3',
    'ID3',
    '\xff\xfb',
    '\x00\x00\x00\x18ftyp',
  );
  fc.assert(
    fc.property(magic, fc.uint8Array({ maxLength: 400 }), fc.boolean(), (m, rest, ended) => {
      const head = Buffer.concat([Buffer.from(m, 'latin1'), rest]);
      const result = sniffAudio(head, ended);
      if (ended) assert.notEqual(result.kind, 'more');
    }),
    { numRuns: 2000 },
  );
});

/** One Ogg page of `serial` holding `segments` (lacing values) over `body`, with its checksum. */
function oggPage(flags: number, serial: number, sequence: number, lacing: number[], body: Buffer): Buffer {
  const page = Buffer.alloc(27 + lacing.length + body.length);
  page.write('OggS', 0, 'latin1');
  page[5] = flags;
  page.writeBigInt64LE(-1n, 6);
  page.writeUInt32LE(serial, 14);
  page.writeUInt32LE(sequence, 18);
  page[26] = lacing.length;
  Buffer.from(lacing).copy(page, 27);
  body.copy(page, 27 + lacing.length);
  page.writeUInt32LE(oggCrc(page), 22);
  return page;
}

test('Ogg: a packet continued over page after page fails at the packet limit instead of growing', () => {
  const head = Buffer.from('OpusHead\x01\x01\x38\x01\x80\xbb\x00\x00\x00\x00\x00', 'latin1');
  const tags = Buffer.from('OpusTags\x00\x00\x00\x00\x00\x00\x00\x00', 'latin1');
  const full = Buffer.alloc(255 * 255); // 255 segments of 255 bytes: the packet goes on
  const demuxer = new OggOpusDemuxer({ maxPacketBytes: 200_000 });
  demuxer.push(oggPage(2, 7, 0, [head.length], head));
  demuxer.push(oggPage(0, 7, 1, [tags.length], tags));
  demuxer.push(oggPage(0, 7, 2, new Array(255).fill(255), full));
  demuxer.push(oggPage(1, 7, 3, new Array(255).fill(255), full));
  demuxer.push(oggPage(1, 7, 4, new Array(255).fill(255), full));
  assert.throws(
    () => demuxer.push(oggPage(1, 7, 5, new Array(255).fill(255), full)),
    (e: MediaError) => e instanceof MediaError && e.code === 'ERR_MEDIA_FORMAT' && /packet/.test(e.message),
  );
});

test('sniffing is linear in the head: byte-sized writes do not copy or re-parse it again and again', async (t) => {
  // A WebM head that never reaches its Tracks: EBML, a Segment of unknown size, then 2-byte
  // Void elements. decode() keeps asking for more (up to the 1 MiB sniff limit).
  const head = Buffer.concat([
    Buffer.from([0x1a, 0x45, 0xdf, 0xa3, 0x80, 0x18, 0x53, 0x80, 0x67, 0xff]),
    Buffer.alloc(64 * 1024, Buffer.from([0xec, 0x80])),
  ]);
  const concat = t.mock.method(Buffer, 'concat');
  const parse = t.mock.method(WebmOpusDemuxer.prototype, 'push');
  const d = decode();
  for (const chunk of chunksOf(head, 64)) d.write(chunk);
  await new Promise((resolve) => setImmediate(resolve));
  const copied = concat.mock.calls.reduce((n, c) => n + (c.result as Buffer).length, 0);
  const parsed = parse.mock.calls.reduce((n, c) => n + (c.arguments[0] as Uint8Array).length, 0);
  d.destroy();
  await new Promise((resolve) => d.once('close', resolve));
  assert.ok(copied <= 4 * head.length, `copied ${copied} bytes for a ${head.length}-byte head`);
  assert.ok(parsed <= 4 * head.length, `parsed ${parsed} bytes for a ${head.length}-byte head`);
});

test('the Ogg and WebM demuxers copy their input a bounded number of times however small the chunks', async (t) => {
  for (const [format, make] of [
    ['ogg', () => new OggOpusDemuxer()],
    ['webm', () => new WebmOpusDemuxer()],
  ] as const) {
    const file = await opusFile(format, ['-b:a', '128k'], 2);
    const concat = t.mock.method(Buffer, 'concat');
    const demuxer = make();
    let packets = 0;
    for (const chunk of chunksOf(file, 16)) packets += demuxer.push(chunk).length;
    demuxer.end();
    const copied = concat.mock.calls.reduce((n, c) => n + (c.result as Buffer).length, 0);
    concat.mock.restore();
    assert.ok(packets > 50, format);
    assert.ok(copied <= 3 * file.length, `${format}: ${copied} bytes copied for ${file.length}`);
  }
});
