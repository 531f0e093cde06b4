// Results for a complete recording (batch jobs and fast transcription) from its speech regions:
// words (generated, or recognized), speaker turns, and the ITN and redaction variants a batch
// job asks for.

import type { DiarizationSegment, JobV2Done, V2_RESULT_FIELDS } from '../../protocol/jobs.ts';
import type { Language } from '../../protocol/languages.ts';
import type { WordSegment } from '../../protocol/records.ts';
import type { SpeechRegion } from './regions.ts';
import { ALTERNATIVE_TURNS, DEFAULT_TURNS, SpeakerTurns } from './speakers.ts';
import { inverseNormalize, joinWords, redact } from './text.ts';
import { roundToMs } from './times.ts';
import { recordingWords } from './words.ts';

/** What the audio analysis kept of an upload: enough to produce every result. */
export interface AnalyzedAudio {
  durationSec: number;
  regions: SpeechRegion[];
  /**
   * SHA-256 hex of the uploaded file bytes (the key of registered transcripts); absent when no
   * transcript was registered under a SHA-256 as the upload began, so none could match.
   */
  sha256?: string;
  /** The audio as raw PCM16LE 16 kHz mono in a temp file, when the recognizer is to decode it. */
  recording?: RecordingAudio;
}

/** An upload's audio kept on disk for the recognizer; `release()` removes it. */
export interface RecordingAudio {
  readonly path: string;
  release(): void;
}

export type DiarizationModel = 'off' | 'd1' | 'd2';

export interface BatchOptions {
  language: Language;
  diarization: DiarizationModel;
  itn: boolean;
  redact: boolean;
  transcript: string | undefined;
}

/** The result fields of a `done` V2 job, in the interface's order. */
export type BatchResult = Pick<JobV2Done, (typeof V2_RESULT_FIELDS)[number]>;

const DIARIZATION_ONSET_SEC = 0.15;

/**
 * `recognized`: the recognizer's words per speech region, which answer instead of generated
 * words (a registered transcript still wins).
 */
export function batchResult(
  audio: AnalyzedAudio,
  options: BatchOptions,
  recognized?: WordSegment[][],
): BatchResult {
  const words =
    recognized && options.transcript === undefined
      ? recognized.flat()
      : recordingWords(audio.regions, audio.durationSec, options.language, options.transcript).flatMap(
          (r) => r.words,
        );
  let diarization: DiarizationSegment[] = [];
  if (options.diarization !== 'off') {
    const turns = new SpeakerTurns(options.diarization === 'd2' ? ALTERNATIVE_TURNS : DEFAULT_TURNS);
    // Diarization boundaries differ from the words' (as a real model's do): a segment starts a
    // little after its speech region, so a region's first word lies outside every segment.
    diarization = audio.regions.map((r) => ({
      start_time: roundToMs(r.start + Math.min(DIARIZATION_ONSET_SEC, (r.end - r.start) / 4)),
      end_time: roundToMs(r.end),
      speaker: turns.assign(r),
    }));
  }
  const itn = options.itn ? inverseNormalize(words) : null;
  const red = options.redact ? redact(itn ?? words) : null;
  const final = red?.words ?? itn ?? words;
  return {
    asr_result: joinWords(words),
    asr_word_segments: words,
    diarization_segments: diarization,
    itn_result: itn ? joinWords(itn) : null,
    itn_word_segments: itn,
    itn_output_formats: null,
    redaction_result: red ? joinWords(red.words) : null,
    redaction_word_segments: red ? red.words : null,
    redaction_labels: red?.labels ?? '',
    final_result: joinWords(final),
    final_word_segments: final,
  };
}

/** Fast transcription: one record's words per speech region (at least one, possibly empty). */
export function fastSegments(
  audio: AnalyzedAudio,
  language: Language,
  transcript: string | undefined,
  recognized?: WordSegment[][],
): WordSegment[][] {
  const parts =
    recognized && transcript === undefined
      ? recognized
      : recordingWords(audio.regions, audio.durationSec, language, transcript).map((r) => r.words);
  return parts.length > 0 ? parts : [[]];
}
