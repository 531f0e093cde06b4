// An archive run's settings: how inputs are transcribed, which result files are written, and
// what the results depend on (a resumed run with other settings transcribes again). One options
// type and one resolver of its defaults serve a local run and a cluster's.

import type { Language } from '../protocol/languages.ts';
import type { WalkOptions } from '../sources/files.ts';

/** Result formats: captions, plain text, JSON with every word, the speaker timeline as SVG. */
export const ARCHIVE_FORMATS = ['vtt', 'srt', 'txt', 'json', 'svg'] as const;
/** One result format: `vtt`, `srt`, `txt`, `json` or `svg` (see {@link ARCHIVE_FORMATS}). */
export type ArchiveFormat = (typeof ARCHIVE_FORMATS)[number];
/** The formats written unless told otherwise. */
export const DEFAULT_ARCHIVE_FORMATS: readonly ArchiveFormat[] = Object.freeze(['vtt', 'json']);
/**
 * How an archive's inputs are transcribed: `live` (realtime sessions fed from the decoded file),
 * `batch` (one job per input, waited for) or `fast` (fast transcription of the whole file).
 */
export type ArchiveMode = 'live' | 'batch' | 'fast';

/**
 * What an archive's results depend on besides the inputs (a resumed run with other settings
 * transcribes again).
 */
export interface ArchiveSettings {
  /** How inputs are transcribed. */
  mode: ArchiveMode;
  /** The language asked of the service. */
  language: Language;
  /** Whether words are labelled with speakers. */
  speakers: boolean;
  /**
   * What answered: a resumed run against another service (another API_URL, the built-in
   * emulator with another engine) transcribes again. Undefined: not compared.
   */
  service?: string | undefined;
}

/** The settings alone, from anything that holds them. */
export function settingsOf(options: ArchiveSettings): ArchiveSettings {
  const { mode, language, speakers, service } = options;
  return service === undefined ? { mode, language, speakers } : { mode, language, speakers, service };
}

/** The walk's choices an archive run passes on: which files it takes and how it treats links. */
export type ArchiveWalkOptions = Pick<WalkOptions, 'include' | 'exclude' | 'followSymlinks'>;

/** The walk's options from an archive run's: only those that choose files. */
export function walkOptionsOf(options: ArchiveWalkOptions): ArchiveWalkOptions {
  const { include, exclude, followSymlinks } = options;
  return { include, exclude, followSymlinks };
}

/**
 * What an archive run is asked, run here (`transcribeArchive()`) or by a cluster's workers
 * (`enqueueArchive()`).
 */
export interface ArchiveRunOptions extends ArchiveWalkOptions {
  /** Where results and `manifest.ndjson` go (in a cluster: storage every worker sees). */
  out: string;
  /** Default `live`. */
  mode?: ArchiveMode;
  /** Default `auto`. */
  language?: Language;
  /** Label speakers (live and batch). Default false. */
  speakers?: boolean;
  /**
   * What answers the run's requests, recorded with each manifest entry: with `resume`, an input
   * done by another service is transcribed again (and a batch job submitted to another service
   * is not waited for). `transcribeArchive()` defaults it to its client's API URL; the CLI names
   * its built-in emulator by engine (`emulator:generated`, `emulator:pocketsphinx`). Entries
   * written without one (by earlier versions) match any service. Not in a cluster, whose workers
   * each talk to a service of their own.
   */
  service?: string;
  /** Default `['vtt', 'json']`. */
  formats?: readonly ArchiveFormat[];
  /**
   * Skip inputs the manifest says are done, unchanged, with the same settings and whose result
   * files exist, and wait for the batch jobs an earlier run submitted (see
   * `ArchiveStoreOptions.resume`). In a cluster also retry this run's failed jobs and resume a
   * queue a refused key stopped; jobs already queued are followed in any case (one done whose
   * result files are gone runs again). Default false.
   */
  resume?: boolean;
  /** Batch: stop waiting for a job after this long. Default 4 h. */
  jobTimeoutMs?: number;
  /**
   * Read each input's duration from its header while the run starts, or while a cluster's run is
   * followed (for `probed` events and the summary's totals). Default true.
   */
  probe?: boolean;
}

/** An archive run's options with their defaults applied. */
export interface ArchiveRun extends ArchiveSettings {
  out: string;
  formats: ArchiveFormat[];
  resume: boolean;
  jobTimeoutMs: number | undefined;
  probe: boolean;
  walk: ArchiveWalkOptions;
}

/** Apply the defaults of {@link ArchiveRunOptions}: the one place they are decided. */
export function resolveArchiveRun(options: ArchiveRunOptions): ArchiveRun {
  return {
    out: options.out,
    mode: options.mode ?? 'live',
    language: options.language ?? 'auto',
    speakers: options.speakers ?? false,
    service: options.service,
    formats: [...(options.formats ?? DEFAULT_ARCHIVE_FORMATS)],
    resume: options.resume === true,
    jobTimeoutMs: options.jobTimeoutMs,
    probe: options.probe !== false,
    walk: walkOptionsOf(options),
  };
}
