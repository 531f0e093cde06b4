// The main job until the CLI lands: frame every recording in the media directory (or a
// synthetic tone when there is none) into live input frames, as a live stream would send them,
// and check each frame the way the service does.

import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { decodeFrame, encodeFrame, parseWavHeader, randomUuid } from '../src/index.ts';

const mediaDir = resolve(
  process.env.SPEECHPIPE_MEDIA ?? new URL('../../shared/media/en', import.meta.url).pathname,
);
const FRAME_BYTES = 3200; // 100 ms at 16 kHz

function tone(seconds: number): Buffer {
  const pcm = Buffer.alloc(seconds * 16000 * 2);
  for (let i = 0; i < pcm.length / 2; i++)
    pcm.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / 16000)), i * 2);
  return pcm;
}

function frameAll(name: string, pcm: Buffer): void {
  const streamId = randomUuid();
  let frames = 0;
  for (let at = 0; at < pcm.length; at += FRAME_BYTES) {
    const end = Math.min(pcm.length, at + FRAME_BYTES) & ~1;
    if (end <= at) break;
    const frame = encodeFrame({
      streamId,
      isStart: at === 0,
      isFinal: end >= (pcm.length & ~1),
      language: 'en',
      pcm: pcm.subarray(at, end),
    });
    decodeFrame(frame);
    frames++;
  }
  console.log(`${name}: ${(pcm.length / 32000).toFixed(2)} s in ${frames} frames`);
}

let files: string[] = [];
try {
  files = readdirSync(mediaDir).filter((f) => f.endsWith('.wav'));
} catch {
  console.log(`no media at ${mediaDir}; using a synthetic tone`);
}
for (const file of files) {
  const bytes = readFileSync(join(mediaDir, file));
  const info = parseWavHeader(bytes);
  if (
    info?.format !== 'pcm' ||
    info.bitsPerSample !== 16 ||
    info.channels !== 1 ||
    info.sampleRate !== 16000
  ) {
    console.log(`${file}: not 16 kHz mono PCM16 (decode() will handle it); skipped`);
    continue;
  }
  frameAll(file, bytes.subarray(info.dataOffset, info.dataOffset + (info.dataBytes ?? bytes.length)));
}
if (files.length === 0) frameAll('tone', tone(3));
