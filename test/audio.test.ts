import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  ALAW_TO_PCM16,
  decodeWav,
  decodeWithFfmpeg,
  FfmpegError,
  FfmpegNotFoundError,
  MULAW_TO_PCM16,
  resolveFfmpeg,
  runFfmpeg,
  WavReader,
} from '../src/audio/index.ts';
import { encodeWav, ProtocolError, writeWavHeader } from '../src/index.ts';
import { cutsFor, splitAt } from './helpers/chunks.ts';
import { ffmpegPcm16, sineFile } from './helpers/ffmpeg.ts';

function maxDiff(a: Buffer, b: Buffer): number {
  assert.equal(a.length, b.length, 'same length');
  let max = 0;
  for (let i = 0; i < a.length; i += 2) max = Math.max(max, Math.abs(a.readInt16LE(i) - b.readInt16LE(i)));
  return max;
}

test('G.711 tables match ffmpeg exactly for every byte', async () => {
  const codes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  for (const [fmt, table] of [
    ['alaw', ALAW_TO_PCM16],
    ['mulaw', MULAW_TO_PCM16],
  ] as const) {
    const theirs = await ffmpegPcm16(codes, ['-f', fmt, '-ar', '8000', '-ac', '1']);
    for (let i = 0; i < 256; i++) assert.equal(table[i], theirs.readInt16LE(i * 2), `${fmt} byte ${i}`);
  }
});

test('WavReader decodes every WAV sample format as ffmpeg does', async () => {
  const cases = [
    { codec: 'pcm_s16le', tolerance: 0 },
    { codec: 'pcm_u8', tolerance: 0 },
    { codec: 'pcm_s24le', tolerance: 0 },
    { codec: 'pcm_s32le', tolerance: 0 },
    { codec: 'pcm_f32le', tolerance: 1 },
    { codec: 'pcm_f64le', tolerance: 1 },
    { codec: 'pcm_alaw', tolerance: 0 },
    { codec: 'pcm_mulaw', tolerance: 0 },
  ];
  for (const c of cases) {
    const wav = await sineFile({ seconds: 0.3, rate: 8000, channels: 2, codec: c.codec });
    const { info, pcm } = decodeWav(wav);
    assert.equal(info.channels, 2);
    assert.equal(info.sampleRate, 8000);
    const theirs = await ffmpegPcm16(wav);
    assert.ok(
      maxDiff(pcm, theirs) <= c.tolerance,
      `${c.codec}: differs from ffmpeg by ${maxDiff(pcm, theirs)}`,
    );
  }
});

test('property: WavReader output does not depend on read boundaries', async () => {
  const wav = await sineFile({ seconds: 0.05, rate: 8000, channels: 2, codec: 'pcm_s24le' });
  const whole = decodeWav(wav).pcm;
  fc.assert(
    fc.property(cutsFor(wav.length), (cuts) => {
      const reader = new WavReader();
      const out = Buffer.concat(splitAt(wav, cuts).map((c) => reader.push(c)));
      reader.end();
      assert.deepEqual(out, whole);
    }),
    { numRuns: 200 },
  );
});

test('WavReader: a partial sample at the end is an error, not dropped', () => {
  const streaming = Buffer.concat([writeWavHeader({ sampleRate: 8000 }), Buffer.alloc(10)]); // size unknown: to the end
  const reader = new WavReader();
  assert.equal(reader.push(streaming).length, 10);
  reader.push(Buffer.of(1));
  assert.throws(
    () => reader.end(),
    (err: unknown) => err instanceof ProtocolError && err.code === 'ERR_WAV_FORMAT',
  );
  assert.throws(() => new WavReader().end(), { code: 'ERR_WAV_FORMAT' });
});

test('WavReader: data that ends before its declared size is a cut file, an error after its samples', () => {
  const wav = encodeWav(Buffer.alloc(64, 3), 8000);
  const reader = new WavReader();
  // Cut on a sample boundary: nothing is left half, but 16 declared bytes never came.
  assert.deepEqual(reader.push(wav.subarray(0, wav.length - 16)), Buffer.alloc(48, 3));
  assert.throws(
    () => reader.end(),
    (err: unknown) =>
      err instanceof ProtocolError && err.code === 'ERR_WAV_FORMAT' && /48 of the 64 bytes/.test(err.message),
  );
  assert.throws(() => decodeWav(wav.subarray(0, wav.length - 2)), { code: 'ERR_WAV_FORMAT' });
  assert.deepEqual(decodeWav(wav).pcm, Buffer.alloc(64, 3), 'the whole file still decodes');
});

test('WavReader ignores bytes after the declared data chunk', () => {
  const wav = encodeWav(Buffer.alloc(64, 3), 8000);
  const withTrailer = Buffer.concat([wav, Buffer.from('LIST\x04\0\0\0abcd')]);
  assert.deepEqual(decodeWav(withTrailer).pcm, Buffer.alloc(64, 3));
});

test('resolveFfmpeg: FFMPEG_PATH first, a clear error when it is wrong', () => {
  const found = resolveFfmpeg({ env: { PATH: process.env.PATH } });
  assert.ok(existsSync(found.path));
  assert.equal(resolveFfmpeg({ env: { FFMPEG_PATH: found.path } }).source, 'FFMPEG_PATH');
  assert.throws(() => resolveFfmpeg({ env: { FFMPEG_PATH: '/nonexistent/ffmpeg' } }), FfmpegNotFoundError);
  assert.throws(
    () => resolveFfmpeg({ env: { PATH: '/nonexistent' }, loadFfmpegStatic: () => undefined }),
    (err: unknown) => {
      return (
        err instanceof FfmpegNotFoundError &&
        err.code === 'ERR_FFMPEG_NOT_FOUND' &&
        /FFMPEG_PATH/.test(err.message)
      );
    },
  );
});

test('resolveFfmpeg: FFMPEG_PATH, then ffmpeg-static only if its binary is really there, then the PATH', () => {
  const onPath = resolveFfmpeg({ env: { PATH: process.env.PATH }, loadFfmpegStatic: () => undefined });
  assert.equal(onPath.source, 'PATH');
  const bundled = { loadFfmpegStatic: () => onPath.path };
  // ffmpeg-static present and executable: it wins over the PATH, not over FFMPEG_PATH.
  assert.deepEqual(resolveFfmpeg({ env: { PATH: process.env.PATH }, ...bundled }), {
    path: onPath.path,
    source: 'ffmpeg-static',
  });
  assert.equal(
    resolveFfmpeg({ env: { FFMPEG_PATH: onPath.path, PATH: '' }, ...bundled }).source,
    'FFMPEG_PATH',
  );
  // Its download failed (a path to nothing), it is not installed (require throws), or it
  // exports something else: the PATH is next.
  for (const load of [
    () => '/nonexistent/ffmpeg-static/ffmpeg',
    () => {
      throw Object.assign(new Error("Cannot find module 'ffmpeg-static'"), { code: 'MODULE_NOT_FOUND' });
    },
    () => ({ path: onPath.path }),
  ]) {
    assert.equal(resolveFfmpeg({ env: { PATH: process.env.PATH }, loadFfmpegStatic: load }).source, 'PATH');
  }
});

test('runFfmpeg: a failing run rejects with exit code and stderr tail', async () => {
  const run = runFfmpeg(['-f', 'wav', '-i', 'pipe:0', '-f', 's16le', 'pipe:1']);
  run.stdout.resume();
  run.stdin.end(Buffer.from('this is not a wav file at all'));
  await assert.rejects(run.done, (err: unknown) => {
    return (
      err instanceof FfmpegError &&
      err.code === 'ERR_FFMPEG_FAILED' &&
      err.exitCode !== 0 &&
      err.stderr.length > 0
    );
  });
});

test('runFfmpeg: stop() ends an endless run and reaps the child', async () => {
  const run = runFfmpeg(['-re', '-f', 'lavfi', '-i', 'sine=frequency=440', '-f', 's16le', 'pipe:1'], {
    killGraceMs: 500,
  });
  await new Promise((resolve) => run.stdout.once('data', resolve));
  run.stdout.resume();
  run.stop();
  await assert.rejects(run.done, FfmpegError);
  assert.notEqual(run.child.exitCode ?? run.child.signalCode, null, 'child exited');
});

test('runFfmpeg: abort rejects with the abort reason and stops the child', async () => {
  const controller = new AbortController();
  const run = runFfmpeg(['-re', '-f', 'lavfi', '-i', 'sine', '-f', 's16le', 'pipe:1'], {
    signal: controller.signal,
  });
  run.stdout.resume();
  const reason = new Error('user cancelled');
  setTimeout(() => controller.abort(reason), 50);
  await assert.rejects(run.done, (err: unknown) => err === reason);
  assert.throws(
    () => runFfmpeg(['-version'], { signal: controller.signal }),
    (err: unknown) => err === reason,
  );
});

test('decodeWithFfmpeg: resample and downmix; maxOutputBytes stops early and says so', async () => {
  const mp3 = await sineFile({ seconds: 2, rate: 44100, channels: 2, codec: 'libmp3lame', format: 'mp3' });
  const full = await decodeWithFfmpeg(mp3, { sampleRate: 16000, channels: 1 });
  assert.equal(full.truncated, false);
  assert.ok(Math.abs(full.pcm.length / 32000 - 2) < 0.1, `${full.pcm.length / 32000} s`);
  const cut = await decodeWithFfmpeg(mp3, { sampleRate: 16000, channels: 1, maxOutputBytes: 16000 });
  assert.equal(cut.truncated, true);
  assert.equal(cut.pcm.length, 16000);
});
