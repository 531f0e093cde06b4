import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { alignSpeakers as emulatorOffsets } from '../src/emulator/jobs.ts';
import { UNKNOWN_SPEAKER } from '../src/index.ts';
import { SegmentIndex } from '../src/protocol/segment-index.ts';
import {
  nearestBoundarySpeaker,
  realSegments,
  segmentHolding,
  v1Speaker,
} from '../src/protocol/speaker-rule.ts';
import * as arb from './helpers/speaker-arbitraries.ts';

const seg = (speaker: string, start_time: number, end_time: number) => ({ speaker, start_time, end_time });
const word = (start_time: number, end_time: number) => ({ start_time, end_time });

test('a word takes the speaker of the segment holding its start; a shared boundary goes to the earlier', () => {
  const real = realSegments([seg('B', 2, 4), seg('A', 0, 2)]);
  assert.deepEqual(
    real.map((s) => s.speaker),
    ['A', 'B'],
  );
  assert.equal(v1Speaker(word(1, 3), real, true), 'A', 'start inside A, even though the word spans into B');
  assert.equal(v1Speaker(word(2, 2.5), real, true), 'A', 'start on the shared boundary');
  assert.equal(v1Speaker(word(3, 3.2), real, false), 'B');
});

test('outside every segment: nearest boundary from the midpoint, ties to the earlier segment', () => {
  const real = realSegments([seg('A', 0, 1), seg('B', 3, 4)]);
  assert.equal(v1Speaker(word(1.2, 1.4), real, true), 'A');
  assert.equal(v1Speaker(word(2.5, 2.7), real, true), 'B');
  // Midpoint 2.0 is exactly 1.0 from A's end and B's start (0.1 + 0.2 style fractions included).
  assert.equal(v1Speaker(word(1.9, 2.1), real, true), 'A');
  assert.equal(nearestBoundarySpeaker(word(0.7 + 0.1 + 1, 0.7 + 0.1 + 1.4), real), 'A');
  assert.equal(v1Speaker(word(1.2, 1.4), real, false), UNKNOWN_SPEAKER);
});

test('zero-length segments are not real; with none the speaker is null', () => {
  assert.equal(realSegments([seg('A', 1, 1), seg('B', 2, 1.5)]).length, 0);
  assert.equal(v1Speaker(word(1, 2), realSegments([seg('A', 1, 1)]), true), null);
  assert.equal(v1Speaker(word(1, 2), [], false), null);
});

test('SegmentIndex answers as the scans of every segment: holding a time, nearest boundary, the V1 speaker', () => {
  fc.assert(
    fc.property(arb.segments, arb.words, fc.array(arb.time, { maxLength: 40 }), (segments, words, times) => {
      const real = realSegments(segments);
      const index = new SegmentIndex(segments);
      assert.deepStrictEqual(index.real, real);
      for (const t of [...times, ...segments.flatMap((s) => [s.start_time, s.end_time])])
        assert.equal(index.holding(t), segmentHolding(t, real), `holding ${t}`);
      for (const word of words) {
        // Any word, inside a segment or not: the rule asks only outside, the scan answers anywhere.
        if (real.length > 0)
          assert.equal(index.nearestBoundarySpeaker(word), nearestBoundarySpeaker(word, real));
        for (const forceAlign of [true, false])
          assert.equal(index.v1Speaker(word, forceAlign), v1Speaker(word, real, forceAlign));
      }
    }),
    { numRuns: 1000 },
  );
});

test("the emulator's V1 offsets take the speakers of the scans (force-align on and off)", () => {
  fc.assert(
    fc.property(arb.segments, arb.words, fc.boolean(), (segments, words, forceAlign) => {
      const real = realSegments(segments);
      assert.deepStrictEqual(
        emulatorOffsets(words, segments, forceAlign).map((o) => o.speaker),
        words.map((word) => v1Speaker(word, real, forceAlign)),
      );
    }),
    { numRuns: 1000 },
  );
});

test('SegmentIndex less removed segments answers as the scans of the segments left', () => {
  fc.assert(
    fc.property(
      arb.segments.chain((segments) =>
        fc.tuple(
          fc.constant(segments),
          fc.uniqueArray(fc.nat(Math.max(0, segments.length - 1)), { maxLength: segments.length }),
        ),
      ),
      arb.words,
      ([segments, removed], words) => {
        const index = new SegmentIndex(segments);
        for (const i of removed) index.remove(i);
        // Twice is once.
        for (const i of removed) index.remove(i);
        const real = realSegments(segments.filter((_, i) => !removed.includes(i)));
        assert.equal(index.size, real.length);
        for (const word of words) {
          assert.equal(index.holding(word.start_time), segmentHolding(word.start_time, real));
          if (real.length > 0)
            assert.equal(index.nearestBoundarySpeaker(word), nearestBoundarySpeaker(word, real));
          for (const forceAlign of [true, false])
            assert.equal(index.v1Speaker(word, forceAlign), v1Speaker(word, real, forceAlign));
        }
      },
    ),
    { numRuns: 1000 },
  );
});

test("the emulator's V1 offsets read segment times O((words + segments) log segments) times, not words x segments", () => {
  const n = 2000;
  let reads = 0;
  const segments = Array.from({ length: n }, (_, i) => ({
    speaker: i % 2 ? 'A' : 'B',
    get start_time() {
      reads++;
      return i;
    },
    get end_time() {
      reads++;
      return i + (i % 7 === 0 ? 0.5 : 1.2);
    },
  }));
  const words = Array.from({ length: 2 * n }, (_, i) => ({
    word: 'x',
    start_time: i * 0.5,
    end_time: i * 0.5 + 0.3,
  }));
  const offsets = emulatorOffsets(words, segments, true);
  assert.equal(offsets.length, words.length);
  assert.ok(reads < 4 * (words.length + n) * Math.log2(n), `${reads} reads`);
});
