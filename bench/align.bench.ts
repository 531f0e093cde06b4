// alignSpeakers vs the scan it replaced (every segment for every word), on a 4-hour recording:
// 36,000 words, a turn every 4 s (3,600 segments, neighbours overlapping a little, some words in
// gaps), and a long segment holding a stretch of short ones. Both modes; the baseline is the scan
// kept as the tests' reference (test/helpers/speaker-reference.ts).

import assert from 'node:assert/strict';
import { alignSpeakers, type WordSegment } from '../src/index.ts';
import type { SpeakerSegment } from '../src/transforms/merge-diarization.ts';
import { reference } from '../test/helpers/speaker-reference.ts';
import { type Comparison, compare } from './harness.ts';

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
  for (const mode of ['overlap', 'v1'] as const) {
    const scan = (w: readonly WordSegment[], s: readonly SpeakerSegment[]) =>
      reference.alignSpeakers(w, s, { mode });
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
