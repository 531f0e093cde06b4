// The target: demuxing at least half as fast as a raw Buffer.indexOf scan of the same
// reads (the physical limit for finding headers), at 1 KiB, 64 KiB and 1 MiB reads. Three rows
// per read size (docs/DECISIONS.md says why):
// - TtsDemuxer core vs raw scan, both bare loops over the reads: target 0.5;
// - demuxTts stream vs the raw scan inside an identical Transform, so both pay Node's per-chunk
//   stream cost: target 0.5;
// - demuxTts stream vs the bare-loop raw scan: informational only, no target (it measures the
//   stream plumbing as much as the demuxer).

import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { demuxTts, encodeTtsFrame, TtsDemuxer } from '../src/index.ts';
import { randomUuid, uuidToBytes } from '../src/protocol/uuid.ts';
import { chunks, discard } from './audio-inputs.ts';
import { type Comparison, compare } from './harness.ts';

export async function run(): Promise<Comparison[]> {
  const results: Comparison[] = [];

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
    const reads = chunks(ttsBody, size);
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
        name: `TtsDemuxer core loop vs raw indexOf scan loop (${label} reads)`,
        units: ttsBody.length,
        ours: () => {
          const d = new TtsDemuxer(requestId);
          let frames = 0;
          for (const r of reads) frames += d.push(r).length;
          return frames + d.end().length;
        },
        baseline: scan,
        target: 0.5,
        note: 'both bare loops over the same reads',
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
        name: `demuxTts stream vs raw indexOf scan in a Transform (${label} reads)`,
        units: ttsBody.length,
        ours: () =>
          pipeline(Readable.from(reads, { objectMode: false }), demuxTts({ requestId }), discard(true)),
        baseline: () => pipeline(Readable.from(reads, { objectMode: false }), scanStream(), discard(true)),
        target: 0.5,
        note: 'both in the same stream plumbing',
      }),
    );
    results.push(
      await compare({
        name: `demuxTts stream vs raw indexOf scan loop (${label} reads)`,
        units: ttsBody.length,
        ours: () =>
          pipeline(Readable.from(reads, { objectMode: false }), demuxTts({ requestId }), discard(true)),
        baseline: scan,
        note: 'informational, no target: stream plumbing vs a bare loop',
      }),
    );
  }

  return results;
}
