// Caption latency per broadcast output: speech at real time (as a capture device gives it)
// through toFrames → sttStream → assembleTranscript against the emulator in this process, as
// `speechpipe caption` runs it, teed to OBS (obsCaptions, a real OBS Studio under xvfb-run
// streaming to nginx-rtmp, as the OBS tests start it) and to a YouTube caption receiver
// (youtubeCaptions, the tests' receiver, which checks the format and seq rules). For every
// caption, minus the moment its last word was spoken:
// - ASR: the utterance event arriving (what every output starts from);
// - OBS delivered: OBS answering SendStreamCaption for its line;
// - OBS in the stream: its line decoded from the received stream (the recording tailed every 50 ms);
// - YouTube accepted: the receiver taking the post that carried it.
// Without OBS installed, its rows are left out (said).
//
//   node bench/caption-outputs-latency.ts [--seconds 60]

import { mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { createClient } from '../src/client/index.ts';
import { startEmulator } from '../src/emulator/index.ts';
import type { DeliveryItem } from '../src/sinks/caption-delivery.ts';
import { type ObsCaptions, obsCaptions } from '../src/sinks/obs-captions.ts';
import { youtubeCaptions } from '../src/sinks/youtube-captions.ts';
import { assembleTranscript, type TranscriptEvent } from '../src/transforms/assemble-transcript.ts';
import { sttStream } from '../src/transforms/live-stream.ts';
import { tee } from '../src/transforms/tee.ts';
import { toFrames } from '../src/transforms/to-frames.ts';
import { startCaptionReceiver } from '../test/helpers/caption-receiver.ts';
import { addedLines, StreamCaptionReader } from '../test/helpers/flv.ts';
import { obsMissing, onAir } from '../test/helpers/obs.ts';
import { newsSpeech, percentile, realtime } from './helpers/realtime-audio.ts';

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '60' } } });
const seconds = Number(values.seconds);
const pcm = await newsSpeech(seconds);

const dir = await mkdtemp(join(tmpdir(), 'speechpipe-outputs-latency-'));
const missing = obsMissing();
const air = await onAir(dir);
const studio = air?.studio;
const receiver = await startCaptionReceiver();
const emulator = await startEmulator();
const client = createClient({ apiUrl: emulator.url, apiKey: emulator.apiKey, env: {} });

const asr: number[] = [];
const obsDelivered: number[] = [];
const obsSeen: number[] = [];
const youtubeAccepted: number[] = [];
let t0 = 0;
/** Seconds since the audio's time 0. */
const now = () => (performance.now() - t0) / 1000;

let obs: ObsCaptions | undefined;
/** OBS lines delivered and not yet seen in the stream, with when their last word was spoken. */
const unseen: DeliveryItem[] = [];
let tail: NodeJS.Timeout | undefined;
if (studio) {
  obs = await obsCaptions({ url: studio.url, password: studio.password });
  obs.on('delivered', (item: DeliveryItem) => {
    obsDelivered.push(now() - item.end);
    unseen.push(item);
  });
  // The newest recording, read as it grows; each line a caption adds is matched to its item.
  const reader = new StreamCaptionReader();
  let offset = 0;
  let previous: string[] = [];
  let reading = false;
  tail = setInterval(async () => {
    if (reading) return;
    reading = true;
    try {
      const file = (await air!.rtmp.recordings()).at(-1);
      if (!file) return;
      const handle = await open(file);
      try {
        const { size } = await handle.stat();
        if (size <= offset) return;
        const chunk = Buffer.alloc(size - offset);
        await handle.read(chunk, 0, chunk.length, offset);
        offset = size;
        for (const caption of reader.push(chunk)) {
          for (const line of addedLines(previous, caption.lines)) {
            const k = unseen.findIndex((item) => item.text === line);
            if (k >= 0) obsSeen.push(now() - unseen.splice(k, 1)[0]!.end);
          }
          previous = caption.lines;
        }
      } finally {
        await handle.close();
      }
    } finally {
      reading = false;
    }
  }, 50);
}
const youtube = youtubeCaptions({ url: receiver.url });
youtube.on('delivered', (item: DeliveryItem) => youtubeAccepted.push(now() - item.end));

const outputs = tee(obs ? 3 : 2, { objectMode: true });
const [toAsr, toYoutube, toObs] = outputs.branches;
t0 = performance.now() + 50;
const done = [
  pipeline(
    realtime(pcm, t0),
    toFrames({ language: 'en' }),
    sttStream({ client, transport: 'socketio' }),
    assembleTranscript({ keepWords: false }),
    outputs.input,
  ),
  pipeline(
    toAsr!,
    new Writable({
      objectMode: true,
      write(event: TranscriptEvent, _encoding, callback) {
        if (event.type === 'utterance' && event.end !== undefined) asr.push(now() - event.end);
        callback();
      },
    }),
  ),
  pipeline(toYoutube!, youtube),
];
if (obs) done.push(pipeline(toObs!, obs));
await Promise.all(done);
// OBS puts a caption into the next frame once its own 2 s are up: the last lines come a moment later.
for (let waited = 0; obs && unseen.length > 0 && waited < 5000; waited += 100)
  await new Promise((r) => setTimeout(r, 100));
clearInterval(tail);
const obsStats = obs?.stats();
const youtubeStats = youtube.stats();
await client.close();
await emulator.close();
await receiver.close();
await air?.close();
await rm(dir, { recursive: true, force: true });

const row = (name: string, values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return `${name.padEnd(20)} n=${String(sorted.length).padStart(3)}  p50 ${percentile(sorted, 50).toFixed(2)} s  p90 ${percentile(sorted, 90).toFixed(2)} s  max ${(sorted.at(-1) ?? Number.NaN).toFixed(2)} s`;
};
console.log(`caption latency per output, ${seconds} s of speech at real time (last word spoken → ...)`);
console.log(row('ASR utterance', asr));
if (obsStats) {
  console.log(row('OBS delivered', obsDelivered));
  console.log(row('OBS in the stream', obsSeen));
  console.log(
    `  OBS: ${obsStats.delivered} of ${obsStats.made} lines delivered, ${unseen.length} not seen in the stream`,
  );
} else console.log(`OBS: left out (${missing})`);
console.log(row('YouTube accepted', youtubeAccepted));
console.log(
  `  YouTube: ${youtubeStats.delivered} of ${youtubeStats.made} cues accepted in ${youtubeStats.posts} posts; format or seq violations: ${receiver.violations.length}`,
);
