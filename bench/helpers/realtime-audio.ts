// Audio played at real time, as a capture device gives it (100 ms of PCM every 100 ms of wall
// time), the news-like speech the latency scripts play, and the percentile they report.

import { Readable } from 'node:stream';
import { NEWS_SENTENCES, speechWithPauses } from '../../test/helpers/speech.ts';

/** `seconds` of 16 kHz mono PCM16: the news sentences spoken by espeak-ng, 0.7 s apart, over and over. */
export async function newsSpeech(seconds: number): Promise<Buffer> {
  let pcm = Buffer.alloc(0);
  while (pcm.length < seconds * 32000)
    pcm = Buffer.concat([pcm, await speechWithPauses(NEWS_SENTENCES, 700)]);
  return pcm.subarray(0, seconds * 32000);
}

/** 16 kHz mono PCM16: 100 ms of it every 100 ms of wall time, from `t0` (performance.now()). */
export function realtime(audio: Buffer, t0: number): Readable {
  let offset = 0;
  return new Readable({
    read() {
      if (offset >= audio.length) return void this.push(null);
      const due = t0 + (offset / 32000) * 1000;
      setTimeout(
        () => {
          this.push(audio.subarray(offset, offset + 3200));
          offset += 3200;
        },
        Math.max(0, due - performance.now()),
      );
    },
  });
}

/** The `p`th percentile (0-100) of ascending `sorted`: NaN when empty. */
export const percentile = (sorted: number[], p: number): number =>
  sorted.length === 0
    ? Number.NaN
    : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
