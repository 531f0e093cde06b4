// The quadratic speaker alignment alignSpeakers replaced (every segment scanned for every word),
// kept as the reference its answers must equal, ties included: the tests compare with it, and
// bench/align.bench.ts races it.

import type { WordSegment } from '../../src/protocol/records.ts';
import { UNKNOWN_SPEAKER } from '../../src/protocol/speaker-rule.ts';
import type { SpeakerSegment } from '../../src/transforms/merge-diarization.ts';

export const reference = {
  realSegments(segments: readonly SpeakerSegment[]): SpeakerSegment[] {
    return segments
      .map((s, i) => ({ s, i }))
      .filter(({ s }) => s.end_time > s.start_time)
      .sort((a, b) => a.s.start_time - b.s.start_time || a.i - b.i)
      .map(({ s }) => s);
  },
  segmentHolding(time: number, real: readonly SpeakerSegment[]): SpeakerSegment | undefined {
    return real.find((s) => s.start_time <= time && time <= s.end_time);
  },
  nearestBoundarySpeaker(word: WordSegment, real: readonly SpeakerSegment[]): string {
    const mid = (word.start_time + word.end_time) / 2;
    let speaker = real[0]!.speaker;
    let best = Number.POSITIVE_INFINITY;
    for (const s of real) {
      const d = Math.round(Math.min(Math.abs(mid - s.start_time), Math.abs(mid - s.end_time)) * 1e6);
      if (d < best) {
        best = d;
        speaker = s.speaker;
      }
    }
    return speaker;
  },
  v1Speaker(word: WordSegment, real: readonly SpeakerSegment[], forceAlign: boolean): string | null {
    if (real.length === 0) return null;
    const holder = reference.segmentHolding(word.start_time, real);
    if (holder) return holder.speaker;
    return forceAlign ? reference.nearestBoundarySpeaker(word, real) : UNKNOWN_SPEAKER;
  },
  labelOne(
    word: WordSegment,
    segs: readonly SpeakerSegment[],
    options: { mode?: 'overlap' | 'v1'; forceAlign?: boolean },
  ): string {
    if ((options.mode ?? 'overlap') === 'v1')
      return reference.v1Speaker(word, segs, options.forceAlign !== false)!;
    const micros = (seconds: number) => Math.round(seconds * 1e6);
    const start = micros(word.start_time);
    const end = micros(word.end_time);
    const bySpeaker = new Map<string, number>();
    for (const s of segs) {
      const from = micros(s.start_time);
      const to = micros(s.end_time);
      const overlap =
        end > start ? Math.min(end, to) - Math.max(start, from) : start >= from && start < to ? 1 : 0;
      if (overlap > 0) bySpeaker.set(s.speaker, (bySpeaker.get(s.speaker) ?? 0) + overlap);
    }
    let best: string | undefined;
    let bestOverlap = 0;
    for (const [speaker, overlap] of bySpeaker) {
      if (overlap > bestOverlap) {
        bestOverlap = overlap;
        best = speaker;
      }
    }
    if (best !== undefined) return best;
    return options.forceAlign === false ? UNKNOWN_SPEAKER : reference.nearestBoundarySpeaker(word, segs);
  },
  alignSpeakers(
    words: readonly WordSegment[],
    segments: readonly SpeakerSegment[],
    options: { mode?: 'overlap' | 'v1'; forceAlign?: boolean },
  ) {
    const segs = reference.realSegments(segments);
    return words.map((w) => ({
      ...w,
      speaker: segs.length === 0 ? null : reference.labelOne(w, segs, options),
    }));
  },
};
