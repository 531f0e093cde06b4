// The quadratic speaker alignment alignSpeakers replaced (every segment scanned for every word),
// kept as the reference its answers must equal, ties included: the tests compare with it, and
// bench/align.bench.ts races it. Its V1 lookups are the one-word scans of speaker-rule.ts.

import type { WordSegment } from '../../src/protocol/records.ts';
import {
  mostOverlapping,
  nearestBoundarySpeaker,
  realSegments,
  segmentHolding,
  UNKNOWN_SPEAKER,
  v1Speaker,
} from '../../src/protocol/speaker-rule.ts';
import type { SpeakerSegment } from '../../src/transforms/merge-diarization.ts';

export const reference = {
  // The one-word scans of the V1 rule are the protocol's own, which SegmentIndex must equal.
  realSegments,
  segmentHolding,
  nearestBoundarySpeaker,
  v1Speaker,
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
    // The pick among the overlaps is the library's; what this checks is finding them.
    const best = mostOverlapping(bySpeaker);
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
