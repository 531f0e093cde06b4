// What the live stream's tests share: speech to send, cut into chunks as a file source gives it,
// a sink that keeps every record, and the words of the records in order.

import assert from 'node:assert/strict';
import { Readable, Writable } from 'node:stream';
import type { AsrRecord, WordSegment } from '../../src/protocol/records.ts';
import { speechWithPauses } from './speech.ts';

/** Four short sentences with 700 ms pauses (about 9 s). */
export const bulletin = (): Promise<Buffer> =>
  speechWithPauses(
    [
      'Good evening and welcome.',
      'Here is the news at nine.',
      'The weather will be fine tomorrow.',
      'That is all for tonight.',
    ],
    700,
  );

/** `audio` as a byte stream of `chunk`-byte reads. */
export function source(audio: Buffer, chunk = 4096): Readable {
  const parts: Buffer[] = [];
  for (let i = 0; i < audio.length; i += chunk) parts.push(audio.subarray(i, i + chunk));
  return Readable.from(parts, { objectMode: false });
}

/** A sink that pushes every object it is written into `into`. */
export function collect<T>(into: T[]): Writable {
  return new Writable({
    objectMode: true,
    write(chunk: T, _e, cb) {
      into.push(chunk);
      cb();
    },
  });
}

/** The committed words (speech-final and final records), in order. */
export function words(records: AsrRecord[]): WordSegment[] {
  return records.filter((r) => r.is_speech_final || r.is_final).flatMap((r) => r.words);
}

/** The committed words' start times never go back. */
export function assertMonotonic(records: AsrRecord[]): void {
  let last = -1;
  for (const w of words(records)) {
    assert.ok(w.start_time >= last - 1e-6, `word ${w.word} at ${w.start_time} after ${last}`);
    last = w.start_time;
  }
}
