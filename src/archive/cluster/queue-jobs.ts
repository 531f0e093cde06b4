// A cluster's queue jobs: what one carries to a worker and what a worker returns, its
// deterministic id, and its failure read back as a reason.

import { createHash } from 'node:crypto';
import { resolve } from 'node:path';
import type { Workload } from '../../protocol/limits.ts';
import type { AudioFile } from '../../sources/files.ts';
import type { Reason } from '../events.ts';
import type { ArchiveFormat, ArchiveSettings } from '../settings.ts';

/** What a queue job carries: everything a worker needs, nothing it must ask the enqueuer. */
export interface ArchiveJobData {
  /**
   * The input's absolute path: a worker's working directory is not the enqueuer's, so a path
   * given relative would name another file there, or none.
   */
  input: string;
  /** The path relative to the root given (a file given directly: its base name). */
  relative: string;
  /** Bytes, when it was queued (part of the job id: a changed input is a new job). */
  size: number;
  /** Modification time (ms since the epoch), when it was queued. */
  mtimeMs: number;
  settings: ArchiveSettings;
  formats: ArchiveFormat[];
  /** Result files (absolute paths), named by the enqueuer (the names a local run gives). */
  outputs: string[];
  /** Batch: stop waiting for the service job after this long. Default 4 h. */
  jobTimeoutMs?: number;
  /** Batch: the service job holding this input's work, stored the moment it was accepted. */
  serviceJobId?: string;
}

/** What a worker returns for a job done (its results are written). */
export interface ArchiveJobResult {
  /** Words in the transcript. */
  words: number;
  /** Audio seconds transcribed, when the mode reports them (not fast). */
  audioSeconds?: number;
  /** Batch: the service job that did the work. */
  jobId?: string;
  /** Input the decoder skipped (the results stand without it). */
  warnings?: Reason[];
  /** How long the worker spent on it. */
  elapsedMs: number;
}

export const workloadOf = (settings: ArchiveSettings): Workload =>
  settings.mode === 'batch' ? 'batch' : settings.mode === 'fast' ? 'fast' : 'realtime_asr';

/** A queue job's id: the same input (path, size, mtime) with the same settings and results. */
export function archiveJobId(
  data: Omit<ArchiveJobData, 'relative' | 'jobTimeoutMs' | 'serviceJobId'>,
): string {
  const key = JSON.stringify([
    resolve(data.input),
    data.size,
    data.mtimeMs,
    data.settings.mode,
    data.settings.language,
    data.settings.speakers,
    data.formats,
    data.outputs.map((o) => resolve(o)),
  ]);
  return `a${createHash('sha256').update(key).digest('hex').slice(0, 40)}`;
}

/** `CODE: message` (a failed job's reason) back to a reason. */
export function parseFailedReason(text: string | undefined): Reason {
  const m = /^([A-Z][A-Z0-9_]+): ([\s\S]*)$/.exec(text ?? '');
  if (m) return { code: m[1]!, message: m[2]! };
  if (/stalled more than/.test(text ?? ''))
    return { code: 'ERR_STALLED', message: `its workers died too often: ${text}` };
  return { code: 'ERR_UNKNOWN', message: text || 'the job failed' };
}

export const fileOf = (data: ArchiveJobData): AudioFile => ({
  path: data.input,
  relative: data.relative,
  size: data.size,
  mtimeMs: data.mtimeMs,
});
