// Audio played at real time, as a capture device gives it (100 ms of PCM every 100 ms of wall
// time), and the percentile the latency scripts report.

import { Readable } from 'node:stream';

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
