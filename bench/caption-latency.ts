// Caption latency per live transport: speech played at real time (100 ms of PCM every 100 ms,
// as a capture device gives it) through toFrames → sttStream → assembleTranscript, the way
// `speechpipe caption` runs it, against the emulator in this process. For every committed
// utterance: arrival time minus the moment its last word was spoken; for partials: arrival
// minus the moment the audio they cover ended. Both transports in the same run; the ratio says
// which is faster.
//
//   node bench/caption-latency.ts [--seconds 30]

import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { createClient } from '../src/client/index.ts';
import { startEmulator } from '../src/emulator/index.ts';
import { assembleTranscript, type TranscriptEvent } from '../src/transforms/assemble-transcript.ts';
import { sttStream } from '../src/transforms/live-stream.ts';
import { toFrames } from '../src/transforms/to-frames.ts';
import { newsSpeech, percentile, realtime } from './helpers/realtime-audio.ts';

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '30' } } });
const seconds = Number(values.seconds);
const pcm = await newsSpeech(seconds);

const emulator = await startEmulator();
const client = createClient({ apiUrl: emulator.url, apiKey: emulator.apiKey, env: {} });
const results: Record<string, { utterance: number[]; partial: number[] }> = {};
for (const transport of ['http', 'socketio'] as const) {
  const utterance: number[] = [];
  const partial: number[] = [];
  const t0 = performance.now() + 50;
  await pipeline(
    realtime(pcm, t0),
    toFrames({ language: 'en' }),
    sttStream({ client, transport }),
    assembleTranscript(),
    new Writable({
      objectMode: true,
      write(event: TranscriptEvent, _encoding, callback) {
        const now = (performance.now() - t0) / 1000;
        if (event.type === 'utterance' && event.end !== undefined) utterance.push(now - event.end);
        if (event.type === 'partial' && event.words.length > 0)
          partial.push(now - event.words.at(-1)!.end_time);
        callback();
      },
    }),
  );
  results[transport] = { utterance: utterance.sort((a, b) => a - b), partial: partial.sort((a, b) => a - b) };
}
await client.close();
await emulator.close();

const row = (name: string, values: number[]) =>
  `${name.padEnd(22)} n=${String(values.length).padStart(3)}  p50 ${percentile(values, 50).toFixed(2)} s  p90 ${percentile(values, 90).toFixed(2)} s  max ${(values.at(-1) ?? Number.NaN).toFixed(2)} s`;
console.log(`caption latency, ${seconds} s of speech at real time (lower is better)`);
for (const [transport, r] of Object.entries(results)) {
  console.log(row(`${transport} utterance`, r.utterance));
  console.log(row(`${transport} partial`, r.partial));
}
const ratio = percentile(results.socketio!.utterance, 50) / percentile(results.http!.utterance, 50);
console.log(`socketio / http utterance p50: ${ratio.toFixed(2)}`);
