// assembleTranscript(): realtime ASR records in, transcript events out: `partial` (replaces the
// previous provisional text), `utterance` (words committed at is_speech_final) and `final`.
// No word is committed twice, even when the session restarts and the service hears the
// boundary again.

import type { Transform } from 'node:stream';
import { IncompleteStreamError, ProtocolError } from '../protocol/errors.ts';
import { type AsrRecord, parseAsrRecord, type WordSegment } from '../protocol/records.ts';
import { coreTransform } from './core-transform.ts';
import type { LostAudio } from './live-stream.ts';

/** Provisional text: replaces the previous partial; shows what follows the committed text. */
export interface PartialEvent {
  type: 'partial';
  /** Session (stream) id of the record. */
  id: string;
  text: string;
  words: WordSegment[];
}

/** Words committed at a speech boundary; they never change. */
export interface UtteranceEvent {
  type: 'utterance';
  id: string;
  /** 0-based, counting the utterances of the whole pipeline. */
  index: number;
  text: string;
  words: WordSegment[];
  /** Seconds from the start of the pipeline (first and last word), when there are words. */
  start?: number;
  end?: number;
}

/** The stream ended (`is_final`): the whole transcript. */
export interface FinalEvent {
  type: 'final';
  id: string;
  text: string;
  words: WordSegment[];
  utterances: number;
  /**
   * Stretches of audio lost for good, in seconds from the pipeline's start: sttStream could
   * not hear them again after a failure (the service stayed down longer than its replay
   * buffer holds). Absent when nothing was lost.
   */
  lost?: LostAudio[];
}

/**
 * What {@link assembleTranscript} emits: provisional text, a committed utterance, or the final
 * transcript.
 */
export type TranscriptEvent = PartialEvent | UtteranceEvent | FinalEvent;

/** Options of {@link assembleTranscript}. */
export interface AssembleTranscriptOptions {
  /** Check each record's shape (default true); an invalid record fails with `ProtocolError`. */
  validate?: boolean;
  /** Keep every committed word for the `final` event (default true; false for endless streams). */
  keepWords?: boolean;
}

/**
 * Pure core. The no-duplicate rule: a word is committed only if its midpoint lies after the end
 * of the last committed word. Times keep increasing across session restarts (sttStream offsets
 * them), so a word the new session hears again, wholly or across the restart point, is dropped.
 */
export class TranscriptAssembler {
  readonly #keepWords: boolean;
  #lastEnd = Number.NEGATIVE_INFINITY;
  #utterances = 0;
  #texts: string[] = [];
  #words: WordSegment[] = [];
  #final = false;

  constructor(options: { keepWords?: boolean } = {}) {
    this.#keepWords = options.keepWords ?? true;
  }

  /** Whether the final record arrived. */
  get finished(): boolean {
    return this.#final;
  }

  /** End time (seconds) of the last committed word. */
  get committedUntil(): number {
    return this.#lastEnd;
  }

  /**
   * The events one ASR record makes: a `partial`, or an `utterance` when it is speech-final (or
   * final), and for the final record the `final` event after it. Words already committed are
   * dropped.
   * @throws ProtocolError when a record comes after the final record.
   */
  push(record: AsrRecord): TranscriptEvent[] {
    if (this.#final) throw new ProtocolError('ERR_INVALID_RECORD', 'ASR record after the final record');
    const events: TranscriptEvent[] = [];
    const fresh = record.words.filter((w) => (w.start_time + w.end_time) / 2 > this.#lastEnd);
    const text = fresh.length === record.words.length ? record.transcription.trim() : joinWords(fresh);
    // The final record's words are committed too: nothing can replace them after it.
    if (record.is_speech_final || record.is_final) {
      if (fresh.length > 0 || (record.words.length === 0 && text !== '')) {
        events.push(this.#commit(record.id, text, fresh));
      }
    } else {
      events.push({ type: 'partial', id: record.id, text, words: fresh });
    }
    if (record.is_final) {
      this.#final = true;
      const { lost_audio: lost } = record as { lost_audio?: LostAudio[] };
      events.push({
        type: 'final',
        id: record.id,
        text: this.#texts.join(' '),
        words: this.#words,
        utterances: this.#utterances,
        ...(lost && lost.length > 0 ? { lost } : {}),
      });
    }
    return events;
  }

  /** End of input: fails unless the final record arrived. */
  end(): TranscriptEvent[] {
    if (!this.#final) {
      throw new IncompleteStreamError('ASR records ended without a final record (is_final: true)', {
        received: this.#utterances,
      });
    }
    return [];
  }

  #commit(id: string, text: string, words: WordSegment[]): UtteranceEvent {
    const event: UtteranceEvent = { type: 'utterance', id, index: this.#utterances++, text, words };
    if (words.length > 0) {
      event.start = words[0]!.start_time;
      // A loop, not Math.max(...): a record of 100k+ words would overflow the call stack.
      let end = words[0]!.end_time;
      for (const w of words) if (w.end_time > end) end = w.end_time;
      event.end = end;
      this.#lastEnd = Math.max(this.#lastEnd, event.end);
    }
    if (this.#keepWords) {
      if (text !== '') this.#texts.push(text);
      for (const w of words) this.#words.push(w);
    }
    return event;
  }
}

function joinWords(words: readonly WordSegment[]): string {
  return words
    .map((w) => w.word.trim())
    .filter((w) => w !== '')
    .join(' ');
}

/** A Transform (object mode both sides) from ASR records to `TranscriptEvent`s. */
export function assembleTranscript(options: AssembleTranscriptOptions = {}): Transform {
  const assembler = new TranscriptAssembler(options);
  const validate = options.validate ?? true;
  return coreTransform<unknown, TranscriptEvent>(
    {
      push: (record) => assembler.push(validate ? parseAsrRecord(record) : (record as AsrRecord)),
      end: () => assembler.end(),
    },
    { objectMode: true },
  );
}
