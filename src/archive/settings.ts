// An archive run's settings: how inputs are transcribed, which result files are written, and
// what the results depend on (a resumed run with other settings transcribes again).

import type { Language } from '../protocol/languages.ts';

/** Result formats: captions, plain text, JSON with every word, the speaker timeline as SVG. */
export const ARCHIVE_FORMATS = ['vtt', 'srt', 'txt', 'json', 'svg'] as const;
/** One result format: `vtt`, `srt`, `txt`, `json` or `svg` (see {@link ARCHIVE_FORMATS}). */
export type ArchiveFormat = (typeof ARCHIVE_FORMATS)[number];
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
}
