import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nearestBoundarySpeaker, realSegments, UNKNOWN_SPEAKER, v1Speaker } from '../src/index.ts';

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
