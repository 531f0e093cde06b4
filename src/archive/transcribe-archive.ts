// transcribeArchive(): the archive job as one call. It walks the inputs, runs them through
// transcribeEach() into writeTranscripts(), and yields typed events ending in a summary;
// walkArchive() is the walk as a stream.

import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { SpeechClient } from '../client/index.ts';
import { type AudioFile, type WalkOptions, walkAudioFiles } from '../sources/files.ts';
import type { BreakerOptions } from './breaker.ts';
import { probeAll } from './durations.ts';
import { EventQueue } from './event-queue.ts';
import { type ArchiveEvent, type ArchiveSummary, emptySummary, tally } from './events.ts';
import { type ArchiveRunOptions, resolveArchiveRun } from './settings.ts';
import { openArchiveStore } from './store.ts';
import { transcribeEach } from './transcribe-each.ts';
import { writeTranscripts } from './write-transcripts.ts';

/** The archive's inputs as a Readable of `AudioFile`s (see `walkAudioFiles`). */
export function walkArchive(roots: readonly string[], options: WalkOptions = {}): Readable {
  return Readable.from(walkAudioFiles(roots, options), { objectMode: true, highWaterMark: 16 });
}

/** Options of {@link transcribeArchive}. */
export interface TranscribeArchiveOptions extends ArchiveRunOptions {
  /** The client that transcribes. */
  client: SpeechClient;
  /** Files at once. Default: what the plan allows (see `TranscribeEachOptions.concurrency`). */
  concurrency?: number;
  /**
   * The order inputs start in. `largest-first` (default): the biggest files first, so the
   * longest work does not start last and leave the run waiting on it alone; `walk`: the walk's.
   */
  order?: 'largest-first' | 'walk';
  /** Stop starting inputs while the service is unreachable (see {@link BreakerOptions}). */
  breaker?: BreakerOptions;
  /** Stops the run: inputs not started are left for a resumed run. */
  signal?: AbortSignal;
}

/** Events queued before the run waits for its consumer to take some. */
const EVENTS_QUEUED = 64;

/**
 * Transcribe an archive: walk `roots`, transcribe every input, write results and the manifest.
 * Yields every input's events as they happen and, last, the summary. Breaking out of the loop
 * (or aborting `signal`) cancels the inputs in flight; they are left for a resumed run. The run
 * keeps pace with the loop: while 64 of its events wait to be taken, it waits for the loop.
 */
export async function* transcribeArchive(
  roots: readonly string[],
  options: TranscribeArchiveOptions,
): AsyncGenerator<ArchiveEvent | ArchiveSummary, void, undefined> {
  const began = performance.now();
  const run = resolveArchiveRun({ ...options, service: options.service ?? options.client.config.apiUrl });
  const store = await openArchiveStore(run);
  const controller = new AbortController();
  const onAbort = () => controller.abort(options.signal?.reason);
  if (options.signal?.aborted) onAbort();
  options.signal?.addEventListener('abort', onAbort, { once: true });

  // The walk, the headers and the sink wait for room: a consumer that stops pulling stops them.
  const events = new EventQueue<ArchiveEvent>({ highWaterMark: EVENTS_QUEUED });
  const summary = emptySummary(store.manifest.path, 0, store.removedTemporary);
  const count = (event: ArchiveEvent): Promise<void> => {
    tally(summary, event);
    events.push(event);
    return events.room();
  };

  // The walk first (it is quick: names and sizes), so totals are known from the start, then
  // the headers in the background while the first files run.
  const files: AudioFile[] = [];
  let finished = false;
  const work = (async () => {
    let probing: Promise<void> = Promise.resolve();
    let failed: { error: unknown } | undefined;
    let walked = false;
    try {
      for await (const file of walkAudioFiles(roots, {
        ...run.walk,
        signal: controller.signal,
      })) {
        files.push(file);
        store.claim(file);
        summary.total++;
        await count({ type: 'queued', file });
      }
      walked = true;
      if (run.probe) probing = probeAll(files, () => controller.signal.aborted, count);
      const ordered = options.order === 'walk' ? files : [...files].sort((a, b) => b.size - a.size);
      await pipeline(
        Readable.from(ordered, { objectMode: true }),
        transcribeEach({
          client: options.client,
          store,
          ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
          ...(run.jobTimeoutMs === undefined ? {} : { jobTimeoutMs: run.jobTimeoutMs }),
          ...(options.breaker ? { breaker: options.breaker } : {}),
          signal: controller.signal,
        }),
        writeTranscripts({ store, onEvent: count }),
      );
    } catch (err) {
      if (controller.signal.aborted) {
        // Aborted during the walk: nothing started, and every input found so far is left for a
        // resumed run (as transcribeEach counts the inputs it did not start).
        if (!walked)
          void count({
            type: 'stopped',
            reason: { code: 'ERR_INTERRUPTED', message: 'the run was aborted' },
            notAttempted: files.length,
          });
        summary.stopped ??= { code: 'ERR_INTERRUPTED', message: 'the run was aborted' };
      } else {
        // The run failed (a manifest or sink that cannot be written): the headers still
        // being read stop too, and nothing of the run outlives its error.
        failed = { error: err };
        controller.abort(err);
      }
    } finally {
      try {
        await probing;
        // The manifest's last entries; a failure to write them is the run's error unless it
        // failed already (a manifest that cannot be appended to rejects every later write).
        await store.flush().catch((err: unknown) => {
          failed ??= { error: err };
        });
      } finally {
        finished = true;
        events.wake();
      }
    }
    if (failed !== undefined) throw failed.error;
  })();
  let failure: unknown;
  work.catch((err: unknown) => {
    failure = err;
  });
  try {
    for (;;) {
      yield* events.drain();
      if (finished) break;
      await events.wait();
    }
    await work.catch(() => {});
    if (failure !== undefined) throw failure;
    summary.elapsedMs = Math.round(performance.now() - began);
    yield summary;
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
    // Left early: what waits for room goes on to see the abort.
    events.close();
    if (!finished) {
      controller.abort(new Error('the archive run was left'));
      await work.catch(() => {});
    }
  }
}
