// alignSpeakers vs the scan it replaced (every segment for every word), on a 4-hour recording:
// 36,000 words, a turn every 4 s (3,600 segments, neighbours overlapping a little, some words in
// gaps), and a long segment holding a stretch of short ones. Both modes; the V1 baseline is the
// one-word rule of src/protocol/speaker-rule.ts called for each word.

import assert from 'node:assert/strict';
import {
  alignSpeakers,
  nearestBoundarySpeaker,
  realSegments,
  UNKNOWN_SPEAKER,
  v1Speaker,
  type WordSegment,
} from '../src/index.ts';
import type { SpeakerSegment } from '../src/transforms/merge-diarization.ts';
import { type Comparison, compare } from './harness.ts';

const micros = (seconds: number) => Math.round(seconds * 1e6);

/** The overlap rule as alignSpeakers had it: every segment scanned for every word. */
function scanOverlap(words: readonly WordSegment[], segments: readonly SpeakerSegment[]) {
  const segs = realSegments(segments);
  return words.map((word) => {
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
    return {
      ...word,
      speaker: best ?? (segs.length > 0 ? nearestBoundarySpeaker(word, segs) : UNKNOWN_SPEAKER),
    };
  });
}

function scanV1(words: readonly WordSegment[], segments: readonly SpeakerSegment[]) {
  const real = realSegments(segments);
  return words.map((word) => ({ ...word, speaker: v1Speaker(word, real, true) }));
}

export async function run(): Promise<Comparison[]> {
  const hours = 4;
  const seconds = hours * 3600;
  const words: WordSegment[] = [];
  for (let t = 0.1; t < seconds; t += 0.4) words.push({ word: 'w', start_time: t, end_time: t + 0.3 });
  const segments: SpeakerSegment[] = [];
  for (let t = 0; t < seconds; t += 4) {
    // Now and then a gap of a second (words in it are force-aligned), otherwise a 0.2 s overlap.
    const end = t % 60 === 0 ? t + 3 : t + 4.2;
    segments.push({ speaker: `SPEAKER_0${(t / 4) % 3}`, start_time: t, end_time: end });
  }
  segments.push({ speaker: 'SPEAKER_09', start_time: 600, end_time: 1200 });

  const results: Comparison[] = [];
  for (const [mode, scan] of [
    ['overlap', scanOverlap],
    ['v1', scanV1],
  ] as const) {
    // Like for like: the same speakers (test/transforms-align.test.ts checks every tie rule).
    assert.deepStrictEqual(alignSpeakers(words, segments, { mode }), scan(words, segments));
    results.push(
      await compare({
        name: `alignSpeakers ${mode} vs scan of every segment (${words.length} words, ${segments.length} segments)`,
        units: words.length,
        unit: 'k words/s',
        scale: 1e3,
        ours: () => alignSpeakers(words, segments, { mode }),
        baseline: () => scan(words, segments),
        rounds: 3,
        minMs: 100,
      }),
    );
  }
  return results;
}
