// Time in a live stream that runs over several sessions. Each session's records are timed from
// its own start and count the keepalive silence it was sent; the pipeline's are timed from the
// pipeline's start, in the source's audio only. A SessionClock maps one session's times; an
// EmittedWatermark keeps words (segments) a restarted session hears again from going out twice.

import type { AsrRecord, DiarizationRecord, LiveDiarizationSegment } from '../protocol/records.ts';

/** Keepalive silence a session heard: `sec` seconds inserted at session time `at`. */
interface Filler {
  at: number;
  sec: number;
}

const segmentEnd = (s: LiveDiarizationSegment): number =>
  typeof s.end_time === 'number' ? s.end_time : s.start_time;

/** The latest end among `items`, or -Infinity. */
export function latestEnd<T>(items: readonly T[], end: (item: T) => number): number {
  let max = Number.NEGATIVE_INFINITY;
  for (const item of items) max = Math.max(max, end(item));
  return max;
}

/** Where a diarization segment ends (an open one: where it starts). */
export { segmentEnd };

/**
 * One session's clock: its time origin in the pipeline (`offsetSec`), the audio it accepted
 * (`sec`, keepalive silence included, since its limits count it) and that silence's place.
 */
export class SessionClock {
  /** Pipeline seconds at this session's time 0. */
  readonly offsetSec: number;
  /** Seconds of audio the session accepted, keepalive silence included. */
  sec = 0;
  /** Seconds of the frame on its way to the session (sent, not accepted yet). */
  sending = 0;
  readonly #fillers: Filler[] = [];

  constructor(offsetSec: number) {
    this.offsetSec = offsetSec;
  }

  /**
   * Session time up to which the session was sent audio: no record of it can be about later
   * audio (over Socket.IO a frame's records may come before its acknowledgement).
   */
  get sentSec(): number {
    return this.sec + this.sending;
  }

  /** The session accepted `bytes` of PCM; `filler`: silence of our own, not the source's. */
  accepted(seconds: number, filler: boolean): void {
    if (filler) this.#fillers.push({ at: this.sec, sec: seconds });
    this.sec += seconds;
  }

  /**
   * Session time to pipeline time: the offset plus the session time without the keepalive
   * silence inserted before it (a time inside a filler maps to where the filler began).
   * Keepalive audio is not the source's, so it must not delay what the source said after a stall.
   */
  toPipeline(t: number): number {
    let inserted = 0;
    for (const f of this.#fillers) {
      if (t >= f.at + f.sec) inserted += f.sec;
      else if (t > f.at) inserted += t - f.at;
      else break;
    }
    return this.offsetSec + t - inserted;
  }

  get #identity(): boolean {
    return this.offsetSec === 0 && this.#fillers.length === 0;
  }

  /** An ASR record with word times in pipeline time. */
  shiftAsr(record: AsrRecord): AsrRecord {
    if (this.#identity) return record;
    return {
      ...record,
      words: record.words.map((w) => ({
        ...w,
        start_time: this.toPipeline(w.start_time),
        end_time: this.toPipeline(w.end_time),
      })),
    };
  }

  /**
   * A diarization record with segment times in pipeline time. Speaker labels are relative to
   * one stream: a later session's (`index` > 0) are other people, labelled `<label>#<index>`.
   */
  shiftDiarization(record: DiarizationRecord, index: number): DiarizationRecord {
    if (this.#identity && index === 0) return record;
    const shift = (s: LiveDiarizationSegment): LiveDiarizationSegment => ({
      ...s,
      start_time: this.toPipeline(s.start_time),
      ...(typeof s.end_time === 'number' ? { end_time: this.toPipeline(s.end_time) } : {}),
      speaker: index === 0 ? s.speaker : `${s.speaker}#${index}`,
    });
    return {
      ...record,
      final_segments: record.final_segments.map(shift),
      active_segments: record.active_segments.map(shift),
    };
  }
}

/**
 * The final record of a session that ended before the stream did (rotation): not the stream's
 * end, but its words are committed.
 */
export function continuedAsr(record: AsrRecord): AsrRecord {
  return { ...record, is_speech_final: true, is_final: false };
}

/**
 * As {@link continuedAsr} for diarization: the session can no longer change its active
 * segments, so they are closed, ending where the next one starts or with the session's audio.
 */
export function continuedDiarization(record: DiarizationRecord, sessionEndSec: number): DiarizationRecord {
  const active = [...record.active_segments].sort((a, b) => a.start_time - b.start_time);
  const closed = active.map((s, i) => ({
    ...s,
    end_time: s.end_time ?? Math.max(s.start_time, active[i + 1]?.start_time ?? sessionEndSec),
  }));
  return {
    ...record,
    final_segments: [...record.final_segments, ...closed],
    active_segments: [],
    is_final: false,
  };
}

/**
 * Pipeline time up to which words (closed segments) went downstream: a restarted session that
 * hears audio again gives its words again, and they must not be emitted twice. A word whose
 * midpoint is not after the watermark is dropped.
 */
export class EmittedWatermark {
  #until = Number.NEGATIVE_INFINITY;

  /** Pipeline time up to which words (segments) went downstream (-Infinity: none yet). */
  get until(): number {
    return this.#until;
  }

  /**
   * `record` without the words emitted already; committed words raise the watermark, never past
   * `limit`: the end of the audio their session was sent (a word timed past it cannot be of
   * it, and would hide every later word).
   */
  newWords(record: AsrRecord, limit = Number.POSITIVE_INFINITY): AsrRecord {
    const until = this.#until;
    const words = record.words.filter((w) => (w.start_time + w.end_time) / 2 > until);
    if ((record.is_speech_final || record.is_final) && words.length > 0)
      this.#until = Math.max(
        until,
        Math.min(
          limit,
          latestEnd(words, (w) => w.end_time),
        ),
      );
    if (words.length === record.words.length) return record;
    return { ...record, words, transcription: words.map((w) => w.word).join(' ') };
  }

  /** As {@link EmittedWatermark.newWords}, for closed diarization segments. */
  newSegments(record: DiarizationRecord, limit = Number.POSITIVE_INFINITY): DiarizationRecord {
    const until = this.#until;
    const segments = record.final_segments.filter((s) => (s.start_time + segmentEnd(s)) / 2 > until);
    if (segments.length > 0) this.#until = Math.max(until, Math.min(limit, latestEnd(segments, segmentEnd)));
    if (segments.length === record.final_segments.length) return record;
    return { ...record, final_segments: segments };
  }
}
