// Protocol codecs against their physical or peer baselines:
// parseNdjson vs split2 + JSON.parse; TtsDemuxer/demuxTts vs a raw Buffer.indexOf scan;
// encodeFrame vs a plain allocate-and-copy of the same PCM.

import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import split2 from 'split2';
import {
  demuxTts,
  encodeFrame,
  encodeTtsFrame,
  parseNdjson,
  randomUuid,
  TtsDemuxer,
  uuidToBytes,
} from '../src/index.ts';
import { type Comparison, compare } from './harness.ts';

const chunk = (buf: Buffer, size: number) => {
  const out: Buffer[] = [];
  for (let i = 0; i < buf.length; i += size) out.push(buf.subarray(i, i + size));
  return out;
};

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

const sink = () =>
  new Writable({
    objectMode: true,
    write(_chunk, _enc, cb) {
      cb();
    },
  });

export async function run(): Promise<Comparison[]> {
  const results: Comparison[] = [];

  const ndjson = asrNdjson(20_000);
  const ndjsonChunks = chunk(ndjson, 64 * 1024);
  results.push(
    await compare({
      name: 'parseNdjson vs split2+JSON.parse (ASR records, 64 KiB reads)',
      units: ndjson.length,
      ours: () => pipeline(Readable.from(ndjsonChunks, { objectMode: false }), parseNdjson(), sink()),
      baseline: () =>
        pipeline(Readable.from(ndjsonChunks, { objectMode: false }), split2(JSON.parse), sink()),
      target: 1.0,
    }),
  );

  // A 16 kHz TTS body in 100 ms frames (3,200 PCM bytes each), 8 MiB in all.
  const requestId = randomUuid();
  const idBytes = uuidToBytes(requestId);
  const frames: Buffer[] = [];
  const pcm = Buffer.alloc(3200);
  for (let i = 0; i < pcm.length; i += 2) pcm.writeInt16LE(Math.round(8000 * Math.sin(i / 7)), i);
  const count = Math.floor((8 * 1024 * 1024) / (pcm.length + 17));
  for (let i = 0; i < count; i++) frames.push(encodeTtsFrame(requestId, i === count - 1, pcm));
  const ttsBody = Buffer.concat(frames);
  for (const [label, size] of [
    ['1 KiB', 1024],
    ['64 KiB', 64 * 1024],
    ['1 MiB', 1024 * 1024],
  ] as const) {
    const reads = chunk(ttsBody, size);
    const scan = () => {
      let found = 0;
      for (const r of reads) {
        let at = r.indexOf(idBytes);
        while (at !== -1) {
          found++;
          at = r.indexOf(idBytes, at + 16);
        }
      }
      return found;
    };
    results.push(
      await compare({
        name: `TtsDemuxer vs Buffer.indexOf scan (${label} reads)`,
        units: ttsBody.length,
        ours: () => {
          const d = new TtsDemuxer(requestId);
          let frames = 0;
          for (const r of reads) frames += d.push(r).length;
          return frames + d.end().length;
        },
        baseline: scan,
        target: 0.5,
      }),
    );
    // The stream adapter pays Node's per-chunk Transform cost, which at 1 KiB reads alone
    // exceeds an indexOf call; its fair baseline scans inside the same stream plumbing.
    const scanStream = () =>
      new Transform({
        readableObjectMode: true,
        transform(chunk: Buffer, _enc, cb) {
          let at = chunk.indexOf(idBytes);
          while (at !== -1) at = chunk.indexOf(idBytes, at + 16);
          cb(null, chunk);
        },
      });
    results.push(
      await compare({
        name: `demuxTts stream vs indexOf-scan Transform (${label} reads)`,
        units: ttsBody.length,
        ours: () => pipeline(Readable.from(reads, { objectMode: false }), demuxTts({ requestId }), sink()),
        baseline: () => pipeline(Readable.from(reads, { objectMode: false }), scanStream(), sink()),
        target: 0.5,
      }),
    );
    results.push(
      await compare({
        name: `demuxTts stream vs raw Buffer.indexOf scan (${label} reads)`,
        units: ttsBody.length,
        ours: () => pipeline(Readable.from(reads, { objectMode: false }), demuxTts({ requestId }), sink()),
        baseline: scan,
        note: 'informational: stream plumbing vs a bare loop',
      }),
    );
  }

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
