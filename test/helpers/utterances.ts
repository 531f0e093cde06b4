// Transcript events for the broadcast caption outputs' tests, what an output says back, and the
// words of a WebVTT file to hold them against.

import { readFile } from 'node:fs/promises';
import type { Writable } from 'node:stream';
import type { CaptionOutputError, DeliveryItem } from '../../src/sinks/caption-delivery.ts';
import type { UtteranceEvent } from '../../src/transforms/assemble-transcript.ts';

let index = 0;

/** An utterance of `text`: its words 0.3 s apart from `start` (seconds), said by `speaker` when given. */
export function utterance(text: string, start: number, speaker?: string): UtteranceEvent {
  const words = text.split(' ').map((word, k) => ({
    word,
    start_time: start + k * 0.3,
    end_time: start + k * 0.3 + 0.25,
    ...(speaker ? { speaker } : {}),
  }));
  return { type: 'utterance', id: 'test', index: index++, text, words, start, end: words.at(-1)!.end_time };
}

/** The warnings and the deliveries of an output, as they come. */
export function collectDeliveries(sink: Writable): {
  warnings: CaptionOutputError[];
  delivered: DeliveryItem[];
} {
  const warnings: CaptionOutputError[] = [];
  const delivered: DeliveryItem[] = [];
  sink.on('warning', (w: CaptionOutputError) => warnings.push(w));
  sink.on('delivered', (d: DeliveryItem) => delivered.push(d));
  return { warnings, delivered };
}

/** The words of a WebVTT file's cues, in order. */
export async function vttWords(path: string): Promise<string[]> {
  return (await readFile(path, 'utf8'))
    .split('\n\n')
    .slice(1)
    .flatMap((cue) => cue.split('\n').slice(1))
    .join(' ')
    .split(/\s+/)
    .filter(Boolean);
}
