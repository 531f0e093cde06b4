// One measured run of the end-to-end pipeline (or its baseline), in a fresh process so that
// its peak RSS is its own: prints {audioSeconds, wallSeconds, maxRssMiB, maxLiveHeapMiB, words}
// as JSON. Under `--expose-gc` it also collects garbage every 60 s of audio and records the heap
// that survives (what the pipeline really holds; peak RSS also counts garbage not collected yet).
//   node [--expose-gc] bench/pipeline-run.ts pipeline <file> <url> <key>
//   node bench/pipeline-run.ts baseline <file> <url> <key>
// SPEECHPIPE_BENCH_DIST=1 runs the built library (dist/) instead of the sources.

import { createReadStream } from 'node:fs';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { request } from 'undici';
import type { TranscriptEvent } from '../src/index.ts';

// The library as users run it (dist/, built JavaScript) when SPEECHPIPE_BENCH_DIST=1, else the
// sources (Node's type stripping, which costs startup time users do not pay).
const entry = process.env.SPEECHPIPE_BENCH_DIST === '1' ? '../dist/index.js' : '../src/index.ts';
const { assembleTranscript, createClient, decode, encodeFrame, sttStream, toFrames } = (await import(
  entry
)) as typeof import('../src/index.ts');

const [mode, file, url, key] = process.argv.slice(2) as [string, string, string, string];
const started = performance.now();
let audioBytes = 0;
let words = 0;
let maxLiveHeap = 0;
const gc = (globalThis as { gc?: () => void }).gc;
// Sampled by progress, not by the clock: every 60 s of audio, however fast it goes.
const SAMPLE_EVERY_BYTES = 60 * 32000;
let nextSample = SAMPLE_EVERY_BYTES;
const sampleHeap = () => {
  if (!gc) return;
  gc();
  maxLiveHeap = Math.max(maxLiveHeap, process.memoryUsage().heapUsed);
};

if (mode === 'pipeline') {
  const client = createClient({ apiUrl: url, apiKey: key, env: {} });
  await pipeline(
    createReadStream(file),
    decode(),
    new (await import('node:stream')).Transform({
      transform(chunk: Buffer, _e, cb) {
        audioBytes += chunk.length;
        if (audioBytes >= nextSample) {
          nextSample += SAMPLE_EVERY_BYTES;
          sampleHeap();
        }
        cb(null, chunk);
      },
    }),
    toFrames({ language: 'en' }),
    sttStream({ client, keepaliveMs: 0 }),
    assembleTranscript({ keepWords: false }),
    new Writable({
      objectMode: true,
      write(event: TranscriptEvent, _e, cb) {
        if (event.type === 'utterance') words += event.words.length;
        cb();
      },
    }),
  );
  await client.close();
} else {
  // Baseline: the same frames POSTed one after another with bare undici, bodies read as text.
  const pcmChunks: Buffer[] = [];
  await pipeline(createReadStream(file), decode(), async (source) => {
    for await (const chunk of source) pcmChunks.push(chunk as Buffer);
  });
  const pcm = Buffer.concat(pcmChunks);
  audioBytes = pcm.length;
  const id = globalThis.crypto.randomUUID();
  const step = 32000;
  for (let at = 0; at < pcm.length; at += step) {
    const end = Math.min(pcm.length, at + step) & ~1;
    const frame = encodeFrame({
      streamId: id,
      isStart: at === 0,
      isFinal: end >= (pcm.length & ~1),
      language: 'en',
      pcm: pcm.subarray(at, end),
    });
    const res = await request(`${url}/http/stt-stream`, {
      method: 'POST',
      headers: { 'x-api-key': key },
      body: frame,
    });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`baseline POST ${res.statusCode}: ${text}`);
    for (const line of text.split('\n')) if (line.includes('"is_speech_final":true')) words++;
  }
}

process.stdout.write(
  `${JSON.stringify({
    audioSeconds: audioBytes / 32000,
    wallSeconds: (performance.now() - started) / 1000,
    maxRssMiB: process.resourceUsage().maxRSS / 1024,
    maxLiveHeapMiB: maxLiveHeap / 1048576,
    words,
  })}\n`,
);
