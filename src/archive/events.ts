// What an archive run reports: every input's events, the run's pauses and stop, and the summary
// that ends it, counted from those events (the same way for a local run and a cluster's).

import type { AudioFile } from '../sources/files.ts';
import type { FileResult } from './transcribe-file.ts';

/** An input's reason: a stable code and a message. */
export interface Reason {
  code: string;
  message: string;
}

/** Why a resumed run does not run an input again: it is done, unchanged, with its results there. */
export const ALREADY_DONE: Readonly<Reason> = Object.freeze({
  code: 'ALREADY_DONE',
  message: 'done in an earlier run, unchanged',
});

/** Whether a `skipped` event's reason is {@link ALREADY_DONE} (counted apart from inputs not taken). */
export const isAlreadyDone = (reason: Reason): boolean => reason.code === ALREADY_DONE.code;

/** What happens to the inputs of an archive run. Every event of one input carries its `file`. */
export type ArchiveEvent =
  /** The walk found the input; `durationSec` once its header was read (see `probed`). */
  | { type: 'queued'; file: AudioFile }
  /** The input's audio duration, read from its header without decoding. */
  | { type: 'probed'; file: AudioFile; durationSec: number }
  | { type: 'started'; file: AudioFile; attempt: number }
  /** Live mode: audio seconds sent so far. */
  | { type: 'progress'; file: AudioFile; audioSeconds: number }
  /** Transcribed, not yet written (transcribeEach's output; writeTranscripts makes it `done`). */
  | { type: 'transcribed'; file: AudioFile; outputs: string[]; result: FileResult; elapsedMs: number }
  | {
      type: 'done';
      file: AudioFile;
      outputs: string[];
      words: number;
      audioSeconds?: number;
      elapsedMs: number;
      warnings?: Reason[];
    }
  | { type: 'failed'; file: AudioFile; error: Reason; jobId?: string }
  /** Not taken: hidden, special, a symlink not followed, or (`ALREADY_DONE`) done in an earlier run. */
  | { type: 'skipped'; file: AudioFile; reason: Reason }
  /**
   * No file starts for now: the service stopped answering (`ERR_SERVICE_UNREACHABLE`: until it
   * answers again), or, following a queue, no worker serves it (`NO_WORKER`: until one does).
   */
  | { type: 'paused'; reason: Reason }
  | { type: 'resumed'; pausedMs: number }
  /**
   * The run stopped before its end (the key was refused, the service stayed unreachable, or
   * it was aborted); `notAttempted` inputs are left for a resumed run.
   */
  | { type: 'stopped'; reason: Reason; notAttempted: number };

/** The last event of a run: counts, audio seconds and why it stopped early, if it did. */
export interface ArchiveSummary {
  type: 'summary';
  /** Inputs found by the walk (skipped ones included). */
  total: number;
  /** Inputs transcribed. */
  done: number;
  /** Inputs that failed. */
  failed: number;
  /** Inputs not taken by the walk (hidden, special, a symlink not followed). */
  skipped: number;
  /** Inputs done in an earlier run, unchanged (resume): not run again. */
  alreadyDone: number;
  /** Inputs left for a resumed run (the run stopped or was aborted). */
  notAttempted: number;
  /** Audio seconds of the inputs done. */
  audioSeconds: number;
  /** Audio seconds of all inputs, as far as their headers said. */
  totalAudioSeconds: number;
  /** Milliseconds the run took. */
  elapsedMs: number;
  /** Why the run ended early, if it did. */
  stopped?: Reason;
  /** The manifest's path. */
  manifest: string;
  /** Temporary files of a killed run removed first (resume). */
  removedTemporary: number;
}

/** A run's summary before anything is counted (`total` inputs). */
export function emptySummary(manifest: string, total: number, removedTemporary: number): ArchiveSummary {
  return {
    type: 'summary',
    total,
    done: 0,
    failed: 0,
    skipped: 0,
    alreadyDone: 0,
    notAttempted: 0,
    audioSeconds: 0,
    totalAudioSeconds: 0,
    elapsedMs: 0,
    manifest,
    removedTemporary,
  };
}

/** Count one event of a run (local or cluster) into its summary. */
export function tally(summary: ArchiveSummary, event: ArchiveEvent): void {
  if (event.type === 'done') {
    summary.done++;
    summary.audioSeconds += event.audioSeconds ?? 0;
  } else if (event.type === 'failed') summary.failed++;
  else if (event.type === 'skipped') {
    if (isAlreadyDone(event.reason)) summary.alreadyDone++;
    else summary.skipped++;
  } else if (event.type === 'probed') summary.totalAudioSeconds += event.durationSec;
  else if (event.type === 'stopped') {
    summary.stopped = event.reason;
    summary.notAttempted = event.notAttempted;
  }
}
