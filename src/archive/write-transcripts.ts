// writeTranscripts(): the archive's sink. Each input's results are written (atomically) and its
// end recorded in the manifest, in the order the events come.

import { Writable } from 'node:stream';
import type { TypedStream } from '../protocol/typed-stream.ts';
import { type ArchiveEvent, isAlreadyDone } from './events.ts';
import type { ArchiveStore } from './store.ts';

/** Options of {@link writeTranscripts}. */
export interface WriteTranscriptsOptions {
  /** Where results and manifest entries go. */
  store: ArchiveStore;
  /**
   * Each event as it is recorded (the same as the stream's `'event'` events). A promise it
   * returns holds the next event back until it settles (its rejection fails the sink): a
   * consumer that is slow to take events slows the run instead of letting them pile up.
   */
  onEvent?: (event: ArchiveEvent) => unknown;
}

/** The events of a `writeTranscripts()` sink besides Node's, with their arguments. */
export interface WriteTranscriptsEvents {
  /** Each input's event as recorded in the manifest (`done`, `failed`, `skipped`, ...). */
  event: [event: ArchiveEvent];
}

/** What `writeTranscripts()` returns: an object-mode Writable typed by `WriteTranscriptsEvents`. */
export type TranscriptsSink = TypedStream<Writable, WriteTranscriptsEvents>;

/**
 * A Writable of transcribeEach's events: results are written (atomically) and every input's
 * end is recorded in the store's manifest, in the order they come. A `transcribed` input
 * becomes `done` (or `failed` when its results cannot be written). Every event, as recorded,
 * is emitted as `'event'`.
 */
export function writeTranscripts(options: WriteTranscriptsOptions): TranscriptsSink {
  const { store } = options;
  const sink = new Writable({
    objectMode: true,
    write(event: ArchiveEvent, _encoding, callback) {
      record(event)
        .then((out) => {
          const taken = options.onEvent?.(out);
          sink.emit('event', out);
          return taken;
        })
        .then(
          () => callback(),
          (err: unknown) => callback(err as Error),
        );
    },
    final(callback) {
      store.flush().then(() => callback(), callback);
    },
  });
  async function record(event: ArchiveEvent): Promise<ArchiveEvent> {
    switch (event.type) {
      case 'transcribed': {
        const { file, outputs, result } = event;
        try {
          await store.done(file, outputs, result);
        } catch (err) {
          const error = {
            code: (err as { code?: string }).code ?? 'ERR_WRITE',
            message: `cannot write the results: ${(err as Error).message}`,
          };
          await store.failed(file, error, result.jobId);
          return { type: 'failed', file, error, ...(result.jobId ? { jobId: result.jobId } : {}) };
        }
        return {
          type: 'done',
          file,
          outputs,
          words: result.words.length,
          ...(result.audioSeconds === undefined ? {} : { audioSeconds: result.audioSeconds }),
          elapsedMs: event.elapsedMs,
          ...(result.warnings ? { warnings: result.warnings } : {}),
        };
      }
      case 'failed':
        await store.failed(event.file, event.error, event.jobId);
        return event;
      case 'skipped':
        if (!isAlreadyDone(event.reason)) await store.skipped(event.file, event.reason);
        return event;
      default:
        return event;
    }
  }
  return sink as TranscriptsSink;
}
