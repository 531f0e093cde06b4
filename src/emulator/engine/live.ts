// Live engines: PCM in (any chunking), records out. ASR gives a provisional record as a region
// grows, a speech-final record at each pause and a final record last; diarization gives
// closed segments as per-record deltas and the region in progress as an active snapshot.

import type { Language } from '../../protocol/languages.ts';
import type {
  AsrRecord,
  DiarizationRecord,
  LiveDiarizationSegment,
  WordSegment,
} from '../../protocol/records.ts';
import { LIVE_SAMPLE_RATE } from '../../protocol/socket-events.ts';
import { type SpeechRegion, SpeechRegionDetector } from './regions.ts';
import { SpeakerTurns } from './speakers.ts';
import { roundToMs } from './times.ts';
import { generatedWord, layoutWords, TranscriptQueue, WORD_SLOT_SEC, wordCount } from './words.ts';

/** A region still open when the stream ends and shorter than this stays provisional. */
const PROVISIONAL_TAIL_SEC = 0.5;

/** Realtime ASR for one stream. */
export class LiveAsrEngine {
  readonly #id: string;
  readonly #language: Language;
  readonly #detector = new SpeechRegionDetector(LIVE_SAMPLE_RATE);
  readonly #transcript: TranscriptQueue | undefined;
  #seq = 0;
  #provisionalRegion: number | undefined;
  #provisionalWords = 0;
  #lastEnd = 0;

  constructor(id: string, language: Language, transcript?: string) {
    this.#id = id;
    this.#language = language;
    this.#transcript = transcript === undefined ? undefined : new TranscriptQueue(transcript);
  }

  /** Records for one accepted chunk of PCM16LE 16 kHz mono. */
  push(pcm: Uint8Array): AsrRecord[] {
    this.#detector.push(pcm);
    const out = this.#detector.takeClosed().map((r) => this.#record(this.#closedWords(r), true, false));
    const start = this.#detector.openStart;
    if (start === undefined) return out;
    if (this.#provisionalRegion !== start) {
      this.#provisionalRegion = start;
      this.#provisionalWords = 0;
    }
    const k = Math.floor((this.#detector.speechUntil! - start) / WORD_SLOT_SEC);
    if (k > this.#provisionalWords) {
      this.#provisionalWords = k;
      const words = this.#transcript
        ? this.#transcript.peek(k)
        : Array.from({ length: k }, (_, i) => generatedWord(this.#language, start, i));
      const segments = words.map((word, i) => ({
        start_time: roundToMs(start + WORD_SLOT_SEC * (i + 0.1)),
        end_time: roundToMs(start + WORD_SLOT_SEC * (i + 0.9)),
        word,
      }));
      out.push(this.#record(segments, false, false));
    }
    return out;
  }

  /** The stream's last records, ending with the final record (`is_final: true`). */
  finish(): AsrRecord[] {
    const closed = this.#detector.end();
    const last = closed.pop();
    const out = closed.map((r) => this.#record(this.#closedWords(r), true, false));
    const words = last ? this.#closedWords(last) : [];
    const rest = this.#transcript?.rest() ?? [];
    if (rest.length > 0) {
      const from = this.#lastEnd;
      words.push(...layoutWords(rest, from, Math.max(from, this.#detector.position)));
    }
    out.push(this.#record(words, true, true));
    return out;
  }

  #closedWords(region: SpeechRegion): WordSegment[] {
    this.#provisionalRegion = undefined;
    this.#provisionalWords = 0;
    this.#lastEnd = region.end;
    const n = wordCount(region.end - region.start);
    const words = this.#transcript
      ? this.#transcript.take(n)
      : Array.from({ length: n }, (_, i) => generatedWord(this.#language, region.start, i));
    return layoutWords(words, region.start, region.end);
  }

  #record(words: WordSegment[], speechFinal: boolean, final: boolean): AsrRecord {
    return asrRecord(this.#id, this.#seq++, words, speechFinal, final);
  }
}

/** A realtime ASR record of `words` (its transcription their words joined). */
export function asrRecord(
  id: string,
  seq: number,
  words: WordSegment[],
  speechFinal: boolean,
  final: boolean,
): AsrRecord {
  return {
    id,
    seq,
    transcription: words.map((w) => w.word).join(' '),
    words,
    is_speech_final: speechFinal,
    is_final: final,
  };
}

/** Realtime diarization for one stream. */
export class LiveDiarizationEngine {
  readonly #id: string;
  readonly #detector = new SpeechRegionDetector(LIVE_SAMPLE_RATE);
  readonly #turns = new SpeakerTurns();

  constructor(id: string) {
    this.#id = id;
  }

  /** At most one record per chunk: new closed segments and the active snapshot. */
  push(pcm: Uint8Array): DiarizationRecord[] {
    this.#detector.push(pcm);
    const finals = this.#detector.takeClosed().map((r) => this.#segment(r));
    const start = this.#detector.openStart;
    const active: LiveDiarizationSegment[] =
      start === undefined
        ? []
        : [
            {
              start_time: roundToMs(start),
              end_time: roundToMs(this.#detector.position),
              speaker: this.#turns.peek(start),
            },
          ];
    if (finals.length === 0 && active.length === 0) return [];
    return [{ id: this.#id, final_segments: finals, active_segments: active, is_final: false }];
  }

  /** The final record; a short region still open at the end stays in `active_segments`. */
  finish(): DiarizationRecord[] {
    const wasOpen = this.#detector.openStart !== undefined;
    const closed = this.#detector.end();
    const tail = closed.at(-1);
    const provisional =
      wasOpen && tail !== undefined && tail.end - tail.start < PROVISIONAL_TAIL_SEC
        ? closed.pop()
        : undefined;
    const finals = closed.map((r) => this.#segment(r));
    const active = provisional ? [this.#segment(provisional)] : [];
    return [{ id: this.#id, final_segments: finals, active_segments: active, is_final: true }];
  }

  #segment(region: SpeechRegion): LiveDiarizationSegment {
    return {
      start_time: roundToMs(region.start),
      end_time: roundToMs(region.end),
      speaker: this.#turns.assign(region),
    };
  }
}
