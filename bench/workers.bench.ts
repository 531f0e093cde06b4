// The resampling worker pool against inline resampling (48 kHz stereo -> 16 kHz mono) at the
// chunk sizes streams really see: 20 ms live frames, 100 ms, 1 s file reads; one stream, and
// four at once. Ratio > 1: the pool wins.

import { availableParallelism } from 'node:os';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ResamplePool, resample } from '../src/index.ts';
import { chunks, discard } from './audio-inputs.ts';
import { type Comparison, compare } from './harness.ts';

const FROM = { sampleRate: 48000, channels: 2 };
const TO = { sampleRate: 16000, channels: 1 };

function audio(seconds: number): Buffer {
  const buf = Buffer.alloc(seconds * 48000 * 4);
  for (let i = 0; i < buf.length; i += 2)
    buf.writeInt16LE(Math.round(9000 * Math.sin(i * 0.0123) + ((i * 7919) % 4001) - 2000), i);
  return buf;
}

export async function run(): Promise<Comparison[]> {
  const seconds = 30;
  const input = audio(seconds);
  const threads = Math.max(1, availableParallelism());
  const results: Comparison[] = [];
  const one = new ResamplePool({ threads: 1 });
  const all = new ResamplePool({ threads });
  try {
    for (const [label, chunkSeconds] of [
      ['20 ms', 0.02],
      ['100 ms', 0.1],
      ['1 s', 1],
    ] as const) {
      const reads = chunks(input, Math.round(chunkSeconds * 48000) * 4);
      const stream = (pool: ResamplePool | false, taskSeconds?: number) => () =>
        pipeline(Readable.from(reads), resample({ from: FROM, to: TO, pool, taskSeconds }), discard());
      // Tasks as big as the chunks, and tasks batching chunks up to 1 s.
      results.push(
        await compare({
          name: `pool (${threads} threads, ${label} tasks) vs inline, ${label} chunks`,
          units: seconds,
          unit: 'audio s/s',
          scale: 1,
          rounds: 5,
          ours: stream(all, chunkSeconds),
          baseline: stream(false),
          note: chunkSeconds < 0.1 ? 'live frame sizes' : undefined,
        }),
      );
      if (chunkSeconds < 1) {
        results.push(
          await compare({
            name: `pool (${threads} threads, 1 s tasks) vs inline, ${label} chunks`,
            units: seconds,
            unit: 'audio s/s',
            scale: 1,
            rounds: 5,
            ours: stream(all, 1),
            baseline: stream(false),
            note: 'adds up to 1 s of latency: for files, not live audio',
          }),
        );
      }
    }
    const reads = chunks(input, 48000 * 4);
    results.push(
      await compare({
        name: 'pool (1 thread, 1 s tasks) vs inline, 1 s chunks',
        units: seconds,
        unit: 'audio s/s',
        scale: 1,
        rounds: 5,
        ours: () => pipeline(Readable.from(reads), resample({ from: FROM, to: TO, pool: one }), discard()),
        baseline: () => pipeline(Readable.from(reads), resample({ from: FROM, to: TO }), discard()),
      }),
    );
    const four = (pool: ResamplePool | false) => () =>
      Promise.all(
        [0, 1, 2, 3].map(() =>
          pipeline(Readable.from(reads), resample({ from: FROM, to: TO, pool }), discard()),
        ),
      );
    results.push(
      await compare({
        name: `4 streams at once: pool (${threads} threads, 1 s tasks) vs inline`,
        units: 4 * seconds,
        unit: 'audio s/s',
        scale: 1,
        rounds: 5,
        ours: four(all),
        baseline: four(false),
      }),
    );
  } finally {
    await Promise.all([one.close(), all.close()]);
  }
  return results;
}
