// The emulator's PocketSphinx engine against PocketSphinx alone. Ours: a recording through the
// whole live pipeline (file → decode → resample → frames → a live session) to an in-process
// emulator with `engine: 'pocketsphinx'`, as `npm start` runs it. Baseline: pocketsphinx_continuous
// on a 16 kHz mono WAV that ffmpeg made of it, with the same speed settings. Reported: the
// real-time factor as audio seconds per wall second, and audio seconds per CPU second (this
// process, its recognizer processes and ffmpeg: all of the work), each as ours / baseline.

import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createClient } from '../src/client/index.ts';
import { findPocketSphinx } from '../src/emulator/engine/pocketsphinx.ts';
import { startEmulator } from '../src/emulator/index.ts';
import { ffmpegWav16k, MEDIA_DIR, pipelineTranscript, pocketSphinxDirect } from '../test/helpers/wer.ts';
import type { Comparison } from './harness.ts';

const exec = promisify(execFile);
const ROUNDS = 3;

/** CPU seconds of this process and of its children it has waited for (ffmpeg, PocketSphinx). */
function cpuSeconds(): number {
  const self = process.cpuUsage();
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // cutime and cstime: the 14th and 15th fields after the command, in clock ticks (USER_HZ, 100).
  const children = (Number(fields[13]) + Number(fields[14])) / 100;
  return (self.user + self.system) / 1e6 + children;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function run(): Promise<Comparison[]> {
  if (!findPocketSphinx()) {
    console.log(
      'PocketSphinx is not installed: nothing to measure (apt-get install pocketsphinx pocketsphinx-en-us)',
    );
    return [];
  }
  const dir = await mkdtemp(join(tmpdir(), 'speechpipe-recognizer-bench-'));
  let file = join(MEDIA_DIR, 'en/jfk.wav');
  let note = 'JFK, 11 s 16 kHz WAV';
  if (!existsSync(file)) {
    file = join(dir, 'spoken.wav');
    await exec('espeak-ng', [
      '-v',
      'en-us',
      '-w',
      file,
      'Ask not what your country can do for you. Ask what you can do for your country. And so my fellow Americans, we choose to go to the moon in this decade.',
    ]);
    note = 'espeak-ng speech (no media)';
  }
  const wav = join(dir, 'direct.16k.wav');
  await ffmpegWav16k(file, wav);
  const audioSec = (readFileSync(wav).length - 44) / 32_000;
  const emulator = await startEmulator({ engine: 'pocketsphinx' });
  const client = createClient({ apiUrl: emulator.url, apiKey: emulator.apiKey, env: {} });
  const measure = async (work: () => Promise<unknown>, recognizerCpu: () => number) => {
    const cpu0 = cpuSeconds() + recognizerCpu();
    const t0 = performance.now();
    await work();
    const wall = (performance.now() - t0) / 1000;
    return { wall, cpu: cpuSeconds() + recognizerCpu() - cpu0 };
  };
  const recognizer = () => emulator.stats().recognizer.cpuSec;
  const ours: { wall: number; cpu: number }[] = [];
  const fast: { wall: number; cpu: number }[] = [];
  const base: { wall: number; cpu: number }[] = [];
  let partials = 0;
  try {
    await pipelineTranscript(client, file, 'live'); // processes started, code compiled
    for (let r = 0; r < ROUNDS; r++) {
      const before = emulator.stats().recognizer.partials;
      ours.push(await measure(() => pipelineTranscript(client, file, 'live'), recognizer));
      partials = emulator.stats().recognizer.partials - before;
      fast.push(await measure(() => pipelineTranscript(client, file, 'fast'), recognizer));
      base.push(
        await measure(
          () => pocketSphinxDirect(wav),
          () => 0,
        ),
      );
    }
  } finally {
    await client.close();
    await emulator.close();
    await rm(dir, { recursive: true, force: true });
  }
  const rtf = (xs: { wall: number }[]) => audioSec / median(xs.map((x) => x.wall));
  const perCpu = (xs: { cpu: number }[]) => audioSec / median(xs.map((x) => x.cpu));
  return [
    {
      name: 'PocketSphinx through the emulator (live pipeline) vs alone: speed',
      unit: 'audio s/s',
      ours: rtf(ours),
      baseline: rtf(base),
      ratio: rtf(ours) / rtf(base),
      note: `${note}; real-time factor ours ${(1 / rtf(ours)).toFixed(2)}, alone ${(1 / rtf(base)).toFixed(2)}`,
    },
    {
      name: 'PocketSphinx through the emulator (live pipeline) vs alone: CPU',
      unit: 'audio s/CPU s',
      ours: perCpu(ours),
      baseline: perCpu(base),
      ratio: perCpu(ours) / perCpu(base),
      note: `CPU s per audio s: ours ${(1 / perCpu(ours)).toFixed(3)}, alone ${(1 / perCpu(base)).toFixed(3)}; ${partials} provisional decodes a run`,
    },
    {
      name: 'PocketSphinx through the emulator (fast transcription) vs alone: CPU',
      unit: 'audio s/CPU s',
      ours: perCpu(fast),
      baseline: perCpu(base),
      ratio: perCpu(fast) / perCpu(base),
      note: `CPU s per audio s: ours ${(1 / perCpu(fast)).toFixed(3)} (no provisional records), alone ${(1 / perCpu(base)).toFixed(3)}`,
    },
  ];
}
