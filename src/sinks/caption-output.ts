// The shape every caption output shares: a Writable (object mode) of the transcript events that
// assembleTranscript() and alignSpeakersStream() emit, so that one pipeline tees the same events
// into an overlay relay, an HLS presentation, a broadcaster or a file. captionOutput() builds
// one from handlers: it checks each event, calls the handler of its type and ignores the rest.

import { Writable } from 'node:stream';
import { InvalidArgumentError } from '../protocol/errors.ts';
import type { PartialEvent, TranscriptEvent, UtteranceEvent } from '../transforms/assemble-transcript.ts';

/** A caption output: write it the transcript events; it ends when the captions end. */
export type CaptionOutput = Writable;

/** What a caption output does with each kind of event. A handler that throws (or rejects) fails the write. */
export interface CaptionOutputHandlers {
  /** Committed words: lay them out as cues and send them on. */
  utterance?(event: UtteranceEvent): void | Promise<void>;
  /** Provisional text, replacing the previous one. */
  partial?(event: PartialEvent): void | Promise<void>;
  /** The writes ended: the captions are over. */
  end?(): void | Promise<void>;
  /** The output is destroyed (after `end`, or instead of it on a failure): release everything. */
  destroy?(err: Error | null): void | Promise<void>;
}

/**
 * A caption output from its handlers. An event that is not a transcript event (no string
 * `type`) fails the write with `InvalidArgumentError`; events of other types (`final`,
 * diarization) pass unused. `autoDestroy: false` keeps the output alive after its end (a relay
 * still serving what it has).
 */
export function captionOutput(
  name: string,
  handlers: CaptionOutputHandlers,
  options: { autoDestroy?: boolean } = {},
): CaptionOutput {
  const settle = (run: () => void | Promise<void>, callback: (err?: Error | null) => void) => {
    let result: void | Promise<void>;
    try {
      result = run();
    } catch (err) {
      callback(err as Error);
      return;
    }
    if (result instanceof Promise) result.then(() => callback(), callback);
    else callback();
  };
  return new Writable({
    objectMode: true,
    autoDestroy: options.autoDestroy ?? true,
    write(event: Partial<TranscriptEvent> | null | undefined, _encoding, callback) {
      const type = event?.type;
      if (type === 'utterance' && Array.isArray(event!.words) && handlers.utterance) {
        const utterance = event as UtteranceEvent;
        settle(() => handlers.utterance!(utterance), callback);
      } else if (type === 'partial' && typeof event!.text === 'string' && handlers.partial) {
        const partial = event as PartialEvent;
        settle(() => handlers.partial!(partial), callback);
      } else if (typeof type !== 'string') {
        callback(new InvalidArgumentError(`${name}: expected transcript events (partial, utterance, final)`));
      } else callback();
    },
    final(callback) {
      settle(() => handlers.end?.(), callback);
    },
    destroy(err, callback) {
      settle(
        () => handlers.destroy?.(err),
        () => callback(err),
      );
    },
  });
}
