// decode() against the plain ffmpeg command doing the same work (spawned, output discarded):
// the 107 s 48 kHz stereo MP3 to 16 kHz mono (target 0.9), and the in-process paths (WAV,
// Ogg Opus) against ffmpeg on the same files.

import { createReadStream, existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { decode } from '../src/index.ts';
import { benchTmp, discard, ffmpegTo, plainFfmpeg } from './audio-inputs.ts';
import { type Comparison, compare } from './harness.ts';

const media = resolve(
  process.env.SPEECHPIPE_MEDIA ?? new URL('../../shared/media', import.meta.url).pathname,
);

/** The MP3, or one like it (107 s, 48 kHz stereo) made with lavfi and libmp3lame. */
async function mp3(): Promise<{ path: string; seconds: number; note: string }> {
  const real = join(media, 'compressed/revai-example.mp3');
  if (existsSync(real)) return { path: real, seconds: 107, note: 'revai-example.mp3, 107 s 48 kHz stereo' };
  const path = join(benchTmp(), 'synthetic-107s.mp3');
  if (!existsSync(path)) {
    await ffmpegTo(path, [
      '-f',
      'lavfi',
      '-i',
      'anoisesrc=d=107:r=48000:a=0.2',
      '-ac',
      '2',
      '-c:a',
      'libmp3lame',
      '-b:a',
      '64k',
    ]);
  }
  return { path, seconds: 107, note: 'synthetic 107 s 48 kHz stereo MP3 (no media)' };
}

/** `ffmpeg -i path -f s16le -ar 16000 -ac 1 pipe:1`, stdout to /dev/null. */
const ffmpegDecode = (path: string) => () =>
  plainFfmpeg(['-i', path, '-f', 's16le', '-ar', '16000', '-ac', '1', 'pipe:1']);

const ours = (path: string) => () =>
  pipeline(createReadStream(path, { highWaterMark: 64 * 1024 }), decode(), discard());

export async function run(): Promise<Comparison[]> {
  mkdirSync(benchTmp(), { recursive: true });
  const results: Comparison[] = [];
  const main = await mp3();
  results.push(
    await compare({
      name: 'decode() MP3 -> 16 kHz mono vs plain ffmpeg',
      units: main.seconds,
      unit: 'audio s/s',
      scale: 1,
      rounds: 5,
      minMs: 500,
      ours: ours(main.path),
      baseline: ffmpegDecode(main.path),
      target: 0.9,
      note: main.note,
    }),
  );
  // The in-process paths, on 60 s of the same kind of audio.
  const wav = join(benchTmp(), 'noise-60s-44k1-stereo.wav');
  const ogg = join(benchTmp(), 'noise-60s-stereo.ogg');
  if (!existsSync(wav))
    await ffmpegTo(wav, [
      '-f',
      'lavfi',
      '-i',
      'anoisesrc=d=60:r=44100:a=0.2',
      '-ac',
      '2',
      '-c:a',
      'pcm_s16le',
    ]);
  if (!existsSync(ogg))
    await ffmpegTo(ogg, [
      '-f',
      'lavfi',
      '-i',
      'anoisesrc=d=60:r=48000:a=0.2',
      '-ac',
      '2',
      '-c:a',
      'libopus',
      '-b:a',
      '64k',
    ]);
  for (const [name, path] of [
    ['decode() WAV 44.1 kHz stereo (in-process) vs plain ffmpeg', wav],
    ['decode() Ogg Opus stereo (in-process) vs plain ffmpeg', ogg],
  ] as const) {
    results.push(
      await compare({
        name,
        units: 60,
        unit: 'audio s/s',
        scale: 1,
        rounds: 5,
        minMs: 500,
        ours: ours(path),
        baseline: ffmpegDecode(path),
        note: 'informational: in-process decode, 100 dB resampler (ffmpeg: swr defaults, -11 dB aliasing)',
      }),
    );
  }
  return results;
}
