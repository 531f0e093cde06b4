// parseNdjson vs split2 + JSON.parse on realistic ASR records (the nearest peer).

import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import split2 from 'split2';
import { parseNdjson } from '../src/index.ts';
import { randomUuid } from '../src/protocol/uuid.ts';
import { chunks, discard } from './audio-inputs.ts';
import { type Comparison, compare } from './harness.ts';

function asrNdjson(records: number): Buffer {
  const vocabulary = ['ask', 'not', 'what', 'your', 'country', 'can', 'do', 'for', 'you', 'مرحبا', 'naïve'];
  const lines: string[] = [];
  const id = randomUuid();
  let t = 0;
  for (let i = 0; i < records; i++) {
    const words = Array.from({ length: 3 + (i % 12) }, (_, k) => {
      const start = t + k * 0.31;
      return {
        start_time: +start.toFixed(3),
        end_time: +(start + 0.27).toFixed(3),
        word: vocabulary[(i + k) % vocabulary.length]!,
      };
    });
    t += words.length * 0.31;
    lines.push(
      JSON.stringify({
        id,
        seq: i,
        transcription: words.map((w) => w.word).join(' '),
        words,
        is_speech_final: i % 4 === 3,
        is_final: false,
      }),
    );
  }
  return Buffer.from(`${lines.join('\n')}\n`);
}

export async function run(): Promise<Comparison[]> {
  const results: Comparison[] = [];

  const ndjson = asrNdjson(20_000);
  const ndjsonChunks = chunks(ndjson, 64 * 1024);
  results.push(
    await compare({
      name: 'parseNdjson vs split2+JSON.parse (ASR records, 64 KiB reads)',
      units: ndjson.length,
      ours: () => pipeline(Readable.from(ndjsonChunks, { objectMode: false }), parseNdjson(), discard(true)),
      baseline: () =>
        pipeline(Readable.from(ndjsonChunks, { objectMode: false }), split2(JSON.parse), discard(true)),
      target: 1.0,
    }),
  );

  return results;
}
