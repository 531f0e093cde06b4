// The V1 lookup's speaker rule (interface, GET /v1/transcribe/{job_id}/{lang}): a word takes
// the speaker of the segment holding its start; outside every real segment, with force-align
// it takes the speaker of the segment boundary nearest its midpoint (ties to the earlier
// segment), without it `UNKNOWN_SPEAKER`; with no real segment the speaker stays null.
// Shared by the emulator (which answers V1 lookups) and alignSpeakers() (which offers it live),
// which label many words at once through SegmentIndex (segment-index.ts): the same answers as
// these one-word scans, in O(log segments) a word.

/** Speaker of a V1 word outside every real segment without force-align (interface, V1 lookup). */
export const UNKNOWN_SPEAKER = 'UNKNOWN_SPEAKER';

/** Anything with start and end times, in seconds (a word). */
export interface Timed {
  /** Start, seconds. */
  start_time: number;
  /** End, seconds. */
  end_time: number;
}

/** A speaker segment, times in seconds. */
export interface Segment extends Timed {
  /** Speaker label. */
  speaker: string;
}

/** Segments with positive duration, ordered by start (stable for equal starts). */
export function realSegments<S extends Segment>(segments: readonly S[]): S[] {
  return segments
    .map((s, i) => ({ s, i }))
    .filter(({ s }) => s.end_time > s.start_time)
    .sort((a, b) => a.s.start_time - b.s.start_time || a.i - b.i)
    .map(({ s }) => s);
}

/** The first (earliest) real segment holding `time`, boundaries included. */
export function segmentHolding<S extends Segment>(time: number, real: readonly S[]): S | undefined {
  return real.find((s) => s.start_time <= time && time <= s.end_time);
}

/** The speaker of the segment boundary nearest the word's midpoint; ties to the earlier segment. */
export function nearestBoundarySpeaker(word: Timed, real: readonly Segment[]): string {
  const mid = (word.start_time + word.end_time) / 2;
  let speaker = real[0]!.speaker;
  let best = Number.POSITIVE_INFINITY;
  for (const s of real) {
    // Whole microseconds, so equal distances in seconds tie despite binary fractions.
    const d = Math.round(Math.min(Math.abs(mid - s.start_time), Math.abs(mid - s.end_time)) * 1e6);
    if (d < best) {
      best = d;
      speaker = s.speaker;
    }
  }
  return speaker;
}

/** The V1 speaker of one word; `real` must come from `realSegments`. */
export function v1Speaker(word: Timed, real: readonly Segment[], forceAlign: boolean): string | null {
  if (real.length === 0) return null;
  const holder = segmentHolding(word.start_time, real);
  if (holder) return holder.speaker;
  return forceAlign ? nearestBoundarySpeaker(word, real) : UNKNOWN_SPEAKER;
}

/**
 * The speaker with the most overlap, from overlaps per speaker in the order each speaker was
 * first seen: strictly more wins, so a tie stays with the speaker whose segment came earlier.
 * Undefined when nothing overlaps.
 */
export function mostOverlapping(bySpeaker: ReadonlyMap<string, number>): string | undefined {
  let best: string | undefined;
  let bestOverlap = 0;
  for (const [speaker, overlap] of bySpeaker) {
    if (overlap > bestOverlap) {
      bestOverlap = overlap;
      best = speaker;
    }
  }
  return best;
}
