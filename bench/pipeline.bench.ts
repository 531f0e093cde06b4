// End to end: an MP3 → decode → toFrames → sttStream (emulator in its own process, instant
// engine, session rate limit lifted) → assembleTranscript. Throughput against the same frames
// POSTed by bare undici (no streams, no records parsed); peak RSS of a 1-hour input against a
// 10-minute one, and the heap that survives garbage collection through a 3-hour input against a
// 10-minute one (flat memory: the ratios stay near 1). Each run is a fresh process.

import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Comparison } from './harness.ts';
import { startEmulatorProcess } from './helpers/emulator-process.ts';
import { speechArchive } from './helpers/speech-archive.ts';

const exec = promisify(execFile);
const ROOT = fileURLToPath(new URL('..', import.meta.url));

interface RunResult {
  audioSeconds: number;
  wallSeconds: number;
  maxRssMiB: number;
  maxLiveHeapMiB: number;
  words: number;
}

async function measure(
  mode: 'pipeline' | 'baseline',
  file: string,
  url: string,
  key: string,
  sampleHeap = false,
): Promise<RunResult> {
  const flags = sampleHeap ? ['--expose-gc'] : [];
  const { stdout } = await exec(process.execPath, [...flags, 'bench/pipeline-run.ts', mode, file, url, key], {
    cwd: ROOT,
    maxBuffer: 1 << 20,
  });
  return JSON.parse(stdout) as RunResult;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function run(): Promise<Comparison[]> {
  const tenMinutes = await speechArchive(600);
  const oneHour = await speechArchive(3600);
  const threeHours = await speechArchive(10800);
  const emulator = await startEmulatorProcess({
    latency: 'instant',
    limits: { sessionAudioRateRealtime: 1e6, sessionAudioRateBurstBytes: 1e12 },
  });
  try {
    const ours: number[] = [];
    const base: number[] = [];
    for (let round = 0; round < 3; round++) {
      const p = await measure('pipeline', tenMinutes, emulator.url, emulator.apiKey);
      const b = await measure('baseline', tenMinutes, emulator.url, emulator.apiKey);
      if (p.words === 0) throw new Error('the pipeline committed no words');
      ours.push(p.audioSeconds / p.wallSeconds);
      base.push(b.audioSeconds / b.wallSeconds);
    }
    const throughput: Comparison = {
      name: 'file→decode→toFrames→sttStream→assembleTranscript vs bare POST loop (10 min MP3)',
      unit: 'audio s/s',
      ours: median(ours),
      baseline: median(base),
      ratio: median(ours) / median(base),
      minimum: 200,
    };
    // Peak RSS moves with GC timing by tens of MiB between runs of the same input: the median
    // of three fresh processes per length, alternating.
    const short: RunResult[] = [];
    const long: RunResult[] = [];
    for (let round = 0; round < 3; round++) {
      short.push(await measure('pipeline', tenMinutes, emulator.url, emulator.apiKey));
      long.push(await measure('pipeline', oneHour, emulator.url, emulator.apiKey));
    }
    const shortRss = median(short.map((r) => r.maxRssMiB));
    const longRss = median(long.map((r) => r.maxRssMiB));
    const last = long.at(-1)!;
    const mib = (runs: RunResult[]) => runs.map((r) => r.maxRssMiB.toFixed(0)).join('/');
    const memory: Comparison = {
      name: 'pipeline peak RSS: 10 min input / 1 h input (1.0 = flat)',
      unit: 'MiB',
      ours: longRss,
      baseline: shortRss,
      ratio: shortRss / longRss,
      target: 0.8,
      note: `median of 3 runs (1 h: ${mib(long)} MiB; 10 min: ${mib(short)} MiB); 1 h input: ${(last.audioSeconds / last.wallSeconds).toFixed(0)} audio s/s, ${last.words} words`,
    };
    // Peak RSS also counts garbage not yet collected, which grows with throughput: the heap
    // that survives a collection, sampled every second, is what the pipeline really holds.
    const heapShort = await measure('pipeline', tenMinutes, emulator.url, emulator.apiKey, true);
    const heapLong = await measure('pipeline', threeHours, emulator.url, emulator.apiKey, true);
    const liveHeap: Comparison = {
      name: 'pipeline live heap after GC: 10 min input / 3 h input (1.0 = flat)',
      unit: 'MiB',
      ours: heapLong.maxLiveHeapMiB,
      baseline: heapShort.maxLiveHeapMiB,
      ratio: heapShort.maxLiveHeapMiB / heapLong.maxLiveHeapMiB,
      target: 0.9,
      note: `largest heap left after a collection, sampled every 60 s of audio; 3 h: ${heapLong.words} words, peak RSS ${heapLong.maxRssMiB.toFixed(0)} MiB`,
    };
    return [throughput, memory, liveHeap];
  } finally {
    await emulator.stop();
  }
}
