// encodeFrame vs a plain allocate-and-copy of the same PCM.

import { encodeFrame } from '../src/index.ts';
import { randomUuid, uuidToBytes } from '../src/protocol/uuid.ts';
import { type Comparison, compare } from './harness.ts';

export async function run(): Promise<Comparison[]> {
  const results: Comparison[] = [];

  for (const [label, bytes] of [
    ['20 ms', 640],
    ['100 ms', 3200],
    ['1 s', 32000],
  ] as const) {
    const samples = Buffer.alloc(bytes, 1);
    const streamId = uuidToBytes(randomUuid());
    const n = 1000;
    results.push(
      await compare({
        name: `encodeFrame vs alloc+copy (${label} frames)`,
        units: n * bytes,
        ours: () => {
          let last: Buffer | undefined;
          for (let i = 0; i < n; i++)
            last = encodeFrame({ streamId, isStart: i === 0, language: 'en', pcm: samples });
          return last;
        },
        baseline: () => {
          let last: Buffer | undefined;
          for (let i = 0; i < n; i++) {
            last = Buffer.allocUnsafe(bytes);
            samples.copy(last);
          }
          return last;
        },
        target: 0.5,
      }),
    );
  }
  return results;
}
